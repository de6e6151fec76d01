"""The `attnlab` command line: parsing and rendering only; the work lives in the modules it calls.

Exit codes are documented in `exit_codes.py` and README.md. Every error is one line on stderr;
results go to stdout, progress to stderr, and `--json PATH` writes the versioned result.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from pathlib import Path

import click

from labrunner import box as boxes
from labrunner.exit_codes import AttnlabError, ExitCode, Terminated, usage_error
from labrunner.labs import LABS, get_lab
from labrunner.report import terminal
from labrunner.report.junit import write_junit
from labrunner.report.results import RunResult, write_json
from labrunner.run.sandbox import forget_environment_variable, keep_driver_private
from labrunner.truth.cases import SEED_ENVIRONMENT_VARIABLE, keep_environment_seed
from labrunner.truth.golden import prove_oracle

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _require_box(context, parameter, value):
    boxes.REQUIRED = bool(value)  # read where each process starts: one that cannot be boxed is refused


def compile_timeout_option(command):
    """--compile-timeout, and --require-box: every command that compiles a file takes both."""
    command = click.option(
        "--require-box",
        is_flag=True,
        expose_value=False,
        callback=_require_box,
        help="Refuse to start any compiler or worker outside the box (bubblewrap), on the GPU "
        "too, where it otherwise runs unboxed with a note (exit 6).",
    )(command)
    return click.option(
        "--compile-timeout",
        "compile_timeout_s",
        type=click.FloatRange(min=0.5),
        default=20.0,
        show_default=True,
        help="Seconds the compiler may take on the file; past it the verdict is compile-error.",
    )(command)


def json_option(command):
    command = click.option(
        "--junit",
        "junit_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Also write the cases as a JUnit XML report (one test case per case).",
    )(command)
    return click.option(
        "--json",
        "json_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Also write the result as JSON (schema attnlab.result/1) to this file.",
    )(command)


def run_options(command):
    """Options shared by grade, bench and calibrate: where and how the kernels run."""
    decorators = [
        click.option(
            "--device",
            "device",
            type=click.Choice(["gpu", "cpu", "auto"]),
            default="gpu",
            show_default=True,
            help="Backend: gpu (CuPy), cpu (the same .cu on the CPU, correctness only), or auto "
            "(the GPU where there is one, else the CPU).",
        ),
        click.option(
            "--unsafe-cpu",
            "unsafe_cpu",
            is_flag=True,
            help="CPU backend: run the file without the worker's seccomp filter, where this machine "
            "has none (a student grading their own file; never for files you did not write).",
        ),
        click.option(
            "--seed",
            type=int,
            default=None,
            help="Seed for every case's inputs (default: $ATTNLAB_SEED, else the public default).",
        ),
        click.option(
            "--timeout",
            "timeout_s",
            type=click.FloatRange(min=0.1),
            default=None,
            help="Seconds one case may take before its kernel is stopped (default 20 on the GPU, 120 on the CPU).",
        ),
        click.option("--arch", default="sm_90", show_default=True, help="GPU architecture for the compile gate."),
        compile_timeout_option,
        click.option(
            "--budget",
            "budget_s",
            type=click.FloatRange(min=0.05),
            default=3.0,
            show_default=True,
            help="Seconds of sampling per timed kernel.",
        ),
        click.option(
            "--noise",
            "noise_target",
            type=click.FloatRange(min=1e-5, max=0.5),
            default=0.005,
            show_default=True,
            help="Stop sampling once the relative standard error is below this.",
        ),
        click.option(
            "--rounds",
            type=click.IntRange(min=1, max=20),
            default=1,
            show_default=True,
            help="Lab 2: time the comparison this many times, each in a fresh worker process on fresh "
            "buffers, and pool them; SPEEDUP's interval then includes the spread between rounds.",
        ),
        json_option,
    ]
    return functools.reduce(lambda c, d: d(c), reversed(decorators), command)


def finish(result: RunResult, json_path: Path | None, junit_path: Path | None = None, after=None) -> None:
    """Render what is there, write --json and --junit, exit with the result's code. Never a traceback."""
    if result.error:
        terminal.error(result.error)
    if after:
        after(result)
    for option, path, write in (("--json", json_path, write_json), ("--junit", junit_path, write_junit)):
        if path:
            try:
                write(result, path)
            except OSError as exc:
                terminal.error(f"{option} {path}: cannot write ({exc.strerror})")
                sys.exit(int(ExitCode.USAGE))
    sys.exit(int(result.exit_code))


