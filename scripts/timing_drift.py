"""Where does run-to-run drift in lab 2's SPEEDUP come from: the clock, buffer placement, or the process?

1. `bench lab2` RUNS times (each in a fresh worker process) while a thread samples the SM clock,
   power and temperature through NVML: each run's two medians beside the clock it ran at.
2. One process, PLACEMENTS sets of buffers, each uploaded after a pad of random size (so each set
   lands on other physical pages), timed in rounds that cycle through them twice (1 2 3 1 2 3).
   A time that repeats with its placement means placement moves it; a time that drifts from round
   to round whatever the placement means something in the device's state moves it.
3. ncu (--clock-control none) on the solution in separate processes: duration, elapsed cycles and
   the SM clock ncu saw, per launch. Constant cycles with a moving duration point at the clock.

Prints figures; asserts nothing. Needs the GPU.
"""

from __future__ import annotations

import csv
import io
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import cupy

from labrunner.cli.guard import reporter_for
from labrunner.compile.gate import load_submission
from labrunner.compile.nvrtc import compose_source
from labrunner.labs import get_lab
from labrunner.measure.gpu_timer import CupyTimer
from labrunner.measure.input_pool import InputPool
from labrunner.measure.sampling import TimingOptions, compare
from labrunner.measure.timed_runs import INPUT_SLOTS, KernelCall
from labrunner.pipeline.bench import bench_submission
from labrunner.pipeline.requests import BenchRequest
from labrunner.pipeline.timing_stage import new_key, per_input_set_medians
from labrunner.report.results import RunResult
from labrunner.run.gpu_device import GpuDevice

RUNS = 5
PLACEMENTS = 3
NCU_PROCESSES = 3
REPO = Path(__file__).resolve().parent.parent
SOLUTION = REPO / "kernels/lab2/solution.cu"


class ClockSampler:
    """NVML readings every `period_s` on a thread: (time, SM MHz, watts, degrees C)."""

    def __init__(self, period_s: float = 0.02):
        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.period_s = period_s
        self.readings: list[tuple[float, int, float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n, h = self.nvml, self.handle
        while not self._stop.is_set():
            self.readings.append(
                (
                    time.monotonic(),
                    n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
                    n.nvmlDeviceGetPowerUsage(h) / 1000,
                    n.nvmlDeviceGetTemperature(h, 0),
                )
            )
            time.sleep(self.period_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> str:
        window = [r for r in self.readings if start <= r[0] <= end and r[1] > 1000]  # busy readings only
        if not window:
            return "no busy readings"
        clocks = [r[1] for r in window]
        return (
            f"SM {statistics.median(clocks):.0f} MHz (min {min(clocks)}, max {max(clocks)}), "
            f"{statistics.median(r[2] for r in window):.0f} W, {max(r[3] for r in window)} C"
        )


def bench_runs(sampler: ClockSampler) -> None:
    print(f"\n--- 1. {RUNS} bench runs, fresh worker each")
    for run in range(1, RUNS + 1):
        start = time.monotonic()
        result = RunResult("bench", "lab2")
        bench_submission(BenchRequest(lab="lab2", file=None), result, reporter_for(result))
        c = result.timing.comparison
        print(
            f"run {run}: solution {c.student.median_ms:.4f} ms (rse {100 * c.student.rse:.2f}%, "
            f"n={c.student.count}), starter {c.baseline.median_ms:.3f} ms, "
            f"SPEEDUP {c.speedup:.3f}; {sampler.between(start, time.monotonic())}"
        )


def placement_rounds(sampler: ClockSampler) -> None:
    print(f"\n--- 2. one process, {PLACEMENTS} placements, each timed twice")
    lab = get_lab("lab2")
    device = GpuDevice()
    modules, launches = {}, {}
    for role, path in (("solution", SOLUTION), ("starter", lab.starter_path)):
        submission = load_submission(lab, path, path.name)
        modules[role] = device.compile(compose_source(submission.source, path.name), path.name, lab.entry_point_types())
        launches[role] = lab.plan_launches(submission.constants, 2048, 2048)
    timer = CupyTimer()
    rng = random.Random(1)
    placements, pads = [], []
    for _ in range(PLACEMENTS):
        pads.append(cupy.empty(rng.randrange(1, 512) * 2 * 1024 * 1024 + rng.randrange(0, 4096) * 256, cupy.uint8))
        pool = InputPool(device, {"key": new_key(), "rows": 2048, "prefix": 2048}, INPUT_SLOTS)
        placements.append(
            [
                KernelCall(
                    role, device, modules[role], launches[role], pool, 2048 * 32 * 64, {}, leads=role == "solution"
                )
                for role in ("solution", "starter")
            ]
        )
    for round_index, placement in enumerate(list(range(PLACEMENTS)) * 2, 1):
        solution, starter = placements[placement]
        start = time.monotonic()
        comparison = compare(solution, starter, INPUT_SLOTS, timer, TimingOptions(seed=round_index))
        s, b = comparison.student, comparison.baseline
        per_set = per_input_set_medians(s.samples_ms, INPUT_SLOTS)
        print(
            f"round {round_index} placement {placement + 1}: solution {s.median_ms:.4f} ms "
            f"(rse {100 * s.rse:.2f}%, n={s.count}, per input set {', '.join(f'{v:.4f}' for v in per_set)}), "
            f"starter {b.median_ms:.3f} ms, SPEEDUP {comparison.speedup:.3f}; "
            f"{sampler.between(start, time.monotonic())}"
        )


def ncu_solution() -> None:
    print(f"\n--- 3. ncu on the solution, {NCU_PROCESSES} processes")
    if not shutil.which("ncu"):
        print("ncu: not available here")
        return
    metrics = "gpu__time_duration.sum,sm__cycles_elapsed.max,gpc__cycles_elapsed.avg.per_second"
    for process in range(1, NCU_PROCESSES + 1):
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
            metrics,
            "--csv",
            sys.executable,
            str(REPO / "scripts/kernel_once.py"),
            str(SOLUTION),
        ]
        completed = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        rows = [r for r in csv.reader(io.StringIO(completed.stdout)) if len(r) > 10]
        if not rows:
            print(completed.stdout[-1500:], completed.stderr[-1500:])
            continue
        header = rows[0]
        name, unit, value, launch = (header.index(k) for k in ("Metric Name", "Metric Unit", "Metric Value", "ID"))
        for row in rows[1:]:
            print(f"process {process} launch {row[launch]}: {row[name]} = {row[value]} {row[unit]}")


def main() -> None:
    with ClockSampler() as sampler:
        bench_runs(sampler)
        placement_rounds(sampler)
    ncu_solution()


if __name__ == "__main__":
    main()
