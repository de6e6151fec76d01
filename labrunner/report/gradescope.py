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

The points, and which part a grade cannot score, are report/points.py's: the same function gives
the score every other output shows.

Everything shown is the submission's text at one remove (a compiler quotes the student's lines; a
file's name is the student's), so every text is `shown` (untrusted_text.py) on its way in, and every
text is declared plain `text`: Gradescope renders the top-level output as HTML by default.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from labrunner.report.points import Part, catalogue, hint_lines, points_text, score_result
from labrunner.report.points import split as split  # how the case points are shared, named where it always was
from labrunner.report.results import ResultJson
from labrunner.run.untrusted_text import shown, shown_text
from labrunner.truth.catalogue import PointsError
from labrunner.truth.verdict import Status

# Gradescope's visibility words: "visible" (its default) shows a test to the student at once; a course
# that wants results held back until the due date edits its autograder's call, never this file.
VISIBILITY = "visible"
# What the autograder printed (attnlab's terminal report) is shown to instructors only, as by default.
STDOUT_VISIBILITY = "hidden"


def graded(part: Part) -> dict[str, Any]:
    return {
        "name": shown(part.name),
        "name_format": "text",
        "score": part.score / 100,
        "max_score": part.max_score / 100,
        "status": "passed" if part.passed else "failed",
        "output": shown_text(part.output),
        "output_format": "text",
        "tags": [shown(t) for t in part.tags],
        "visibility": VISIBILITY,
    }


def gradescope_results(data: ResultJson) -> dict[str, Any]:
    """results.json for one grade's JSON result (`RunResult.to_json()`, schema attnlab.result/1)."""
    try:
        catalogue(data.get("lab"))
    except PointsError as exc:  # the grade loaded the same table first, so it already ended in this error
        if not data.get("error"):
            data = {**data, "error": exc.message, "verdict": Status.USAGE_ERROR, "exit_code": int(exc.exit_code)}
    worth = score_result(data)  # a lab attnlab does not know, or a refused table: Points()'s defaults
    tests = [graded(part) for part in worth.parts]
    # the parts' sum: `worth.score` where the grader finished, and 0 (each part worth nothing) where it did
    # not, which the autograder's run decides whether to publish
    score, possible, speed_note = sum(part.score for part in worth.parts), worth.max_score, worth.unscored
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


def leaderboard(data: ResultJson) -> list[dict[str, Any]]:
    """What a timed grade measured, for an assignment with Gradescope's leaderboard on (ignored otherwise)."""
    timing = data.get("timing") or {}
    if timing.get("kind") != "speedup":
        return []
    board = [{"name": "SPEEDUP", "value": round(timing["speedup"], 3)}]
    bandwidth = timing.get("bandwidth") or {}
    if "copy_fraction" in bandwidth:
        board.append({"name": "fraction of the device copy", "value": round(bandwidth["copy_fraction"], 3)})
    return board


def write_gradescope(data: ResultJson, path: Path) -> None:
    """Write results.json for one grade (`gradescope_results`) to `path`."""
    Path(path).write_text(json.dumps(gradescope_results(data), indent=2, allow_nan=False) + "\n", encoding="utf-8")
