"""One NVRTC compile in a process of its own: the only place a student's text meets the compiler.

`compiler_process.run_compiler` starts this file as a fresh interpreter (`python -I -S`: no
environment variables of Python's, no site-packages, not even attnlab), in a session of its own,
in an empty folder, with an environment that holds nothing of the grader's. It calls NVRTC's C
API through ctypes from the library path it is given, so the process that reads hostile text
holds only the standard library and NVRTC, and starts in a few hundredths of a second. The
protocol is plain data both ways, never pickle:

    argv:   LIBNVRTC_PATH MEMORY_MIB CPU_SECONDS
    stdin:  {"source": str, "name": str, "options": [str, ...]}
    stdout: {"status": "done", "result": "NVRTC_SUCCESS" | "NVRTC_ERROR_...", "log": str, "ptx": str,
             "cubin": hex str (the machine code, for a real architecture; "" otherwise)}
         or {"status": "no-nvrtc" | "out-of-memory" | "failed", "detail": str}

NVRTC's library is loaded first (it holds no student data), then the limits are set, and only
then is the request read: no byte of the source is handled without them, and the memory ceiling
measures the compiler's working room, not the size of its library.
"""

from __future__ import annotations

import ctypes
import json
import resource
import sys

# typing is for the type checker only: importing it would cost this bare interpreter's start a tenth of its time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypedDict

    class Request(TypedDict):
        source: str
        name: str
        options: list[str]


def _limit(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value if hard == resource.RLIM_INFINITY else hard))


def _reply(message: dict[str, str]) -> None:
    sys.stdout.write(json.dumps(message))
    sys.stdout.flush()


def load_nvrtc(path: str) -> ctypes.CDLL:
    nvrtc = ctypes.CDLL(path)
    nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
    return nvrtc


def _text(
    nvrtc: ctypes.CDLL, program: ctypes.c_void_p, size_fn: Callable[..., int], read_fn: Callable[..., int]
) -> str:
    size = ctypes.c_size_t()
    size_fn(program, ctypes.byref(size))
    buffer = ctypes.create_string_buffer(size.value + 1)
    read_fn(program, buffer)
    return buffer.value.decode(errors="replace")


def compile_once(nvrtc: ctypes.CDLL, request: Request) -> dict[str, str]:
    program = ctypes.c_void_p()
    result = nvrtc.nvrtcCreateProgram(
        ctypes.byref(program), request["source"].encode(), request["name"].encode(), 0, None, None
    )
    if result != 0:
        return {"status": "done", "result": nvrtc.nvrtcGetErrorString(result).decode(), "log": "", "ptx": ""}
    options = [option.encode() for option in request["options"]]
    try:
        compiled = nvrtc.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options))
        log = _text(nvrtc, program, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog)
        ptx = _text(nvrtc, program, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX) if compiled == 0 else ""
        cubin = _binary(nvrtc, program) if compiled == 0 else b""
    finally:
        nvrtc.nvrtcDestroyProgram(ctypes.byref(program))
    return {
        "status": "done",
        "result": nvrtc.nvrtcGetErrorString(compiled).decode(),
        "log": log,
        "ptx": ptx,
        "cubin": cubin.hex(),
    }


def _binary(nvrtc: ctypes.CDLL, program: ctypes.c_void_p) -> bytes:
    """The machine code NVRTC built for a real architecture (sm_XX); empty for a virtual one."""
    size = ctypes.c_size_t()
    if nvrtc.nvrtcGetCUBINSize(program, ctypes.byref(size)) != 0 or size.value == 0:
        return b""
    buffer = ctypes.create_string_buffer(size.value)
    if nvrtc.nvrtcGetCUBIN(program, buffer) != 0:
        return b""
    return buffer.raw


def main() -> None:
    library, memory_mib, cpu_seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    try:
        nvrtc = load_nvrtc(library)
    except OSError as exc:  # the shared library is missing or broken
        _reply({"status": "no-nvrtc", "detail": str(exc)})
        return
    _limit(resource.RLIMIT_AS, memory_mib << 20)
    _limit(resource.RLIMIT_CPU, cpu_seconds)
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_NOFILE, 64)
    try:
        _reply(compile_once(nvrtc, json.loads(sys.stdin.buffer.read())))
    except MemoryError:
        # The reply itself may not fit any more; a short fixed one does.
        _reply({"status": "out-of-memory", "detail": "MemoryError"})
    except Exception as exc:  # any failure is reported as data, not as a traceback
        _reply({"status": "failed", "detail": type(exc).__name__})


if __name__ == "__main__":
    main()
