"""What every command does around its work: refuse unwritable outputs first, turn every error and
signal into one line and an exit code (never a traceback), write --json and --junit, exit.

Exit codes are documented in `exit_codes.py` and README.md. Every error is one line on stderr;
results go to stdout, progress to stderr.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import NoReturn

import click

from labrunner.cli.options import SHOW_TIMINGS
from labrunner.compile.source import submission_sha256
from labrunner.exit_codes import AttnlabError, ExitCode, SignalHandler, Terminated
from labrunner.phases import CLOCK
from labrunner.pipeline.outputs import unwritable
from labrunner.report import terminal
from labrunner.report.junit import write_junit
from labrunner.report.reporter import NotesRecorded, Reporter
from labrunner.report.results import RunResult, json_text, write_json
from labrunner.report.terminal_listener import TerminalListener
from labrunner.truth.verdict import Status

# `--json -`: the JSON on standard output, as a pipe into jq expects.
STANDARD_OUTPUT = Path("-")

# What a command does once its result is whole, before the reports are written (the annotations, Gradescope's file).
After = Callable[[RunResult], object]


def finish(
    result: RunResult, json_path: Path | None, junit_path: Path | None, after: After | None, started: float
) -> None:
    """Render what is there, write --json and --junit, exit with the result's code. Never a traceback."""
    with CLOCK.phase("reports"):
        if result.error:
            terminal.error(result.error)
        if result.verdict == Status.COMPILE_ERROR:
            # the compiler's lines end with the verdict line every grade ends with: `COMPILE-ERROR (exit 3)`
            terminal.verdict_line(result)
        if after:
            after(result)
    result.seconds = round(time.perf_counter() - started, 3)
    result.timings = CLOCK.table()  # what writing the JSON itself takes is the one thing left out
    if show_timings():
        terminal.phase_table(result.timings, result.seconds)
    for option, path, write in (("--json", json_path, write_json), ("--junit", junit_path, write_junit)):
        if option == "--json" and path == STANDARD_OUTPUT:
            sys.stdout.write(json_text(result))
            continue
        if path:
            try:
                write(result, path)
            except OSError as exc:
                terminal.error(f"{option} {path}: cannot write ({exc.strerror})")
                sys.exit(int(ExitCode.USAGE))
    sys.exit(int(result.exit_code))


def reporter_for(result: RunResult, verbose: bool = False) -> Reporter:
    """Who hears a command's run: the terminal, and the run's own record (its notes, as --json writes them)."""
    return Reporter(TerminalListener(verbose), NotesRecorded(result))


def guarded(
    result: RunResult,
    json_path: Path | None,
    body: Callable[[], object],
    junit_path: Path | None = None,
    also_writes: tuple[tuple[str, Path], ...] = (),
    after: After | None = None,
) -> None:
    if json_path == STANDARD_OUTPUT:
        # the report a person reads goes to standard error, so standard output holds the JSON alone
        report_to, terminal.stdout = terminal.stdout, terminal.stderr
        try:
            _guarded(result, json_path, body, junit_path, also_writes, after)
        finally:
            terminal.stdout = report_to
        return
    _guarded(result, json_path, body, junit_path, also_writes, after)


def _guarded(
    result: RunResult,
    json_path: Path | None,
    body: Callable[[], object],
    junit_path: Path | None,
    also_writes: tuple[tuple[str, Path], ...],
    after: After | None,
) -> None:
    for option, path in (("--json", json_path), ("--junit", junit_path), *also_writes):
        problem = path and not (option == "--json" and path == STANDARD_OUTPUT) and unwritable(path)
        if problem:
            terminal.error(f"{option} {path}: cannot write ({problem})")
            sys.exit(int(ExitCode.USAGE))
    started = time.perf_counter()
    CLOCK.start()
    previous = _on_sigterm(_terminate)
    try:
        body()
    except AttnlabError as exc:
        result.error, result.error_code = exc.message, exc.exit_code
    except (KeyboardInterrupt, Terminated) as exc:
        name, result.error_code = (
            ("SIGINT", ExitCode.INTERRUPTED) if isinstance(exc, KeyboardInterrupt) else ("SIGTERM", ExitCode.TERMINATED)
        )
        kept = len([c for c in result.cases if c.status != Status.SKIPPED])
        result.error = f"interrupted by {name}: {kept} case{'s' if kept != 1 else ''} finished before it are kept"
        terminal.cases_report(result)
    finally:
        _on_sigterm(previous)
    describe_run(result)
    finish(result, json_path, junit_path, after, started)


# Options a run's record has never carried: how its cases are printed, and whether a box is insisted on
# (a run that could not have one ended in an error, which the record says).
NOT_RECORDED = ("verbose", "require_box")


def describe_run(result: RunResult) -> None:
    """What the JSON records about the run itself: the command's options and the hash of the file graded.

    The file is hashed as the grade read it (no link followed, nothing but a regular file of at most
    1 MiB): a link to a secret or a 1.5 GB file gets no hash, and costs no memory."""
    context = click.get_current_context(silent=True)
    if context is not None:
        result.options = {
            name: plain_option(value) for name, value in context.params.items() if name not in NOT_RECORDED
        }
    if result.file:
        result.sha256 = submission_sha256(Path(result.file))  # None where the run itself says why not


def show_timings() -> bool:
    """`--timings` on the command line of the command that runs (every command that grades takes it)."""
    context = click.get_current_context(silent=True)
    return bool(context is not None and context.meta.get(SHOW_TIMINGS))


def plain_option(value: object) -> object:
    """An option's value as the JSON holds it: a path as its text, a tuple as a list."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [plain_option(v) for v in value]
    return value


def _terminate(signum: int, frame: FrameType | None) -> NoReturn:
    raise Terminated()


def _on_sigterm(handler: SignalHandler) -> SignalHandler:
    """Installs a SIGTERM handler and returns the previous one (only the main thread may; elsewhere, none)."""
    if handler is None:
        return None
    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return None
