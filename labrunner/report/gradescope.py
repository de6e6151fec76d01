"""Gradescope's autograder results.json, from one submission's JSON result.

Gradescope runs a course's autograder in a container and shows students what it left in
/autograder/results/results.json, whose format Gradescope documents at
https://gradescope-autograders.readthedocs.io/en/latest/specs/ ("Output format"). What is written:

- a test per case the grade ran: its `name`, its points (`max_score`), what it earned (`score`), its
  `status` ("passed" or "failed"; a case's own status is its tag) and, as its `output`, the case's
  message and, where it failed, the grade's hints;
- where the grade ended in an error before its cases could decide (a compile error, a refused file,
  a module that crashed while loading, an interrupt), one test in their place, named `compile` or
  the verdict, with the error as its output;
- the speed part, where the lab has one (`speed` points) and a gate can decide it;
- the total `score`, the grade's verdict in the top-level `output` (with the cases the CPU backend
  skipped, and why the speed part was or was not scored), its duration (`execution_time`), and the
  attnlab record of it in `extra_data`; a `leaderboard` of SPEEDUP (and lab 3's fraction of the
  device copy) where the kernel was timed.

The points come from the lab's case catalogue (`[points]` in cases/<lab>.toml, truth/catalogue.py's
`Points`): `cases` points are shared by the cases that ran, in proportion to their shares, so the
total stays the same whichever cases run; a passing case earns its share, any other case (wrong, a
crash, a case not run after a crash) earns nothing; a case the CPU backend skipped (its time budget)
is no test: it counts neither way. A compile error, or any grade that ended in an error, earns none
of the case points. The speed part earns `speed` points for a met gate and none for a missed one,
or for a kernel a GPU grade did not time because it failed; where no gate can decide (the CPU
backend, which never times; `--no-timing`; `--case`; a GPU with no gate) it is not scored, and the
total is `cases` alone. Points are counted in hundredths and a share's remainder goes to the first
cases, so the tests' maxima add up to exactly the points of the table.

Everything shown is the submission's text at one remove (a compiler quotes the student's lines; a
file's name is the student's), so every text is `shown` (untrusted_text.py) on its way in, and every
text is declared plain `text`: Gradescope renders the top-level output as HTML by default.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from labrunner.run.untrusted_text import shown, shown_text
from labrunner.truth.catalogue import Catalogue, Points, PointsError
from labrunner.truth.verdict import Status

# Gradescope's visibility words: "visible" (its default) shows a test to the student at once; a course
# that wants results held back until the due date edits its autograder's call, never this file.
VISIBILITY = "visible"
# What the autograder printed (attnlab's terminal report) is shown to instructors only, as by default.
STDOUT_VISIBILITY = "hidden"


def catalogue(lab: str | None) -> Catalogue | None:
    """The lab's parsed case file, None for a lab attnlab does not know (a result of another tool's)."""
    from labrunner.labs import LABS

    definition = LABS.get(lab or "")
    return definition.catalogue if definition else None


def case_purposes(found: Catalogue | None) -> dict[str, str]:
    """Each catalogue case's `why`, what it is there to catch, which a student reads beside its result."""
    return {c.name: c.why for c in found.cases} if found else {}


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


def hint_lines(data: dict) -> list[str]:
    return [
        f"hint ({shown(h.get('hazard') or 'hint')}): {shown(' '.join(h['text'].split()))}"
        for h in data.get("hints") or []
        if isinstance(h, dict) and h.get("text")
    ]


def graded(name: str, score: int, most: int, passed: bool, output: str, tags: list[str]) -> dict[str, Any]:
    return {
        "name": shown(name),
        "name_format": "text",
        "score": score / 100,
        "max_score": most / 100,
        "status": "passed" if passed else "failed",
        "output": shown_text(output),
        "output_format": "text",
        "tags": [shown(t) for t in tags],
        "visibility": VISIBILITY,
    }


def case_tests(data: dict, points: Points, why: dict[str, str]) -> list[dict[str, Any]]:
    """The tests for the correctness part: one per case that ran, or one for the error that stopped the
    grade before its cases could decide."""
    total = hundredths(points.cases)
    verdict = data.get("verdict") or Status.ERROR
    if data.get("error"):
        name = "compile" if verdict == Status.COMPILE_ERROR else verdict
        stopped = f"{verdict}: none of the {points_text(total)} case points\n\n{data['error']}"
        return [graded(name, 0, total, False, stopped, [verdict])]
    ran = [c for c in data.get("cases") or [] if c["status"] != Status.SKIPPED]
    if not ran:
        return []
    hints = hint_lines(data)
    tests = []
    for case, most in zip(ran, split(total, [points.share(c["name"]) for c in ran])):
        passed = case["status"] == Status.PASS
        checks = [f"this case: {why[case['name']]}"] if case["name"] in why else []
        output = "\n".join([f"{case['status']}: {case['message']}", *([] if passed else hints), *checks])
        tests.append(graded(case["name"], most if passed else 0, most, passed, output, [case["status"]]))
    return tests


