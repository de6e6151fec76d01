"""The verdict's rules, in one place: every status a case or a run ends as, how severe each is, the
exit code it means, and the words and order a batch reports exit codes in.

A case is judged once (`judge.py`) to one status. A run's verdict is its most severe case status
(ties: the first such case), a missed speed gate where every case passed, or, where the run ended
in an error before its cases could decide, the status that error's exit code names. Its exit code
follows from that verdict alone. The statuses are the very strings the JSON, JUnit, CSV, GitHub
annotations and messages carry (a `StrEnum` member is its string): CI jobs and gradebooks read them,
so they never change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum

from labrunner.exit_codes import ExitCode


class Status(StrEnum):
    """What a case, or a run, ended as."""

    # What a case ran to, most severe first (the order of SEVERITY below).
    CRASH = "crash"
    TIMEOUT = "timeout"
    OUT_OF_BOUNDS = "out-of-bounds"
    INPUT_MUTATED = "input-mutated"
    RACE = "race"
    RACE_CHECK_INCONCLUSIVE = "race-check-inconclusive"  # --race-check could not finish: never read as no race
    NEVER_WRITTEN = "never-written"
    WRONG = "wrong"
    SPEED_GATE = "speed-gate"
    PASS = "pass"
    # Cases that say nothing about the kernel.
    NOT_RUN = "not-run"  # after a crash or a timeout, which may have left the device unusable
    SKIPPED = "skipped"  # outside the CPU backend's time budget
    # A run that ended in an error before its cases could decide.
    COMPILE_ERROR = "compile-error"
    USAGE_ERROR = "usage-error"
    ENVIRONMENT_MISSING = "environment-missing"
    INTERRUPTED = "interrupted"
    ERROR = "error"  # an error whose exit code names no verdict of its own


# The case statuses, most severe first, each with the exit code it means. The order decides which
# case is decisive, and so the run's verdict: a crash says more than a wrong value it may have
# caused, and a race makes every wrong value after it an accident of the thread order.
CASE_EXIT_CODES: dict[Status, ExitCode] = {
    Status.CRASH: ExitCode.MISBEHAVED,
    Status.TIMEOUT: ExitCode.MISBEHAVED,
    Status.OUT_OF_BOUNDS: ExitCode.MISBEHAVED,
    Status.INPUT_MUTATED: ExitCode.MISBEHAVED,
    Status.RACE: ExitCode.MISBEHAVED,
    Status.RACE_CHECK_INCONCLUSIVE: ExitCode.MISBEHAVED,
    Status.NEVER_WRITTEN: ExitCode.WRONG_ANSWER,
    Status.WRONG: ExitCode.WRONG_ANSWER,
    Status.SPEED_GATE: ExitCode.SPEED_GATE,
    Status.PASS: ExitCode.PASS,
}
SEVERITY: tuple[Status, ...] = tuple(CASE_EXIT_CODES)
NOT_RUN: tuple[Status, ...] = (Status.NOT_RUN, Status.SKIPPED)

# A run that ended in an error: the verdict its exit code names (Status.ERROR for any other).
ERROR_VERDICTS: dict[ExitCode, Status] = {
    ExitCode.COMPILE_ERROR: Status.COMPILE_ERROR,
    ExitCode.USAGE: Status.USAGE_ERROR,
    ExitCode.ENVIRONMENT: Status.ENVIRONMENT_MISSING,
    ExitCode.MISBEHAVED: Status.CRASH,  # outside any case: a module that crashed or hung loading, a trace cut off
    ExitCode.INTERRUPTED: Status.INTERRUPTED,
    ExitCode.TERMINATED: Status.INTERRUPTED,
}

# A batch exits with the worst of its submissions' exit codes and counts each code in words. Worst
# first: a batch stopped before its end (Ctrl-C, SIGTERM, its deadline), a grader that could not run
# at all, then a command that was wrong, then the submissions'
# own faults from the worst down.
BATCH_EXIT_CODES: dict[ExitCode, str] = {
    ExitCode.INTERRUPTED: "interrupted",
    ExitCode.TERMINATED: "terminated",
    ExitCode.ENVIRONMENT: "environment missing",
    ExitCode.USAGE: "usage error",
    ExitCode.COMPILE_ERROR: "compile error",
    ExitCode.MISBEHAVED: "misbehaving kernel",
    ExitCode.WRONG_ANSWER: "wrong answer",
    ExitCode.SPEED_GATE: "speed gate missed",
    ExitCode.PASS: "pass",
}
WORST_FIRST: tuple[ExitCode, ...] = tuple(BATCH_EXIT_CODES)


def failure_status(kind: str) -> Status:
    """The status of a run the worker could not answer (run/worker.py's WorkerFailure kinds): a time
    limit is a timeout; a fault the CPU backend found in a guard past shared memory or a buffer is
    out-of-bounds; a process that died, a poisoned context, another caught fault or a failed launch, a crash."""
    if kind == "out-of-bounds":
        return Status.OUT_OF_BOUNDS
    return Status.TIMEOUT if kind == "timeout" else Status.CRASH


def decisive_index(statuses: Sequence[str]) -> int | None:
    """Which case decides the run: the first of its most severe failing statuses; None where every case
    that ran passed (a case not run or skipped says nothing about the kernel)."""
    failing = [i for i, status in enumerate(statuses) if status not in NOT_RUN and status != Status.PASS]
    if not failing:
        return None
    return min(failing, key=lambda i: SEVERITY.index(Status(statuses[i])))


def run_verdict(error_code: ExitCode | None, decisive: str | None, gate_passed: bool = True) -> Status:
    """A run's verdict: its error's, else its decisive case's status, else a missed gate, else a pass."""
    if error_code is not None:
        return ERROR_VERDICTS.get(error_code, Status.ERROR)
    if decisive is not None:
        return Status(decisive)
    if not gate_passed:
        return Status.SPEED_GATE
    return Status.PASS


def run_exit_code(error_code: ExitCode | None, verdict: str) -> ExitCode:
    """The exit code a run returns: its error's own code, else the one its verdict means."""
    if error_code is not None:
        return error_code
    return CASE_EXIT_CODES[Status(verdict)]


def worst_exit_code(codes: Iterable[int]) -> ExitCode:
    """A batch's exit code: the worst of its submissions' (a pass where there were none)."""
    present = set(codes)
    return next((code for code in WORST_FIRST if int(code) in present), ExitCode.PASS)
