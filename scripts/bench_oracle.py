#!/usr/bin/env python3
"""How long the float64 oracle takes at the lab-2 timing shape (prints, never asserts).

C = 2048 chunk rows against P = 2048 cached keys (4096 keys in all): the reference every
`grade lab2` computes for its C2048-P2048 case. Run: `python scripts/bench_oracle.py [REPEATS]`.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labrunner.truth import oracle
from labrunner.truth.cases import DEFAULT_SEED, load_catalogue, make_inputs


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    catalogue = load_catalogue("lab2")
    rows, prefix = catalogue.timing["rows"], catalogue.timing["prefix"]
    case = next(c for c in catalogue.cases if c.rows == rows and c.prefix == prefix)
    inputs = make_inputs(case, DEFAULT_SEED)
    print(
        f"oracle.attention at C = {rows}, P = {prefix} ({prefix + rows} keys), float64, "
        f"{os.cpu_count()} CPU(s), {repeats} run(s)"
    )
    seconds = []
    for run in range(repeats):
        start = time.perf_counter()
        oracle.attention(inputs.q, inputs.k, inputs.v, prefix=prefix)
        seconds.append(time.perf_counter() - start)
        print(f"  run {run + 1}: {seconds[-1]:.3f} s")
    print(f"median {statistics.median(seconds):.3f} s, min {min(seconds):.3f} s, max {max(seconds):.3f} s")


if __name__ == "__main__":
    main()
