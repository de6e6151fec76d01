"""Triton's compiler over a kernel package: the file's kernels built from data, with none of its top level.

`triton_build.compile_triton` starts this file in a compile box (`labrunner/box.py`) as a fresh
interpreter (`python -I`) once the sealed import (`triton_import_child.py`) has handed back the file's
kernel package. It imports Triton, compiles a kernel of its own through every stage it will use
(LLVM, libdevice and the toolchain's version query are loaded and asked now), sets its limits and
seals itself against new processes (`syscall_filter.install("no-processes")`: no fork, no exec, no
network; threads stay, for LLVM). Only then does it read the package, rebuild the kernels from it
(`triton_package.rebuild`: a namespace of those functions and the values they read, nothing else) and
lower each of the lab's kernels for the GPU architecture asked, with no GPU:

- for the GPU: to PTX, which `ptxas_child.py` assembles in a box of its own into the cubin (ptxas is
  a program, and this process may start none);
- for the CPU backend, which runs the kernels in Triton's interpreter and never a cubin: to LLVM IR
  only. Triton's front end (every error a compile of the file would give), its GPU layouts and the
  shared memory they need are checked as for the GPU; only PTX and its assembly, which the verdict
  does not read, are left out.

A kernel's body is read by Triton's compiler, which evaluates its constant expressions as Python:
that Python runs here, sealed, over the package's names only. The protocol is plain data both ways:

    argv:   MEMORY_MIB CPU_SECONDS ARCH (an integer: 90 for sm_90) TARGET ("gpu" | "cpu")
    stdin:  {"package": {...}, "filename": str, "kernels": {name: [Triton type of each lab parameter]}}
    stdout: {"status": "done", "triton": version, "kernels": {name: {"ptx": str (GPU only), "entry": str,
             "num_warps": int, "num_stages": int, "shared": int, "global_scratch_size": int,
             "profile_scratch_size": int, "num_ctas": int, "cooperative": bool, "pdl": bool,
             "tmem_size": int, "fp_fusion": bool}}, "constexprs": {kernel: {name: value}}}
         or {"status": "error", "detail": str}
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any

# `python -I` leaves the script's folder and PYTHONPATH off the import path: the package's own parent
# folder goes first, so that labrunner is found where it is run from a checkout and not installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

DETAIL_LIMIT = 4000  # characters of an error's detail: Triton's source excerpt and its message
STAGES = {"gpu": "ptx", "cpu": "llir"}  # the last stage each backend needs
_WARM_UP = {
    "format": 1,
    "functions": {
        "warm_up": {
            "source": "def warm_up(out, n, BLOCK: tl.constexpr = 256):\n"
            "    offsets = tl.arange(0, BLOCK)\n"
            "    x = tl.load(out + offsets, mask=offsets < n, other=0.0)\n"
            '    y = tl.dot(tl.reshape(x, (16, 16)), tl.reshape(x, (16, 16)) + 0.0, input_precision="tf32x3")\n'
            "    tl.store(out + offsets, tl.reshape(tl.exp2(y), (BLOCK,)), mask=offsets < n)\n",
            "line": 1,
            "noinline": False,
            "defaults": {"BLOCK": 256},
        }
    },
    "globals": {"tl": {"module": "triton.language"}},
    "launch": {"num_warps": 4, "num_stages": 3, "constexprs": {}, "constants": {}},
}


def _limit(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value if hard == resource.RLIM_INFINITY else hard))


def _reply(channel: int, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    while data:
        data = data[os.write(channel, data) :]


def _for_kernel(value: object, kernel: str, default: int) -> object:
    """A launch setting given once for every kernel, or as {kernel: value}."""
    return value.get(kernel, default) if isinstance(value, dict) else value


def _number(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}")
    return value


def triton_error(exc: BaseException, functions: dict[str, dict[str, Any]], filename: str) -> str:
    """Triton's error on the student's own file and lines (`file:LINE: ...`, counted in the file, not from
    the `def`): the innermost place in the file (a helper's line, where real kernels fail), the
    innermost message (Triton's chained cause), the line with a caret, and each call that led there."""
    from triton.compiler.errors import CompilationError

    from labrunner.compile.triton_import_child import excerpt

    places: list[tuple[str, int, int, str]] = []  # (function, file line, column from 1, the line's text)
    message = ""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, CompilationError) and hasattr(current.node, "lineno"):
            source = (current.src or "").rstrip()
            name = next((n for n, e in functions.items() if e["source"].rstrip() == source), "")
            lines = source.split("\n")
            number = current.node.lineno
            if name:  # a place in the file's own functions (Triton's library functions have places of their own)
                text = lines[number - 1] if 0 < number <= len(lines) else ""
                places.append((name, functions[name]["line"] + number - 1, current.node.col_offset + 1, text))
            if current.error_message:
                message = current.error_message
        elif not isinstance(current, CompilationError):
            message = message or f"{type(current).__name__}: {current}"
        current = current.__cause__ or current.__context__
    if not places:
        return (message or f"{type(exc).__name__}: {exc}")[:DETAIL_LIMIT]
    name, line, column, text = places[-1]
    words = f"{filename}:{line}: in {name}: {message or type(exc).__name__}"
    if text:
        words += excerpt(text, column)
    for caller, at, _, _ in reversed(places[:-1]):
        words += f"\n  called from {filename}({at}), in {caller}"
    return words[:DETAIL_LIMIT]


def lower(
    function: Any, signature: dict[str, str], values: dict[str, Any], options: dict[str, int], arch: int, last: str
) -> tuple[Any, dict[str, Any]]:
    """One kernel through Triton's stages up to `last`, in this process (no cache, no ptxas): the last
    stage's output and the compile's metadata. The same steps as `triton.compile`, which would also
    write a cache and run ptxas."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend

    aligned = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(signature.values()) if t.startswith("*")}
    source = ASTSource(fn=function, signature=signature, constexprs=values, attrs=aligned)
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    parsed = backend.parse_options(dict(options, **source.parse_options()))
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = source.make_ir(
        target, parsed, backend.get_codegen_implementation(parsed), backend.get_module_map(), context
    )
    metadata: dict[str, Any] = {"hash": "attnlab", "target": target, **parsed.__dict__}
    stages: dict[str, Any] = {}
    backend.add_stages(stages, parsed, source.language)
    for ext, stage in stages.items():
        module = stage(module, metadata)
        if ext == last:
            break
    return module, metadata


def build(request: dict[str, Any], arch: int, target: str) -> dict[str, Any]:
    import triton

    from labrunner.compile import triton_package

    filename = request["filename"]
    package = triton_package.loads(json.dumps(request["package"]), list(request["kernels"]))
    namespace = triton_package.rebuild(package, filename, triton.jit)
    launch = package["launch"]
    declared = launch.get("constexprs", {})
    kernels, constexprs = {}, {}
    for name, types in request["kernels"].items():
        function = namespace[name]
        parameters = function.params
        if len(parameters) < len(types) or any(p.is_constexpr for p in parameters[: len(types)]):
            raise triton_package.PackageError(
                f"{filename}: {name} takes the lab's {len(types)} parameters first ({', '.join(types)}), then only "
                f"tl.constexpr ones; it has {len(parameters)}: {', '.join(function.arg_names)}"
            )
        given = declared.get(name, {}) if isinstance(declared, dict) else {}
        values = {}
        for parameter in parameters[len(types) :]:
            if not parameter.is_constexpr:
                raise triton_package.PackageError(
                    f"{filename}: {name}: parameter {parameter.name} past the lab's must be a tl.constexpr"
                )
            if parameter.name in given:
                values[parameter.name] = given[parameter.name]
            elif parameter.has_default:
                values[parameter.name] = parameter.default
            else:
                raise triton_package.PackageError(
                    f"{filename}: {name}: constexpr {parameter.name} has no value: give it in "
                    f"{triton_package.CONSTEXPRS} = {{{name!r}: {{{parameter.name!r}: ...}}}} or as a default"
                )
        unknown = sorted(set(given) - {p.name for p in parameters[len(types) :]})
        if unknown:
            raise triton_package.PackageError(f"{filename}: {name} has no tl.constexpr parameter {', '.join(unknown)}")
        for key, value in values.items():
            if not isinstance(value, (int, bool)):
                raise triton_package.PackageError(
                    f"{filename}: {name}: constexpr {key} must be an integer or a bool, not {type(value).__name__}"
                )
        signature = {p.name: t for p, t in zip(parameters, [*types, *["constexpr"] * len(values)])}
        options = {
            "num_warps": _number(_for_kernel(launch["num_warps"], name, 4), triton_package.NUM_WARPS),
            "num_stages": _number(_for_kernel(launch["num_stages"], name, 3), triton_package.NUM_STAGES),
        }
        try:
            output, facts = lower(function, signature, values, options, arch, STAGES[target])
        except triton_package.PackageError:
            raise
        except Exception as exc:  # a kernel Triton refuses is a compile error of the file's
            raise triton_package.PackageError(triton_error(exc, package["functions"], filename)) from None
        kernels[name] = {
            "entry": str(facts.get("name", name)),
            "num_warps": facts["num_warps"],
            "num_stages": facts["num_stages"],
            "shared": facts.get("shared") or 0,
            "global_scratch_size": facts.get("global_scratch_size") or 0,
            "profile_scratch_size": facts.get("profile_scratch_size") or 0,
            "num_ctas": facts["num_ctas"],
            "cooperative": bool(facts.get("launch_cooperative_grid", False)),
            "pdl": bool(facts.get("launch_pdl", False)),
            "tmem_size": facts.get("tmem_size") or 0,
            "fp_fusion": bool(facts.get("enable_fp_fusion", True)),
        }
        if target == "gpu":
            kernels[name]["ptx"] = str(output)
        constexprs[name] = values
    return {"status": "done", "triton": triton.__version__, "kernels": kernels, "constexprs": constexprs}


def main() -> None:
    memory_mib, cpu_seconds, arch, target = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    # The reply goes out on a copy of stdout; fd 1 itself becomes stderr, so Triton's chatter never mixes with it.
    channel = os.dup(1)
    os.dup2(2, 1)
    request = json.loads(sys.stdin.buffer.read())
    from labrunner import syscall_filter

    # Every stage this compile will run, run once on a kernel of ours: what Triton loads or asks lazily
    # (LLVM's targets, libdevice, the toolchain's version, which runs ptxas) is loaded and asked now.
    build(
        {"package": _WARM_UP, "filename": "<attnlab warm-up>", "kernels": {"warm_up": ["*fp32", "i32"]}}, arch, target
    )
    _limit(resource.RLIMIT_AS, memory_mib << 20)
    # the soft limit's SIGXCPU is what the driver reads as the CPU time spent; the hard one, later, kills
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    _limit(resource.RLIMIT_CORE, 0)
    syscall_filter.install("no-processes")
    from labrunner.compile.triton_package import PackageError

    try:
        reply = build(request, arch, target)
    except PackageError as exc:
        reply = {"status": "error", "detail": str(exc)[:DETAIL_LIMIT]}
    except MemoryError:
        reply = {"status": "error", "detail": "the compile needed more memory than its ceiling"}
    except BaseException as exc:  # what a kernel's constant Python raised past Triton: the file's error
        reply = {"status": "error", "detail": f"{type(exc).__name__}: {exc}"[:DETAIL_LIMIT]}
    _reply(channel, reply)


if __name__ == "__main__":
    main()
