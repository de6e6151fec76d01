"""The gradebook: one CSV row per submission, the file course staff open after a batch.

Each row is read from the submission's JSON result, so the gradebook never disagrees with the
reports beside it. The sha256 names exactly the bytes that were graded: a student who changes the
file afterwards has a different hash.
"""

from __future__ import annotations

import csv
from pathlib import Path

from labrunner.report.results import NOT_RUN

COLUMNS = ("file", "sha256", "verdict", "exit_code", "speedup", "gate_met", "first_failing_case", "hints", "seconds")

# A spreadsheet runs a cell that starts with one of these as a formula; a file name or a hint is
# the students' text, so such a cell is written with a leading quote (it then reads as text).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def row(data: dict, seconds: float | None = None) -> dict:
    """A gradebook row from one submission's JSON result; `seconds` is the batch's own clock where it has one."""
    timing = data.get("timing") or {}
    gate = data.get("gate") or {}
    failing = next((c["name"] for c in data.get("cases") or [] if c["status"] not in ("pass", *NOT_RUN)), None)
    if failing is None and data.get("verdict") == "compile-error":
        failing = "compile"
    taken = seconds if seconds is not None else data.get("seconds")
    return {
        "file": data.get("file") or "",
        "sha256": data.get("sha256") or "",
        "verdict": data.get("verdict") or "",
        "exit_code": data.get("exit_code"),
        "speedup": f"{timing['speedup']:.3f}" if timing.get("kind") == "speedup" else "",
        "gate_met": {"met": "yes", "missed": "no"}.get(gate.get("status"), ""),
        "first_failing_case": failing or "",
        "hints": hints_text(data.get("hints")),
        "seconds": "" if taken is None else f"{taken:.1f}",
    }


def hints_text(hints) -> str:
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


def spreadsheet_safe(value) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def write_gradebook(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for entry in rows:
            writer.writerow({key: spreadsheet_safe(entry[key]) if key in ("file", "first_failing_case", "hints")
                             else entry[key] for key in COLUMNS})
