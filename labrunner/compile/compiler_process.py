"""The compiler runs apart from the driver, under a clock and a memory ceiling.

A 1 KB file of nested empty macros keeps NVRTC busy for minutes and most of a gigabyte, and
NVRTC runs inside whatever process calls it; so every compile of a student's text happens in a
child (`nvrtc_child.py`) that this module starts, limits, and always ends:

- in a box (`labrunner/box.py`, purpose `COMPILE`) where one can be made: only the toolchain, read
  only, and a private tmpfs; no network, no other process, nothing of the grader's files;

- a fresh interpreter (`python -I -S`: no PYTHONPATH, no site-packages, not the working folder),
  given only the path of NVRTC's library, which it calls through ctypes;
- its own session, so the whole process group is killed at the deadline, leaving nothing behind;
- an environment with nothing of the grader's in it (no ATTNLAB_SEED, no tokens): only what
  finds the CUDA libraries;
- an empty private working folder, removed afterwards;
- RLIMIT_AS of `memory_mib` (address space: NVRTC's heap, its maps and Python's together),
  RLIMIT_CPU a little past the wall clock, no core files, few open files;
- replies are JSON, read as data; a reply that is not the expected shape is the compiler failing.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import functools
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labrunner import box as boxes
from labrunner.exit_codes import AttnlabError, ExitCode, environment_error

CHILD = Path(__file__).with_name("nvrtc_child.py")
DEFAULT_COMPILE_TIMEOUT_S = 20.0
# A Triton file's compile is held to CPU seconds, not wall seconds: Triton's compiler takes 25-36 s of CPU
# for exact-fp32 dots at 128-wide tiles (measured on real kernels ported to the labs), and a loaded
# host stretches the wall clock, not the work. 120 s is over three times the slowest seen; the wall
# clock is then a backstop at three times that.
DEFAULT_TRITON_COMPILE_CPU_S = 120.0
TRITON_WALL_FACTOR = 3.0
# Both shipped solutions compile within 200 MiB of address space (the child's Python, libnvrtc
# mapped, ptxas included) and fail at 150; 1024 MiB is five times that, far more than any real
# kernel file needs, and well under what a grading machine running several compiles side by side
# can spare. The macro bomb meets the clock first (given 120 s it stays under 1024 MiB, and its
# fixture's test shows a 300 MiB ceiling stopping it); the ceiling is for what grows faster.
DEFAULT_COMPILE_MEMORY_MIB = 1024
# Variables that only say where the CUDA libraries are; everything else of the caller's stays out.
_PASSED_VARIABLES = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH")
# NVRTC's own words when its allocator fails: "attention.cu(12): catastrophic error: out of memory".
_OUT_OF_MEMORY = re.compile(r"catastrophic error: out of memory$", re.MULTILINE)


@dataclass(frozen=True)
class CompileLimits:
    timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S
    memory_mib: int = DEFAULT_COMPILE_MEMORY_MIB
    # A Triton file's compile: the CPU seconds each of its steps may take (`--compile-timeout` when given)
    triton_cpu_s: float = DEFAULT_TRITON_COMPILE_CPU_S
    # --unsafe-cpu: the file is the user's own, so a Triton file's compile (which runs its Python) may
    # run unboxed where no box can be made; without it such a compile is refused.
    unboxed_python: bool = False
    # How far the compiler's processes yield the CPU to the grade's others (nice): on the CPU backend the
    # worker builds the file with g++ beside the gate's compile, and that build, not the gate, is what the
    # grade waits for, so on a machine of two cores the gate gives way (`pipeline/prepare.py`).
    niceness: int = 0


@functools.lru_cache(maxsize=1)
def nvrtc_library() -> str:
    """Where NVRTC's shared library is, found the way cuda-bindings finds it (the wheel first)."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        found = load_nvidia_dynamic_lib("nvrtc").abs_path
    except Exception as exc:  # the package or its library is missing or broken
        raise environment_error(
            f"NVRTC is not available ({exc}): install attnlab with its dependencies "
            "(pip install -e .) so cuda-bindings and nvidia-cuda-nvrtc are present"
        ) from None
    return found or ctypes.util.find_library("nvrtc") or "libnvrtc.so"


