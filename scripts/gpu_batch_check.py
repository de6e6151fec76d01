"""A course's batch on the GPU, as staff run it: graded, re-run unchanged, interrupted, and one
submission written for Gradescope. Prints a short table and exits non-zero if any check fails.

    python3 scripts/gpu_batch_check.py [--out DIR]

Run from the repository (PYTHONPATH=.) on a machine with a GPU; scripts/gpu_check.sh runs it."""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOLUTION = REPO / "kernels/lab2/solution.cu"
STARTER = REPO / "kernels/lab2/starter.cu"
WRONG = REPO / "tests/fixtures/lab2/wrong/causal_off_by_one.cu"
COMPILE_ERROR = REPO / "tests/fixtures/lab2/hostile/foreign_include.cu"
HANG = REPO / "tests/fixtures/lab2/hostile/hang.cu"


def attnlab(*args: str) -> list[str]:
    return [sys.executable, "-m", "labrunner", *args]


def environment() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
    env.pop("ATTNLAB_SEED", None)
    env.pop("CI", None)
    return env


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def grading_processes() -> int:
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                words = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            count += b"labrunner" in words and b"grade" in words and b"--json" in words
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-batch-check"))
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    checks: list[tuple[str, bool, str]] = []
    files = [str(p) for p in (SOLUTION, STARTER, WRONG, COMPILE_ERROR)]
    batch = attnlab("grade", "lab2", *files, "--jobs", "2", "--out-dir", str(out / "batch"), "--budget", "1")
    batch += ["--html", str(out / "course.html")]

    started = time.monotonic()
    first = subprocess.run(batch, env=environment(), capture_output=True, text=True, cwd=out)
    first_s = time.monotonic() - started
    print(first.stdout[-4000:], first.stderr[-2000:], sep="\n")
    graded = rows(out / "batch/gradebook.csv")
    verdicts = [(Path(r["file"]).name, r["verdict"], r["backend"], r["speedup"]) for r in graded]
    expected = [("solution.cu", "pass"), ("starter.cu", "pass"), ("causal_off_by_one.cu", "wrong")]
    expected.append(("foreign_include.cu", "compile-error"))
    checks.append(
        (
            "batch of 4 on the GPU",
            [(f, v) for f, v, _, _ in verdicts] == expected and first.returncode == 3,
            f"exit {first.returncode} in {first_s:.1f} s: {verdicts}",
        )
    )
    checks.append(("html report written", (out / "course.html").stat().st_size > 10_000, "course.html"))

    started = time.monotonic()
    again = subprocess.run(batch, env=environment(), capture_output=True, text=True, cwd=out)
    again_s = time.monotonic() - started
    reused = "reused 4 of 4 reports" in " ".join(again.stderr.split())
    same = [{k: v for k, v in r.items() if k != "seconds"} for r in rows(out / "batch/gradebook.csv")] == [
        {k: v for k, v in r.items() if k != "seconds"} for r in graded
    ]
    checks.append(("unchanged re-run reuses all", reused and same and again.returncode == 3, f"{again_s:.1f} s"))

    stopped = attnlab("grade", "lab2", str(SOLUTION), str(HANG), str(STARTER), "--jobs", "1", "--no-timing")
    stopped += ["--timeout", "60", "--out-dir", str(out / "interrupted")]
    driver = subprocess.Popen(
        stopped, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=out
    )
    assert driver.stderr is not None
    for line in driver.stderr:
        if line.startswith("[1/3]"):
            break
    time.sleep(3)
    signalled = time.monotonic()
    driver.send_signal(signal.SIGINT)
    driver.communicate(timeout=60)
    stop_s = time.monotonic() - signalled
    after = [(Path(r["file"]).name, r["verdict"]) for r in rows(out / "interrupted/gradebook.csv")]
    checks.append(
        (
            "SIGINT stops the batch",
            driver.returncode == 130
            and stop_s < 10
            and after == [("solution.cu", "pass"), ("hang.cu", "interrupted"), ("starter.cu", "interrupted")]
            and grading_processes() == 0,
            f"exit {driver.returncode} {stop_s:.1f} s after the signal: {after}; {grading_processes()} left",
        )
    )
    smoke = subprocess.run(
        attnlab("grade", "lab2", str(SOLUTION), "--budget", "1", "--gradescope", str(out / "results.json")),
        env=environment(),
        capture_output=True,
        text=True,
        cwd=out,
    )
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    checks.append(
        (
            "gradescope after the interrupt",
            smoke.returncode == 0 and bool(results.get("tests")),
            f"exit {smoke.returncode}; score {results.get('score')}; {len(results.get('tests', []))} tests",
        )
    )

    print(f"\n{'check':32} {'ok':4} detail")
    for name, passed, detail in checks:
        print(f"{name:32} {'ok' if passed else 'FAIL':4} {detail}")
    return 0 if all(passed for _, passed, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
