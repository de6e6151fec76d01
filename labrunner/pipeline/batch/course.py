"""A batch's rows as a course reads them: one per student, with the roster's ids, a score, and the
submissions that look alike.

Each graded student's row is the result its own grading process wrote, with the course's fields added
(`CourseRow.to_json`: `student`, `student_id`, `points`, `similar_to`) and written back to its JSON and
JUnit reports, so every report names its student. Two kinds of row are the batch's own, never graded:
a student with several candidate files (batch_students.py: never guessed), and, with a roster, a
rostered student with no submission. Each is written as a result of the schema too (a usage error
that names what to do), scored 0: the student's doing, not the grader's.

The score of every row is report/points.py's, from the result and the lab's points table; similar
submissions are report/similarity.py's, over the bytes each student handed in, the lab's starters
taken out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from labrunner.exit_codes import ExitCode
from labrunner.labs import get_lab
from labrunner.pipeline.batch.files import report_name
from labrunner.pipeline.batch.roster import RosterEntry
from labrunner.pipeline.batch.settings import BatchOptions
from labrunner.pipeline.batch.students import Student, submitted_bytes
from labrunner.pipeline.batch.submission import Outcome
from labrunner.report.course_row import CourseRow
from labrunner.report.junit import write_suite
from labrunner.report.points import UNFINISHED, lab_points, score_result
from labrunner.report.results import RunResult
from labrunner.report.similarity import fingerprints, similar_to


@dataclass
class CourseEntry:
    """One row of the batch: the student, their result (with the course's fields) and where it is written."""

    student: str
    result: dict[str, Any]
    course: CourseRow
    json_path: Path
    junit_path: Path
    seconds: float | None = None
    students_fault: bool = False  # a refusal that is the student's doing: scored 0, ranked as theirs
    submitted: bool = True

    def write_reports(self) -> None:
        """The row's JSON result and JUnit report, with the course's fields (a folder that fails to take them
        leaves the gradebook its row; the batch's own outputs say what could not be written)."""
        try:
            self.json_path.write_text(json.dumps(self.result, indent=2, allow_nan=False) + "\n")
            write_suite(self.result, self.junit_path)
        except OSError:
            pass


@dataclass(frozen=True)
class Graded:
    """What a batch graded: its students as found, each graded one's outcome by name, the names whose
    refusal is the student's own doing, and the backend the batch chose."""

    students: list[Student]
    outcomes: dict[str, Outcome]
    students_fault: set[str]
    backend: str


@dataclass(frozen=True)
class ReportNames:
    """Where a batch writes each student's reports: the folder, and each student's report name in it."""

    folder: Path
    names: dict[str, str]

    def written(self, name: str, seconds: float | None = None) -> Written:
        return Written(self.folder / f"{name}.json", self.folder / f"{name}.xml", seconds)


@dataclass(frozen=True)
class Written:
    """Where one row's JSON and JUnit reports are written, and the seconds its grade took (None: never graded)."""

    json_path: Path
    junit_path: Path
    seconds: float | None = None


@dataclass(frozen=True)
class Scoring:
    """What every row is scored against: the lab's points, the roster by student, and who looks like whom."""

    points: Any
    on_roster: dict[str, RosterEntry]
    similar: dict[str, list[tuple[str, float]]]


def course_entries(
    lab: str, graded: Graded, roster: list[RosterEntry] | None, batch: BatchOptions, reports: ReportNames
) -> list[CourseEntry]:
    """A row per student found, then one per rostered student who submitted nothing; in the order found."""
    students, outcomes = graded.students, graded.outcomes
    # the options every graded file records (a row the batch writes itself is scored under the same ones)
    options = next(
        (o.result["options"] for o in outcomes.values() if o.result.get("options")), {"device": graded.backend}
    )
    handed_out = starters(lab)
    scoring = Scoring(
        lab_points(lab),
        {r.student: r for r in roster or []},
        similar_to(own_code(students, handed_out), handed_out, batch.similar_above),
    )
    entries = []
    for student in students:
        outcome = outcomes.get(student.name)
        if outcome is not None:
            result, fault = outcome.result, student.name in graded.students_fault
            written = Written(Path(outcome.task.json_path), Path(outcome.task.junit_path), outcome.seconds)
        else:  # several files: never graded, never guessed
            error = f"{student.shown_file}: {student.several}"
            result, fault = unguessed(lab, student.shown_file, error, options), True
            written = reports.written(reports.names[student.name])
        entries.append(entry(student.name, result, scoring, fault, written))
    found = {s.name for s in students}
    used = {n.lower() for n in reports.names.values()} | {"junit", "gradebook"}
    unscored = replace(scoring, similar={})
    for rostered in roster or []:
        if rostered.student in found:
            continue
        name = unique(report_name(rostered.student), used)
        error = f"no submission: no file of {rostered.student} was among the files graded"
        result = unguessed(lab, None, error, options)
        row = entry(rostered.student, result, unscored, True, reports.written(name))
        entries.append(replace(row, submitted=False, course=replace(row.course, submitted=False)))
    return entries


def entry(student: str, result: dict[str, Any], scoring: Scoring, fault: bool, written: Written) -> CourseEntry:
    rostered = scoring.on_roster.get(student)
    course = CourseRow(
        student,
        score_result(result, scoring.points, students_fault=fault),
        student_id=rostered.student_id if rostered else "",
        name=rostered.name if rostered else "",
        section=rostered.section if rostered else "",
        similar_to=tuple(scoring.similar.get(student, ())),
        not_graded=str(result.get("error") or "") if result.get("verdict") in UNFINISHED else "",
    )
    return CourseEntry(
        student,
        {**result, **course.to_json()},
        course,
        written.json_path,
        written.junit_path,
        written.seconds,
        fault,
    )


def unguessed(lab: str, file: str | None, error: str, options: dict[str, Any]) -> dict[str, Any]:
    """The result of a row the batch writes itself: a usage error that says what to do, under the options
    the batch graded with (they decide whether the speed part is scored)."""
    result = RunResult("grade", lab, file, error=error, error_code=ExitCode.USAGE, options=dict(options))
    return result.to_json()


def unique(name: str, used: set[str]) -> str:
    candidate, n = name, 1
    while candidate.lower() in used:
        n += 1
        candidate = f"{name}-{n}"
    used.add(candidate.lower())
    return candidate


def own_code(students: list[Student], handed_out: list[bytes]) -> dict[str, bytes]:
    """Each graded student's bytes, where the file holds code of its own: a file with nothing beyond the
    starter (the starter handed in unchanged, an empty file, a line too short to fingerprint) is like every
    other such file by nature, and flagging those pairs would bury the pairs a person must look at."""
    starter_prints = set().union(*(fingerprints(data) for data in handed_out))
    files = {s.name: submitted_bytes(s.files[0].path) for s in students if not s.several}
    return {name: data for name, data in files.items() if data and fingerprints(data) - starter_prints}


def starters(lab: str) -> list[bytes]:
    """The files every student was handed: the code they share with everyone, which never counts as shared."""
    definition = get_lab(lab)
    paths = [definition.starter_path] + ([definition.triton_starter_path] if definition.triton_blocks else [])
    return [p.read_bytes() for p in paths if p.is_file()]


def course_order(entries: list[CourseEntry], roster: list[RosterEntry] | None) -> list[CourseEntry]:
    """The roster's students in its order (a missing one where it is listed), then those not on it as found."""
    if not roster:
        return entries
    by_student = {e.student: e for e in entries}
    listed = [by_student[r.student] for r in roster if r.student in by_student]
    kept = {r.student for r in roster}
    return listed + [e for e in entries if e.student not in kept]
