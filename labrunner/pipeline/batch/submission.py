"""One submission's grading in a batch, as a process runs it, on this machine or on a cluster's node.

Each submission is graded by the single-file path itself (`attnlab grade LAB FILE --json ...`) in a
process of its own, so a batch gives every file exactly the verdict it gets graded alone, a grader
that dies costs one submission its verdict and nothing more, and the result comes back as the JSON
file that process wrote (never its stdout, which a kernel's printf can fill).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from labrunner.exit_codes import ExitCode
from labrunner.report.results import ResultJson, RunResult
from labrunner.run.sandbox import end_process_tree
from labrunner.run.untrusted_text import shown
from labrunner.truth.cases import SEED_ENVIRONMENT_VARIABLE, environment_seed


@dataclass(frozen=True)
class SubmissionTask:
    """One submission's grading, as a process runs it: picklable, so a Slurm job can carry it."""

    lab: str
    file: str  # as the user named it or the folder listed it (the reports show it escaped)
    options: tuple[str, ...]  # the grade command's options, as given
    json_path: str
    junit_path: str
    log_path: str | None
    cwd: str
    python: str = sys.executable
    environment: tuple[tuple[str, str], ...] = ()

    def argv(self) -> list[str]:
        # `--` before the file: a submission named `-x.cu` is a file, never an option
        return [
            self.python,
            "-m",
            "labrunner",
            "grade",
            "--json",
            self.json_path,
            "--junit",
            self.junit_path,
            *self.options,
            "--",
            self.lab,
            self.file,
        ]


@dataclass
class Outcome:
    task: SubmissionTask
    result: ResultJson
    seconds: float
    exit_code: int = field(init=False)

    def __post_init__(self) -> None:
        self.exit_code = int(self.result.get("exit_code", ExitCode.ENVIRONMENT))


def seed_environment() -> dict[str, str]:
    """$ATTNLAB_SEED for a submission's own process, given only to it: the batch's driver took it out of
    its own environment as it started (the single-file command it runs does the same at once)."""
    seed = environment_seed()
    return {SEED_ENVIRONMENT_VARIABLE: seed} if seed else {}


@contextlib.contextmanager
def environment_for_submission(extra: dict[str, str]) -> Iterator[None]:
    """`extra` in this process's environment only while a cluster's jobs are submitted."""
    os.environ.update(extra)
    try:
        yield
    finally:
        for name in extra:
            os.environ.pop(name, None)


class RunningProcesses:
    """The grading processes a driver has started and not yet seen end, so that a stop can end them.

    Each runs in a session of its own (`start_new_session`), so a terminal's Ctrl-C reaches the driver
    alone, and the driver decides: it passes the signal on to each grading process, whose own handler
    (cli/guard.py) closes its worker and writes its result as interrupted; one still there after
    `grace_s` is killed with every process below it (its worker, a box, a compiler: each in a session
    of its own, so found by parent links, not by its group)."""

    def __init__(self, grace_s: float = 5.0) -> None:
        self._lock = threading.Lock()
        self._processes: set[subprocess.Popen[str]] = set()
        self._ending: signal.Signals | None = None
        self.grace_s = grace_s

    def started(self, process: subprocess.Popen[str]) -> None:
        with self._lock:
            self._processes.add(process)
            ending = self._ending
        if ending is not None:  # started as the stop came: it is ended like the rest, on a clock of its own
            threading.Thread(target=self._end, args=([process], ending), daemon=True).start()

    def ended(self, process: subprocess.Popen[str]) -> None:
        with self._lock:
            self._processes.discard(process)

    def end_all(self, signum: signal.Signals) -> None:
        with self._lock:
            self._ending = signum
            processes = list(self._processes)
        self._end(processes, signum)

    def _end(self, processes: list[subprocess.Popen[str]], signum: signal.Signals) -> None:
        for process in processes:
            with contextlib.suppress(OSError):
                process.send_signal(signum)
        deadline = time.monotonic() + self.grace_s
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - time.monotonic()))
            if process.poll() is None:
                end_process_tree(process.pid)
            else:  # what is left of its group (it ended; what it started in its own group must not outlive it)
                with contextlib.suppress(OSError):
                    os.killpg(process.pid, signal.SIGKILL)


def grade_in_process(task: SubmissionTask, running: RunningProcesses | None = None) -> Outcome:
    """Grade one submission through the single-file command, in a process of its own.

    This is the function every executor runs, on this machine or on a cluster's node. `running` is the
    registry a driver ends its processes through when the batch is stopped."""
    Path(task.json_path).unlink(missing_ok=True)  # a result left by an earlier batch must never stand in
    started = time.perf_counter()
    environment = {**os.environ, **seed_environment(), **dict(task.environment)}
    # stdout and stderr as one stream, in the order they were written: the log reads as a terminal would
    process = subprocess.Popen(
        task.argv(),
        cwd=task.cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    if running is not None:
        running.started(process)
    try:
        output, _ = process.communicate()
    finally:
        if running is not None:
            running.ended(process)
    seconds = time.perf_counter() - started
    if task.log_path:
        with contextlib.suppress(OSError):
            Path(task.log_path).write_text(output)
    try:
        result = json.loads(Path(task.json_path).read_text())
    except (OSError, ValueError):
        result = None
    if result is None or result.get("exit_code") != process.returncode:
        why = ended_how(process.returncode)
        last = (output.strip().splitlines() or [""])[-1][:300]
        result = dead_result(task, f"the grading process {why} without a result" + (f": {shown(last)}" if last else ""))
        write_json_file(result, Path(task.json_path))
    return Outcome(task, result, seconds)


def ended_how(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited {returncode}"


def dead_result(task: SubmissionTask, reason: str) -> ResultJson:
    """What a submission's result says when the job grading it died: the grader's fault, not the student's
    (environment-missing, exit 6), with nothing the dead process could have said, its version included."""
    result = RunResult("grade", task.lab, task.file, error=reason, error_code=ExitCode.ENVIRONMENT, grader_died=True)
    return result.to_json()


def interrupted_result(task: SubmissionTask, reason: str, exit_code: ExitCode) -> ResultJson:
    """What a submission's result says when the batch stopped before it had a verdict: `interrupted`, with
    the batch's own exit code (130 or 143) and why."""
    return RunResult("grade", task.lab, task.file, error=reason, error_code=exit_code).to_json()


def write_json_file(data: ResultJson, path: Path) -> None:
    with contextlib.suppress(OSError):  # the gradebook still has the row; the folder itself is what failed
        path.write_text(json.dumps(data, indent=2) + "\n")
