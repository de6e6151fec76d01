"""The `attnlab` command line: parsing and rendering only; the work lives in the modules it calls.

Exit codes are documented in `exit_codes.py` and README.md. Every error is one line on stderr;
results go to stdout, progress to stderr, and `--json PATH` writes the versioned result.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from pathlib import Path

import click

from labrunner.exit_codes import AttnlabError, ExitCode, Terminated, usage_error
from labrunner.labs import LABS, get_lab
from labrunner.report import terminal
from labrunner.report.results import RunResult, write_json, write_junit
from labrunner.truth.golden import prove_oracle

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def json_option(command):
    command = click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path),
                           help="Also write the cases as a JUnit XML report (one test case per case).")(command)
    return click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
                        help="Also write the result as JSON (schema attnlab.result/1) to this file.")(command)



def run_options(command):
    """Options shared by grade, bench and calibrate: where and how the kernels run."""
    decorators = [
        click.option("--device", "device", type=click.Choice(["gpu", "cpu", "auto"]), default="gpu", show_default=True,
                     help="Backend: gpu (CuPy), cpu (the same .cu on the CPU, correctness only), or auto "
                          "(the GPU where there is one, else the CPU)."),
        click.option("--seed", type=int, default=None,
                     help="Seed for every case's inputs (default: $ATTNLAB_SEED, else the public default)."),
        click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1), default=None,
                     help="Seconds one case may take before its kernel is stopped (default 20 on the GPU, 120 on the CPU)."),
        click.option("--arch", default="sm_90", show_default=True, help="GPU architecture for the compile gate."),
        click.option("--budget", "budget_s", type=click.FloatRange(min=0.05), default=3.0, show_default=True,
                     help="Seconds of sampling per timed kernel."),
        click.option("--noise", "noise_target", type=click.FloatRange(min=1e-5, max=0.5), default=0.005,
                     show_default=True, help="Stop sampling once the relative standard error is below this."),
        click.option("--rounds", type=click.IntRange(min=1, max=20), default=1, show_default=True,
                     help="Lab 2: time the comparison this many times, each in a fresh worker process on fresh "
                          "buffers, and pool them; SPEEDUP's interval then includes the spread between rounds."),
        json_option,
    ]
    return functools.reduce(lambda c, d: d(c), reversed(decorators), command)


def finish(result: RunResult, json_path: Path | None, junit_path: Path | None = None) -> None:
    """Render what is there, write --json and --junit, exit with the result's code. Never a traceback."""
    if result.error:
        terminal.error(result.error)
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


def guarded(result: RunResult, json_path: Path | None, body, junit_path: Path | None = None,
            also_writes: tuple[tuple[str, Path], ...] = ()) -> None:
    for option, path in (("--json", json_path), ("--junit", junit_path), *also_writes):
        problem = path and unwritable(path)
        if problem:
            terminal.error(f"{option} {path}: cannot write ({problem})")
            sys.exit(int(ExitCode.USAGE))
    previous = _on_sigterm(_terminate)
    try:
        body()
    except AttnlabError as exc:
        result.error, result.error_code = exc.message, exc.exit_code
    except (KeyboardInterrupt, Terminated) as exc:
        name, result.error_code = (("SIGINT", ExitCode.INTERRUPTED) if isinstance(exc, KeyboardInterrupt)
                                   else ("SIGTERM", ExitCode.TERMINATED))
        kept = len([c for c in result.cases if c.status != "skipped"])
        result.error = f"interrupted by {name}: {kept} case{'s' if kept != 1 else ''} finished before it are kept"
        terminal.cases_report(result)
    finally:
        _on_sigterm(previous)
    finish(result, json_path, junit_path)


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


@main.command(context_settings=CONTEXT)
def labs():
    """List the labs, one line on what each teaches."""
    terminal.labs_table(LABS.values())


@main.command(context_settings=CONTEXT)
@click.argument("lab")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the starter (default: print it to stdout).")
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
@json_option
def check(lab, file, arch, json_path, junit_path):
    """Compile FILE for LAB through NVRTC (no GPU needed) and show its kernels' resources."""
    from labrunner.build.gate import load_submission
    from labrunner.build.nvrtc import nvrtc_version

    result = RunResult("check", lab, str(file))

    def body():
        submission = load_submission(get_lab(lab), file, str(file), arch)
        result.compile = compile_summary(submission, arch, nvrtc_version())
        terminal.check_report(result)
        terminal.verdict_line(result)

    guarded(result, json_path, body, junit_path)


def compile_summary(submission, arch: str, nvrtc: str) -> dict:
    from dataclasses import asdict

    module = submission.module
    return {"arch": arch, "nvrtc": nvrtc, "entry_points": module.entry_points,
            "constants": submission.constants, "exported": module.launch_constants,
            "resources": {name: asdict(r) for name, r in module.resources.items()}, "warnings": module.warnings}


