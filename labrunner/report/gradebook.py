"""The gradebook: one CSV row per submission, the file course staff open after a batch.

Each row is read from the submission's JSON result, so the gradebook never disagrees with the
reports beside it. The sha256 names exactly the bytes that were graded: a student who changes the
file afterwards has a different hash.

A file name is the student's text, and a spreadsheet runs text that looks like a formula. So:

- every field is quoted (`csv.QUOTE_ALL`), so a `,` or a newline inside one never starts another;
- every text cell is first `shown` (untrusted_text.py): no control character, no byte that is not
  UTF-8, reaches the file;
- a text cell gets a `'` (which a spreadsheet reads as "this cell is text" and does not display)
  wherever a formula could begin: at the start of the cell, and right after each character a
  spreadsheet might split a line on when it guesses the wrong separator (`;`, `,`, tab, `|`),
  when what follows there, after any spaces, is a formula opener (`=`, `+`, `-`, `@`, tab, CR).
  `y;=1+1;.cu` is written `y;'=1+1;.cu`: split on `;`, its middle cell is the text `=1+1`;
- the numbers the grader itself writes (exit_code, cases_run, cases_skipped, speedup, seconds, score,
  max_score, and the cluster's cluster_elapsed_s) are written as they are: no student's text reaches them, and a
  spreadsheet must read them as numbers. Everything else (a hint quotes what a kernel wrote; the
  cluster's state is another program's text) is a text cell, under the rules above.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

from labrunner.report.batch_row import BatchRow
from labrunner.report.course_row import COURSE_COLUMNS
from labrunner.run.untrusted_text import shown

# The verdict's columns (BatchRow), then the course's (CourseRow: who, what it is worth, whom it is like),
# appended so that a reader of the earlier columns finds each where it was.
RESULT_COLUMNS = (
    "file",
    "sha256",
    "verdict",
    "exit_code",
    "backend",
    "cases_run",
    "cases_skipped",
    "speedup",
    "gate_met",
    "first_failing_case",
    "first_hint",
    "hints",
    "cluster_state",
    "cluster_elapsed_s",
    "cluster_reason",
    "seconds",
)
COLUMNS = RESULT_COLUMNS + COURSE_COLUMNS
# the grader's own numbers (and the cluster's count of seconds); every other column is text
NUMBERS = ("exit_code", "cases_run", "cases_skipped", "speedup", "cluster_elapsed_s", "seconds", "score", "max_score")

# Where a formula could begin in a cell: its start, or just after a separator a spreadsheet may split
# on; and what begins one (after any spaces).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
SEPARATORS = (";", ",", "\t", "|")
_FORMULA_HERE = re.compile(f"(^|[{re.escape(''.join(SEPARATORS))}])(?= *[{re.escape(''.join(FORMULA_STARTS))}])")


def row(data: dict[str, Any], seconds: float | None = None) -> dict[str, Any]:
    """A gradebook row's verdict cells (`RESULT_COLUMNS`) from one submission's JSON result; `seconds` is the
    batch's own clock where it has one. The row itself is `BatchRow` (records/batch_row.py); a batch adds
    the course's cells (`CourseRow.cells`), and a row without them leaves those columns empty."""
    return BatchRow.from_json(data, seconds).to_json()


def spreadsheet_safe(value: object) -> str:
    """A text cell as the module's docstring says: shown, and a `'` wherever a formula could begin."""
    return _FORMULA_HERE.sub(r"\1'", shown("" if value is None else str(value)))


def write_gradebook(rows: list[dict[str, Any]], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, quoting=csv.QUOTE_ALL)
        writer.writeheader()
        for entry in rows:
            writer.writerow(
                {
                    key: plain_number(entry.get(key)) if key in NUMBERS else spreadsheet_safe(entry.get(key))
                    for key in COLUMNS
                }
            )


def plain_number(value: object) -> str:
    """One of the grader's numbers as written: an int or a figure the row formatted, else empty."""
    if isinstance(value, bool) or value is None:
        return ""
    if isinstance(value, (int, float)):
        return str(value)
    return str(value) if re.fullmatch(r"\d+(\.\d+)?", str(value)) else ""
