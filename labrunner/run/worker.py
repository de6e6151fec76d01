"""Isolation: the student's kernels run in a worker process; the driver keeps everything else.

The driver (parent) sends a request (inputs, launches) over a pipe and receives raw buffers
back; the oracle, the checks and the verdicts stay on its side. The worker never prints a
result: its stdout and stderr (where device printf lands) go to a log file the driver shows
labelled as the kernel's output, so a kernel that prints "PASS" changes nothing.

Three ways a request ends without an answer, each a verdict rather than a driver failure:
a time limit passes (the worker is killed: `timeout`), the worker dies (a segfault on the CPU
backend: `crash`), or the worker answers with a sticky CUDA error (illegal address and the
like poison the whole CUDA context, so the worker exits after answering: `crash` with the
error's name). The next request starts a fresh worker.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labrunner.labs.definition import Launch
from labrunner.truth.poison import poison_for

COMPILE_TIMEOUT_S = 300.0


class WorkerFailure(Exception):
    """A request the worker could not answer.

    kind: 'timeout' (killed at the time limit), 'crash' (the process died or its CUDA context is
    poisoned), 'fault' (the kernel misbehaved in a way the backend caught, e.g. a barrier that can
    never complete on the CPU; the worker lives on), 'compile' (the device's own build refused the
    file while loading it) or 'error' (anything else, the driver's fault).
    """

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail

    @property
    def status(self) -> str:
        """The case status it means: a time limit is `timeout`, every other failure to answer a `crash`."""
        return "timeout" if self.kind == "timeout" else "crash"


@dataclass
class CaseRun:
    outputs: dict[str, np.ndarray]                       # the writable buffers asked for
    bands: dict[str, tuple[np.ndarray, np.ndarray]]      # guard bands of every writable buffer
    inputs_after: dict[str, np.ndarray]                  # the inputs as the kernels left them


class Worker:
    """The parent's handle on one worker process for one backend ('gpu' or 'cpu')."""

    def __init__(self, backend: str):
        self.backend = backend
        self._context = multiprocessing.get_context("spawn")
        self._process = None
        self._conn = None
        self._loaded: list[dict] = []
        self.log_path = Path(tempfile.mkstemp(prefix="attnlab-kernel-output-", suffix=".log")[1])

    # -- lifecycle ---------------------------------------------------------------------------
    def _start(self) -> None:
        parent_end, child_end = self._context.Pipe()
        self._process = self._context.Process(
            target=serve, args=(child_end, self.backend, str(self.log_path)), daemon=True
        )
        self._process.start()
        child_end.close()
        self._conn = parent_end
        for load in self._loaded:  # a restarted worker needs the modules again
            self._call(load, COMPILE_TIMEOUT_S)

    def close(self) -> None:
        """Stop the worker and delete its kernel-output log: read `kernel_output()` before this."""
        self._stop()
        self.log_path.unlink(missing_ok=True)

    def restart(self) -> None:
        """A fresh process for the next request: new CUDA context, new allocations, modules loaded again."""
        self._stop()

    def _stop(self) -> None:
        if self._process is not None and self._process.is_alive():
            try:
                self._conn.send({"op": "exit"})
                self._process.join(5)
            except (OSError, EOFError):
                pass
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
        self._process = None

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def kernel_output(self, limit: int = 20) -> list[str]:
        """What the kernels printed (device printf), for the report to show labelled as such."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return lines[:limit] + ([f"... and {len(lines) - limit} more lines"] if len(lines) > limit else [])

    # -- requests ----------------------------------------------------------------------------
    def _call(self, request: dict, timeout_s: float) -> dict:
        if self._process is None or not self._process.is_alive():
            self._process = None
            self._start()
        try:
            self._conn.send(request)
            ready = self._conn.poll(timeout_s)
        except (OSError, EOFError, BrokenPipeError):
            ready = True  # fall through to recv, which reports the death
        if not ready:
            self._kill()
            raise WorkerFailure("timeout", f"no answer within {timeout_s:g} s; the kernel was stopped")
        try:
            reply = self._conn.recv()
        except (EOFError, OSError):
            code = self._process.exitcode if self._process else None
            self._kill()
            raise WorkerFailure("crash", _describe_exit(code)) from None
        if not reply["ok"]:
            if reply["kind"] == "crash":
                self._kill()  # its CUDA context is poisoned; the next request gets a fresh one
            raise WorkerFailure(reply["kind"], reply["detail"])
        return reply

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()
        self._process = None

    def load(self, role: str, composed_source: str, filename: str, entry_types: dict[str, list[str]],
             options: dict | None = None) -> None:
        """Compile and load a module in the worker. `options` go to the device's compile (the CPU's:
        arch, sandboxed). A file the device's build refuses raises WorkerFailure of kind 'compile'."""
        request = {"op": "load", "role": role, "source": composed_source, "filename": filename,
                   "entry_types": entry_types, "options": options or {}}
        self._call(request, COMPILE_TIMEOUT_S)
        self._loaded.append(request)

    def run_case(self, role: str, launches: list[Launch], inputs: dict[str, np.ndarray],
                 writable: dict[str, int], returned: tuple[str, ...], timeout_s: float,
                 reverse_threads: bool = False) -> CaseRun:
        reply = self._call({"op": "run", "role": role, "launches": launches, "inputs": inputs,
                            "writable": writable, "returned": returned, "reverse_threads": reverse_threads},
                           timeout_s)
        return CaseRun(reply["outputs"], reply["bands"], reply["inputs_after"])

    def time(self, request: dict, timeout_s: float) -> dict:
        return self._call({"op": "time", **request}, timeout_s)


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker process died ({name})"
    return f"the worker process exited unexpectedly (exit status {code})"


