"""The `local` executor: a pool of `--jobs N` on this machine (default: one per GPU, or one per core on
the CPU backend). With several GPUs, each job is given one (`CUDA_VISIBLE_DEVICES`), round robin."""

from __future__ import annotations

import os
import queue
import signal
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from labrunner.compile.backend import Backend
from labrunner.exit_codes import ExitCode
from labrunner.pipeline.batch.grading import Grading
from labrunner.pipeline.batch.submission import (
    Outcome,
    RunningProcesses,
    SubmissionTask,
    dead_result,
    interrupted_result,
    write_json_file,
)


def default_jobs(backend: str) -> int:
    if backend == Backend.GPU:
        return max(1, len(visible_gpus()))
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


# What one grading process may hold of a GPU at once: its worker's buffers (lab 2's largest case and
# the timing's input pool), the driver's GPU oracle and two CUDA contexts, with room to spare.
GRADE_GPU_BYTES = 8 << 30
# Each grading process keeps about two cores busy while it compiles (the driver, the compiler's box
# or the worker's): more processes than half the cores only queue for them.
CORES_PER_GRADE = 2


def auto_jobs(backend: str, gpus: list[str]) -> int:
    """`--jobs auto`: on the GPU, per GPU as many grading processes as its free memory holds and the cores
    keep busy (their cases share the GPU; their timing takes it one at a time); on the CPU, one per core."""
    cores = default_jobs(Backend.CPU)
    if backend != Backend.GPU or not gpus:
        return cores
    per_gpu = min(free_gpu_bytes() // GRADE_GPU_BYTES, max(1, cores // len(gpus) // CORES_PER_GRADE))
    return max(1, per_gpu) * len(gpus)


def free_gpu_bytes() -> int:
    """The free memory of the first visible GPU (the smallest figure is what limits; they are alike here)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.memGetInfo()[0])
    except Exception:  # no usable GPU in the driver: one grade at a time per GPU, as without auto
        return GRADE_GPU_BYTES


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them for a child."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [g for g in given.split(",") if g.strip()]
    try:
        import cupy

        return [str(i) for i in range(cupy.cuda.runtime.getDeviceCount())]
    except Exception:
        return []


# The thread pools a grading process's numpy may start (OpenBLAS, OpenMP, MKL): the oracle's float64 products.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def thread_shares(jobs: int) -> tuple[tuple[str, str], ...]:
    """Each of `jobs` grading processes' share of the cores for its BLAS threads, where the user set none.

    Alone, a grade's CPU oracle multiplies with a thread per core; `jobs` of them side by side would ask
    for `jobs` times the cores. In a batch of 40 lab-2 files with 8 jobs on a 16-core GPU host, the wrong
    files' references and explanations (the CPU oracle's work) took 30 to 56 s each."""
    share = str(max(1, default_jobs(Backend.CPU) // max(1, jobs)))
    return tuple((name, share) for name in BLAS_THREAD_VARIABLES if name not in os.environ)


def run_local(tasks: list[SubmissionTask], jobs: int, gpus: list[str], grading: Grading) -> list[Outcome]:
    """A pool of `jobs` slots; each slot grades one submission at a time in its own process. Slots are
    spread over the GPUs, so with one job per GPU every GPU grades one submission at a time.

    Once `stop` is set, no submission starts, the running grading processes are ended (each is given the
    batch's signal, then killed with its group), and every submission without a verdict is `interrupted`."""
    stop, job, finished = grading.stop, grading.job, grading.finished
    running = RunningProcesses()
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(jobs):
        slots.put(slot)

    def written(outcome: Outcome) -> Outcome:
        """A result made here, not by the grading process: written where that process would have put it."""
        write_json_file(outcome.result, Path(outcome.task.json_path))
        return outcome

    def one(task: SubmissionTask) -> Outcome:
        slot = slots.get()
        try:
            if stop.is_set():
                return written(Outcome(task, interrupted_result(task, stop.reason, stop.exit_code), 0.0))
            environment = thread_shares(jobs)
            if len(gpus) > 1:
                environment += (("CUDA_VISIBLE_DEVICES", gpus[slot % len(gpus)]),)
            task = SubmissionTask(**{**task.__dict__, "environment": task.environment + environment})
            try:
                outcome = job(task, running)
            except Exception as exc:  # the job itself failed: that submission is ungraded, the rest go on
                outcome = written(Outcome(task, dead_result(task, f"the grading job failed: {exc}"), 0.0))
            if stop.is_set() and outcome.result.get("grader_died"):  # ended by the stop, not dead of its own
                outcome = written(Outcome(task, interrupted_result(task, stop.reason, stop.exit_code), outcome.seconds))
            return outcome
        finally:
            slots.put(slot)

    outcomes: dict[int, Outcome] = {}
    ending: threading.Thread | None = None
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(one, task): i for i, task in enumerate(tasks)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for future in done:
                outcome = future.result()
                outcomes[futures[future]] = outcome
                finished(outcome)
            if ending is None and stop.is_set():
                signum = signal.SIGINT if stop.exit_code == ExitCode.INTERRUPTED else signal.SIGTERM
                ending = threading.Thread(target=running.end_all, args=(signum,), daemon=True)
                ending.start()
    return [outcomes[i] for i in range(len(tasks))]
