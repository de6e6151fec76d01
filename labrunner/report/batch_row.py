"""A submission's row in a batch's gradebook, read from the JSON result its own grading process wrote."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labrunner.run.untrusted_text import shown
from labrunner.truth.verdict import NOT_RUN, Status


@dataclass(frozen=True)
class BatchRow:
    """What the gradebook and the batch's table show of one submission.

    `backend` is where its verdict was reached ("gpu" or "cpu"; empty where no backend was chosen, as for
    a compile error), `cases_run` how many cases ran to a status of their own and `cases_skipped` how many
    the CPU backend left out (its time budget; --full runs them), so a CPU pass that skipped cases never
    reads as a GPU pass. `speedup` is the timed SPEEDUP (labs graded on it only), `gate_met` "yes" or
    "no" where a speed gate decided (else empty), `first_failing_case` the first case in catalogue order
    that failed ("compile" for a compile error), `first_hint` the first hint's text and `hints` every
    hint's, as one cell. `cluster_state` and `cluster_elapsed_s` are the cluster's word on the task that
    graded it (Slurm's job state and elapsed seconds, from the result's `cluster`), empty elsewhere.
    `seconds` is the batch's own clock where it has one, else the result's."""

    file: str
    sha256: str
    verdict: str
    exit_code: int | None
    speedup: float | None
    gate_met: str
    first_failing_case: str
    hints: str
    seconds: float | None
    # added later, so last and with defaults: a row built by position keeps its meaning
    backend: str = ""
    cases_run: int = 0
    cases_skipped: int = 0
    first_hint: str = ""
    cluster_state: str = ""
    cluster_elapsed_s: float | None = None
    cluster_reason: str = ""  # the cluster's fault, where one ended or requeued the task (`node failure, requeued`)

    @property
    def speedup_text(self) -> str:
        """SPEEDUP as the gradebook writes it (three decimals), empty where none was timed."""
        return "" if self.speedup is None else f"{self.speedup:.3f}"

    @property
    def seconds_text(self) -> str:
        return "" if self.seconds is None else f"{self.seconds:.1f}"

    @property
    def cluster_elapsed_text(self) -> str:
        """The cluster's elapsed time as the gradebook writes it: whole seconds as sacct counts them."""
        if self.cluster_elapsed_s is None:
            return ""
        return (
            f"{self.cluster_elapsed_s:.0f}"
            if float(self.cluster_elapsed_s).is_integer()
            else f"{self.cluster_elapsed_s:.1f}"
        )

    def to_json(self) -> dict[str, Any]:
        """The row as the gradebook's columns, in their order (`gradebook.COLUMNS`)."""
        return {
            "file": self.file,
            "sha256": self.sha256,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "backend": self.backend,
            "cases_run": self.cases_run,
            "cases_skipped": self.cases_skipped,
            "speedup": self.speedup_text,
            "gate_met": self.gate_met,
            "first_failing_case": self.first_failing_case,
            "first_hint": self.first_hint,
            "hints": self.hints,
            "cluster_state": self.cluster_state,
            "cluster_elapsed_s": self.cluster_elapsed_text,
            "cluster_reason": self.cluster_reason,
            "seconds": self.seconds_text,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], seconds: float | None = None) -> BatchRow:
        """From one submission's JSON result (schema attnlab.result/1); `seconds` is the batch's clock."""
        timing = data.get("timing") or {}
        gate = data.get("gate") or {}
        cases = data.get("cases") or []
        cluster = data.get("cluster") or {}
        failing = next((c["name"] for c in cases if c["status"] not in (Status.PASS, *NOT_RUN)), None)
        if failing is None and data.get("verdict") == Status.COMPILE_ERROR:
            failing = "compile"
        hints = data.get("hints")
        elapsed = cluster.get("elapsed_s")
        return cls(
            file=shown(data.get("file") or ""),
            sha256=data.get("sha256") or "",
            verdict=data.get("verdict") or "",
            exit_code=data.get("exit_code"),
            backend=shown(data.get("backend") or ""),
            cases_run=sum(1 for c in cases if c["status"] not in NOT_RUN),
            cases_skipped=sum(1 for c in cases if c["status"] == Status.SKIPPED),
            speedup=timing["speedup"] if timing.get("kind") == "speedup" else None,
            gate_met={"met": "yes", "missed": "no"}.get(gate.get("status", ""), ""),
            first_failing_case=failing or "",
            first_hint=hints_text(hints[:1] if isinstance(hints, list) else hints),
            hints=hints_text(hints),
            cluster_state=shown(str(cluster.get("state") or "")),
            cluster_elapsed_s=elapsed if isinstance(elapsed, (int, float)) and not isinstance(elapsed, bool) else None,
            cluster_reason=shown(str(cluster.get("reason") or "")),
            seconds=seconds if seconds is not None else data.get("seconds"),
        )


def batch_rows(results: list[tuple[dict[str, Any], float | None]]) -> list[BatchRow]:
    """Each submission's row, from the result its own grading process wrote (with the batch's clock): a batch
    holds only those results' JSON, so the gradebook reads its rows from it, here and nowhere else."""
    return [BatchRow.from_json(result, seconds) for result, seconds in results]


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
