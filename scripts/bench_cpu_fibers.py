#!/usr/bin/env python3
"""Micro-benchmark of the CPU backend's fiber switching (prints, never asserts).

Times a 32-block x 256-thread kernel that does nothing but warp shuffles, with
the x86-64 assembly context switch and with the portable ucontext fallback.
Every shuffle suspends 31 of the 32 lanes once, so the launch performs about
blocks * threads * iterations fiber switches.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labrunner.run.cpu.module import CpuModule, cpu_compiler_available

SRC = r"""
#include <attnlab/prelude.cuh>
#line 1 "bench.cu"
extern "C" __global__ void shfl_bench(float* out, int iters) {
  float v = threadIdx.x;
  for (int i = 0; i < iters; ++i) v += __shfl_xor_sync(0xffffffffu, v, (i & 15) + 1) * 0.5f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}
"""

BLOCKS, THREADS = 32, 256


def main() -> None:
    reason = cpu_compiler_available()
    if reason:
        print("cannot run:", reason)
        return
    t0 = time.perf_counter()
    mod = CpuModule.build(SRC, "bench.cu", {"shfl_bench": ["float*", "int"]})
    print(f"build (or cache hit): {time.perf_counter() - t0:.2f} s")
    out = np.zeros(BLOCKS * THREADS, np.float32)
    results = {}
    for mode, iters in (("asm", 200), ("ucontext", 50)):
        os.environ["ATTNLAB_CPU_FIBERS"] = mode
        mod.launch("shfl_bench", (BLOCKS, 1, 1), (THREADS, 1, 1), 0, [out, 2])  # warm-up
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            mod.launch("shfl_bench", (BLOCKS, 1, 1), (THREADS, 1, 1), 0, [out, iters])
            best = min(best, time.perf_counter() - t)
        switches = BLOCKS * THREADS * iters
        results[mode] = out.copy() if iters == 50 else None
        print(
            f"{mode:9s}: {iters:4d} shuffles/thread, {best * 1e3:8.1f} ms, "
            f"{best / switches * 1e9:6.1f} ns per fiber switch (incl. shuffle bookkeeping)"
        )
    os.environ["ATTNLAB_CPU_FIBERS"] = "asm"
    mod.launch("shfl_bench", (BLOCKS, 1, 1), (THREADS, 1, 1), 0, [out, 50])
    print("asm and ucontext agree:", bool(np.array_equal(out, results["ucontext"])))


if __name__ == "__main__":
    main()