def unwritable(path: Path) -> str | None:
    """Why a file cannot be written there, or None. Asked before the work, so no result is lost to it."""
    folder = path.parent
    if not folder.is_dir():
        return "No such file or directory"
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "Permission denied"
    return None


def guarded(
    result: RunResult,
    json_path: Path | None,
    body,
    junit_path: Path | None = None,
    also_writes: tuple[tuple[str, Path], ...] = (),
    after=None,
) -> None:
    for option, path in (("--json", json_path), ("--junit", junit_path), *also_writes):
        problem = path and unwritable(path)
        if problem:
            terminal.error(f"{option} {path}: cannot write ({problem})")
            sys.exit(int(ExitCode.USAGE))
    started = time.perf_counter()
    previous = _on_sigterm(_terminate)
    try:
        body()
    except AttnlabError as exc:
        result.error, result.error_code = exc.message, exc.exit_code
    except (KeyboardInterrupt, Terminated) as exc:
        name, result.error_code = (
            ("SIGINT", ExitCode.INTERRUPTED) if isinstance(exc, KeyboardInterrupt) else ("SIGTERM", ExitCode.TERMINATED)
        )
        kept = len([c for c in result.cases if c.status != "skipped"])
        result.error = f"interrupted by {name}: {kept} case{'s' if kept != 1 else ''} finished before it are kept"
        terminal.cases_report(result)
    finally:
        _on_sigterm(previous)
    result.seconds = round(time.perf_counter() - started, 3)
    describe_run(result)
    finish(result, json_path, junit_path, after)


def describe_run(result: RunResult) -> None:
    """What the JSON records about the run itself: the command's options and the hash of the file graded.

    The file is hashed as the grade read it (no link followed, nothing but a regular file of at most
    1 MiB): a link to a secret or a 1.5 GB file gets no hash, and costs no memory."""
    from labrunner.build.source import submission_sha256

    context = click.get_current_context(silent=True)
    if context is not None:
        result.options = {name: plain_option(value) for name, value in context.params.items()}
    if result.file:
        result.sha256 = submission_sha256(Path(result.file))  # None where the run itself says why not


def plain_option(value):
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [plain_option(v) for v in value]
    return value


def _terminate(signum, frame):
    raise Terminated()


def _on_sigterm(handler):
    """Installs a SIGTERM handler and returns the previous one (only the main thread may; elsewhere, none)."""
    if handler is None:
        return None
    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return None


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="attnlab")
def main():
    """attnlab: compile, check and time CUDA attention labs against a float64 oracle.

    \b
    Exit codes: 0 pass, 1 wrong answer, 2 usage error, 3 compile error,
    4 misbehaving kernel (crash, timeout, out-of-bounds, mutated input, race),
    5 speed gate missed, 6 environment missing (GPU, driver, compiler),
    130 interrupted (SIGINT), 143 terminated (SIGTERM).
    """
    terminal.prepare_streams()
    # The driver alone holds the seed: out of its environment (and of /proc/self/environ) before any
    # process starts, and the driver non-dumpable, so no other process of this user can read its memory.
    keep_environment_seed(forget_environment_variable(SEED_ENVIRONMENT_VARIABLE))
    keep_driver_private()


@main.command(context_settings=CONTEXT)
def labs():
    """List the labs, one line on what each teaches."""
    terminal.labs_table(LABS.values())


@main.command(context_settings=CONTEXT)
@click.argument("lab")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the starter (default: print it to stdout).",
)
@click.option("--force", is_flag=True, help="Overwrite the output file if it exists.")
def starter(lab, output, force):
    """Write the .cu file a student starts LAB from."""
    result = RunResult("starter", lab)

    def body():
        text = get_lab(lab).starter_path.read_text()
        if output is None:
            click.echo(text, nl=False)
            return
        if output.exists() and not force:
            raise usage_error(f"{output} exists; nothing was written (use --force to overwrite it)")
        try:
            output.write_text(text)
        except OSError as exc:
            raise usage_error(f"{output}: cannot be written ({exc.strerror}); check the folder exists") from None
        terminal.note(f"wrote {output}; grade it with: attnlab grade {lab} {output}")

    guarded(result, None, body)


