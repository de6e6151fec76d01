"""How much a second job buys: the CPU fixture suite graded as one batch with --jobs 1, then --jobs 2.

A benchmark, not a test: it prints both wall times and their ratio. On two free cores the second
job should bring the batch to at most 0.6 of the first's time (each submission's grading is one
process, mostly the C++ compile and the fiber run, so two of them use two cores). Both batches
must also agree on every verdict, which is checked and said.

    python scripts/batch_speed.py [--lab lab2]
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fixture_suite import load_fixtures  # noqa: E402  (the suite's own list of fixtures)


def grade_batch(lab: str, files: list[Path], jobs: int, out: Path) -> tuple[float, int, list[dict]]:
    command = [
        sys.executable,
        "-m",
        "labrunner",
        "grade",
        lab,
        *map(str, files),
        "--device",
        "cpu",
        "--jobs",
        str(jobs),
        "--csv",
        str(out / "gradebook.csv"),
    ]
    started = time.perf_counter()
    completed = subprocess.run(
        command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    with open(out / "gradebook.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return seconds, completed.returncode, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lab", default="lab2")
    args = parser.parse_args()
    files = [
        f.path
        for f in load_fixtures(args.lab)
        if f.runs_on("cpu") and "timeout" not in f.expected and "args" not in f.expected
    ]
    print(f"{args.lab}: {len(files)} submissions on the CPU backend, {os.cpu_count()} cores", flush=True)
    times, verdicts = {}, {}
    for jobs in (1, 2):
        with tempfile.TemporaryDirectory() as scratch:
            seconds, code, rows = grade_batch(args.lab, files, jobs, Path(scratch))
            gradebook = (Path(scratch) / "gradebook.csv").read_text()
        times[jobs] = seconds
        verdicts[jobs] = [(r["file"], r["verdict"], r["exit_code"]) for r in rows]
        print(f"--jobs {jobs}: {seconds:7.1f} s  (exit {code})", flush=True)
    print(f"ratio --jobs 2 / --jobs 1: {times[2] / times[1]:.2f}")
    same = verdicts[1] == verdicts[2]
    print("verdicts: the same in both batches" if same else "verdicts: DIFFER between the batches")
    print(f"\nthe --jobs 2 gradebook:\n{gradebook}", end="")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
