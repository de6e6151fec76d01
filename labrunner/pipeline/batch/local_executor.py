"""The `local` executor: a pool of `--jobs N` on this machine (default: one per GPU, or one per core on
the CPU backend). On the GPU each grading process is given one GPU (`CUDA_VISIBLE_DEVICES`), by the
batch's GPU pool (`gpu_pool.py`: spread by free memory, a failed GPU taken out)."""

from __future__ import annotations

import os
import queue
import signal
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from labrunner.compile.backend import Backend
from labrunner.exit_codes import ExitCode
from labrunner.pipeline.batch.gpu_pool import BatchGpu, GpuPool, may_have_failed_its_gpu, visible_gpus
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


# Each grading process keeps about two cores busy while it compiles (the driver, the compiler's box
# or the worker's): more processes than half the cores only queue for them.
CORES_PER_GRADE = 2


def auto_jobs(backend: str, gpus: list[BatchGpu]) -> int:
    """`--jobs auto`: on the GPU, per GPU as many grading processes as its free memory holds (its weight)
    and its share of the cores keeps busy (their cases share the GPU; their timing takes it one at a time);
    on the CPU, one per core."""
    cores = default_jobs(Backend.CPU)
    if backend != Backend.GPU or not gpus:
        return cores
    per_gpu_cores = max(1, cores // len(gpus) // CORES_PER_GRADE)
    return sum(max(1, min(gpu.weight, per_gpu_cores)) for gpu in gpus)


def batch_jobs(asked: int | str | None, backend: str, gpus: list[BatchGpu]) -> int:
    """How many submissions a local batch grades at once: `--jobs` (a number, or auto); by default one per
    GPU of the batch (on the CPU backend, one per core)."""
    if asked == "auto":
        return auto_jobs(backend, gpus)
    if asked:
        return int(asked)
    return len(gpus) if gpus else default_jobs(backend)


def run_local(tasks: list[SubmissionTask], jobs: int, pool: GpuPool | None, grading: Grading) -> list[Outcome]:
    """A pool of `jobs` slots; each slot grades one submission at a time in its own process, on the GPU
    `pool` gives it (`gpu_pool.py`; None on the CPU backend). A submission whose GPU then fails its health
    check is graded again on another, and that GPU is out of the batch.

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

    def graded(task: SubmissionTask, environment: tuple[tuple[str, str], ...]) -> Outcome:
        task = SubmissionTask(**{**task.__dict__, "environment": task.environment + environment})
        try:
            return job(task, running)
        except Exception as exc:  # the job itself failed: that submission is ungraded, the rest go on
            return written(Outcome(task, dead_result(task, f"the grading job failed: {exc}"), 0.0))

    def on_a_gpu(task: SubmissionTask, pool: GpuPool) -> Outcome:
        """Graded on the GPU the pool gives; again on another while the one it ran on fails its check."""
        while True:
            gpu = pool.take()
            if gpu is None:
                return written(Outcome(task, dead_result(task, f"not graded: {pool.why_none_left()}"), 0.0))
            try:
                outcome = graded(task, (("CUDA_VISIBLE_DEVICES", gpu.uuid or gpu.name),))
            finally:
                pool.give_back(gpu)
            if stop.is_set() or not may_have_failed_its_gpu(outcome):
                return outcome
            why = pool.check(gpu.uuid or gpu.name)
            if why is None:  # the GPU works: the verdict is the kernel's
                return outcome
            if pool.take_out(gpu, why):
                left = ", ".join(pool.left()) or "none"
                grading.reporter.note(
                    f"GPU {gpu.name} is out of the batch: {why}; GPUs left: {left}. "
                    f"{task.file} is graded again on another GPU"
                )

    def one(task: SubmissionTask) -> Outcome:
        slot = slots.get()
        try:
            if stop.is_set():
                return written(Outcome(task, interrupted_result(task, stop.reason, stop.exit_code), 0.0))
            outcome = on_a_gpu(task, pool) if pool is not None else graded(task, ())
            if stop.is_set() and outcome.result.get("grader_died"):  # ended by the stop, not dead of its own
                outcome = written(Outcome(task, interrupted_result(task, stop.reason, stop.exit_code), outcome.seconds))
            return outcome
        finally:
            slots.put(slot)

    outcomes: dict[int, Outcome] = {}
    ending: threading.Thread | None = None
    with ThreadPoolExecutor(max_workers=jobs) as pool_of_slots:
        futures = {pool_of_slots.submit(one, task): i for i, task in enumerate(tasks)}
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
