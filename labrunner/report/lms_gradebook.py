"""The gradebook in the layout a learning-management system imports (`--lms-csv PATH --lms NAME`).

One column of grades, named by `--assignment`, one row per student, in the batch's order (the
roster's, where there is one):

- `canvas`: Canvas's gradebook import (Grades, Import): `Student`, `ID`, `SIS User ID`, `SIS Login
  ID`, `Section`, then the assignment's column, with a second row `Points Possible` that gives the
  assignment's points. `ID` is Canvas's own number for a user, which attnlab does not know, so it is
  left empty and the roster's `student_id` goes in `SIS User ID`, the student's folder or file name in
  `SIS Login ID`; Canvas matches a row on whichever of those it knows. A column Canvas does not have yet
  becomes a new assignment when the file is imported.
- `moodle`: Moodle's grade import (Grades, Import, CSV file): `ID number`, `Username`, `Full name`,
  `Group`, then the assignment's column; Moodle asks which column identifies the user (map `ID number`
  to the user's ID number) and which grade item the assignment's column goes to.

A grade the grader could not finish (its environment, a grader that died, an interrupted batch) is an
empty cell, never 0: both systems leave a grade alone where the cell is empty, so nobody is given a 0
for the grader's fault. A student who did not submit, or whose file could not be graded, is 0. Every
text cell is written as the gradebook writes its cells (gradebook.py: quoted, shown, a formula kept as
text).
"""

from __future__ import annotations

import csv
from pathlib import Path

from labrunner.report.course_row import CourseRow
from labrunner.report.gradebook import spreadsheet_safe

CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MOODLE_COLUMNS = ("ID number", "Username", "Full name", "Group")


def lms_rows(layout: str, rows: list[CourseRow], assignment: str) -> list[list[str]]:
    """The file's lines as cells, its header first."""
    title = spreadsheet_safe(assignment)
    if layout == "canvas":
        most = max((r.score.max_score_text for r in rows), key=float, default="")
        lines = [[*CANVAS_COLUMNS, title], ["Points Possible", "", "", "", "", most]]
        for r in rows:
            who = r.name or r.student
            lines.append(
                [*(spreadsheet_safe(c) for c in (who, "", r.student_id, r.student, r.section)), r.score.score_text]
            )
        return lines
    lines = [[*MOODLE_COLUMNS, title]]
    for r in rows:
        lines.append([*(spreadsheet_safe(c) for c in (r.student_id, r.student, r.name, r.section)), r.score.score_text])
    return lines


def write_lms_gradebook(layout: str, rows: list[CourseRow], assignment: str, path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, quoting=csv.QUOTE_MINIMAL).writerows(lms_rows(layout, rows, assignment))