@main.command(context_settings=CONTEXT)
@click.argument("lab")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--arch", default="sm_90", show_default=True, help="GPU architecture to compile for.")
@compile_timeout_option
@json_option
def check(lab, file, arch, compile_timeout_s, json_path, junit_path):
    """Compile FILE for LAB through NVRTC (no GPU needed) and show its kernels' resources."""
    from labrunner.build.compiler_process import CompileLimits
    from labrunner.build.gate import load_submission
    from labrunner.build.nvrtc import nvrtc_version
    from labrunner.run.untrusted_text import shown_path

    result = RunResult("check", lab, str(file))

    def body():
        submission = load_submission(
            get_lab(lab), file, shown_path(file), arch, CompileLimits(timeout_s=compile_timeout_s)
        )
        result.compile = compile_summary(submission, arch, nvrtc_version())
        terminal.check_report(result)
        terminal.verdict_line(result)

    guarded(result, json_path, body, junit_path)


def compile_summary(submission, arch: str, nvrtc: str) -> dict:
    from dataclasses import asdict

    module = submission.module
    return {
        "arch": arch,
        "nvrtc": nvrtc,
        "entry_points": module.entry_points,
        "constants": submission.constants,
        "exported": module.launch_constants,
        "resources": {name: asdict(r) for name, r in module.resources.items()},
        "warnings": module.warnings,
    }


@main.command(context_settings=CONTEXT)
@click.option(
    "--device",
    type=click.Choice(["gpu", "cpu", "auto"]),
    default="auto",
    show_default=True,
    help="The backend you mean to grade on: exit 6 when it is unusable here (auto: either one).",
)
@json_option
def doctor(device, json_path, junit_path):
    """Check this machine: GPU and driver, CuPy, NVRTC, a C++ compiler, and the oracle's golden proof."""
    from labrunner.commands.doctor import diagnose, require_backend

    result = RunResult("doctor")

    def body():
        rows = diagnose()
        result.notes = [f"{name}: {'ok' if ok else 'missing'}: {words}" for name, ok, words in rows]
        result.oracle_proof = prove_oracle().to_json()
        terminal.doctor_report(rows)
        if not result.oracle_proof["passed"]:
            raise AttnlabError("the oracle failed its golden proof", ExitCode.ENVIRONMENT)
        require_backend(device, rows)

    guarded(result, json_path, body, junit_path)


def batch_options(command):
    """grade's options for many submissions (see commands/batch.py)."""
    decorators = [
        click.option(
            "--jobs",
            type=click.IntRange(min=1),
            default=None,
            help="Submissions graded at once (default: one per GPU; on the CPU backend, one per core).",
        ),
        click.option(
            "--executor",
            type=click.Choice(["local", "slurm", "submitit-local"]),
            default="local",
            show_default=True,
            help="Where the submissions run: this machine, a Slurm job array "
            "(submitit; pip install 'attnlab[cluster]'), or submitit's local executor.",
        ),
        click.option(
            "--out-dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Folder (created if missing) for one JSON, JUnit and log per submission, the aggregated "
            "junit.xml and gradebook.csv.",
        ),
        click.option(
            "--csv",
            "csv_path",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            help="Write the gradebook (a row per submission) to this CSV file.",
        ),
        click.option(
            "--annotations",
            type=click.Choice(["github"]),
            default=None,
            help="Also print GitHub Actions ::error annotations for compile errors and failing cases.",
        ),
        click.option("--partition", default=None, help="Slurm: the partition to submit to."),
        click.option(
            "--gpus-per-job",
            type=click.IntRange(min=0),
            default=1,
            show_default=True,
            help="Slurm: GPUs each array task asks for.",
        ),
        click.option(
            "--time-limit",
            "time_limit_min",
            type=click.IntRange(min=1),
            default=60,
            show_default=True,
            help="Slurm: minutes each array task may run.",
        ),
        click.option("--account", default=None, help="Slurm: the account to charge."),
    ]
    return functools.reduce(lambda c, d: d(c), reversed(decorators), command)


BATCH_ONLY = ("jobs", "executor", "out_dir", "csv_path", "partition", "gpus_per_job", "time_limit_min", "account")


