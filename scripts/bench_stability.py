"""Is SPEEDUP stable? `attnlab bench lab2` five times in one process, each SPEEDUP and the spread.

usage: python scripts/bench_stability.py [ROUNDS]   (bench's --rounds; default 1)

Then the starter's reported time beside Nsight Compute's `gpu__time_duration` for the same
kernel and shape (ncu runs with --clock-control none, leaving the GPU's clocks alone, and its
default cache control, which flushes caches before each profiled launch as attnlab does).
Prints figures; asserts nothing. Needs the GPU.
"""

from __future__ import annotations

import csv
import io
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from labrunner.cli.guard import reporter_for
from labrunner.pipeline.bench import bench_submission
from labrunner.pipeline.requests import BenchRequest
from labrunner.report.results import RunResult

RUNS = 5
REPO = Path(__file__).resolve().parent.parent


def bench_runs(rounds: int) -> list[RunResult]:
    results = []
    for _ in range(RUNS):
        result = RunResult("bench", "lab2")
        bench_submission(BenchRequest(lab="lab2", file=None, rounds=rounds), result, reporter_for(result))
        results.append(result)
    return results


def ncu_starter_ms() -> list[float] | None:
    if not shutil.which("ncu"):
        return None
    command = [
        "ncu",
        "--clock-control",
        "none",
        "--kernel-name",
        "flash_prefill",
        "--launch-skip",
        "1",
        "--launch-count",
        "3",
        "--metrics",
        "gpu__time_duration.sum",
        "--csv",
        sys.executable,
        str(REPO / "scripts" / "kernel_once.py"),
    ]
    completed = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    rows = [r for r in csv.reader(io.StringIO(completed.stdout)) if len(r) > 10]
    if not rows:
        print(completed.stdout[-2000:], completed.stderr[-2000:])
        return None
    header, data = rows[0], rows[1:]
    unit_col, value_col = header.index("Metric Unit"), header.index("Metric Value")
    scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "ns": 1e-6, "us": 1e-3, "ms": 1.0}
    return [float(r[value_col].replace(",", "")) * scale.get(r[unit_col], 1.0) for r in data]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    results = bench_runs(rounds)
    speedups = [r.timing.speedup for r in results]
    starter_ms = [r.timing.comparison.baseline.median_ms for r in results]
    median = statistics.median(speedups)
    print("\nrun  SPEEDUP  vs median   starter ms  solution ms per input set, each round")
    for i, (result, s, t) in enumerate(zip(results, speedups, starter_ms), 1):
        per_set = " | ".join(", ".join(f"{x:.3f}" for x in r.student_per_input_set_ms) for r in result.timing.rounds)
        print(f"{i:>3}  {s:7.3f}  {100 * (s / median - 1):+8.2f}%  {t:10.3f}  {per_set}")
    print(
        f"--rounds {rounds}: SPEEDUP median {median:.3f}, spread {100 * (max(speedups) - min(speedups)) / median:.2f}% "
        f"(max deviation from median {100 * max(abs(s / median - 1) for s in speedups):.2f}%)"
    )
    ncu = ncu_starter_ms()
    if ncu:
        ours = statistics.median(starter_ms)
        theirs = statistics.median(ncu)
        print(
            f"starter C=P=2048: attnlab {ours:.3f} ms, ncu gpu__time_duration {theirs:.3f} ms "
            f"(launches {', '.join(f'{x:.3f}' for x in ncu)}), difference {100 * (ours / theirs - 1):+.2f}%"
        )
    else:
        print("ncu: not available here")


if __name__ == "__main__":
    main()
