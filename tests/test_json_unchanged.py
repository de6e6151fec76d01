"""Every command's JSON, byte for byte as it was before the pipeline carried one run object.

The files under tests/data/json_before/ were written by the tree before that restructuring, from the
runs below on the CPU backend (fixed seed, deterministic). A run's durations are the only values that
differ from one run to the next; they are replaced by "<seconds>" on both sides (and the phases, some of
which run side by side in threads, are sorted by name; a refused file's early build, which races the
gate, is left out), and the temporary folder by "<tmp>". Everything else (keys, their order, every
verdict, number, message and hint) must match.
Regenerate only for a deliberate change of the JSON: `python tests/test_json_unchanged.py --write`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
BEFORE = REPO / "tests" / "data" / "json_before"
DURATION_KEYS = {"seconds"}
UNCOMPILABLE = "__global__ void k( {\n"

# name -> (the command's arguments after `python -m labrunner`, the JSON file it writes under the tmp folder)
RUNS: dict[str, list[str]] = {
    "grade_lab1": ["grade", "lab1", "kernels/lab1/solution.cu", "--device", "cpu"],
    "grade_lab2": ["grade", "lab2", "kernels/lab2/solution.cu", "--device", "cpu"],
    "grade_lab3": ["grade", "lab3", "kernels/lab3/solution.cu", "--device", "cpu"],
    "grade_lab1_starter": ["grade", "lab1", "kernels/lab1/starter.cu", "--device", "cpu"],
    "grade_lab2_starter": ["grade", "lab2", "kernels/lab2/starter.cu", "--device", "cpu", "--no-timing"],
    "grade_lab2_wrong": ["grade", "lab2", "tests/fixtures/lab2/wrong/tile_overwritten_early.cu", "--device", "cpu"],
    "grade_lab3_wrong": ["grade", "lab3", "tests/fixtures/lab3/wrong/partition_divides_length.cu", "--device", "cpu"],
    "grade_compile_error": ["grade", "lab2", "{tmp}/uncompilable.cu", "--device", "cpu"],
    "check_lab2": ["check", "lab2", "kernels/lab2/solution.cu"],
    "check_bad": ["check", "lab2", "{tmp}/uncompilable.cu"],
    "bench_lab2": ["bench", "lab2", "--device", "cpu"],
}
BATCH_FILES = {
    "alice.cu": "kernels/lab2/solution.cu",
    "bob.cu": "kernels/lab2/starter.cu",
    "carol.cu": "tests/fixtures/lab2/wrong/tile_overwritten_early.cu",
}


# A file the gate refuses may or may not have had its early CPU build started (`pipeline/worker_ahead.py`):
# the build waits for the worker's box, and the refusal cancels what has not started yet. Which comes first
# depends on the machine's load, so a refused file's JSON is compared without that phase.
RACING_THE_GATE = "load student (ahead)"


def without_the_race(data: dict) -> dict:
    if data.get("verdict") != "compile-error" or not isinstance(data.get("timings"), list):
        return data
    return {**data, "timings": [row for row in data["timings"] if row.get("phase") != RACING_THE_GATE]}


def normalized(value: Any, tmp: str, key: str | None = None) -> Any:
    """The JSON with its durations and the temporary folder replaced by placeholders."""
    if isinstance(value, dict):
        return {k: "<seconds>" if k in DURATION_KEYS else normalized(v, tmp, k) for k, v in value.items()}
    if isinstance(value, list):
        items = [normalized(item, tmp, key) for item in value]
        # The phases that run in threads finish in either order.
        return sorted(items, key=lambda phase: phase["phase"]) if key == "timings" else items
    if isinstance(value, str):
        return value.replace(tmp, "<tmp>")
    return value


def run_all(tmp: Path) -> dict[str, str]:
    """Each run's JSON, normalized, as text keyed by a file name."""
    (tmp / "uncompilable.cu").write_text(UNCOMPILABLE)
    batch = tmp / "batch"
    batch.mkdir()
    for name, source in BATCH_FILES.items():
        (batch / name).write_bytes((REPO / source).read_bytes())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("ATTNLAB_SEED", None)
    commands = {
        name: [*(a.format(tmp=tmp) for a in args), "--json", str(tmp / f"{name}.json")] for name, args in RUNS.items()
    }
    commands["batch"] = ["grade", "lab2", str(batch), "--device", "cpu", "--no-timing", "--out-dir", str(tmp / "out")]
    for args in commands.values():
        subprocess.run(
            [sys.executable, "-m", "labrunner", *args], cwd=REPO, env=env, capture_output=True, timeout=600, check=False
        )
    written = {f"{name}.json": tmp / f"{name}.json" for name in RUNS}
    written |= {f"batch_{p.name}": p for p in sorted((tmp / "out").glob("*.json"))}
    return {
        name: json.dumps(normalized(without_the_race(json.loads(path.read_text())), str(tmp)), indent=1) + "\n"
        for name, path in written.items()
    }


@pytest.mark.slow
def test_every_commands_json_is_what_it_was_before(tmp_path: Path) -> None:
    now = run_all(tmp_path)
    before = {p.name: p.read_text() for p in sorted(BEFORE.glob("*.json"))}
    assert sorted(now) == sorted(before)
    for name, text in before.items():
        assert now[name] == text, name


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_json_unchanged.py --write")
    with tempfile.TemporaryDirectory() as folder:
        BEFORE.mkdir(parents=True, exist_ok=True)
        for name, text in run_all(Path(folder)).items():
            (BEFORE / name).write_text(text)