def speed_test(data: dict, points: Points) -> tuple[dict[str, Any] | None, str]:
    """The speed part's test, or None where it is not scored, with a line that says which and why."""
    most = hundredths(points.speed)
    if not most:
        return None, ""
    gate = data.get("gate") or {}
    status = gate.get("status")
    if status in ("met", "missed"):
        passed = status == "met"
        return graded("speed gate", most if passed else 0, most, passed, gate["message"], [f"gate {status}"]), ""
    options = data.get("options") or {}
    backend = data.get("backend") or (options.get("device") if options.get("device") in ("gpu", "cpu") else None)
    unscored = f"the speed part ({points_text(most)} points) is not scored"
    if backend == "cpu":
        return None, f"{unscored}: the CPU backend checks correctness only"
    if options.get("no_timing"):
        return None, f"{unscored}: --no-timing"
    if options.get("only"):
        return None, f"{unscored}: --case grades some cases, untimed"
    if backend == "gpu" and data.get("verdict") != Status.PASS:
        why = f"not timed: the grade ended {data.get('verdict')} before its timing"
        return graded("speed gate", 0, most, False, why, ["not timed"]), ""
    if status == "none":
        return None, f"{unscored}: {gate.get('message')}"
    return None, f"{unscored}: no speed gate decided"


def gradescope_results(data: dict) -> dict[str, Any]:
    """results.json for one grade's JSON result (`RunResult.to_json()`, schema attnlab.result/1)."""
    try:
        found = catalogue(data.get("lab"))
    except PointsError as exc:  # the grade loaded the same table first, so it already ended in this error
        found = None
        if not data.get("error"):
            data = {**data, "error": exc.message, "verdict": Status.USAGE_ERROR, "exit_code": int(exc.exit_code)}
    points = found.points if found else Points()  # a lab attnlab does not know: Points()'s defaults
    tests = case_tests(data, points, case_purposes(found))
    speed, speed_note = speed_test(data, points)
    if speed is not None:
        tests.append(speed)
    score = sum(hundredths(t["score"]) for t in tests)
    possible = sum(hundredths(t["max_score"]) for t in tests) if tests else hundredths(points.cases)
    skipped = [c["name"] for c in data.get("cases") or [] if c["status"] == Status.SKIPPED]
    backend = data.get("backend")
    decisive = data.get("decisive_case")
    verdict_line = (
        f"attnlab {data.get('lab') or ''} {shown(data.get('file') or '')}: {str(data.get('verdict')).upper()}"
        + (f" in case {decisive}" if decisive else "")
        + (f" on the {backend.upper()} backend" if backend else "")
        + f" (exit {data.get('exit_code')})"
    )
    lines = [verdict_line, f"score {points_text(score)} of {points_text(possible)}"]
    if skipped:
        lines.append(
            f"{len(skipped)} case{'s' if len(skipped) != 1 else ''} skipped on the CPU backend (its time budget; "
            f"--full runs them), counted neither way: {', '.join(skipped)}"
        )
    if speed_note:
        lines.append(speed_note)
    lines.extend(hint_lines(data))
    results: dict[str, Any] = {
        "score": score / 100,
        "output": shown_text("\n".join(lines)),
        "output_format": "text",
        "test_output_format": "text",
        "test_name_format": "text",
        "visibility": VISIBILITY,
        "stdout_visibility": STDOUT_VISIBILITY,
        "extra_data": {
            "attnlab": {
                "lab": data.get("lab"),
                "file": None if data.get("file") is None else shown(data["file"]),
                "verdict": data.get("verdict"),
                "exit_code": data.get("exit_code"),
                "backend": backend,
                "skipped": len(skipped),
                "sha256": data.get("sha256"),
                "seed": data.get("seed"),
                "attnlab_version": data.get("attnlab_version"),
            }
        },
        "tests": tests,
    }
    if data.get("seconds") is not None:
        results["execution_time"] = round(data["seconds"])
    board = leaderboard(data)
    if board:
        results["leaderboard"] = board
    return results


def leaderboard(data: dict) -> list[dict[str, Any]]:
    """What a timed grade measured, for an assignment with Gradescope's leaderboard on (ignored otherwise)."""
    timing = data.get("timing") or {}
    if timing.get("kind") != "speedup":
        return []
    board = [{"name": "SPEEDUP", "value": round(timing["speedup"], 3)}]
    bandwidth = timing.get("bandwidth") or {}
    if "copy_fraction" in bandwidth:
        board.append({"name": "fraction of the device copy", "value": round(bandwidth["copy_fraction"], 3)})
    return board


def write_gradescope(data: dict, path: Path) -> None:
    """Write results.json for one grade (`gradescope_results`) to `path`."""
    Path(path).write_text(json.dumps(gradescope_results(data), indent=2, allow_nan=False) + "\n", encoding="utf-8")
