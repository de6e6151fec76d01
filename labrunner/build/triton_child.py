"""One Triton submission compiled ahead of time, in a process of its own: the only place its Python runs.

`triton_build.compile_triton` starts this file in a compile box (`labrunner/box.py`: the toolchain
read-only, a private tmpfs, no network, nothing of the grader's) as a fresh interpreter
(`python -I`: no PYTHONPATH, no user site, not the working folder; the installation's site-packages,
where Triton lives, stay on the path). It imports the student's file, which runs its top-level code
here and nowhere else, then compiles each of the lab's kernels through Triton's own compiler for the
GPU architecture asked, with no GPU: a cubin and the facts a launch needs. The protocol is plain data
both ways, never pickle:

    argv:   MEMORY_MIB CPU_SECONDS ARCH (an integer: 90 for sm_90) FOLDER (a new folder for the file,
            in the private tmpfs)
    stdin:  {"source": str, "filename": str, "kernels": {name: [Triton type of each lab parameter]},
             "constants": [the lab's launch-constant names]}
    stdout: {"status": "done", "triton": version, "kernels": {name: {"cubin": hex, "entry": str,
             "num_warps": int, "num_stages": int, "shared": int, "global_scratch_size": int,
             "profile_scratch_size": int, "num_ctas": int, "cooperative": bool, "pdl": bool,
             "tmem_size": int}}, "constants": {name: value}, "constexprs": {kernel: {name: value}}}
         or {"status": "error", "stage": "import" | "kernel" | "compile", "kernel": str, "detail": str}
         or {"status": "no-triton" | "out-of-memory" | "failed", "detail": str}

Triton is imported first (it holds no student data), then the limits are set, and only then is the
request read. Everything the reply says came from a process that ran the student's code, which may
have replaced Triton itself: the driver takes it as bytes and numbers to check, never as truth.
The file's own output (print, warnings) goes to stderr, which the driver does not read as a reply.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import traceback
from typing import Any

DETAIL_LIMIT = 4000  # characters of an error's detail: enough for Triton's source excerpt and its message
# The launch data a Triton file declares beside the lab's own constants (README "Triton submissions").
NUM_WARPS, NUM_STAGES, CONSTEXPRS = "attnlab_num_warps", "attnlab_num_stages", "attnlab_constexprs"


def _limit(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value if hard == resource.RLIM_INFINITY else hard))


def _reply(channel: int, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    while data:
        data = data[os.write(channel, data) :]


def _detail(exc: BaseException, filename: str, folder: str) -> str:
    """The error as the student needs it: Triton's own message (it quotes the kernel's line), or the
    exception and the last line of the student's file the traceback passed through."""
    text = f"{type(exc).__name__}: {exc}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(folder + "/")]
    if frames:
        text = f"{filename}:{frames[-1].lineno}: {text}"
    return text[:DETAIL_LIMIT]


def _number(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}")
    return value


def _for_kernel(value: object, kernel: str, default: int) -> object:
    """A launch setting given once for every kernel, or as {kernel: value}."""
    return value.get(kernel, default) if isinstance(value, dict) else value