def wants_batch(files: tuple[Path, ...], batch: dict) -> bool:
    """One file with no batch option is graded as it always was; anything more is a batch."""
    given = any(batch[name] not in (None, "local") for name in ("jobs", "executor", "out_dir", "csv_path"))
    return len(files) != 1 or files[0].is_dir() or given


def grade_many(lab, files, device, json_path, junit_path, batch: dict) -> None:
    from labrunner.commands.batch import BatchOptions, grade_batch, passed_options

    context = click.get_current_context()
    if json_path:
        terminal.error(f"--json {json_path}: one result per file; for a batch, --out-dir writes a JSON per submission")
        sys.exit(int(ExitCode.USAGE))
    options = BatchOptions(junit_path=junit_path, **batch)
    forwarded = passed_options(context.command, context.params, {"json_path", "junit_path", "annotations", *BATCH_ONLY})
    try:
        code = grade_batch(lab, files, device, forwarded, options)
    except AttnlabError as exc:
        terminal.error(exc.message)
        code = int(exc.exit_code)
    except KeyboardInterrupt:
        terminal.error("interrupted")
        code = int(ExitCode.ENVIRONMENT)
    sys.exit(code)


def annotate(kind: str | None):
    """The step that prints a single run's CI annotations, after its verdict."""
    if kind != "github":
        return None
    from labrunner.report.annotations import github_annotations

    return lambda result: terminal.plain_lines(github_annotations(result.to_json()))


@main.command(context_settings=CONTEXT)
@click.argument("lab")
@click.argument("file", nargs=-1, required=True, type=click.Path(path_type=Path))
@run_options
@batch_options
@click.option("--full", is_flag=True, help="CPU backend: also run the cases outside its time budget.")
@click.option(
    "--race-check",
    is_flag=True,
    help="CPU: run every case again under other thread orders (reversed, seeded random); different "
    "outputs mean a missing __syncthreads(). GPU: the small cases under compute-sanitizer's "
    "racecheck and synccheck.",
)
@click.option("--case", "only", multiple=True, help="Run only this case (repeatable).")
@click.option(
    "--diagnose/--no-diagnose",
    default=True,
    show_default=True,
    help="GPU: after a crash, replay that case under compute-sanitizer (where installed) to name the line.",
)
@click.option(
    "--gates",
    "gates_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Speed gates file written by `attnlab calibrate` (applied when this GPU's name is in it).",
)
@click.option("--no-timing", is_flag=True, help="Check correctness only.")
@click.option(
    "--profile",
    "with_profile",
    is_flag=True,
    help="GPU: after a correct run, Nsight Compute's Range pass in one line (slow; see `attnlab profile`).",
)
def grade(
    lab,
    file,
    device,
    unsafe_cpu,
    seed,
    timeout_s,
    arch,
    compile_timeout_s,
    budget_s,
    noise_target,
    rounds,
    json_path,
    junit_path,
    full,
    race_check,
    only,
    diagnose,
    gates_path,
    no_timing,
    with_profile,
    annotations,
    **batch,
):
    """Grade FILE for LAB: compile, prove the oracle, check every case, then time it.

    Several files, or a folder (its .cu files, sorted), are graded as a batch: --jobs at once, a
    progress bar over submissions, a gradebook (--csv), reports per submission (--out-dir), and the
    worst submission's exit code.
    """
    from labrunner.commands.runs import GradeRequest, grade_submission

    if wants_batch(file, batch):
        grade_many(lab, file, device, json_path, junit_path, {**batch, "annotations": annotations})
    file = file[0]  # one file: graded exactly as it always was

    request = GradeRequest(
        lab=lab,
        file=file,
        device=device,
        unsafe_cpu=unsafe_cpu,
        seed=seed,
        timeout_s=timeout_s,
        arch=arch,
        compile_timeout_s=compile_timeout_s,
        budget_s=budget_s,
        noise_target=noise_target,
        rounds=rounds,
        full=full,
        race_check=race_check,
        only=tuple(only),
        diagnose=diagnose,
        gates_path=gates_path,
        timing=not no_timing,
        profile=with_profile,
    )
    result = RunResult("grade", lab, str(file))
    guarded(result, json_path, lambda: grade_submission(request, result), junit_path, after=annotate(annotations))


