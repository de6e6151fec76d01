"""One NVRTC compile in a process of its own: the only place a student's text meets the compiler.

`compiler_process.run_compiler` starts this file as a fresh interpreter (`python -I`), in a
session of its own, in an empty folder, with an environment that holds nothing of the grader's.
It imports nothing of attnlab on purpose: the process that reads hostile text has only the
standard library and NVRTC in it. The protocol is plain data both ways, never pickle:

    argv:   MEMORY_MIB CPU_SECONDS
    stdin:  {"source": str, "name": str, "options": [str, ...]}
    stdout: {"status": "done", "result": "NVRTC_SUCCESS" | "NVRTC_ERROR_...", "log": str, "ptx": str}
         or {"status": "no-nvrtc" | "out-of-memory", "detail": str}

NVRTC's library is loaded first (it holds no student data), then the limits are set, and only
then is the request read: no byte of the source is handled without them, and the memory ceiling
measures the compiler's working room, not the size of its library.
"""

import json
import resource
import sys


def _limit(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value if hard == resource.RLIM_INFINITY else hard))


def _reply(message: dict) -> None:
    sys.stdout.write(json.dumps(message))
    sys.stdout.flush()


def _read(size_fn, read_fn, program) -> str:
    _, size = size_fn(program)
    buffer = b" " * size
    read_fn(program, buffer)
    return buffer.rstrip(b"\x00 ").decode(errors="replace")


def load_nvrtc():
    from cuda.bindings import nvrtc

    nvrtc.nvrtcVersion()  # maps the shared library now, before the ceiling is set
    return nvrtc


def compile_once(nvrtc, request: dict) -> dict:
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    result, program = nvrtc.nvrtcCreateProgram(request["source"].encode(), request["name"].encode(), 0, [], [])
    if result != ok:
        return {"status": "done", "result": result.name, "log": "", "ptx": ""}
    options = [option.encode() for option in request["options"]]
    try:
        (compiled,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        log = _read(nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, program)
        ptx = _read(nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, program) if compiled == ok else ""
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return {"status": "done", "result": compiled.name, "log": log, "ptx": ptx}


def main() -> None:
    memory_mib, cpu_seconds = int(sys.argv[1]), int(sys.argv[2])
    try:
        nvrtc = load_nvrtc()
    except Exception as exc:  # the package or its shared library is missing or broken
        _reply({"status": "no-nvrtc", "detail": f"{type(exc).__name__}: {exc}"})
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
    except Exception as exc:  # noqa: BLE001 - any failure is reported as data, not as a traceback
        _reply({"status": "failed", "detail": type(exc).__name__})


if __name__ == "__main__":
    main()
