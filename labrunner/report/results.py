"""Results: what a case and a run ended as, their exit codes, and the versioned JSON schema.

Statuses, most severe first. A run's verdict is its most severe case status (ties: the first
such case), and its exit code follows from that verdict alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from labrunner.exit_codes import ExitCode

SCHEMA = "attnlab.result/1"

STATUS_EXIT_CODES: dict[str, ExitCode] = {
    "crash": ExitCode.MISBEHAVED,
    "timeout": ExitCode.MISBEHAVED,
    "out-of-bounds": ExitCode.MISBEHAVED,
    "input-mutated": ExitCode.MISBEHAVED,
    "race": ExitCode.MISBEHAVED,
    "never-written": ExitCode.WRONG_ANSWER,
    "wrong": ExitCode.WRONG_ANSWER,
    "speed-gate": ExitCode.SPEED_GATE,
    "pass": ExitCode.PASS,
}
SEVERITY = list(STATUS_EXIT_CODES)
NOT_RUN = ("not-run", "skipped")  # cases that say nothing about the kernel


@dataclass
class CaseResult:
    name: str
    status: str
    message: str
    rows: int
    prefix: int = 0
    max_abs_err: float | None = None
    bad_elements: int = 0
    first_bad: dict | None = None
    failing_rows: list[int] = field(default_factory=list)
    diagnosis: str | None = None  # compute-sanitizer's report on a crash, where it ran
    nonfinite: int = 0            # output elements that are NaN or Inf
    evidence: dict = field(default_factory=dict)  # what the hints read (truth/hints.py); not in the JSON

    def to_json(self) -> dict:
        return {
            "name": self.name, "status": self.status, "rows": self.rows, "prefix": self.prefix,
            "max_abs_err": _number(self.max_abs_err), "nonfinite": self.nonfinite,
            "bad_elements": self.bad_elements, "first_bad": self.first_bad,
            "failing_rows": self.failing_rows, "message": self.message, "diagnosis": self.diagnosis,
        }


@dataclass
class RunResult:
    command: str                       # grade, bench, check or doctor
    lab: str | None = None
    file: str | None = None
    backend: str | None = None
    device: dict | None = None
    seed: str | None = None
    oracle_proof: dict | None = None
    cases: list[CaseResult] = field(default_factory=list)
    timing: dict | None = None
    gate: dict | None = None
    compile: dict | None = None
    notes: list[str] = field(default_factory=list)
    kernel_output: list[str] = field(default_factory=list)
    error: str | None = None
    error_code: ExitCode | None = None
    hints: list[dict] = field(default_factory=list)  # [{"hazard", "text"}], at most two, on a failing grade

    @property
    def skipped(self) -> int:
        return sum(1 for c in self.cases if c.status == "skipped")

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
        ran = [c for c in self.cases if c.status not in NOT_RUN]
        failing = [c for c in ran if c.status != "pass"]
        if not failing:
            return None
        return min(failing, key=lambda c: SEVERITY.index(c.status))

    @property
    def verdict(self) -> str:
        if self.error_code is not None:
            return {ExitCode.COMPILE_ERROR: "compile-error", ExitCode.USAGE: "usage-error",
                    ExitCode.ENVIRONMENT: "environment-missing", ExitCode.INTERRUPTED: "interrupted",
                    ExitCode.TERMINATED: "interrupted"}.get(self.error_code, "error")
        case = self.decisive_case
        if case is not None:
            return case.status
        if self.gate and not self.gate.get("passed", True):
            return "speed-gate"
        return "pass"

    @property
    def exit_code(self) -> ExitCode:
        if self.error_code is not None:
            return self.error_code
        return STATUS_EXIT_CODES.get(self.verdict, ExitCode.PASS)

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA, "command": self.command, "lab": self.lab, "file": self.file,
            "backend": self.backend, "device": self.device, "seed": self.seed,
            "verdict": self.verdict, "summary": self.summary, "exit_code": int(self.exit_code), "error": self.error,
            "skipped": self.skipped, "hints": self.hints,
            "decisive_case": self.decisive_case.name if self.decisive_case else None,
            "oracle_proof": self.oracle_proof, "compile": self.compile,
            "cases": [c.to_json() for c in self.cases], "timing": self.timing, "gate": self.gate,
            "notes": self.notes, "kernel_output": self.kernel_output,
        }


def write_json(result: RunResult, path: Path) -> None:
    path.write_text(json.dumps(result.to_json(), indent=2, allow_nan=False, default=_plain) + "\n")


def write_junit(result: RunResult, path: Path) -> None:
    """One JUnit test case per grading case, for CI systems that render test reports."""
    from xml.etree import ElementTree

    suite = ElementTree.Element("testsuite", name=f"attnlab {result.lab} {result.file}",
                                tests=str(len(result.cases)), skipped=str(result.skipped))
    failures = 0
    for case in result.cases:
        element = ElementTree.SubElement(suite, "testcase", classname=f"{result.lab}.{result.file}", name=case.name)
        if case.status in NOT_RUN:
            ElementTree.SubElement(element, "skipped", message=case.message)
        elif case.status != "pass":
            failures += 1
            ElementTree.SubElement(element, "failure", type=case.status, message=case.message)
    if result.error:
        failures += 1
        element = ElementTree.SubElement(suite, "testcase", classname=str(result.lab), name=result.verdict)
        ElementTree.SubElement(element, "failure", type=result.verdict, message=result.error)
    suite.set("failures", str(failures))
    ElementTree.ElementTree(suite).write(path, encoding="unicode", xml_declaration=True)


def _number(value: float | None) -> float | str | None:
    """JSON has no NaN or Inf: a non-finite error is written as the word ("nan", "inf")."""
    if value is None or value == value and abs(value) != float("inf"):
        return value
    return str(value)


def _plain(value):
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