@main.command(context_settings=CONTEXT)
@click.argument("lab")
@click.argument("file", type=click.Path(path_type=Path), required=False)
@run_options
@click.option("--chunk", type=click.IntRange(min=1), default=None, help="lab2: rows in the chunk (default 2048).")
@click.option("--prefix", type=click.IntRange(min=0), default=None, help="lab2: cached prefix length (default 2048).")
@click.option(
    "--vs",
    "versus",
    default="starter",
    show_default=True,
    help="lab2 baseline: starter, solution, expert, sdpa (PyTorch's fused attention), or a .cu file; "
    "lab1: torch (eager PyTorch, interleaved with the whole call). PyTorch peers: pip install "
    "'attnlab[peers]'.",
)
@click.option(
    "--profile",
    "with_profile",
    is_flag=True,
    help="After timing, Nsight Compute's Range pass in one line (slow; see `attnlab profile`).",
)
def bench(
    lab,
    file,
    device,
    unsafe_cpu,
    seed,
    timeout_s,
    arch,
    compile_timeout_s,
    budget_s,
    noise_target,
    rounds,
    json_path,
    junit_path,
    chunk,
    prefix,
    versus,
    with_profile,
):
    """Time FILE for LAB (default: the shipped solution) after one correctness check."""
    from labrunner.commands.runs import BenchRequest, bench_submission

    request = BenchRequest(
        lab=lab,
        file=file,
        device=device,
        unsafe_cpu=unsafe_cpu,
        seed=seed,
        timeout_s=timeout_s,
        arch=arch,
        compile_timeout_s=compile_timeout_s,
        budget_s=budget_s,
        noise_target=noise_target,
        rounds=rounds,
        chunk=chunk,
        prefix=prefix,
        versus=versus,
        profile=with_profile,
    )
    result = RunResult("bench", lab, str(file) if file else None)
    guarded(result, json_path, lambda: bench_submission(request, result), junit_path)


@main.command(context_settings=CONTEXT)
@click.argument("lab")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("gates.json"),
    show_default=True,
    help="Gates file to create or update (one entry per GPU model).",
)
@click.option(
    "--fraction",
    type=click.FloatRange(min=0.0, max=1.0, min_open=True),
    default=0.5,
    show_default=True,
    help="Fraction of the solution's SPEEDUP a student needs to pass the gate.",
)
@run_options
def calibrate(
    lab,
    output,
    fraction,
    device,
    unsafe_cpu,
    seed,
    timeout_s,
    arch,
    compile_timeout_s,
    budget_s,
    noise_target,
    rounds,
    json_path,
    junit_path,
):
    """Time the shipped solution against the starter on this GPU and write its speed gate."""
    from labrunner.commands.runs import BenchRequest, calibrate_gate

    request = BenchRequest(
        lab=lab,
        file=None,
        device=device,
        unsafe_cpu=unsafe_cpu,
        seed=seed,
        timeout_s=timeout_s,
        arch=arch,
        compile_timeout_s=compile_timeout_s,
        budget_s=budget_s,
        noise_target=noise_target,
        rounds=rounds,
        chunk=None,
        prefix=None,
        versus="starter",
    )
    result = RunResult("calibrate", lab)
    guarded(
        result,
        json_path,
        lambda: calibrate_gate(request, output, fraction, result),
        junit_path,
        also_writes=(("-o", output),),
    )


