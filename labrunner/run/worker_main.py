"""The worker process itself: load modules, run cases and timed calls, answer on the wire.

Started by `worker.Worker` inside a `sandbox.Sandbox` as
`python -I -c <bootstrap> ... labrunner.run.worker_main BACKEND REQUEST_FD REPLY_FD [LAUNCH_FD]`:
its limits and Landlock ruleset are in place before this module runs, and so before any student
code. Its stdout and stderr are the kernel-output pipe; requests arrive on REQUEST_FD and
replies leave on REPLY_FD, each in the wire format (`wire.py`), never pickled. Before each launch
of a case one byte, the launch's index, goes to LAUNCH_FD (non-blocking), so that a driver which
stops a hung case can name the kernel that was running.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import traceback
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from labrunner.compile.backend import Backend
from labrunner.run import sandbox
from labrunner.run.wire import ANY_BUFFERS, Message, Reader, WireClosed, encode, write_message
from labrunner.truth.poison import poison_for

if TYPE_CHECKING:
    import numpy as np

    from labrunner.measure.device import DeviceArray, Kernels
    from labrunner.run.cpu_device import CpuDevice
    from labrunner.run.gpu_device import GpuDevice

    # The device the worker runs kernels on: the GPU's, or the CPU backend's.
    WorkerDevice = GpuDevice | CpuDevice

# the CPU build's, NVRTC's (CuPy's) and a Triton file's that cannot load on this GPU
BUILD_ERRORS = ("CpuKernelError", "CpuCompileError", "CompileException", "TritonLoadError")
OUT_OF_BOUNDS = {"CpuOutOfBounds": "out-of-bounds"}  # the CPU backend's faults that have a verdict of their own


def make_device(backend: str) -> WorkerDevice:
    if backend == Backend.GPU:
        from labrunner.run.gpu_device import GpuDevice

        return GpuDevice()
    from labrunner.run.cpu_device import CpuDevice

    return CpuDevice()


def run_case(device: WorkerDevice, kernels: Kernels, request: Message, launch_fd: int | None = None) -> Message:
    """Upload inputs, poison and guard the writable buffers, run the launches, read everything back (an
    input only where the kernels changed it: `labrunner.run.replies`). `launch_fd`: where each launch's
    index is written as it starts; each launch then ends before the next is marked, so the last mark is
    the kernel running."""
    buffers = {name: device.upload(array) for name, array in request["inputs"].items()}
    guarded = {name: device.guarded(count, poison_for(name)) for name, count in request["writable"].items()}
    buffers.update({name: g.inner for name, g in guarded.items()})
    with kernel_printf_silenced(request.get("quiet", False)):
        for index, (launch, schedule) in enumerate(zip(request["launches"], launch_schedules(request))):
            if launch_fd is not None:
                mark_launch(launch_fd, index)
            device.launch(kernels, launch, buffers, reverse_threads=schedule)
            if launch_fd is not None:
                device.synchronize()  # a GPU launch returns at once: wait, so the next mark is true
        device.synchronize()
    return {
        "outputs": {name: device.to_host(guarded[name].inner) for name in request["returned"]},
        "bands": {name: list(g.bands(device.to_host)) for name, g in guarded.items()},
        "inputs_after": changed_inputs(device, buffers, request["inputs"]),
    }


def changed_inputs(
    device: WorkerDevice, buffers: dict[str, DeviceArray], sent: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Each input whose bits the kernels changed, as they left it."""
    after = {name: device.to_host(buffers[name]) for name in sent}
    return {name: array for name, array in after.items() if not same_bits(array, sent[name])}


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    import numpy as np

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8)))


# /dev/null, opened before the module's system-call filter refuses every open: where a rerun's kernel
# printf goes. None where the box has no /dev/null (reruns then print as first runs do).
_DEV_NULL: list[int] = []


@contextlib.contextmanager
def kernel_printf_silenced(quiet: bool) -> Iterator[None]:
    """A rerun of a case (another schedule, the race's kernel search) prints nothing: what the kernels
    printed is shown once, from the case's first run, not once per schedule. Kernel printf reaches fd 1
    (the driver's capped pipe), and the CPU runtime flushes C's stdio around every launch, so fd 1 points
    at /dev/null for the launches. The filter allows dup and close but not dup2: closing fd 1 makes it the
    lowest free descriptor, which dup then fills."""
    if not quiet or not _DEV_NULL:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    flush_output()
    kept = libc.dup(1)  # the C call: Python's os.dup asks fcntl for F_DUPFD_CLOEXEC, which the filter refuses
    if kept < 0:
        raise OSError(ctypes.get_errno(), "dup of fd 1 for a rerun")
    os.close(1)
    silenced = libc.dup(_DEV_NULL[0])
    if silenced != 1:  # fd 0 closed too: put fd 1 back rather than lose it
        if silenced >= 0:
            os.close(silenced)
        libc.dup(kept)
        os.close(kept)
        raise RuntimeError("fd 1 could not be pointed at /dev/null for a rerun")
    try:
        yield
    finally:
        flush_output()
        os.close(1)
        libc.dup(kept)
        os.close(kept)


