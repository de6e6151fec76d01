"""How long one whole `attnlab grade` takes, end to end, boxed and unboxed, cold and warm.

A benchmark, never a test: it prints figures. Each grade is a fresh process, as a student's is.
The first grade of a mode on a fresh machine fills NVRTC's and CuPy's caches (cold); the rest are
warm, and their median is the figure to read. "unboxed" grades with the box taken away
(`ATTNLAB_BWRAP` pointed at nothing), which is what the box costs.

    python scripts/grade_latency.py [--lab lab2] [--file kernels/lab2/solution.cu] [--runs 5] [--device gpu]
                                    [--against OTHER_CHECKOUT]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def one_grade(lab: str, path: str, device: str, boxed: bool, tree: Path = REPO) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if not boxed:
        env["ATTNLAB_BWRAP"] = "/nonexistent/bwrap"
    extra = [] if device == "gpu" else ["--unsafe-cpu"] if not boxed else []
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "labrunner", "grade", lab, path, "--device", device, *extra],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - started, completed.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", default="lab2")
    parser.add_argument("--file", default=None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        help="another checkout (an earlier commit, unpacked) timed the same way in the same run",
    )
    arguments = parser.parse_args()
    path = arguments.file or f"kernels/{arguments.lab}/solution.cu"
    rows = []
    modes = [("boxed", True, REPO), ("unboxed", False, REPO)]
    if arguments.against:
        modes.append((f"{arguments.against.name}", False, arguments.against.resolve()))
    for mode, boxed, tree in modes:
        seconds, codes = [], set()
        for _ in range(arguments.runs + 1):  # the first is the cold one
            took, code = one_grade(arguments.lab, path, arguments.device, boxed, tree)
            seconds.append(took)
            codes.add(code)
        rows.append(
            (mode, seconds[0], statistics.median(seconds[1:]), min(seconds[1:]), max(seconds[1:]), sorted(codes))
        )
    print(f"grade {arguments.lab} {path} --device {arguments.device}: {arguments.runs} warm runs after one cold")
    print(f"{'mode':12} {'first s':>8} {'median s':>9} {'min s':>6} {'max s':>6}  exit codes")
    for mode, first, median, low, high, codes in rows:
        print(f"{mode:12} {first:8.2f} {median:9.2f} {low:6.2f} {high:6.2f}  {codes}")
    boxed_median, unboxed_median = rows[0][2], rows[1][2]
    print(
        f"the box costs {boxed_median - unboxed_median:+.2f} s per warm grade "
        f"({boxed_median / unboxed_median - 1:+.1%} of the unboxed median)"
    )
    if arguments.against:
        print(
            f"this tree, boxed, against {arguments.against.name}: {boxed_median / rows[2][2] - 1:+.1%} per warm grade"
        )
    return 0 if all(codes == [0] for *_, codes in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