@main.command(context_settings=CONTEXT)
@click.argument("lab")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--calls",
    type=click.IntRange(min=1, max=100),
    default=5,
    show_default=True,
    help="Calls traced at each timing shape.",
)
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the trace as Chrome trace-event JSON, which Perfetto's UI (ui.perfetto.dev) opens.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Draw the roofline (both ceilings, the ridge, every kernel) to this PNG (needs matplotlib).",
)
@click.option(
    "--ncu-csv",
    "ncu_csv_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also save Nsight Compute's raw CSV of the Range pass to this file.",
)
@click.option(
    "--range/--no-range",
    "range_pass",
    default=True,
    show_default=True,
    help="Run the Range pass (Nsight Compute's counters; slow, and needs permission to read them).",
)
@click.option(
    "--cupti/--no-cupti",
    default=True,
    show_default=True,
    help="Trace with CUPTI's activity records where cupti-python is installed; else CUDA events.",
)
@click.option(
    "--seed", type=int, default=None, help="Seed for the inputs (default: $ATTNLAB_SEED, else the public default)."
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0.1),
    default=None,
    help="Seconds the correctness check may take before its kernel is stopped (default 60).",
)
@click.option("--arch", default="sm_90", show_default=True, help="GPU architecture for the compile gate.")
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help='Also write the result as JSON (the profile is under "profile", schema attnlab.profile/1).',
)
def profile(lab, file, calls, trace_path, plot_path, ncu_csv_path, range_pass, cupti, seed, timeout_s, arch, json_path):
    """Look inside FILE for LAB on the GPU: the Trace timeline, Nsight Compute's Range pass, the roofline.

    One correctness check first (as bench does); then every kernel of a few calls at each timing shape,
    the counters of one call of your kernels and the starter's, the verdict against this GPU's FP32 and
    HBM ceilings, and the lesson's traffic model beside the DRAM bytes measured.
    """
    from labrunner.commands.profile import ProfileRequest, profile_submission

    request = ProfileRequest(
        lab=lab,
        file=file,
        seed=seed,
        timeout_s=timeout_s,
        arch=arch,
        calls=calls,
        trace_path=trace_path,
        plot_path=plot_path,
        ncu_csv_path=ncu_csv_path,
        range_pass=range_pass,
        cupti=cupti,
    )
    result = RunResult("profile", lab, str(file))
    writes = tuple(
        (option, path)
        for option, path in (("--trace", trace_path), ("--plot", plot_path), ("--ncu-csv", ncu_csv_path))
        if path
    )
    guarded(result, json_path, lambda: profile_submission(request, result), also_writes=writes)


def comma_separated_ints(ctx, param, value: str) -> tuple[int, ...]:
    try:
        numbers = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: give whole numbers separated by commas, e.g. 1024,4096") from None
    if any(n <= 0 for n in numbers):
        raise click.BadParameter(f"{value!r}: every length must be positive")
    return numbers


@main.command(context_settings=CONTEXT)
@click.option(
    "--seq",
    default="512,1024,2048",
    show_default=True,
    callback=comma_separated_ints,
    help="Sequence lengths N, comma separated (default: lab 1's timing sizes).",
)
@click.option("--heads", type=click.IntRange(min=1), default=32, show_default=True, help="Query heads.")
@click.option(
    "--kv-heads",
    type=click.IntRange(min=1),
    default=None,
    help="KV heads (grouped-query attention); default one per 4 query heads, at least 1 (8 for 32).",
)
@click.option("--d-head", type=click.IntRange(min=1), default=64, show_default=True, help="Head size.")
@click.option(
    "--dtype-bytes",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Bytes per element (4: float32, the labs; 2: the lesson's half precision).",
)
def traffic(seq, heads, kv_heads, d_head, dtype_bytes):
    """The lesson's HBM traffic model: bytes naive and flash attention move, no GPU needed.

    \b
    The lesson's table: attnlab traffic --seq 1024,4096,16384 --heads 1 --d-head 64 --dtype-bytes 2
    """
    from labrunner.measure.traffic import TrafficShape, check_heads, default_kv_heads, lesson_line
    from labrunner.measure.traffic import traffic as model

    kv = kv_heads or default_kv_heads(heads)
    problem = check_heads(heads, kv)
    if problem:
        terminal.error(problem)
        sys.exit(int(ExitCode.USAGE))
    terminal.plain_lines(
        [
            f"HBM traffic model: {heads} query head{'s' if heads > 1 else ''}, {kv} KV head"
            f"{'s' if kv > 1 else ''}, d_head {d_head}, {dtype_bytes}-byte elements (MB = 10^6 bytes)"
        ]
    )
    terminal.plain_lines([lesson_line(n, model(TrafficShape(n, n, heads, kv, d_head, dtype_bytes))) for n in seq])
    terminal.plain_lines(
        [
            "naive: Q, K, V read, the N x N scores written and read back, the probabilities written and "
            "read back, the output written; flash: Q, K, V read once, the output written once"
        ]
    )
    if kv < heads:
        terminal.plain_lines(
            [
                f"grouped-query attention: each of the {kv} KV heads serves {heads // kv} query heads, so K "
                f"and V are 1/{heads // kv} of Q's size; flash counts each KV head read once for its whole "
                "group (a kernel that reads it once per query head relies on L2 for the rest)"
            ]
        )
