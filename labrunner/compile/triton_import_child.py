"""A Triton file's top level, run sealed: the one process where the file's own Python runs outside a kernel.

`triton_build.compile_triton` starts this file in a compile box (`labrunner/box.py`) as a fresh
interpreter (`python -I`). Before it reads a byte of the file it imports everything a Triton file may
import (`triton_package.PRELOADED`), decorates and packages a kernel of its own (so that nothing Triton's
decorator or `inspect` needs is left to load later), sets its limits (address space, CPU time, no
files written, no core) and seals itself with the CPU worker's seccomp filters (`labrunner/syscall_filter.py`:
no open, no fork, no exec, no threads, no sockets). Only then does it run the file, and what it
hands back is data: the kernel package (`triton_package.extract`), or the file's error.

    argv:   MEMORY_MIB CPU_SECONDS FILE_BYTES (the largest file it may write: 0, `triton_build.ImportBoxLimits`)
    stdin:  {"source": str, "filename": str, "kernels": [the lab's kernel names], "constants": [its
             launch constants]}
    stdout: {"status": "done", "package": {...}} or {"status": "error", "detail": str}

The file's prints and warnings go to stderr, which the driver reads only up to a few KiB. Everything
the reply says came from a process that ran the student's code, which may have replaced this very
function: the driver takes the package as data to check (`triton_package.loads`), and nothing said
here can be a fault of the grader's.
"""

from __future__ import annotations

import importlib
import importlib.abc
import json
import os
import resource
import sys
import traceback
from typing import Any

# `python -I` leaves the script's folder and PYTHONPATH off the import path: the package's own parent
# folder goes first, so that labrunner is found where it is run from a checkout and not installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

DETAIL_LIMIT = 4000  # characters of an error's detail: enough for a traceback's line and its message
SEALED = (
    " (a Triton file's top level runs sealed: it may define kernels and constants, and open no file, "
    "start no process or thread and reach no network)"
)
_WARM_UP = """import triton
import triton.language as tl

SCALE = tl.constexpr(2)


@triton.jit
def helper(x):
    return x * SCALE


@triton.jit
def warm_up(out, n, BLOCK: tl.constexpr = 16):
    offsets = tl.arange(0, BLOCK)
    tl.store(out + offsets, helper(tl.full((BLOCK,), 1.0, tl.float32)), mask=offsets < n)
"""


class _OnlyPreloaded(importlib.abc.MetaPathFinder):
    """After the seal an import that is not already loaded would fail deep in the import system with a
    refused stat; this says why instead."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name in sys.builtin_module_names:
            return  # compiled into the interpreter (gc, time): importing it opens no file
        raise ImportError(
            f"No module named {name!r} here: a Triton file may import only what its kernels use "
            "(triton, triton.language, math, numpy and the standard modules already loaded)"
        )


def _limit(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value if hard == resource.RLIM_INFINITY else hard))


def _reply(channel: int, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    while data:
        data = data[os.write(channel, data) :]


def excerpt(line: str, column: int | None) -> str:
    """A line of the file as a compiler shows it under its error: indented by four, a caret under `column`
    (counted from 1, as in the line as written) where one is known."""
    shown = line.rstrip("\r\n")
    stripped = shown.lstrip()
    text = f"\n    {stripped}"
    if column is not None and 0 < column <= len(shown) + 1:
        text += "\n    " + " " * max(0, column - 1 - (len(shown) - len(stripped))) + "^"
    return text


def detail(exc: BaseException, filename: str) -> str:
    """The error as the student needs it: the exception and the last line of their file it passed through
    (`file:LINE: ...`, which the driver shows as the compiler's `file:LINE: error: ...`)."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SyntaxError) and exc.filename == filename and exc.lineno:
        text = f"{filename}:{exc.lineno}: {type(exc).__name__}: {exc.msg}"
        if exc.text:
            text += excerpt(exc.text, exc.offset)
    else:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
        if frames:
            text = f"{filename}:{frames[-1].lineno}: {text}"
    if isinstance(exc, PermissionError) or (isinstance(exc, RuntimeError) and "new thread" in str(exc)):
        text += SEALED
    return text[:DETAIL_LIMIT]


def main() -> None:
    memory_mib, cpu_seconds, file_bytes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    # The reply goes out on a copy of stdout; fd 1 itself becomes stderr, so the file's prints never mix with it.
    channel = os.dup(1)
    os.dup2(2, 1)
    request = json.loads(sys.stdin.buffer.read())
    from labrunner import syscall_filter
    from labrunner.compile import triton_package

    for name in triton_package.PRELOADED:
        importlib.import_module(name)
    triton_package.package_source(_WARM_UP, "<attnlab warm-up>", ["warm_up"], [])
    try:
        raise ValueError("warm-up")  # tracebacks' own imports, now
    except ValueError as exc:
        detail(exc, "<attnlab warm-up>")
    _limit(resource.RLIMIT_AS, memory_mib << 20)
    # the soft limit's SIGXCPU is what the driver reads as the CPU time spent; the hard one, later, kills
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_FSIZE, file_bytes)
    sys.meta_path.insert(0, _OnlyPreloaded())
    os.environ.clear()
    syscall_filter.install("load")
    syscall_filter.install("run")
    filename = request["filename"]
    try:
        package = triton_package.package_source(request["source"], filename, request["kernels"], request["constants"])
        reply: dict[str, Any] = {"status": "done", "package": package}
    except triton_package.PackageError as exc:
        reply = {"status": "error", "detail": str(exc)[:DETAIL_LIMIT]}
    except BaseException as exc:  # the file's own failure (an exit, a MemoryError too) is its verdict, not ours
        reply = {"status": "error", "detail": detail(exc, filename)}
    try:
        _reply(channel, reply)
    except (MemoryError, ValueError):
        _reply(channel, {"status": "error", "detail": "the file's kernels could not be written out as data"})


if __name__ == "__main__":
    main()
