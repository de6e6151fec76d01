"""The worker process itself: load modules, run cases and timed calls, answer on the wire.

Started by `worker.Worker` inside a `sandbox.Sandbox` as
`python -I -c <bootstrap> ... labrunner.run.worker_main BACKEND REQUEST_FD REPLY_FD`: its
limits and Landlock ruleset are in place before this module runs, and so before any student
code. Its stdout and stderr are the kernel-output pipe; requests arrive on REQUEST_FD and
replies leave on REPLY_FD, each in the wire format (`wire.py`), never pickled.
"""

from __future__ import annotations

import ctypes
import os
import sys
import traceback

from labrunner.run import sandbox
from labrunner.run.wire import ANY_BUFFERS, Reader, WireClosed, encode, write_message
from labrunner.truth.poison import poison_for

BUILD_ERRORS = ("CpuKernelError", "CpuCompileError", "CompileException")  # the CPU build's and NVRTC's (CuPy's) own
OUT_OF_BOUNDS = {"CpuOutOfBounds": "out-of-bounds"}  # the CPU backend's faults that have a verdict of their own


def make_device(backend: str):
    if backend == "gpu":
        from labrunner.run.gpu_device import GpuDevice

        return GpuDevice()
    from labrunner.run.cpu_device import CpuDevice

    return CpuDevice()


def run_case(device, kernels, request: dict) -> dict:
    """Upload inputs, poison and guard the writable buffers, run the launches, read everything back."""
    buffers = {name: device.upload(array) for name, array in request["inputs"].items()}
    guarded = {name: device.guarded(count, poison_for(name)) for name, count in request["writable"].items()}
    buffers.update({name: g.inner for name, g in guarded.items()})
    for launch, schedule in zip(request["launches"], launch_schedules(request)):
        device.launch(kernels, launch, buffers, reverse_threads=schedule)
    device.synchronize()
    return {
        "outputs": {name: device.to_host(guarded[name].inner) for name in request["returned"]},
        "bands": {name: list(g.bands(device.to_host)) for name, g in guarded.items()},
        "inputs_after": {name: device.to_host(buffers[name]) for name in request["inputs"]},
    }


def launch_schedules(request: dict) -> list[int]:
    """Each launch's CPU schedule: one number for every launch, or a list of one per launch (the race
    search reorders one kernel's threads while the others keep theirs, to see whose order matters)."""
    schedule = request["reverse_threads"]
    count = len(request["launches"])
    if isinstance(schedule, list):
        if len(schedule) != count or not all(isinstance(n, int) for n in schedule):
            raise ValueError(f"reverse_threads: {len(schedule)} schedules for {count} launches")
        return schedule
    return [int(schedule)] * count


def machine_code(binary: dict) -> tuple[str, bytes]:
    """(architecture, bytes) of a module the driver's compile gate built, as the wire carried it."""
    words = binary["words"]
    return binary["arch"], words.tobytes()[: binary["bytes"]]


def answer(request: dict, device, kernels: dict) -> dict:
    if request["op"] == "load":
        extra = {"binary": machine_code(request["binary"])} if "binary" in request else {}
        kernels[request["role"]] = device.compile(
            request["source"], request["filename"], request["entry_types"], **request.get("options", {}), **extra
        )
        return {}
    if request["op"] == "run":
        return run_case(device, kernels[request["role"]], request)
    if request["op"] == "peer":
        from labrunner.measure.timed_runs import run_peer_check

        return run_peer_check(device, request)
    if request["op"] == "trace":
        from labrunner.measure.trace import run_trace

        return run_trace(device, kernels, request)
    from labrunner.measure.timed_runs import run_timing

    return run_timing(device, kernels, request)


def failure(request: dict, device, exc: BaseException) -> tuple[dict, bool]:
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


def main(backend: str, request_fd: int, reply_fd: int) -> None:
    reader = Reader(request_fd)
    try:
        hello = reader.read(ANY_BUFFERS, None)
    except WireClosed:
        return
    cookie = bytes.fromhex(hello["cookie"])

    def reply(body: dict) -> None:
        flush_output()
        write_message(reply_fd, encode(body, cookie))

    reply({"ok": True, "landlock": sandbox.LANDLOCK_ABI, "pid_namespace": sandbox.PID_NAMESPACE})
    device = None
    kernels: dict[str, object] = {}
    while True:
        try:
            request = reader.read(ANY_BUFFERS, None, records=True)
        except WireClosed:
            return
        try:
            if device is None:
                device = make_device(backend)
            body = {"ok": True, **answer(request, device, kernels)}
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
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
