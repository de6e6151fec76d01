"""A submission's row in a batch's gradebook, read from the JSON result its own grading process wrote."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labrunner.run.untrusted_text import shown
from labrunner.truth.verdict import NOT_RUN, Status


@dataclass(frozen=True)
class BatchRow:
    """What the gradebook and the batch's table show of one submission.

    `speedup` is the timed SPEEDUP (labs graded on it only), `gate_met` "yes" or "no" where a speed gate
    decided (else empty), `first_failing_case` the first case in catalogue order that failed ("compile"
    for a compile error), `hints` the hints' texts as one cell, `seconds` the batch's own clock where it
    has one, else the result's."""

    file: str
    sha256: str
    verdict: str
    exit_code: int | None
    speedup: float | None
    gate_met: str
    first_failing_case: str
    hints: str
    seconds: float | None

    @property
    def speedup_text(self) -> str:
        """SPEEDUP as the gradebook writes it (three decimals), empty where none was timed."""
        return "" if self.speedup is None else f"{self.speedup:.3f}"

    @property
    def seconds_text(self) -> str:
        return "" if self.seconds is None else f"{self.seconds:.1f}"

    def to_json(self) -> dict[str, Any]:
        """The row as the gradebook's columns, in their order (`gradebook.COLUMNS`)."""
        return {
            "file": self.file,
            "sha256": self.sha256,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "speedup": self.speedup_text,
            "gate_met": self.gate_met,
            "first_failing_case": self.first_failing_case,
            "hints": self.hints,
            "seconds": self.seconds_text,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], seconds: float | None = None) -> BatchRow:
        """From one submission's JSON result (schema attnlab.result/1); `seconds` is the batch's clock."""
        timing = data.get("timing") or {}
        gate = data.get("gate") or {}
        failing = next((c["name"] for c in data.get("cases") or [] if c["status"] not in (Status.PASS, *NOT_RUN)), None)
        if failing is None and data.get("verdict") == Status.COMPILE_ERROR:
            failing = "compile"
        return cls(
            file=shown(data.get("file") or ""),
            sha256=data.get("sha256") or "",
            verdict=data.get("verdict") or "",
            exit_code=data.get("exit_code"),
            speedup=timing["speedup"] if timing.get("kind") == "speedup" else None,
            gate_met={"met": "yes", "missed": "no"}.get(gate.get("status", ""), ""),
            first_failing_case=failing or "",
            hints=hints_text(data.get("hints")),
            seconds=seconds if seconds is not None else data.get("seconds"),
        )


def hints_text(hints: Any) -> str:
    """Hints, where the result carries them, as one cell: each hint's text, joined by ' | '."""
    if not hints:
        return ""
    if isinstance(hints, str):
        return hints
    if isinstance(hints, dict):
        hints = [hints]
    texts = []
    for hint in hints:
        if isinstance(hint, dict):
            hint = hint.get("text") or hint.get("message") or hint.get("hint") or ""
        texts.append(" ".join(str(hint).split()))
    return " | ".join(t for t in texts if t)
