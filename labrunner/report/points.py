"""What a grade is worth: its score and max_score, computed once, here, for every output that shows one.

The points come from the lab's case catalogue (`[points]` in cases/<lab>.toml, truth/catalogue.py's
`Points`): `cases` points are shared by the cases that ran, in proportion to their shares, so the
total stays the same whichever cases run; a passing case earns its share, any other case (wrong, a
crash, a case not run after a crash) earns nothing; a case the CPU backend skipped (its time budget)
counts neither way. A compile error, or any grade that ended in an error, earns none of the case
points. The speed part earns `speed` points for a met gate and none for a missed one, or for a kernel
a GPU grade did not time because it failed; where no gate can decide (the CPU backend, which never
times; `--no-timing`; `--case`; a GPU with no gate) it is not scored, the total is `cases` alone, and
one sentence says so (`Score.unscored`), in the same words in every output. Points are counted in
hundredths and a share's remainder goes to the first cases, so the parts' maxima add up to exactly the
points of the table.

Gradescope's results.json (gradescope.py) shows each part as a test; the gradebook CSV, the
learning-management system's import, the terminal's and the HTML page's tables, JUnit's properties and
the JSON result show the total. A grade the grader could not finish (its environment, a grader that
died, an interrupt, a wrong command) has parts, each worth nothing, but no score (`Score.score` is
None): a gradebook leaves its cell empty, never 0, so nobody reads a fault of the grader as the
student's. A refusal that is the student's (a file the batch found in a submissions folder that
cannot be graded: a link, a FIFO, two files for one student) is scored 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labrunner.compile.backend import Backend
from labrunner.report.results import ResultJson
from labrunner.run.untrusted_text import shown
from labrunner.truth.catalogue import Catalogue, Points, PointsError
from labrunner.truth.verdict import Status

# Verdicts that say the grader could not finish: no score is published for them.
UNFINISHED = (Status.ENVIRONMENT_MISSING, Status.ERROR, Status.INTERRUPTED, Status.USAGE_ERROR)


@dataclass(frozen=True)
class Part:
    """One scored part of a grade: a case, the error that stopped the cases, or the speed gate."""

    name: str
    score: int  # hundredths of a point
    max_score: int
    passed: bool
    output: str  # what the part says to the student (unescaped: each writer escapes for its format)
    tags: tuple[str, ...]


@dataclass(frozen=True)
class Score:
    """A grade's worth: its parts, its total (hundredths; None where the grader could not finish) and the
    sentence that names the part this grade could not score, or ""."""

    parts: tuple[Part, ...]
    score: int | None
    max_score: int
    unscored: str = ""

    @property
    def score_text(self) -> str:
        """The score as a gradebook cell: `53.33`, `80`, or empty where there is none."""
        return "" if self.score is None else points_text(self.score)

    @property
    def max_score_text(self) -> str:
        return points_text(self.max_score)

    def to_json(self) -> dict[str, Any]:
        """The result's `points` field (schema result-1)."""
        return {
            "score": None if self.score is None else self.score / 100,
            "max_score": self.max_score / 100,
            "unscored": self.unscored or None,
        }


def hundredths(points: float) -> int:
    return round(points * 100)