def child_environment(workdir: str) -> dict[str, str]:
    env = {name: os.environ[name] for name in _PASSED_VARIABLES if name in os.environ}
    env.update(HOME=workdir, TMPDIR=workdir, LC_ALL="C.UTF-8")
    return env


# The child's reply: JSON, checked for the shape it must have (`_parse`) before anything reads it.
Reply = dict[str, Any]


def run_compiler(request: dict[str, object], label: str, limits: CompileLimits) -> Reply:
    """One compile in a limited child: its JSON reply, or a compile error saying which limit it hit."""
    cpu_seconds = int(limits.timeout_s) + 2  # the wall clock decides; this only backs it up
    library = nvrtc_library()
    # NVRTC's library and its builtins sit beside each other, wherever the wheel put them
    out, status = run_limited_child(
        lambda workdir: [sys.executable, "-I", "-S", str(CHILD), library, str(limits.memory_mib), str(cpu_seconds)],
        json.dumps(request).encode(),
        label,
        limits,
        boxes.COMPILE,
        readable=(os.path.dirname(os.path.realpath(library)), str(CHILD.parent)),
    )
    reply = _parse(out)
    if reply is not None and reply.get("status") == "no-nvrtc":
        raise environment_error(
            f"NVRTC is not available ({reply.get('detail')}): install attnlab with its "
            "dependencies (pip install -e .) so cuda-bindings and nvidia-cuda-nvrtc are present"
        )
    out_of_memory = (reply is None and status in (-signal.SIGABRT, -signal.SIGSEGV, -signal.SIGKILL)) or (
        reply is not None
        and (
            reply["status"] == "out-of-memory"
            or reply.get("result") == "NVRTC_ERROR_OUT_OF_MEMORY"
            or _OUT_OF_MEMORY.search(reply.get("log", "")) is not None
        )
    )
    if out_of_memory:
        # Out of address space, NVRTC's allocator fails: NVRTC says so in its log or its result, the
        # child aborts, or Python raises MemoryError. Each reads here as the ceiling reached.
        raise AttnlabError(
            f"{label}: error: the compiler needed more than {limits.memory_mib} MiB", ExitCode.COMPILE_ERROR
        )
    if reply is None and status == -signal.SIGXCPU:
        raise AttnlabError(
            f"{label}: error: the compiler did not finish in {limits.timeout_s:g} s (--compile-timeout)",
            ExitCode.COMPILE_ERROR,
        )
    if reply is None or reply["status"] != "done":
        raise AttnlabError(
            f"{label}: error: the compiler stopped without an answer (exit status "
            f"{status}); the file could not be compiled",
            ExitCode.COMPILE_ERROR,
        )
    return reply


# What a compiler child may write, past which it is ended: its reply (stdout) up to the largest a legal
# one can be, and a few KiB of diagnostics (stderr), since a child that read a student's file writes
# what that file makes it write, and a grader that kept it all would hold whatever a flood sends.
REPLY_LIMIT_BYTES = 96 << 20  # NVRTC's PTX, or a Triton file's cubins in hexadecimal
DIAGNOSTICS_LIMIT_BYTES = 64 << 10


class OutputFlood(Exception):
    """A child wrote past its cap: `stream` is "stdout" or "stderr", `limit` the cap in bytes."""

    def __init__(self, stream: str, limit: int):
        super().__init__(f"{stream} past {limit} bytes")
        self.stream, self.limit = stream, limit


def size_words(count: int) -> str:
    return f"{count >> 20} MiB" if count >= 1 << 20 else f"{count >> 10} KiB"


