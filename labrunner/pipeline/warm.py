"""`attnlab doctor --warm`: what a machine's first grade would build, built now, so that it pays only for its file.

A fresh machine's first grade used to compile the grader's own things before it could judge a line of
the student's: CuPy's kernels for the GPU oracle and its proof (most of nine seconds on an H200 host),
the worker's own CuPy kernels (the poison fill, the timer's, the timing sets' twin), the starters, the
CPU build's shared parts. Each is kept where only the driver writes (CuPy's cache in the driver's home,
`labrunner.grader_cache`), and each is built here from the grader's own files only:

- the CPU build's shared parts (`run/cpu/parts.py`), where g++ is;
- on a GPU, the worker's CuPy kernels, made by the very code the worker runs (`GpuDevice`, `CupyTimer`,
  the timing sets' kernel, the device copy), run here in the driver, whose CuPy cache each box is given
  a copy of: a box's own compiles are private and lost, so only the driver can keep them;
- for each lab, its shipped solution graded as a student's file is (the starter compiled and kept by
  `compile/module_cache.py`, the oracle's kernels compiled at the shapes a grade uses, timed where a GPU
  is), silently: a solution that does not pass is a fault of this machine, said in its row.

Every step is timed; its row says what it built and how long it took.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from labrunner.compile.backend import Backend
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.labs import LABS, get_lab
from labrunner.report.reporter import silent
from labrunner.report.results import RunResult

Row = tuple[str, bool, str]


def warm_machine(backend: Backend) -> list[Row]:
    """One row per step, in order: what was built, and in how many seconds."""
    rows = [timed("CPU build's shared parts", cpu_parts)]
    if backend == Backend.GPU:
        rows.append(timed("the worker's CuPy kernels", warm_worker_kernels))
    for name in sorted(LABS):
        rows.append(timed(f"{name}: its solution graded", solution_grader(name, backend)))
    return rows


def solution_grader(lab_name: str, backend: Backend) -> Callable[[], str]:
    return lambda: grade_solution(lab_name, backend)


def timed(name: str, step: Callable[[], str]) -> Row:
    started = time.perf_counter()
    try:
        words = step()
    except AttnlabError as exc:
        return name, False, exc.message
    return name, True, f"{words} ({time.perf_counter() - started:.1f} s)"


def cpu_parts() -> str:
    from labrunner.run.cpu.module import cpu_compiler_available
    from labrunner.run.cpu.parts import shared_parts

    missing = cpu_compiler_available()
    if missing is not None:
        return f"none: {missing}"
    folder = shared_parts()
    return f"made in {folder}" if folder is not None else "none: the grader's cache cannot be trusted here"


def warm_worker_kernels() -> str:
    """The CuPy kernels a GPU worker compiles on its first use, compiled here by the worker's own code."""
    from labrunner.measure.gpu_timer import CupyTimer
    from labrunner.measure.input_pool import timing_set_kernel
    from labrunner.measure.timed_runs import DeviceCopy
    from labrunner.run.gpu_device import GpuDevice

    device = GpuDevice()
    device.guarded(64)  # the canary bands and the poison fill
    timer = CupyTimer()
    timer.hold(1.0)
    timer.flush_caches()
    timer.overhead_ms()  # the empty kernel, timed as the worker times it
    timing_set_kernel().compile()
    copy = DeviceCopy(device, 1 << 20)
    copy.launch(0)
    device.xp.cuda.Device().synchronize()
    return "the poison fill, the timer's kernels, the timing sets' kernel and the device copy"


def grade_solution(lab_name: str, backend: Backend) -> str:
    from labrunner.pipeline.grade import grade_submission
    from labrunner.pipeline.requests import GradeRequest

    lab = get_lab(lab_name)
    result = RunResult("grade")
    request = GradeRequest(lab=lab_name, file=lab.solution_path, device=str(backend), public_seed=True)
    grade_submission(request, result, silent())
    if result.decisive_case is not None:
        raise AttnlabError(
            f"{lab_name}'s shipped solution failed case {result.decisive_case.name} here: this machine's "
            f"grades cannot be trusted; `attnlab grade {lab_name} {lab.solution_path}` shows why",
            ExitCode.ENVIRONMENT,
        )
    return f"{lab.solution_path.name} passed every case" + (" and was timed" if result.timing is not None else "")