def compile_kernels(request: dict[str, Any], arch: int, folder: str) -> dict[str, Any]:
    import importlib.util

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    filename = request["filename"]
    os.makedirs(folder)
    path = os.path.join(folder, "submission.py")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(request["source"])
    spec = importlib.util.spec_from_file_location("submission", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - the file's own failure is its verdict, not ours
        return {"status": "error", "stage": "import", "kernel": "", "detail": _detail(exc, filename, folder)}

    constants = {}
    for name in request["constants"]:
        if hasattr(module, name):
            value = getattr(module, name)
            constants[name] = value if isinstance(value, int) and not isinstance(value, bool) else repr(value)[:80]
    declared = getattr(module, CONSTEXPRS, {})
    # one value for every kernel, or {kernel: value}; Triton's own defaults where the file says nothing
    num_warps = getattr(module, NUM_WARPS, 4)
    num_stages = getattr(module, NUM_STAGES, 3)
    kernels, constexprs = {}, {}
    for name, types in request["kernels"].items():
        function = getattr(module, name, None)
        if not isinstance(function, JITFunction):
            found = "nothing" if function is None else f"a {type(function).__name__}"
            detail = f"{filename}: {name} must be a @triton.jit function; the file defines {found} by that name"
            return {"status": "error", "stage": "kernel", "kernel": name, "detail": detail}
        try:
            parameters = function.params
            if len(parameters) < len(types) or any(p.is_constexpr for p in parameters[: len(types)]):
                raise TypeError(
                    f"{name} takes the lab's {len(types)} parameters first ({', '.join(types)}), then only "
                    f"tl.constexpr ones; it has {len(parameters)}: {', '.join(function.arg_names)}"
                )
            given = declared.get(name, {}) if isinstance(declared, dict) else {}
            values = {}
            for parameter in parameters[len(types) :]:
                if not parameter.is_constexpr:
                    raise TypeError(f"{name}: parameter {parameter.name} past the lab's must be a tl.constexpr")
                if parameter.name in given:
                    values[parameter.name] = given[parameter.name]
                elif parameter.has_default:
                    values[parameter.name] = parameter.default
                else:
                    raise TypeError(
                        f"{name}: constexpr {parameter.name} has no value: give it in "
                        f"{CONSTEXPRS} = {{{name!r}: {{{parameter.name!r}: ...}}}} or as a default"
                    )
            for key, value in values.items():
                if not isinstance(value, (int, bool)):
                    raise TypeError(f"{name}: constexpr {key} must be an integer or a bool, not {type(value).__name__}")
            signature = {p.name: t for p, t in zip(parameters, [*types, *["constexpr"] * len(values)])}
            # Every buffer the driver hands a kernel starts on a 16-byte boundary: said, so Triton may vectorize.
            aligned = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(types) if t.startswith("*")}
            source = ASTSource(fn=function, signature=signature, constexprs=values, attrs=aligned)
            options = {
                "num_warps": _number(_for_kernel(num_warps, name, 4), NUM_WARPS),
                "num_stages": _number(_for_kernel(num_stages, name, 3), NUM_STAGES),
            }
            compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)
        except BaseException as exc:  # noqa: BLE001 - a kernel Triton refuses is a compile error of the file's
            return {"status": "error", "stage": "compile", "kernel": name, "detail": _detail(exc, filename, folder)}
        facts = compiled.metadata
        kernels[name] = {
            "cubin": bytes(compiled.asm["cubin"]).hex(),
            "entry": str(facts.name),
            "num_warps": facts.num_warps,
            "num_stages": facts.num_stages,
            "shared": facts.shared,
            "global_scratch_size": facts.global_scratch_size,
            "profile_scratch_size": getattr(facts, "profile_scratch_size", 0),
            "num_ctas": facts.num_ctas,
            "cooperative": bool(facts.launch_cooperative_grid),
            "pdl": bool(getattr(facts, "launch_pdl", False)),
            "tmem_size": getattr(facts, "tmem_size", 0),
        }
        constexprs[name] = values
    return {
        "status": "done",
        "triton": triton.__version__,
        "kernels": kernels,
        "constants": constants,
        "constexprs": constexprs,
    }


def main() -> None:
    memory_mib, cpu_seconds, arch, folder = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    # The reply goes out on a copy of stdout; fd 1 itself becomes stderr, so the file's prints and
    # Triton's chatter never mix with it.
    channel = os.dup(1)
    os.dup2(2, 1)
    try:
        import triton  # noqa: F401 - loaded before any student byte, as NVRTC is in its child
        from triton.compiler import ASTSource  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - no Triton here: said as data
        _reply(channel, {"status": "no-triton", "detail": f"{type(exc).__name__}: {exc}"[:DETAIL_LIMIT]})
        return
    _limit(resource.RLIMIT_AS, memory_mib << 20)
    _limit(resource.RLIMIT_CPU, cpu_seconds)
    _limit(resource.RLIMIT_CORE, 0)
    try:
        reply = compile_kernels(json.loads(sys.stdin.buffer.read()), arch, folder)
    except MemoryError:
        reply = {"status": "out-of-memory", "detail": "MemoryError"}
    except BaseException as exc:  # noqa: BLE001 - any failure is reported as data, not as a traceback
        reply = {"status": "failed", "detail": type(exc).__name__}
    try:
        _reply(channel, reply)
    except MemoryError:
        _reply(channel, {"status": "out-of-memory", "detail": "MemoryError"})


if __name__ == "__main__":
    main()
