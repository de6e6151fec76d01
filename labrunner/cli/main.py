"""The `attnlab` command line: click alone. Each command parses its options into a request
(`labrunner/pipeline/requests.py`) and hands it to the pipeline step that does the work; `guarded`
(`guard.py`) turns whatever happens into one line, the reports asked for, and an exit code.

Exit codes are documented in `exit_codes.py` and README.md. Every error is one line on stderr;
results go to stdout, progress to stderr, and `--json PATH` writes the versioned result.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from labrunner.cli.guard import guarded, reporter_for
from labrunner.cli.help_groups import GroupedHelp
from labrunner.cli.options import (
    BATCH_ONLY,
    batch_options,
    bench_options,
    calibrate_options,
    comma_separated_ints,
    compile_options,
    grade_options,
    passed_options,
    profile_options,
    report_options,
    run_options,
)
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.labs import LABS
from labrunner.pipeline.batch.settings import BatchOptions
from labrunner.pipeline.bench import bench_submission
from labrunner.pipeline.calibrate import calibrate_gate
from labrunner.pipeline.check import check_submission
from labrunner.pipeline.doctor import doctor_machine
from labrunner.pipeline.grade import grade_submission
from labrunner.pipeline.profile import profile_submission
from labrunner.pipeline.requests import (
    BenchRequest,
    CalibrateRequest,
    CheckRequest,
    GradeRequest,
    ProfileRequest,
    default,
)
from labrunner.pipeline.starter import LANGUAGES, starter_text, write_starter
from labrunner.pipeline.traffic import TrafficAsk, show_traffic
from labrunner.report import terminal
from labrunner.report.annotations import github_annotations
from labrunner.report.results import RunResult
from labrunner.run.sandbox import forget_environment_variable, keep_driver_private
from labrunner.truth.cases import SEED_ENVIRONMENT_VARIABLE, keep_environment_seed

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="attnlab")
def main() -> None:
    """attnlab: compile, check and time CUDA attention labs against a float64 oracle.

    \b
    Exit codes: 0 pass, 1 wrong answer, 2 usage error, 3 compile error,
    4 misbehaving kernel (crash, timeout, out-of-bounds, mutated input, race),
    5 speed gate missed, 6 environment missing (GPU, driver, compiler),
    130 interrupted (SIGINT), 143 terminated (SIGTERM).
    """
    terminal.prepare_streams()
    # A Python warning (numpy's RuntimeWarning over a NaN a kernel wrote, say) speaks of the grader's own
    # lines, not the student's file; what was wrong is already in the verdict and its message.
    warnings.simplefilter("ignore")
    # The driver alone holds the seed: out of its environment (and of /proc/self/environ) before any
    # process starts, and the driver non-dumpable, so no other process of this user can read its memory.
    keep_environment_seed(forget_environment_variable(SEED_ENVIRONMENT_VARIABLE))
    keep_driver_private()


@main.command(context_settings=CONTEXT)
def labs() -> None:
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
@click.option(
    "--lang",
    "language",
    type=click.Choice(LANGUAGES),
    default="cuda",
    show_default=True,
    help="The starter's language: a CUDA C++ .cu file, or a Triton .py file (labs 2 and 3).",
)
def starter(lab: str, output: Path | None, force: bool, language: str) -> None:
    """Write the file a student starts LAB from (a .cu file, or with --lang triton a .py file)."""

    def body() -> None:
        if output is None:
            click.echo(starter_text(lab, language), nl=False)
        else:
            write_starter(lab, output, force, language, reporter_for(result))

    result = RunResult("starter", lab)
    guarded(result, None, body)


@main.command(context_settings=CONTEXT)
@click.argument("lab")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--arch", default=default(CheckRequest, "arch"), show_default=True, help="GPU architecture to compile for."
)
@compile_options
@report_options
def check(json_path: Path | None, junit_path: Path | None, **options: Any) -> None:
    """Compile FILE for LAB through NVRTC (no GPU needed) and show its kernels' resources."""
    request = CheckRequest.from_options(options)
    result = RunResult("check", request.lab, str(request.file))
    guarded(result, json_path, lambda: check_submission(request, result, reporter_for(result)), junit_path)


