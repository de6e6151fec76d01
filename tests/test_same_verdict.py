"""Same file, same seed, same options: the same verdict, decisive case and message on every run.

The kernels most prone to an accident of the run are graded five times each through the real
command line: a wild read (every buffer sits between guards that fault at the same element every
time), a race (the CPU's schedules are numbered, each the same orders on every run, and a failing
case's reruns use the same numbers), and a hang (its time limit is the case's own, from the
machine's measured cost, and the message says so: only its figures may differ, as the load does).
Nothing else may differ between the five but the wall time.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests/fixtures"
RUNS = 5


def decided(tmp_path: Path, fixture: str, run: int) -> tuple[int, str, str | None, str, tuple[str, ...]]:
    """(exit code, verdict, decisive case, its message, hint hazards) of one grade."""
    report = tmp_path / f"run{run}.json"
    lab = fixture.split("/")[0]
    command = [sys.executable, "-m", "labrunner", "grade", lab, str(FIXTURES / fixture), "--device", "cpu"]
    completed = subprocess.run(
        [*command, "--seed", "7", "--json", str(report)], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert report.exists(), completed.stderr[-2000:]
    result = json.loads(report.read_text())
    failing = [c for c in result["cases"] if c["status"] not in ("pass", "skipped", "not-run")]
    first = failing[0] if failing else {"name": None, "message": ""}
    hazards = tuple(h["hazard"] for h in result["hints"])
    message = first["message"]
    if result["verdict"] == "timeout":
        # its limit is this machine's measured cost of the case, which a busy machine raises: the words stay
        message = re.sub(r"\d+(\.\d+)?", "#", message)
    return completed.returncode, result["verdict"], first["name"], message, hazards


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fixture", "verdict"),
    [
        ("lab3/wrong/page_number_ignores_table.cu", "out-of-bounds"),  # reads past every page of kCache
        ("lab1/wrong/softmax_max_overwritten.cu", "race"),  # found by the failing case's reruns
        ("lab2/wrong/tile_overwritten_early.cu", "race"),
        ("lab1/hostile/hang.cu", "timeout"),
    ],
)
def test_five_grades_give_one_verdict_case_and_message(tmp_path, fixture, verdict):
    runs = {decided(tmp_path, fixture, n) for n in range(RUNS)}
    assert len(runs) == 1, runs
    (outcome,) = runs
    assert outcome[1] == verdict
