"""What a batch adds to a submission's row for a course: whose it is, what it is worth, and whom it is like.

The student comes from the batch's listing (pipeline/batch/students.py), the id, name and section from
the roster (`--roster`), the score from the one points model (report/points.py) and the similar
submissions from report/similarity.py, flagged for a person to judge: they change no verdict and no
points. Every output of the batch reads these cells from here: the gradebook CSV (after its first
columns), the learning-management system's import, the terminal's and the HTML page's tables, JUnit's
properties, and the JSON result's optional `student`, `student_id`, `points` and `similar_to`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labrunner.report.points import Score
from labrunner.run.untrusted_text import shown

COURSE_COLUMNS = (
    "student",
    "student_id",
    "name",
    "section",
    "score",
    "max_score",
    "unscored",
    "not_graded",
    "similar_to",
)


@dataclass(frozen=True)
class CourseRow:
    student: str
    score: Score
    student_id: str = ""  # the roster's; empty without one, or for a submission not on it
    name: str = ""
    section: str = ""
    similar_to: tuple[tuple[str, float], ...] = ()  # (another student, the share of this file they have)
    submitted: bool = True  # False: a rostered student with no submission
    # why the row has no verdict on a kernel: a refused file, several files, no submission, a grader's fault
    not_graded: str = ""

    @property
    def similar_text(self) -> str:
        """The similar submissions as one cell, highest share first: `bob (1.00); carol (0.72)`."""
        return "; ".join(f"{shown(other)} ({share:.2f})" for other, share in self.similar_to)

    def cells(self) -> dict[str, Any]:
        """The row's course columns, in `COURSE_COLUMNS`' order."""
        return {
            "student": shown(self.student),
            "student_id": shown(self.student_id),
            "name": shown(self.name),
            "section": shown(self.section),
            "score": self.score.score_text,
            "max_score": self.score.max_score_text,
            "unscored": self.score.unscored,
            "not_graded": shown(self.not_graded),
            "similar_to": self.similar_text,
        }

    def to_json(self) -> dict[str, Any]:
        """The fields the batch adds to the submission's JSON result (schema result-1, each optional)."""
        return {
            "student": shown(self.student),
            "student_id": shown(self.student_id) if self.student_id else None,
            "points": self.score.to_json(),
            "similar_to": [{"student": shown(other), "share": round(share, 4)} for other, share in self.similar_to],
        }
