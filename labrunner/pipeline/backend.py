"""Where the kernels run: the GPU (CuPy) or the CPU backend, chosen once per command and said plainly."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from labrunner import box as boxes
from labrunner.compile.backend import Backend
from labrunner.exit_codes import AttnlabError, ExitCode, environment_error, usage_error
from labrunner.measure import device_state
from labrunner.measure.gpu_lock import exclusive_timing, gpu_key, shared_checking
from labrunner.records.device import DeviceFacts
from labrunner.run import cpu_device

BACKENDS = (Backend.GPU, Backend.CPU, "auto")


# The NVIDIA driver's control device: where it is missing, no GPU can be used here.
NVIDIA_CONTROL_DEVICE = "/dev/nvidiactl"


# gpu_status's words where neither CuPy nor the NVIDIA driver is here (a CPU-only CI runner).
NO_DRIVER = "no GPU found (no NVIDIA driver on this machine)"


def gpu_may_be_here() -> bool:
    """Whether a GPU may grade here, asked without CuPy (whose import alone costs a two-core CI runner
    a share of its time): work started ahead for the GPU is started only where this holds."""
    return os.path.exists(NVIDIA_CONTROL_DEVICE)


def gpu_status() -> tuple[bool, str]:
    """Whether CuPy sees a GPU, and the words to say so (one line)."""
    try:
        import cupy
    except ImportError:
        if not gpu_may_be_here():  # CuPy would find nothing here: advising it would send a CPU runner astray
            return False, NO_DRIVER
        return False, "CuPy is not installed: pip install 'attnlab[cuda13]' (or [cuda12] for a CUDA 12 driver)"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, or a driver too old for this CuPy
        reason = str(exc).split(":")[0]
        if reason in ("cudaErrorInsufficientDriver", "cudaErrorNoDevice"):
            return False, f"no GPU present (CUDA reports {reason}: no NVIDIA GPU or driver on this machine)"
        return False, f"no usable GPU ({reason})"
    if count == 0:
        return False, "no GPU found"
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    return True, name.decode() if isinstance(name, bytes) else str(name)


# The note of `--device auto` (the default) on a machine without a GPU; the verdict line says it again, short.
CPU_INSTEAD = "grading on the CPU backend instead (correctness only, no GPU timings)"


def resolve_backend(requested: str, unsafe_cpu: bool = False) -> tuple[Backend, list[str]]:
    """gpu, cpu, or auto (the GPU where there is one, else the CPU, said plainly). Returns notes.

    The CPU backend runs the file as native code, so it grades only where its worker can seal
    itself with seccomp, unless `--unsafe-cpu` says the file is the user's own."""
    if requested not in BACKENDS:
        raise usage_error(f"--device {requested}: choose gpu, cpu or auto")
    if requested == Backend.CPU:
        return Backend.CPU, cpu_sandbox_notes(unsafe_cpu)
    available, words = gpu_status()
    if available:
        return Backend.GPU, gpu_box_notes()
    if requested == "auto":
        notes = cpu_sandbox_notes(unsafe_cpu)
        return Backend.CPU, [f"{words}: {CPU_INSTEAD}", *notes]
    raise environment_error(
        f"{words}. --device gpu grades on a GPU only; leave --device out (auto, the default: the GPU where "
        "there is one, else the CPU) or give --device cpu to grade on the CPU (correctness only)"
    )


def why_on_the_cpu(notes: list[str]) -> str | None:
    """Where `--device auto` fell back to the CPU, why, in the few words the verdict line has room for
    ("no GPU found", "CuPy is not installed"); None where the CPU was asked for, or the GPU ran."""
    for note in notes:
        if note.endswith(f": {CPU_INSTEAD}"):
            words = note.removesuffix(f": {CPU_INSTEAD}")
            return re.split(r": | \(", words, maxsplit=1)[0]
    return None


def needs_a_gpu(command: str, why: str, instead: str) -> AttnlabError:
    """The one line of a command that times or profiles kernels (bench, calibrate, profile) where no GPU
    runs them: what it needs, why there is none, and what to run instead (exit 6)."""
    return AttnlabError(f"{command} needs a GPU: {why}; {instead}", ExitCode.ENVIRONMENT)


def grade_instead(lab: str, file: Path | None) -> str:
    """What a command that needs a GPU offers on a machine without one: the grade, which runs on the CPU."""
    return f"check correctness on the CPU with `attnlab grade {lab} {file or 'FILE'}`"


def refuse_without_gpu(command: str, device: str, instead: str) -> None:
    """Asked before the compile gate, so the default `--device auto` never announces a CPU fall-back that
    the command then refuses, and `--device gpu` gets the same line as the others."""
    if device == Backend.CPU:
        raise needs_a_gpu(command, "--device cpu chose the CPU backend, which takes no timings", instead)
    available, words = gpu_status()
    if not available:
        raise needs_a_gpu(command, words, instead)


def cpu_sandbox_notes(unsafe_cpu: bool) -> list[str]:
    """Refuses the CPU backend where it cannot build (no C++ compiler) or cannot be sealed (exit 6), unless
    --unsafe-cpu for the seal; the notes to print. The compiler is asked for here, by the driver, before any
    worker starts: a build that failed for want of g++ would otherwise read as the file's compile error."""
    from labrunner.run.cpu.module import cpu_compiler_available

    missing = cpu_compiler_available()
    if missing is not None:
        raise environment_error(f"the CPU backend cannot build kernels here: {missing}")
    unboxed = boxes.availability()
    if unsafe_cpu:
        notes = [
            "--unsafe-cpu: the CPU worker runs this file's code without a syscall filter; grade only files you trust"
        ]
        return notes + ([f"--unsafe-cpu: the CPU worker runs unboxed ({unboxed})"] if unboxed else [])
    if unboxed is not None:
        raise environment_error(
            f"the CPU backend cannot box its worker here: {unboxed}. It runs the file as native "
            "code, so it does not grade; use a GPU, or --unsafe-cpu for a file you wrote yourself"
        )
    reason = cpu_device.cpu_sandbox_status()
    if reason is not None:
        raise environment_error(
            f"the CPU backend cannot seal its worker here: {reason}. It runs the file as native "
            "code, so it does not grade; use a GPU, or --unsafe-cpu for a file you wrote yourself"
        )
    return []


def gpu_box_notes() -> list[str]:
    """The GPU path grades unboxed where no box can be made, and says so (`--require-box` refuses)."""
    unboxed = boxes.availability()
    return [f"the GPU worker and the compiler run unboxed: {unboxed}"] if unboxed else []


def device_facts(worker_backend: Backend) -> DeviceFacts:
    if worker_backend != Backend.GPU:
        return DeviceFacts.cpu()
    return DeviceFacts.of_gpu(device_state.read_device_state())


@contextmanager
def gpu_share(backend: Backend, phase: Literal["checking", "timing"]) -> Iterator[None]:
    """On the GPU: checking shares it with other graders, timing has it alone (see measure/gpu_lock.py)."""
    if backend != Backend.GPU:
        yield
        return
    with (shared_checking if phase == "checking" else exclusive_timing)(gpu_key()):
        yield
