"""Isolation: the student's kernels run in a worker process; the driver keeps everything else.

The driver (parent) sends a request (inputs, launches) and receives raw buffers back; the
oracle, the checks and the verdicts stay on its side. The worker runs in a sandbox
(`sandbox.py`: its own session, a scrubbed environment, a private directory, resource limits)
and talks over two pipes in the wire format (`wire.py`: a JSON header and raw numbers, checked
against what was asked for, never unpickled), so nothing it sends can run in the driver. Its
stdout and stderr (where device printf lands) are a third pipe whose first 64 KiB the driver
keeps and shows, escaped and labelled as the kernel's output, so a kernel that prints "PASS"
changes nothing.

Three ways a request ends without an answer, each a verdict rather than a driver failure:
a time limit passes (the worker is killed: `timeout`), the worker dies or answers with
something that is not a reply (`crash`), or the worker answers with a sticky CUDA error
(illegal address and the like poison the whole CUDA context, so the worker exits after
answering: `crash` with the error's name). The next request starts a fresh worker. Whenever a
worker ends, every process it started ends with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import signal
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from labrunner import box as boxes
from labrunner.compile.backend import Backend
from labrunner.compile.nvrtc import DEFAULT_ARCH
from labrunner.compile.triton_build import THREADS_PER_WARP, TritonKernel
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.grader_cache import CPU_PARTS_VARIABLE
from labrunner.labs.definition import Launch
from labrunner.phases import phase
from labrunner.run import replies
from labrunner.run.kernel_output import CappedOutput
from labrunner.run.sandbox import Sandbox, limits_for
from labrunner.run.untrusted_text import shown, shown_lines
from labrunner.run.wire import NO_BUFFERS, Channel, Expected, Message, WireClosed, WireError, WireTimeout
from labrunner.truth.verdict import Status, failure_status

COMPILE_TIMEOUT_S = 300.0
# A Triton file's load in the CPU worker rebuilds its kernel package (no top level of the file runs
# there): the interpreter's own set-up and warm-up (0.3 s measured on two cores) and the package's
# `def`s, held to this, not to the 300 s a g++ build may take.
TRITON_LOAD_TIMEOUT_S = 30.0
START_TIMEOUT_S = 60.0  # a fresh Python with numpy, before any CUDA
FAILURE_KINDS = ("crash", "fault", "out-of-bounds", "error", "compile")


class WorkerFailure(Exception):
    """A request the worker could not answer.

    kind: 'timeout' (killed at the time limit), 'crash' (the process died, its CUDA context is
    poisoned, or it sent something that is not a reply), 'fault' (the kernel misbehaved in a way
    the backend caught, e.g. a barrier that can never complete on the CPU; the worker lives on),
    'out-of-bounds' (a fault the CPU backend placed in a guard past shared memory or a buffer),
    'compile' (the backend could not build the module) or 'error' (anything else).
    """

    def __init__(self, kind: str, detail: str, launch: int | None = None):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        # a timeout's: the index of the launch the worker last marked as started (hostile: an index only,
        # checked against the case's own launches by `run_case`), and that launch in words once checked
        self.launch = launch
        self.running: str | None = None

    @property
    def status(self) -> Status:
        """The case status it means: a time limit is `timeout`, every other failure to answer a `crash`."""
        return failure_status(self.kind)


@dataclass
class CaseRun:
    outputs: dict[str, np.ndarray]  # the writable buffers asked for
    bands: dict[str, tuple[np.ndarray, np.ndarray]]  # guard bands of every writable buffer
    inputs_after: dict[str, np.ndarray]  # the inputs the kernels changed, as they left them (no others)


class Worker:
    """The parent's handle on one worker process for one backend ('gpu' or 'cpu')."""

    def __init__(self, backend: str, cpu_arch: str = DEFAULT_ARCH):
        self.backend = Backend(backend)
        self.output = CappedOutput()  # across restarts: one report of what the kernels printed
        self.landlock_abi: int | None = None
        self._sandbox: Sandbox | None = None
        self._channel: Channel | None = None
        self._launch_marks: int | None = None  # the read end of the pipe each launch's index arrives on
        self._loaded: list[Message] = []
        self.cpu_arch = cpu_arch  # the CPU build's architecture: the parts its box is given are made for it
        # Held around each case's run (and each sanitizer replay of one): on a GPU a batch's checks share it,
        # run by run, so that a grader waiting to time waits for kernels, not for a case's explanation.
        self.runs_held: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._sandbox.process.pid if self._sandbox and self._sandbox.process else None

    def _start(self) -> None:
        with phase("box start"):
            self._start_box()
        with phase("context"):  # the device (a CUDA context, or the CPU's runtime) before any module
            self._exchange({"op": "device"}, START_TIMEOUT_S, NO_BUFFERS)
        for load in self._loaded:  # a restarted worker needs the modules again
            with phase(f"load {load['role']}"):
                self._exchange(load, COMPILE_TIMEOUT_S, NO_BUFFERS)

    def _start_box(self) -> None:
        box = Sandbox(boxes.GPU_RUN if self.backend == Backend.GPU else boxes.CPU_RUN)
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        for pipe in (request_write, reply_write):
            widen_pipe(pipe)
        output = self.output.pipe()
        marks_read, marks_write = os.pipe()
        os.set_blocking(marks_read, False)
        os.set_blocking(marks_write, False)  # the worker's side too: a full pipe loses a mark, never blocks
        limits = limits_for(self.backend)
        parts = cpu_parts(self.cpu_arch) if self.backend == Backend.CPU else None  # made here, read-only inside
        command = box.python_command(
            "labrunner.run.worker_main", limits, self.backend, str(request_read), str(reply_write), str(marks_write)
        )
        try:
            process = box.start(
                command,
                stdout=output,
                pass_fds=(request_read, reply_write, marks_write),
                host_code=limits.host_code,
                readable=(str(parts),) if parts else (),
                environment={CPU_PARTS_VARIABLE: str(parts)} if parts else None,
            )
        except OSError:
            for fd in (request_write, reply_read, marks_read):
                os.close(fd)
            box.kill()
            raise
        finally:
            for fd in (request_read, reply_write, output, marks_write):
                os.close(fd)
        cookie = secrets.token_bytes(16)
        self._sandbox = box
        self._launch_marks = marks_read
        self._channel = Channel(request_write, reply_read, cookie, alive=lambda: process.poll() is None)
        hello = self._exchange({"op": "hello", "cookie": cookie.hex()}, START_TIMEOUT_S, NO_BUFFERS)
        landlock = hello.get("landlock")  # said before any student code ran: what the box holds
        self.landlock_abi = landlock if isinstance(landlock, int) and not isinstance(landlock, bool) else None

    def start(self) -> None:
        """Start the box and the device now, before the first request needs them."""
        self._ensure_started()

    def close(self) -> None:
        """Stop the worker and everything it started; `kernel_output()` still answers after this."""
        self._stop()

    def restart(self) -> None:
        """A fresh process for the next request: new CUDA context, new allocations, modules loaded again."""
        self._stop()

    def _stop(self) -> None:
        # No polite exit: a worker that exits first leaves its orphans to init, out of reach.
        if self._sandbox is not None:
            self._sandbox.kill()
            self._sandbox = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._launch_marks is not None:
            os.close(self._launch_marks)
            self._launch_marks = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def kernel_output(self, limit: int = 20) -> list[str]:
        """What the kernels printed (device printf), escaped, for the report to show labelled as such.
        Ends the worker first, so that everything it wrote has been read (a later request starts a
        new one)."""
        self._stop()
        self.output.finish()
        return self.output.lines(limit)

    # -- requests ----------------------------------------------------------------------------
    def _call(self, request: Message, timeout_s: float, expected: Expected) -> Message:
        self._ensure_started()
        return self._exchange(request, timeout_s, expected)

    def _ensure_started(self) -> None:
        process = self._sandbox.process if self._sandbox is not None else None
        if process is None or process.poll() is not None:
            self._stop()
            self._start()

    def _exchange(self, request: Message, timeout_s: float, expected: Expected) -> Message:
        deadline = time.monotonic() + timeout_s
        assert self._channel is not None, "a request goes to a started worker"
        try:
            self._channel.send(request, deadline)
            reply = self._channel.receive(expected, deadline)
        except WireTimeout:
            launch = self._last_launch_mark()
            self._stop()
            raise WorkerFailure(
                "timeout", f"no answer within {timeout_s:g} s; the kernel was stopped", launch
            ) from None
        except WireClosed:
            code = self._wait_exit()
            self._stop()
            raise WorkerFailure("crash", _describe_exit(code)) from None
        except WireError as refused:
            self._stop()
            raise WorkerFailure("crash", f"the worker's reply was refused: {shown(str(refused))}") from None
        reply = self._checked(reply, expected)
        if not reply["ok"]:
            if reply["kind"] == "crash":
                self._stop()  # its CUDA context is poisoned; the next request gets a fresh one
            raise WorkerFailure(reply["kind"], reply["detail"])
        return reply

    def _last_launch_mark(self) -> int | None:
        """The last launch index the worker marked, draining what it wrote (at most MARK_BYTES, read
        without waiting): None where it marked none since the last drain."""
        if self._launch_marks is None:
            return None
        marks = b""
        while len(marks) < MARK_BYTES:
            try:
                chunk = os.read(self._launch_marks, MARK_BYTES - len(marks))
            except BlockingIOError:
                break
            if not chunk:
                break
            marks += chunk
        return marks[-1] if marks else None

    def _checked(self, reply: Any, expected: Expected) -> Message:
        """A reply says whether it succeeded; a failure says how, in words; a success carries its buffers."""
        problem = None
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
            problem = "it does not say whether it succeeded"
        elif not reply["ok"]:
            if reply.get("kind") not in FAILURE_KINDS or not isinstance(reply.get("detail"), str):
                problem = "a failure without a known kind and its words"
            else:
                joiner = "\n" if reply["kind"] == "compile" else " | "
                reply["detail"] = joiner.join(shown_lines(reply["detail"].strip()))
        elif expected.exact and not _carries_arrays(reply):
            problem = "a success without its buffers"
        if problem:
            self._stop()
            raise WorkerFailure("crash", f"the worker's reply was refused: {problem}")
        checked: Message = reply  # a dict that says how it ended, as checked above
        return checked

    def _wait_exit(self, grace_s: float = 2.0) -> int | None:
        box = self._sandbox
        process = box.process if box else None
        if box is None or process is None:
            return None
        try:
            return boxes.command_status(process.wait(grace_s)) if box.boxed else process.wait(grace_s)
        except Exception:
            return None

    def load(
        self,
        role: str,
        composed_source: str,
        filename: str,
        entry_types: dict[str, list[str]],
        options: dict[str, Any] | None = None,
        binary: tuple[str, bytes] | None = None,
        triton: dict[str, TritonKernel] | None = None,
    ) -> None:
        """Build the module in the worker; `options` go to the device's compile (the CPU's: arch,
        sandboxed, timeout_s). `binary`: (architecture, machine code) the gate's compile already built,
        which a GPU worker on that architecture loads instead of compiling the source again. A build
        that fails is a compile error; a worker that dies or fails while loading (code outside any
        kernel that crashes or exits) is a crash: both are verdicts."""
        request: Message = {
            "op": "load",
            "role": role,
            "source": composed_source,
            "filename": filename,
            "entry_types": entry_types,
            "options": options or {},
        }
        if binary and binary[1] and self.backend == Backend.GPU:
            arch, code = binary
            request["binary"] = {"arch": arch, **code_words(code)}
        if triton:  # a Triton file: on a GPU its cubins, on the CPU its Python for the interpreter
            request["triton"] = {
                name: {
                    "arch": binary[0] if binary else DEFAULT_ARCH,
                    "entry": kernel.entry,
                    "threads": THREADS_PER_WARP * kernel.num_warps,
                    "shared": kernel.shared_bytes,
                    "constexprs": kernel.constexprs,
                    **(code_words(kernel.cubin) if self.backend == Backend.GPU else {}),
                }
                for name, kernel in triton.items()
            }
        timeout_s = COMPILE_TIMEOUT_S
        if triton and self.backend == Backend.CPU:
            timeout_s = TRITON_LOAD_TIMEOUT_S
        try:
            self._ensure_started()
            with phase(f"load {role}"):
                self._exchange(request, timeout_s, NO_BUFFERS)
        except WorkerFailure as failure:
            raise load_failure(filename, self.backend, failure, triton=bool(triton)) from None
        self._loaded.append(request)

    def run_case(
        self,
        role: str,
        launches: list[Launch],
        inputs: dict[str, np.ndarray],
        writable: dict[str, int],
        returned: tuple[str, ...],
        timeout_s: float,
        reverse_threads: int | list[int] = False,  # the CPU schedule: one for all launches, or one per launch
        quiet: bool = False,  # a rerun: what its kernels print is dropped (the first run's is shown)
    ) -> CaseRun:
        """One case's launches on poisoned, guarded buffers. A timeout names the launch that was running
        where the worker marked one of this case's launches (`WorkerFailure.running`)."""
        self._last_launch_mark()  # a mark left from an earlier request is not this case's
        try:
            with self.runs_held():
                reply = self._call(
                    {
                        "op": "run",
                        "role": role,
                        "launches": launches,
                        "inputs": inputs,
                        "writable": writable,
                        "returned": list(returned),
                        "reverse_threads": reverse_threads,
                        "quiet": quiet,
                    },
                    timeout_s,
                    replies.case_reply(inputs, writable, returned),
                )
        except WorkerFailure as failure:
            if failure.kind == "timeout" and failure.launch is not None and failure.launch < len(launches):
                failure.running = running_launch(launches, failure.launch)
                failure.detail = f"no answer within {timeout_s:g} s; {failure.running} was running, and was stopped"
            raise
        return CaseRun(
            reply["outputs"], {name: tuple(pair) for name, pair in reply["bands"].items()}, reply["inputs_after"]
        )

    def time(self, request: Message, timeout_s: float) -> Message:
        return self._call({"op": "time", **request}, timeout_s, replies.timing_reply(request))

    def check_peer(self, request: Message, timeout_s: float) -> Message:
        """A PyTorch peer run once on a timing set (`measure.peers`): its output, or why it cannot run."""
        return self._call({"op": "peer", **request}, timeout_s, replies.peer_check_reply(request))

    def trace(self, request: Message, timeout_s: float) -> Message:
        return self._call({"op": "trace", **request}, timeout_s, replies.trace_reply(request))