# -- the worker process ----------------------------------------------------------------------
def make_device(backend: str):
    if backend == "gpu":
        from labrunner.run.gpu_device import GpuDevice

        return GpuDevice()
    from labrunner.run.cpu_device import CpuDevice

    return CpuDevice()


def serve(conn, backend: str, log_path: str) -> None:
    """The worker's loop: answer requests until told to exit. Runs in the child process."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    device = None
    kernels: dict[str, object] = {}
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request["op"] == "exit":
            return
        try:
            if device is None:
                device = make_device(backend)
            if request["op"] == "load":
                kernels[request["role"]] = device.compile(request["source"], request["filename"], request["entry_types"],
                                                          **request.get("options", {}))
                reply = {}
            elif request["op"] == "run":
                reply = run_case(device, kernels[request["role"]], request)
            else:
                from labrunner.measure.timed_runs import run_timing

                reply = run_timing(device, kernels, request)
            conn.send({"ok": True, **reply})
        except BaseException as exc:  # every failure becomes an answer; the driver decides the verdict
            sticky = device.describe_error(exc) if device is not None else None
            fault = device.describe_fault(exc) if device is not None else None
            refused = device.describe_compile_error(exc) if device is not None else None
            kind = "crash" if sticky else "fault" if fault else "compile" if refused else "error"
            conn.send({"ok": False, "kind": kind,
                       "detail": sticky or fault or refused or f"{type(exc).__name__}: {exc}"})
            if sticky:
                os._exit(3)


def run_case(device, kernels, request: dict) -> dict:
    """Upload inputs, poison and guard the writable buffers, run the launches, read everything back."""
    buffers = {name: device.upload(array) for name, array in request["inputs"].items()}
    guarded = {name: device.guarded(count, poison_for(name)) for name, count in request["writable"].items()}
    buffers.update({name: g.inner for name, g in guarded.items()})
    for launch in request["launches"]:
        device.launch(kernels, launch, buffers, reverse_threads=request["reverse_threads"])
    device.synchronize()
    return {
        "outputs": {name: device.to_host(guarded[name].inner) for name in request["returned"]},
        "bands": {name: g.bands(device.to_host) for name, g in guarded.items()},
        "inputs_after": {name: device.to_host(buffers[name]) for name in request["inputs"]},
    }
