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

from labrunner.box import gpu_uuid_at
from labrunner.compile.backend import Backend
from labrunner.exit_codes import ExitCode
from labrunner.pipeline.batch.gpu_pool import BatchGpu, GpuPool, may_have_failed_its_gpu
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


def batch_gpus(names: list[str], visible: list[str], measured: bool) -> list[BatchGpu]:
    """The batch's GPUs, each weighted by the grades its free memory holds where `measured` (several GPUs
    to share the batch, or --jobs auto: that opens a CUDA context on each, so not otherwise); with several,
    each named for its grading processes by its UUID, so that each one's box maps that GPU alone
    (`box.gpu_device_nodes`). A batch on one GPU gives its processes that GPU as before."""
    if not measured:
        return [BatchGpu(name) for name in names]
    return [
        BatchGpu(
            name,
            max(1, free_gpu_bytes(visible.index(name)) // GRADE_GPU_BYTES),
            uuid=(name if name.startswith("GPU-") else gpu_uuid(visible.index(name))) if len(names) > 1 else None,
        )
        for name in names
    ]


def free_gpu_bytes(index: int = 0) -> int:
    """The free memory of visible GPU `index`, as this process numbers them."""
    try:
        import cupy

        with cupy.cuda.Device(index):
            return int(cupy.cuda.runtime.memGetInfo()[0])
    except Exception:  # no usable GPU in the driver: one grade at a time on it, as without auto
        return GRADE_GPU_BYTES


def gpu_uuid(index: int) -> str | None:
    """Visible GPU `index`'s UUID as CUDA_VISIBLE_DEVICES takes it (GPU-8-4-4-4-12 hex digits): the driver's
    record of the GPU at its PCI bus id, else CUDA's 16 bytes (which CuPy cuts at a zero byte); None where
    neither says."""
    try:
        import cupy

        recorded = gpu_uuid_at(cupy.cuda.Device(index).pci_bus_id)
        return recorded or uuid_name(bytes(cupy.cuda.runtime.getDeviceProperties(index)["uuid"]))
    except Exception:
        return None


def uuid_name(raw: bytes) -> str | None:
    if len(raw) != 16:
        return None
    digits = raw.hex()
    return f"GPU-{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them for a child."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [g.strip() for g in given.split(",") if g.strip()]
    try:
        import cupy

        return [str(i) for i in range(cupy.cuda.runtime.getDeviceCount())]
    except Exception:
        return []


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
