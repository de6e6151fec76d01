"""Where the kernels run: the GPU (CuPy) or the CPU backend, chosen once per command and said plainly."""

from __future__ import annotations

from contextlib import contextmanager

from labrunner import box as boxes
from labrunner.exit_codes import environment_error, usage_error
from labrunner.measure import device_state
from labrunner.measure.gpu_lock import exclusive_timing, gpu_key, shared_checking
from labrunner.report.records.device import DeviceFacts
from labrunner.run import cpu_device

DEFAULT_TIMEOUT_S = {"gpu": 20.0, "cpu": 120.0}


BACKENDS = ("gpu", "cpu", "auto")


def gpu_status() -> tuple[bool, str]:
    """Whether CuPy sees a GPU, and the words to say so (one line)."""
    try:
        import cupy
    except ImportError:
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


def resolve_backend(requested: str, unsafe_cpu: bool = False) -> tuple[str, list[str]]:
    """gpu, cpu, or auto (the GPU where there is one, else the CPU, said plainly). Returns notes.

    The CPU backend runs the file as native code, so it grades only where its worker can seal
    itself with seccomp, unless `--unsafe-cpu` says the file is the user's own."""
    if requested not in BACKENDS:
        raise usage_error(f"--device {requested}: choose gpu, cpu or auto")
    if requested == "cpu":
        return "cpu", cpu_sandbox_notes(unsafe_cpu)
    available, words = gpu_status()
    if available:
        return "gpu", gpu_box_notes()
    if requested == "auto":
        notes = cpu_sandbox_notes(unsafe_cpu)
        return "cpu", [f"{words}: grading on the CPU backend instead (correctness only, no GPU timings)", *notes]
    raise environment_error(
        f"{words}. Grade on the CPU instead with --device cpu (correctness only), "
        "or --device auto to fall back to it automatically"
    )


def cpu_sandbox_notes(unsafe_cpu: bool) -> list[str]:
    """Refuses the CPU backend where it cannot be sealed (exit 6), unless --unsafe-cpu; the notes to print."""
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


def device_facts(worker_backend: str) -> DeviceFacts:
    if worker_backend != "gpu":
        return DeviceFacts.cpu()
    return DeviceFacts.of_gpu(device_state.read_device_state())


@contextmanager
def gpu_share(backend: str, phase: str):
    """On the GPU: checking shares it with other graders, timing has it alone (see measure/gpu_lock.py)."""
    if backend != "gpu":
        yield
        return
    with (shared_checking if phase == "checking" else exclusive_timing)(gpu_key()):
        yield
