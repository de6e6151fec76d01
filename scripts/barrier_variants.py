"""Each shipped solution with one of its __syncthreads() removed, graded with --race-check.

The acceptance list for `--race-check`: on the CPU backend every variant must be a race (the CPU
tests assert it); on the GPU, compute-sanitizer's racecheck and synccheck report the hazards they
see. Prints one line per variant and exits 0 when every variant got a verdict (1 when the grade
itself failed: a traceback or an exit code outside the documented ones).

    python scripts/barrier_variants.py --device gpu [--lab lab1]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCUMENTED_EXITS = {0, 1, 2, 3, 4, 5, 6}


def variants() -> list[tuple[str, int, str]]:
    """(lab, line of the removed barrier, the file's text without it), from the shipped text."""
    found = []
    for lab in ("lab1", "lab2", "lab3"):
        text = (REPO / "kernels" / lab / "solution.cu").read_text()
        for match in re.finditer(r"__syncthreads\(\);", text):
            found.append(
                (lab, text.count("\n", 0, match.start()) + 1, text[: match.start()] + ";" + text[match.end() :])
            )
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--lab", choices=("lab1", "lab2", "lab3"), help="only this lab's variants")
    arguments = parser.parse_args()
    device = arguments.device
    failures = 0
    print(f"{'variant':34} {'verdict':14} exit  decisive case and message")
    with tempfile.TemporaryDirectory(prefix="attnlab-barriers-") as scratch:
        for lab, line, text in variants():
            if arguments.lab and lab != arguments.lab:
                continue
            kernel = Path(scratch) / f"{lab}_without_barrier_{line}.cu"
            kernel.write_text(text)
            report = Path(scratch) / f"{lab}-{line}.json"
            completed = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "labrunner",
                    "grade",
                    lab,
                    str(kernel),
                    "--device",
                    device,
                    "--race-check",
                    "--no-timing",
                    "--json",
                    str(report),
                ],
                capture_output=True,
                text=True,
                cwd=REPO,
            )
            if completed.returncode not in DOCUMENTED_EXITS or not report.exists():
                failures += 1
                print(f"{kernel.name:34} {'NO VERDICT':14} {completed.returncode:4}  {completed.stderr.strip()[-300:]}")
                continue
            data = json.loads(report.read_text())
            decisive = next((c for c in data["cases"] if c["name"] == data["decisive_case"]), None)
            said = f"{decisive['name']}: {decisive['message']}" if decisive else ""
            print(f"{kernel.name:34} {data['verdict']:14} {completed.returncode:4}  {said}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
