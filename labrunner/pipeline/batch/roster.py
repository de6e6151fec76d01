"""A course's roster (`--roster FILE`): who is expected to submit, with the ids the course knows them by.

The roster is a CSV file with a header row holding at least `student_id` (the course's id: what a
learning-management system matches a grade on) and `student` (the name the submissions carry: the
student's folder in `DIR/<student>/`, or the file's stem in `DIR/<student>.cu`); `name` (as the
gradebook shows it) and `section` may be there too, and any other column is ignored. Every rostered
student gets a row, in the roster's order: one with no submission is listed `no submission`.

The file is the course's, not a student's, but it is read as carefully: at most `MAX_ROSTER_BYTES`,
UTF-8 (a spreadsheet's byte-order mark is allowed), and an error names the file, the line and what to
write instead (a usage error, exit 2).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from labrunner.exit_codes import usage_error
from labrunner.run.untrusted_text import shown, shown_path

MAX_ROSTER_BYTES = 16 << 20  # some ten thousand times a large course's roster
REQUIRED = ("student_id", "student")
OPTIONAL = ("name", "section")


@dataclass(frozen=True)
class RosterEntry:
    student_id: str
    student: str
    name: str = ""
    section: str = ""


def read_roster(path: Path) -> list[RosterEntry]:
    """The roster's students in its order, or a usage error that says what is wrong and where."""
    label = f"--roster {shown_path(path)}"
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_ROSTER_BYTES + 1)
    except OSError as exc:
        raise usage_error(f"{label}: cannot be read ({exc.strerror})") from None
    if len(data) > MAX_ROSTER_BYTES:
        raise usage_error(f"{label}: more than {MAX_ROSTER_BYTES} bytes is more than a roster needs")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise usage_error(f"{label}: is not UTF-8 text (byte {exc.start}); save it as CSV UTF-8") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [(name or "").strip() for name in reader.fieldnames or []]
    missing = [name for name in REQUIRED if name not in header]
    if missing:
        raise usage_error(
            f"{label}: no {' or '.join(missing)} column (its header: {shown(', '.join(header)) or 'empty'}); "
            "the first line must name the columns student_id and student (name and section may follow)"
        )
    reader.fieldnames = header
    entries: list[RosterEntry] = []
    seen: dict[str, int] = {}
    ids: dict[str, int] = {}
    for line, row in enumerate(reader, start=2):
        cells = {name: (row.get(name) or "").strip() for name in (*REQUIRED, *OPTIONAL)}
        if not any(cells.values()):
            continue  # a blank line a spreadsheet leaves at the end
        for name in REQUIRED:
            if not cells[name]:
                raise usage_error(f"{label}, line {line}: the {name} cell is empty; every student needs both")
        student, student_id = cells["student"], cells["student_id"]
        if student in seen:
            raise usage_error(
                f"{label}, line {line}: student {shown(student)} is listed again (first on line {seen[student]}); "
                "list each student once"
            )
        if student_id in ids:
            raise usage_error(
                f"{label}, line {line}: student_id {shown(student_id)} is listed again (first on line "
                f"{ids[student_id]}); each student needs an id of their own"
            )
        seen[student], ids[student_id] = line, line
        entries.append(RosterEntry(student_id, student, cells["name"], cells["section"]))
    if not entries:
        raise usage_error(f"{label}: lists no student; write one line per student under the header")
    return entries