def mark_launch(fd: int, index: int) -> None:
    """One byte, the launch's index, for the driver to read if the case hangs. The pipe is non-blocking and
    drained before every case: a mark that does not fit is lost, never waited for."""
    with contextlib.suppress(OSError):
        os.write(fd, bytes([index & 0xFF]))


def launch_schedules(request: Message) -> list[int]:
    """Each launch's CPU schedule: one number for every launch, or a list of one per launch (the race
    search reorders one kernel's threads while the others keep theirs, to see whose order matters)."""
    schedule = request["reverse_threads"]
    count = len(request["launches"])
    if isinstance(schedule, list):
        if len(schedule) != count or not all(isinstance(n, int) for n in schedule):
            raise ValueError(f"reverse_threads: {len(schedule)} schedules for {count} launches")
        return schedule
    return [int(schedule)] * count


def machine_code(binary: Message) -> tuple[str, bytes]:
    """(architecture, bytes) of a module the driver's compile gate built, as the wire carried it."""
    return binary["arch"], code_bytes(binary)


def code_bytes(carried: Message) -> bytes:
    """Machine code carried as words (`worker.code_words`), back to its own bytes."""
    words: np.ndarray = carried["words"]
    return words.tobytes()[: carried["bytes"]]


def triton_kernels(triton: Message) -> dict[str, Message]:
    """A Triton file's kernels as the wire carried them, each with its cubin as bytes where one came."""
    return {
        name: {**{k: v for k, v in kernel.items() if k not in ("words", "bytes")}, "cubin": code_bytes(kernel)}
        if "words" in kernel
        else kernel
        for name, kernel in triton.items()
    }


def answer(
    request: Message, device: WorkerDevice, kernels: dict[str, Kernels], launch_fd: int | None = None
) -> Message:
    if request["op"] == "device":  # made before this call: the driver times the context on its own
        return {}
    if request["op"] == "load":
        extra: dict[str, Any] = {"binary": machine_code(request["binary"])} if "binary" in request else {}
        if "triton" in request:
            extra = {"triton": triton_kernels(request["triton"])}
        kernels[request["role"]] = device.compile(
            request["source"], request["filename"], request["entry_types"], **request.get("options", {}), **extra
        )
        return {}
    if request["op"] == "run":
        return run_case(device, kernels[request["role"]], request, launch_fd)
    if request["op"] == "peer":
        from labrunner.measure.timed_runs import run_peer_check

        return run_peer_check(gpu_only(device), request)
    if request["op"] == "trace":
        from labrunner.measure.trace import run_trace

        return run_trace(gpu_only(device), kernels, request)
    from labrunner.measure.timed_runs import run_timing

    return run_timing(gpu_only(device), kernels, request)


def gpu_only(device: WorkerDevice) -> GpuDevice:
    """The device for timing, a peer's check or a trace: the GPU's (no driver asks a CPU worker for them)."""
    if device.name != Backend.GPU:
        raise RuntimeError("timing needs the GPU backend")
    from labrunner.run.gpu_device import GpuDevice  # imported already, by `make_device`

    if not isinstance(device, GpuDevice):
        raise RuntimeError("timing needs the GPU backend")
    return device


def failure(request: Message, device: WorkerDevice | None, exc: BaseException) -> tuple[Message, bool]:
    """The failure reply for an exception, and whether the process must end (a poisoned CUDA context)."""
    sticky = device.describe_error(exc) if device is not None else None
    fault = device.describe_fault(exc) if device is not None else None
    if request.get("op") == "load" and type(exc).__name__ in BUILD_ERRORS:
        return {"ok": False, "kind": "compile", "detail": str(exc)}, False
    # a fault the CPU backend placed in a guard (of shared memory or of a buffer) is out of bounds
    kind = "crash" if sticky else "error" if not fault else OUT_OF_BOUNDS.get(type(exc).__name__, "fault")
    detail = sticky or fault or "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return {"ok": False, "kind": kind, "detail": detail}, bool(sticky)


def flush_output() -> None:
    """C's stdio buffer too, so a kernel's printf reaches the pipe before the reply that follows it."""
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).fflush(None)


def main(backend: str, request_fd: int, reply_fd: int, launch_fd: int | None = None) -> None:
    reader = Reader(request_fd)
    try:
        hello = reader.read(ANY_BUFFERS, None)
    except WireClosed:
        return
    cookie = bytes.fromhex(hello["cookie"])

    def reply(body: Message) -> None:
        flush_output()
        write_message(reply_fd, encode(body, cookie))

    reply({"ok": True, "landlock": sandbox.LANDLOCK_ABI, "pid_namespace": sandbox.PID_NAMESPACE})
    with contextlib.suppress(OSError):
        _DEV_NULL.append(os.open(os.devnull, os.O_WRONLY))
    device: WorkerDevice | None = None
    kernels: dict[str, Kernels] = {}
    while True:
        try:
            request = reader.read(ANY_BUFFERS, None, records=True)
        except WireClosed:
            return
        try:
            if device is None:
                device = make_device(backend)
            body = {"ok": True, **answer(request, device, kernels, launch_fd)}
            parts = encode(body, cookie)
        except BaseException as exc:  # every failure becomes an answer; the driver decides the verdict
            body, fatal = failure(request, device, exc)
            reply(body)
            if fatal:
                os._exit(3)
            continue
        flush_output()
        write_message(reply_fd, parts)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else None)