@main.command(context_settings=CONTEXT)
@json_option
def doctor(json_path, junit_path):
    """Check this machine: GPU and driver, CuPy, NVRTC, a C++ compiler, and the oracle's golden proof."""
    from labrunner.commands.doctor import diagnose

    result = RunResult("doctor")

    def body():
        rows = diagnose()
        result.notes = [f"{name}: {'ok' if ok else 'missing'}: {words}" for name, ok, words in rows]
        result.oracle_proof = prove_oracle().to_json()
        terminal.doctor_report(rows)
        if not result.oracle_proof["passed"]:
            raise AttnlabError("the oracle failed its golden proof", ExitCode.ENVIRONMENT)

    guarded(result, json_path, body, junit_path)


@main.command(context_settings=CONTEXT)
@click.argument("lab")
@click.argument("file", type=click.Path(path_type=Path))
@run_options
@click.option("--full", is_flag=True, help="CPU backend: also run the cases outside its time budget.")
@click.option("--race-check", is_flag=True,
              help="CPU: run every case again under other thread orders (reversed, seeded random); different "
                   "outputs mean a missing __syncthreads(). GPU: the small cases under compute-sanitizer's "
                   "racecheck and synccheck.")
@click.option("--case", "only", multiple=True, help="Run only this case (repeatable).")
@click.option("--diagnose/--no-diagnose", default=True, show_default=True,
              help="GPU: after a crash, replay that case under compute-sanitizer (where installed) to name the line.")
@click.option("--gates", "gates_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Speed gates file written by `attnlab calibrate` (applied when this GPU's name is in it).")
@click.option("--no-timing", is_flag=True, help="Check correctness only.")
def grade(lab, file, device, seed, timeout_s, arch, budget_s, noise_target, rounds, json_path, junit_path, full, race_check, only,
          diagnose, gates_path, no_timing):
    """Grade FILE for LAB: compile, prove the oracle, check every case, then time it."""
    from labrunner.commands.runs import GradeRequest, grade_submission

    request = GradeRequest(lab=lab, file=file, device=device, seed=seed, timeout_s=timeout_s, arch=arch,
                           budget_s=budget_s, noise_target=noise_target, rounds=rounds, full=full, race_check=race_check,
                           only=tuple(only), diagnose=diagnose, gates_path=gates_path, timing=not no_timing)
    result = RunResult("grade", lab, str(file))
    guarded(result, json_path, lambda: grade_submission(request, result), junit_path)


@main.command(context_settings=CONTEXT)
@click.argument("lab")
@click.argument("file", type=click.Path(path_type=Path), required=False)
@run_options
@click.option("--chunk", type=click.IntRange(min=1), default=None, help="lab2: rows in the chunk (default 2048).")
@click.option("--prefix", type=click.IntRange(min=0), default=None, help="lab2: cached prefix length (default 2048).")
@click.option("--vs", "versus", default="starter", show_default=True,
              help="lab2 baseline: starter, solution, or a .cu file.")
def bench(lab, file, device, seed, timeout_s, arch, budget_s, noise_target, rounds, json_path, junit_path, chunk, prefix, versus):
    """Time FILE for LAB (default: the shipped solution) after one correctness check."""
    from labrunner.commands.runs import BenchRequest, bench_submission

    request = BenchRequest(lab=lab, file=file, device=device, seed=seed, timeout_s=timeout_s, arch=arch,
                           budget_s=budget_s, noise_target=noise_target, rounds=rounds, chunk=chunk, prefix=prefix, versus=versus)
    result = RunResult("bench", lab, str(file) if file else None)
    guarded(result, json_path, lambda: bench_submission(request, result), junit_path)


@main.command(context_settings=CONTEXT)
@click.argument("lab")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=Path("gates.json"),
              show_default=True, help="Gates file to create or update (one entry per GPU model).")
@click.option("--fraction", type=click.FloatRange(min=0.0, max=1.0, min_open=True), default=0.5, show_default=True,
              help="Fraction of the solution's SPEEDUP a student needs to pass the gate.")
@run_options
def calibrate(lab, output, fraction, device, seed, timeout_s, arch, budget_s, noise_target, rounds, json_path, junit_path):
    """Time the shipped solution against the starter on this GPU and write its speed gate."""
    from labrunner.commands.runs import BenchRequest, calibrate_gate

    request = BenchRequest(lab=lab, file=None, device=device, seed=seed, timeout_s=timeout_s, arch=arch,
                           budget_s=budget_s, noise_target=noise_target, rounds=rounds, chunk=None, prefix=None, versus="starter")
    result = RunResult("calibrate", lab)
    guarded(result, json_path, lambda: calibrate_gate(request, output, fraction, result), junit_path,
            also_writes=(("-o", output),))