def split(total: int, shares: list[int]) -> list[int]:
    """`total` hundredths shared in proportion to `shares`: each its floor, then one more to the first
    ones with the largest remainders, so the parts add up to `total` exactly."""
    whole = sum(shares)
    parts = [total * share // whole for share in shares]
    remainders = sorted(range(len(shares)), key=lambda i: (-(total * shares[i] % whole), i))
    for i in remainders[: total - sum(parts)]:
        parts[i] += 1
    return parts


def points_text(value: int) -> str:
    """Hundredths as a score is read: `80`, `26.67`."""
    return f"{value // 100}" if value % 100 == 0 else f"{value / 100:.2f}"


def catalogue(lab: str | None) -> Catalogue | None:
    """The lab's parsed case file, None for a lab attnlab does not know (a result of another tool's)."""
    from labrunner.labs import LABS

    definition = LABS.get(lab or "")
    return definition.catalogue if definition else None


def lab_points(lab: str | None) -> Points:
    """The lab's points table; Points()'s defaults for a lab attnlab does not know or whose table is refused
    (the grade that loaded it ended in that error)."""
    try:
        found = catalogue(lab)
    except PointsError:
        return Points()
    return found.points if found else Points()


def hint_lines(data: ResultJson) -> list[str]:
    return [
        f"hint ({shown(h.get('hazard') or 'hint')}): {shown(' '.join(h['text'].split()))}"
        for h in data.get("hints") or []
        if isinstance(h, dict) and h.get("text")
    ]


def case_parts(data: ResultJson, points: Points, why: dict[str, str]) -> list[Part]:
    """The correctness part: one per case that ran, or one for the error that stopped the grade before
    its cases could decide."""
    total = hundredths(points.cases)
    verdict = data.get("verdict") or Status.ERROR
    if data.get("error"):
        name = "compile" if verdict == Status.COMPILE_ERROR else verdict
        stopped = f"{verdict}: none of the {points_text(total)} case points\n\n{data['error']}"
        return [Part(name, 0, total, False, stopped, (verdict,))]
    ran = [c for c in data.get("cases") or [] if c["status"] != Status.SKIPPED]
    if not ran:
        return []
    hints = hint_lines(data)
    parts = []
    for case, most in zip(ran, split(total, [points.share(c["name"]) for c in ran])):
        passed = case["status"] == Status.PASS
        checks = [f"this case: {why[case['name']]}"] if case["name"] in why else []
        output = "\n".join([f"{case['status']}: {case['message']}", *([] if passed else hints), *checks])
        parts.append(Part(case["name"], most if passed else 0, most, passed, output, (case["status"],)))
    return parts


def speed_part(data: ResultJson, points: Points) -> tuple[Part | None, str]:
    """The speed part, or None where it is not scored, with the sentence that says why not."""
    most = hundredths(points.speed)
    if not most:
        return None, ""
    gate = data.get("gate") or {}
    status = gate.get("status")
    if status in ("met", "missed"):
        passed = status == "met"
        return Part("speed gate", most if passed else 0, most, passed, gate["message"], (f"gate {status}",)), ""
    options = data.get("options") or {}
    backend = data.get("backend") or (options.get("device") if options.get("device") in tuple(Backend) else None)
    unscored = f"the speed part ({points_text(most)} points) is not scored"
    if backend == Backend.CPU:
        return None, f"{unscored}: the CPU backend checks correctness only"
    if options.get("no_timing"):
        return None, f"{unscored}: --no-timing"
    if options.get("only"):
        return None, f"{unscored}: --case grades some cases, untimed"
    if backend == Backend.GPU and data.get("verdict") != Status.PASS:
        why = f"not timed: the grade ended {data.get('verdict')} before its timing"
        return Part("speed gate", 0, most, False, why, ("not timed",)), ""
    if status == "none":
        return None, f"{unscored}: {gate.get('message')}"
    return None, f"{unscored}: no speed gate decided"


def score_result(data: ResultJson, points: Points | None = None, students_fault: bool = False) -> Score:
    """A grade's worth, from its JSON result (`RunResult.to_json()`, schema result-1) and the lab's points
    (read from the result's lab where not given). `students_fault`: a usage error that is the student's
    (a file the batch found that cannot be graded) is scored 0, where any other usage error has no score."""
    found = None
    if points is None:
        try:
            found = catalogue(data.get("lab"))
        except PointsError:
            found = None
        points = found.points if found else Points()
    why = {c.name: c.why for c in found.cases} if found else {}
    parts = case_parts(data, points, why)
    speed, unscored = speed_part(data, points)
    if speed is not None:
        parts.append(speed)
    total = sum(p.score for p in parts)
    possible = sum(p.max_score for p in parts) if parts else hundredths(points.cases)
    verdict = data.get("verdict") or Status.ERROR
    finished = verdict not in UNFINISHED or (students_fault and verdict == Status.USAGE_ERROR)
    return Score(tuple(parts), total if finished else None, possible, unscored)
