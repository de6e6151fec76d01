"""A batch's SPEEDUPs against the same files graded alone (lab 2, on the GPU).

Grades the shipped solution and starter and three fixtures one by one, then all five as one batch
with --jobs 4 on the same GPU (their checks overlap there; their timing is serialised by the
per-GPU lock), and prints each file's verdict and SPEEDUP both ways with the difference. The
batch's SPEEDUPs should sit within 3% of the single-file ones (the spread between two single runs
is of that order too: see README, "Timing"). Exits 1 when a verdict differs.

    python scripts/batch_vs_alone.py [--device gpu] [--jobs 4] [--budget 3]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FILES = [
    "kernels/lab2/solution.cu",
    "kernels/lab2/starter.cu",
    "tests/fixtures/lab2/correct/group_per_block.cu",
    "tests/fixtures/lab2/wrong/l_not_rescaled.cu",
    "tests/fixtures/lab2/hostile/foreign_include.cu",
]


def attnlab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "labrunner", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="gpu")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--budget", default="3")
    args = parser.parse_args()
    options = ["--device", args.device, "--budget", args.budget]
    alone = {}
    with tempfile.TemporaryDirectory() as scratch:
        for file in FILES:
            report = Path(scratch) / f"{Path(file).stem}.json"
            attnlab("grade", "lab2", file, *options, "--json", str(report))
            data = json.loads(report.read_text())
            alone[file] = (data["verdict"], (data.get("timing") or {}).get("speedup"))
            print(f"alone: {file}: {alone[file][0]}", flush=True)
        out = Path(scratch) / "batch"
        batch = attnlab("grade", "lab2", *FILES, *options, "--jobs", str(args.jobs), "--out-dir", str(out))
        print(batch.stdout)
        with open(out / "gradebook.csv", newline="") as handle:
            rows = {r["file"]: r for r in csv.DictReader(handle)}
    print(f"{'file':50} {'alone':>16} {'batch --jobs ' + str(args.jobs):>20} {'diff':>7}")
    differ = False
    for file in FILES:
        verdict, speedup = alone[file]
        row = rows[file]
        batched = float(row["speedup"]) if row["speedup"] else None
        differ |= verdict != row["verdict"]
        diff = f"{100 * (batched / speedup - 1):+.1f}%" if speedup and batched else ""
        left = f"{verdict} {speedup:.2f}x" if speedup else verdict
        right = f"{row['verdict']} {batched:.2f}x" if batched else row["verdict"]
        print(f"{file:50} {left:>16} {right:>20} {diff:>7}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
