"""The GPUs of a local batch: which ones it grades on (`--gpus`), which one each grading process gets, and
a GPU that fails under a submission taken out of the batch, that submission graded again on another.

Each grading process is given one GPU (`CUDA_VISIBLE_DEVICES`, as this process names it for a child), the
one with the fewest grades running for the grades its free memory holds, so a GPU with more memory free
takes more of the batch. Timing stays one at a time per GPU (`measure/gpu_lock.py`, a lock per PCI bus id).

A submission whose grade ended as a GPU that failed would end it (the grading process died, its kernel
crashed or hung, the environment went missing) has its GPU asked, by a process of its own, to allocate,
add and synchronize. A GPU that cannot is out of the batch from then on, with a note saying why, and the
submission is graded again on another; the batch goes on with the GPUs left. A kernel that only wrecked
its own CUDA context leaves a GPU that answers, and its verdict stands.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

from labrunner.box import gpu_uuid_at
from labrunner.exit_codes import ExitCode, usage_error
from labrunner.pipeline.batch.submission import Outcome

# What one grading process may hold of a GPU at once: its worker's buffers (lab 2's largest case and
# the timing's input pool), the driver's GPU oracle and two CUDA contexts, with room to spare.
GRADE_GPU_BYTES = 8 << 30
# A GPU asked whether it still works: it allocates, adds and synchronizes, and says the sum.
HEALTH_PROBE = (
    "import cupy\n"
    "x = cupy.ones(1 << 20, dtype=cupy.int32)\n"
    "total = int(x.sum())\n"
    "cupy.cuda.runtime.deviceSynchronize()\n"
    "print(total)\n"
)
HEALTH_PROBE_TIMEOUT_S = 60.0
# The verdicts a failed GPU can leave: a crash or a hang, the environment gone (no device, a driver error)
GPU_FAILURE_VERDICTS = ("crash", "timeout", "environment-missing")
# Asked of a GPU after such a grade: None if it works, else why not.
GpuCheck = Callable[[str], str | None]


@dataclass
class BatchGpu:
    """One GPU of the batch: its name as the user and the notes know it (a CUDA_VISIBLE_DEVICES entry), how
    many grades its free memory holds (at least 1), its UUID, how many run on it now, and, once it failed,
    why it was taken out."""

    name: str
    weight: int = 1
    # how its grading processes are given it, where known: its box then maps this GPU alone
    uuid: str | None = None
    running: int = 0
    out: str | None = None


class GpuPool:
    """The batch's GPUs, handed out one per grading process."""

    def __init__(self, gpus: list[BatchGpu], check: GpuCheck | None = None):
        """`check(name)`: None if that GPU works, else why not (`gpu_answers` by default)."""
        self.gpus = gpus
        self.check: GpuCheck = check or gpu_answers
        self._lock = threading.Lock()

    def take(self) -> BatchGpu | None:
        """The GPU the next grade runs on: of those still in the batch, the one with the fewest grades
        running for its weight, the larger weight first among equals (so every GPU has one before any has
        two); None when every GPU is out."""
        with self._lock:
            usable = [gpu for gpu in self.gpus if gpu.out is None]
            if not usable:
                return None
            chosen = min(usable, key=lambda gpu: (gpu.running / gpu.weight, -gpu.weight))
            chosen.running += 1
            return chosen

    def give_back(self, gpu: BatchGpu) -> None:
        with self._lock:
            gpu.running -= 1

    def take_out(self, gpu: BatchGpu, why: str) -> bool:
        """`gpu` is out of the batch; True the first time (the one note to give)."""
        with self._lock:
            first = gpu.out is None
            if first:
                gpu.out = why
            return first

    def left(self) -> list[str]:
        with self._lock:
            return [gpu.name for gpu in self.gpus if gpu.out is None]

    def why_none_left(self) -> str:
        with self._lock:
            return "every GPU of the batch failed (" + "; ".join(f"GPU {g.name}: {g.out}" for g in self.gpus) + ")"


def chosen_gpus(asked: tuple[str, ...] | None, visible: list[str]) -> list[str]:
    """`--gpus`, checked against the GPUs this process sees (named as CUDA_VISIBLE_DEVICES names them for a
    child); every visible GPU where none were asked for."""
    if asked is None:
        return visible
    if not visible:
        raise usage_error(
            f"--gpus {','.join(asked)}: no GPU is visible here (CUDA_VISIBLE_DEVICES, or no driver); "
            "leave out --gpus, or grade with --device cpu"
        )
    unknown = [name for name in asked if name not in visible]
    if unknown:
        raise usage_error(
            f"--gpus {','.join(asked)}: no GPU {', '.join(unknown)} here; this machine's GPUs are "
            f"{', '.join(visible)} (as CUDA_VISIBLE_DEVICES or the driver numbers them)"
        )
    return list(asked)


def may_have_failed_its_gpu(outcome: Outcome) -> bool:
    """A grade that ended as a failing GPU would end it: its process died, or a case crashed or hung, or
    the environment went missing. Any other verdict needed a working GPU to be reached."""
    return bool(outcome.result.get("grader_died")) or (
        outcome.exit_code in (ExitCode.MISBEHAVED, ExitCode.ENVIRONMENT)
        and outcome.result.get("verdict") in GPU_FAILURE_VERDICTS
    )


def gpu_answers(name: str, timeout_s: float = HEALTH_PROBE_TIMEOUT_S) -> str | None:
    """None if GPU `name` allocates, adds and synchronizes in a fresh process; else why it did not."""
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": name}
    try:
        done = subprocess.run(
            [sys.executable, "-c", HEALTH_PROBE],
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return f"it did not answer a health check within {timeout_s:.0f} s"
    if done.returncode == 0 and done.stdout.strip() == str(1 << 20):
        return None
    said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    last = said[-1][:300] if said else f"exit status {done.returncode}"
    return f"it failed a health check ({last})"


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
