"""Results: what a case and a run ended as, their exit codes, and the versioned JSON schema.

The rules that decide a verdict and its exit code (statuses, most severe first; ties: the first
such case) are truth/verdict.py's; a result only reads them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labrunner.compile.backend import Backend
from labrunner.exit_codes import ExitCode
from labrunner.records.compile import CompileSummary
from labrunner.records.device import DeviceFacts
from labrunner.records.gate import Gate
from labrunner.records.profile import Profile
from labrunner.records.timing import Timing
from labrunner.run.untrusted_text import shown, shown_text
from labrunner.truth.checker import FirstBad
from labrunner.truth.hints import Evidence, Hint
from labrunner.truth.verdict import CASE_EXIT_CODES, Status, decisive_index, run_exit_code, run_verdict
from labrunner.truth.verdict import NOT_RUN as NOT_RUN

SCHEMA = "attnlab.result/1"
STATUS_EXIT_CODES = CASE_EXIT_CODES  # the case statuses, most severe first, with their exit codes

# A result as its JSON holds it (schema attnlab.result/1): what the report writers read, from a result made
# here or from a file another grading process wrote, so each reader checks the fields it uses.
ResultJson = dict[str, Any]


@dataclass
class CaseResult:
    """One case's outcome. Mutable because a case is judged in steps: the check sets its status, then a
    race check or the sanitizer's replay may change it and add their diagnosis, and the hints' evidence is
    gathered last (`pipeline.cases`, `pipeline.explain`)."""

    name: str
    status: Status
    message: str
    rows: int
    prefix: int = 0
    max_abs_err: float | None = None
    bad_elements: int = 0
    first_bad: FirstBad | None = None
    failing_rows: list[int] = field(default_factory=list)
    diagnosis: str | None = None  # compute-sanitizer's report on a crash, where it ran
    nonfinite: int = 0  # output elements that are NaN or Inf
    evidence: Evidence | dict[str, Any] = field(
        default_factory=dict
    )  # what the hints read (truth/hints.py); not in the JSON

    def __post_init__(self) -> None:
        self.status = Status(self.status)  # the word itself, where a caller gave the string

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "rows": self.rows,
            "prefix": self.prefix,
            "max_abs_err": _number(self.max_abs_err),
            "nonfinite": self.nonfinite,
            "bad_elements": self.bad_elements,
            "first_bad": self.first_bad,
            "failing_rows": self.failing_rows,
            "message": shown_text(self.message),
            "diagnosis": None if self.diagnosis is None else shown_text(self.diagnosis),
        }


@dataclass
class RunResult:
    """One command's result, the record every stage adds to as the command goes on: the compile gate its
    summary, the worker each case, the timing its record, the gates their decision, the CLI the options, the
    clock and an error where one stopped it. Mutable for that reason: it fills step by step, and an error or an
    interrupt at any step still writes what was reached. Its verdict and exit code are derived, never stored."""

    command: str  # grade, bench, check or doctor
    lab: str | None = None
    file: str | None = None
    backend: Backend | None = None
    device: DeviceFacts | None = None
    seed: str | None = None
    oracle_proof: dict[str, object] | None = None
    cases: list[CaseResult] = field(default_factory=list)
    timing: Timing | None = None
    gate: Gate | None = None
    compile: CompileSummary | None = None
    profile: Profile | None = None  # `attnlab profile`, or `--profile`: schema attnlab.profile/1
    notes: list[str] = field(default_factory=list)
    kernel_output: list[str] = field(default_factory=list)
    error: str | None = None
    error_code: ExitCode | None = None
    sha256: str | None = None  # of the file graded, as read: a gradebook row names exactly what it graded
    options: dict[str, Any] = field(default_factory=dict)  # the command's options, as given (JSON)
    seconds: float | None = None  # wall time of the whole command
    timings: list[tuple[str, float]] | None = None  # (phase, seconds): where that time went (`labrunner.phases`)
    hints: list[Hint] = field(default_factory=list)  # [{"hazard", "text"}], at most two, on a failing grade
    grader_died: bool = False  # a batch's record of a grading process that died: it never said its version

    def __post_init__(self) -> None:
        if self.backend is not None:
            self.backend = Backend(self.backend)  # the member itself, where a caller gave the string

    @property
    def device_name(self) -> str | None:
        return None if self.device is None else self.device.name

    @property
    def skipped(self) -> int:
        return sum(1 for c in self.cases if c.status == Status.SKIPPED)

    @property
    def summary(self) -> str:
        """The verdict in words, with the skipped cases counted: a pass that left cases out says so."""
        if not self.skipped:
            return self.verdict
        count = f"{self.skipped} case{'s' if self.skipped != 1 else ''}"
        where = f" on the {self.backend.upper()} backend" if self.backend else ""
        return f"{self.verdict} ({count} skipped{where}; --full runs them)"

    @property
    def decisive_case(self) -> CaseResult | None:
        index = decisive_index([c.status for c in self.cases])
        return None if index is None else self.cases[index]

    @property
    def verdict(self) -> Status:
        case = self.decisive_case
        gate_passed = self.gate is None or self.gate.passed
        return run_verdict(self.error_code, None if case is None else case.status, gate_passed)

    @property
    def exit_code(self) -> ExitCode:
        return run_exit_code(self.error_code, self.verdict)

    def to_json(self) -> ResultJson:
        return {
            "schema": SCHEMA,
            "command": self.command,
            "lab": self.lab,
            "file": None if self.file is None else shown(self.file),  # a student's file name, shown
            "backend": self.backend,
            "device": None if self.device is None else self.device.to_json(),
            "seed": self.seed,
            "verdict": self.verdict,
            "summary": self.summary,
            "exit_code": int(self.exit_code),
            "error": None if self.error is None else shown_text(self.error),
            "skipped": self.skipped,
            "hints": self.hints,
            "decisive_case": self.decisive_case.name if self.decisive_case else None,
            "oracle_proof": self.oracle_proof,
            "compile": None if self.compile is None else self.compile.to_json(),
            "cases": [c.to_json() for c in self.cases],
            "timing": None if self.timing is None else self.timing.to_json(),
            "gate": None if self.gate is None else self.gate.to_json(),
            "notes": [shown_text(n) for n in self.notes],
            "kernel_output": [shown(line) for line in self.kernel_output],
            **({"profile": self.profile.to_json()} if self.profile is not None else {}),
            "attnlab_version": None if self.grader_died else attnlab_version(),
            "sha256": self.sha256,
            "options": self.options,
            "gpu": self.device_name if self.backend == Backend.GPU else None,
            "seconds": self.seconds,
            "timings": None
            if self.timings is None
            else [{"phase": name, "seconds": seconds} for name, seconds in self.timings],
        }


def attnlab_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attnlab")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def write_json(result: RunResult, path: Path) -> None:
    path.write_text(json_text(result))


def json_text(result: RunResult) -> str:
    return json.dumps(result.to_json(), indent=2, allow_nan=False, default=_plain) + "\n"


def _number(value: float | None) -> float | str | None:
    """JSON has no NaN or Inf: a non-finite error is written as the word ("nan", "inf")."""
    if value is None or value == value and abs(value) != float("inf"):
        return value
    return str(value)


def _plain(value: object) -> object:
    """A numpy scalar (anything with `item`) as the number it holds; anything else has no JSON form."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