def run_limited_child(
    command_in: Callable[[str], list[str]],
    request: bytes,
    label: str,
    limits: CompileLimits,
    purpose: boxes.Purpose,
    readable: tuple[str, ...] = (),
    environment: Callable[[str], dict[str, str]] = lambda workdir: child_environment(workdir),
    wall_s: float | None = None,
    reply_limit: int = REPLY_LIMIT_BYTES,
    who: str = "the compiler",
) -> tuple[bytes, int | None]:
    """Run a compiler child on `request` (its stdin) in a box for `purpose` where one can be made, in an
    empty private folder otherwise, its session killed at the wall clock (`wall_s`, else the compile
    timeout): its stdout and exit status. `command_in(workdir)` is the command line, given the private
    folder it runs in. Its stdout is read up to `reply_limit` bytes and its stderr up to
    `DIAGNOSTICS_LIMIT_BYTES` (and then dropped); past either it is ended and the verdict names the flood."""
    boxed = boxes.boxed()
    deadline = limits.timeout_s if wall_s is None else wall_s
    with contextlib.ExitStack() as stack:
        workdir = (
            boxes.PRIVATE if boxed else stack.enter_context(tempfile.TemporaryDirectory(prefix="attnlab-compile-"))
        )
        command = command_in(workdir)
        if boxed:
            command = boxes.wrap(purpose, command, environment(workdir), readable=readable)
        command = yielding(command, limits.niceness)
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd="/" if boxed else workdir,
                env=environment(workdir),
                start_new_session=True,
            )
        except OSError as exc:
            raise environment_error(f"the compiler's process could not start ({exc.strerror})") from None
        try:
            out = _capped_exchange(process, request, deadline, reply_limit)
        except subprocess.TimeoutExpired:
            raise AttnlabError(
                f"{label}: error: {who} did not finish in {deadline:g} s (--compile-timeout)",
                ExitCode.COMPILE_ERROR,
            ) from None
        except OutputFlood as flood:
            raise AttnlabError(
                f"{label}: error: {who} wrote more than {size_words(flood.limit)} to its {flood.stream} (a flood) "
                "and was stopped; nothing it wrote was kept",
                ExitCode.COMPILE_ERROR,
            ) from None
        finally:
            _end_group(process)
            process.wait()
    return out, boxes.command_status(process.returncode) if boxed else process.returncode


def yielding(command: list[str], niceness: int) -> list[str]:
    """`command` run at `niceness` (the box and everything in it inherit it); as it is where there is no `nice`."""
    tool = shutil.which("nice") if niceness else None
    return [tool, "-n", str(niceness), *command] if tool else command


def _capped_exchange(process: subprocess.Popen[bytes], request: bytes, deadline_s: float, reply_limit: int) -> bytes:
    """Write `request` to the child's stdin and read its stdout (kept, up to `reply_limit`) and stderr
    (counted, the first few KiB kept for nothing but the count) until both close or the deadline
    passes; OutputFlood past a cap, TimeoutExpired past the deadline."""
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None

    def feed() -> None:
        try:
            process.stdin.write(request)  # type: ignore[union-attr]
            process.stdin.close()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError, ValueError):
            pass  # the child stopped reading: its reply (or its absence) says why

    writer = threading.Thread(target=feed, name="attnlab-compile-feed", daemon=True)
    writer.start()
    limits = {
        process.stdout.fileno(): ("stdout", reply_limit),
        process.stderr.fileno(): ("stderr", DIAGNOSTICS_LIMIT_BYTES),
    }
    counts = dict.fromkeys(limits, 0)
    kept: list[bytes] = []
    end = time.monotonic() + deadline_s
    with selectors.DefaultSelector() as selector:
        for fd in limits:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = end - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(process.args, deadline_s)
            for key, _ in selector.select(timeout=min(left, 1.0)):
                fd = key.fd
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    selector.unregister(fd)
                    continue
                counts[fd] += len(chunk)
                stream, limit = limits[fd]
                if counts[fd] > limit:
                    raise OutputFlood(stream, limit)
                if stream == "stdout":
                    kept.append(chunk)
    left = max(0.1, end - time.monotonic())
    try:
        process.wait(timeout=left)
    except subprocess.TimeoutExpired:
        raise subprocess.TimeoutExpired(process.args, deadline_s) from None
    return b"".join(kept)


def _end_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the child's whole session; a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _parse(out: bytes) -> Reply | None:
    try:
        reply = json.loads(out)
    except (ValueError, UnicodeDecodeError, RecursionError):  # nested past the parser's depth: no reply either
        return None
    if not isinstance(reply, dict) or not isinstance(reply.get("status"), str):
        return None
    if reply["status"] == "done" and not all(isinstance(reply.get(key), str) for key in ("result", "log", "ptx")):
        return None
    return reply