# A pipe's buffer, as large as Linux lets any process make one (/proc/sys/fs/pipe-max-size, 1 MiB by
# default): a case's buffers (lab 3's longest, 134 MiB each way) would otherwise cross in 64 KiB steps,
# each a wake-up of the reader. What is read is checked against the same limits either way (wire.py).
PIPE_BYTES = 1 << 20

# The most of the launch-mark pipe read at once: a worker writes one byte a launch, and a pipe left at
# its default size holds 64 KiB, so this drains it whatever student code wrote there.
MARK_BYTES = 1 << 16


def running_launch(launches: list[Launch], index: int) -> str:
    """A launch in words as a hang names it: `attn_softmax (launch 2 of 3)`, or the kernel alone where the
    case has one launch."""
    kernel = str(launches[index].kernel)
    return kernel if len(launches) == 1 else f"{kernel} (launch {index + 1} of {len(launches)})"


class CodeWords(TypedDict):
    """Machine code on the wire (`code_words`): its length in bytes, and the bytes padded into words."""

    bytes: int
    words: np.ndarray


def code_words(code: bytes) -> CodeWords:
    """Machine code as the wire carries it: words, not bytes, and how many of the bytes are the code's."""
    padded = code + b"\0" * (-len(code) % 4)
    return {"bytes": len(code), "words": np.frombuffer(padded, dtype=np.uint32)}