@main.command(context_settings=CONTEXT)
@click.option(
    "--device",
    type=click.Choice(["gpu", "cpu", "auto"]),
    default="auto",
    show_default=True,
    help="The backend you mean to grade on: exit 6 when it is unusable here (auto: either one).",
)
@click.option(
    "--warm",
    is_flag=True,
    help="Then build what a first grade would (the oracle's and the worker's kernels, the starters, the CPU "
    "build's parts) by grading each lab's solution once: run it after installing.",
)
@report_options
def doctor(device: str, warm: bool, json_path: Path | None, junit_path: Path | None) -> None:
    """Check this machine: GPU and driver, CuPy, NVRTC, a C++ compiler, and the oracle's golden proof."""
    result = RunResult("doctor")
    guarded(result, json_path, lambda: doctor_machine(device, result, reporter_for(result), warm), junit_path)


def batch_options_given(options: dict[str, Any]) -> bool:
    return any(
        options[name] not in (None, "local")
        for name in (
            "jobs",
            "gpus",
            "executor",
            "out_dir",
            "csv_path",
            "html_path",
            "batch_timeout_s",
            "roster_path",
            "lms_csv_path",
        )
    )


def wants_batch(files: tuple[Path, ...], options: dict[str, Any]) -> bool:
    """One file with no batch option is graded as it always was; anything more is a batch."""
    return len(files) != 1 or files[0].is_dir() or batch_options_given(options)


def wants_gradescope_folder(files: tuple[Path, ...], options: dict[str, Any]) -> bool:
    """`--gradescope` with one folder and no batch option: one student's upload, as Gradescope lays it out."""
    return (
        bool(options["gradescope_path"]) and len(files) == 1 and files[0].is_dir() and not batch_options_given(options)
    )


def grade_gradescope_folder(lab: str, folder: Path, options: dict[str, Any]) -> None:
    """The folder's one kernel file graded and results.json published, or why not (pipeline/gradescope_folder.py)."""
    from labrunner.pipeline.gradescope_folder import GradescopeFolder

    kit = GradescopeFolder(lab, folder, options["gradescope_path"])
    kit.withdraw_stale()
    result = RunResult("grade", lab, str(folder))
    reporter = reporter_for(result, options["verbose"])

    def body() -> None:
        result.file = str(kit.submission())
        request = GradeRequest.from_options(options, lab=lab, file=Path(result.file))
        grade_submission(request, result, reporter)

    def after(done: RunResult) -> None:
        after_verdict(options["annotations"], None)(done)
        kit.publish(done, reporter)

    guarded(
        result,
        options["json_path"],
        body,
        options["junit_path"],
        also_writes=(("--gradescope", options["gradescope_path"]),),
        after=after,
    )


def grade_many(lab: str, files: tuple[Path, ...], options: dict[str, Any]) -> None:
    """A batch: every file graded by its own `attnlab grade` process, with grade's options passed on."""
    context = click.get_current_context()
    if options["json_path"]:
        terminal.error(
            f"--json {options['json_path']}: one result per file; for a batch, --out-dir writes a JSON per submission"
        )
        sys.exit(int(ExitCode.USAGE))
    batch = BatchOptions(
        **{name: options[name] for name in (*BATCH_ONLY, "junit_path", "annotations", "gradescope_path", "device")}
    )
    # the batch writes Gradescope's results.json itself, reused or interrupted as the submission may be
    leave_out = {"json_path", "junit_path", "annotations", "gradescope_path", *BATCH_ONLY}
    forwarded = passed_options(context.command, context.params, leave_out)
    # here: a single grade's start does without the batch's modules
    from labrunner.pipeline.batch.grade_many import grade_batch
    from labrunner.pipeline.batch.grading import Executing

    try:
        code = grade_batch(lab, files, forwarded, batch, Executing(reporter_for(RunResult("grade", lab))))
    except AttnlabError as exc:
        terminal.error(exc.message)
        code = int(exc.exit_code)
    except KeyboardInterrupt:  # before the batch's own handlers were in place, or after they were put back
        terminal.error("interrupted by SIGINT")
        code = int(ExitCode.INTERRUPTED)
    sys.exit(code)


def after_verdict(annotations: str | None, gradescope_path: Path | None) -> Callable[[RunResult], None]:
    """What a single run writes after its verdict: CI annotations, Gradescope's results.json."""

    def write(result: RunResult) -> None:
        if annotations == "github":
            terminal.plain_lines(github_annotations(result.to_json()))
        if gradescope_path:
            from labrunner.report.gradescope import write_gradescope

            write_gradescope(result.to_json(), gradescope_path)

    return write


