"""Where one grade's time goes, function by function, the worker's side included. A profile, never a test.

`attnlab grade --timings` splits a grade into phases, but the worker is another process: its
timing loop, its sets and its device reads are one phase, `timed runs`. Here the whole grade runs
in this one process under cProfile: the worker's own request handlers answer in-process over the
real device (`tests/gpu_standin.InProcessWorker`, the wire included), so the profile reaches into
them. No box: run it only on the grader's own files.

It also lists every kernel CuPy compiled during the grade, with its seconds: on a fresh machine
(an empty CUPY_CACHE_DIR) that is what the first grade pays for CuPy's kernels.

    python scripts/profile_grade.py lab2 kernels/lab2/solution.cu [--top 40] [--device gpu] [MORE GRADE OPTIONS]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def record_cupy_compiles() -> list[tuple[str, float]]:
    """Wrap CuPy's NVRTC entry so each compile's kernel name and seconds are kept (a cache hit never reaches it)."""
    compiled: list[tuple[str, float]] = []
    try:
        from cupy.cuda import compiler
    except ImportError:
        return compiled
    original = compiler.compile_using_nvrtc

    def timed(source, *args, **kwargs):
        started = time.perf_counter()
        try:
            return original(source, *args, **kwargs)
        finally:
            name = next((line for line in source.splitlines() if "__global__" in line), "?")
            compiled.append((name.strip()[:110], time.perf_counter() - started))

    compiler.compile_using_nvrtc = timed
    return compiled


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lab")
    parser.add_argument("file")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--device", default="gpu")
    args, extra = parser.parse_known_args()  # the rest goes to `attnlab grade` as it is

    from gpu_standin import InProcessWorker

    from labrunner.cli.main import main as cli
    from labrunner.pipeline import grade as grade_pipeline

    def in_process_worker(backend: str):
        if backend == "gpu":
            from labrunner.run.gpu_device import GpuDevice

            return InProcessWorker(GpuDevice())
        from labrunner.run.cpu_device import CpuDevice

        worker = InProcessWorker(CpuDevice())
        worker.backend = "cpu"
        return worker

    grade_pipeline.Worker = in_process_worker  # type: ignore[assignment,misc]
    compiled = record_cupy_compiles()
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    try:
        cli.main(["grade", args.lab, args.file, "--device", args.device, "--timings", *extra], standalone_mode=False)
    except SystemExit:
        pass
    finally:
        profile.disable()
    wall = time.perf_counter() - started
    for order in ("cumulative", "tottime"):
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text).strip_dirs().sort_stats(order)
        stats.print_stats(args.top)
        print(f"\n== by {order} ==")
        print("\n".join(line for line in text.getvalue().splitlines() if line.strip()))
    print(f"\n== CuPy compiles: {len(compiled)}, {sum(s for _, s in compiled):.2f} s ==")
    for name, seconds in compiled:
        print(f"{seconds:7.3f} s  {name}")
    print(f"\nwall {wall:.2f} s (in one process, under the profiler)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