def widen_pipe(fd: int) -> None:
    """Give a pipe PIPE_BYTES of buffer where the system allows it; where not, it keeps its own."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def load_failure(filename: str, backend: str, failure: WorkerFailure, triton: bool = False) -> AttnlabError:
    if failure.kind == "compile":
        if failure.detail.startswith(filename):  # the build's own message already names the file
            return AttnlabError(failure.detail, ExitCode.COMPILE_ERROR)
        build = "the CPU build (g++)" if backend == Backend.CPU else "the module build"
        return AttnlabError(f"{filename}: {build} failed: {failure.detail}", ExitCode.COMPILE_ERROR)
    how = "did not finish loading" if failure.kind == "timeout" else "failed while loading"
    # only the CPU backend runs a .cu file's host code (at load: its constructors and static initializers);
    # a Triton file's load runs nothing of the file's, so its failure has no such cause to name
    outside = "code outside any kernel (a constructor, a static initializer)"
    stopped = backend == Backend.CPU and failure.kind in ("crash", "timeout") and not triton
    why = f"; {outside} must not crash, exit or hang" if stopped else ""
    return AttnlabError(f"{filename}: the worker {how} the module ({failure.detail}){why}", ExitCode.MISBEHAVED)


def _carries_arrays(value: object) -> bool:
    if isinstance(value, np.ndarray):
        return True
    if isinstance(value, dict):
        return any(_carries_arrays(v) for v in value.values())
    if isinstance(value, list):
        return any(_carries_arrays(v) for v in value)
    return False


def cpu_parts(arch: str) -> Path | None:
    """The CPU build's shared parts (imported here: the CPU build's modules cost a GPU grade's start)."""
    from labrunner.run.cpu.parts import shared_parts

    return shared_parts(arch)


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker process died ({name})"
    if code is None:
        return "the worker process closed its reply channel"
    return f"the worker process exited unexpectedly (exit status {code})"