@main.command(context_settings=CONTEXT, cls=GroupedHelp)
@click.argument("lab")
@click.argument("file", nargs=-1, required=True, type=click.Path(path_type=Path))
@run_options
@batch_options
@grade_options
def grade(lab: str, file: tuple[Path, ...], **options: Any) -> None:
    """Grade FILE for LAB: compile, prove the oracle, check every case, then time it. FILE is a .cu
    file, or in lab2 and lab3 a Triton .py file (its kernels run sealed; on the CPU in Triton's interpreter).

    Several files, or a folder (its .cu files, sorted, and its .py files in the labs that take Triton:
    lab2, lab3; or a folder per student), are graded as a batch: --jobs at once, a progress bar over
    submissions, one row per student with its score in a gradebook (--csv, --lms-csv), reports per
    submission (--out-dir), and the worst submission's exit code.

    With --gradescope, a folder and no batch option is one student's Gradescope upload: its one kernel
    file is graded; two files, none or an empty one get a results.json that says what to fix, and a
    fault of the grader writes none (exit 2 or 6, the reason on stderr).
    """
    if wants_gradescope_folder(file, options):
        grade_gradescope_folder(lab, file[0], options)
    if wants_batch(file, options):
        grade_many(lab, file, options)
    request = GradeRequest.from_options(options, lab=lab, file=file[0])  # one file: graded as it always was
    result = RunResult("grade", lab, str(request.file))
    guarded(
        result,
        options["json_path"],
        lambda: grade_submission(request, result, reporter_for(result, options["verbose"])),
        options["junit_path"],
        also_writes=(("--gradescope", options["gradescope_path"]),),
        after=after_verdict(options["annotations"], options["gradescope_path"]),
    )


@main.command(context_settings=CONTEXT)
@click.argument("lab")
@click.argument("file", type=click.Path(path_type=Path), required=False)
@run_options
@bench_options
def bench(json_path: Path | None, junit_path: Path | None, **options: Any) -> None:
    """Time FILE for LAB (default: the shipped solution) after one correctness check."""
    request = BenchRequest.from_options(options)
    result = RunResult("bench", request.lab, str(request.file) if request.file else None)
    guarded(result, json_path, lambda: bench_submission(request, result, reporter_for(result)), junit_path)


@main.command(context_settings=CONTEXT)
@click.argument("lab")
@calibrate_options
@run_options
def calibrate(json_path: Path | None, junit_path: Path | None, **options: Any) -> None:
    """Time the shipped solution against the starter on this GPU and write its speed gate."""
    request = CalibrateRequest.from_options(options, file=None)
    result = RunResult("calibrate", request.lab)
    guarded(
        result,
        json_path,
        lambda: calibrate_gate(request, result, reporter_for(result)),
        junit_path,
        also_writes=(("-o", request.output),),
    )


@main.command(context_settings=CONTEXT)
@click.argument("lab")
@click.argument("file", type=click.Path(path_type=Path))
@profile_options
def profile(json_path: Path | None, **options: Any) -> None:
    """Look inside FILE for LAB on the GPU: the Trace timeline, Nsight Compute's Range pass, the roofline.

    One correctness check first (as bench does); then every kernel of a few calls at each timing shape,
    the counters of one call of your kernels and the starter's, the verdict against this GPU's FP32 and
    HBM ceilings, and the lesson's traffic model beside the DRAM bytes measured.
    """
    request = ProfileRequest.from_options(options)
    result = RunResult("profile", request.lab, str(request.file))
    writes = tuple(
        (option, path)
        for option, path in (
            ("--trace", request.trace_path),
            ("--plot", request.plot_path),
            ("--ncu-csv", request.ncu_csv_path),
        )
        if path
    )
    guarded(result, json_path, lambda: profile_submission(request, result, reporter_for(result)), also_writes=writes)


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
def traffic(seq: tuple[int, ...], heads: int, kv_heads: int | None, d_head: int, dtype_bytes: int) -> None:
    """The lesson's HBM traffic model: bytes naive and flash attention move, no GPU needed.

    \b
    The lesson's table: attnlab traffic --seq 1024,4096,16384 --heads 1 --d-head 64 --dtype-bytes 2
    """
    result = RunResult("traffic")
    ask = TrafficAsk(seq, heads, kv_heads, d_head, dtype_bytes)
    guarded(result, None, lambda: show_traffic(ask, reporter_for(result)))
