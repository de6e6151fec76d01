"""Triton submissions: a `.py` file's kernels packaged in a sealed box, built from that package, checked.

A Triton submission defines each of the lab's kernels as a `@triton.jit` function of the lab's name,
taking the lab's parameters in the lab's order (buffers as pointers, sizes as integers) and then only
`tl.constexpr` ones. Its launch is module-level data: the lab's own launch constants (lab 2's
`attnlab_rows_per_block` and `attnlab_heads_per_block` shape the grid as they do for a `.cu` file),
`attnlab_num_warps` and `attnlab_num_stages`, and `attnlab_constexprs = {kernel: {name: value}}`.
A block's threads are its warps' (32 * num_warps) and its shared memory is what Triton's compiler
says it uses, so neither is the file's to state (the lab's `*_threads` and `*_smem_bytes` constants
are a CUDA file's).

Three processes, each in a compile box, none of them trusted (`compile_triton`):

1. `triton_import_child.py` runs the file's top level, sealed (seccomp: no files, processes, threads
   or network; memory, CPU and output bounded), and hands back the *kernel package*
   (`triton_package`): each lab kernel's source and that of every `@triton.jit` function it calls,
   and the plain values they read. No other process ever runs the file's top level.
2. `triton_child.py` rebuilds the kernels from the package alone and lowers them with Triton's
   compiler, sealed against new processes: to PTX for the GPU, to LLVM IR for the CPU backend (whose
   interpreter runs the same package and no cubin).
3. `ptxas_child.py` (the GPU only) assembles the PTX into cubins.

What comes back is checked here as hostile data (`_checked`): the kernels the lab names and no other,
each cubin an ELF image of bounded size, every number an integer in its range, and nothing the grader
does not run (global scratch memory, clusters of CTAs, cooperative or programmatic launches, tensor
memory). The launch constants the package states are then checked as a `.cu` file's are
(`launch_constants.checked_constants`). Steps 2 and 3, the slow ones, are cached by the package's
content in the grader's cache (`grader_cache`): the same kernels are compiled once.

Whatever a box says that is not a compile result is the file's compile error, never a fault of the
grader's: the driver itself checks that Triton is installed (`triton_installed`) before it starts any.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labrunner import box as boxes
from labrunner import syscall_filter
from labrunner.compile import triton_package
from labrunner.compile.backend import Backend
from labrunner.compile.compiler_process import TRITON_WALL_FACTOR, CompileLimits, child_environment, run_limited_child
from labrunner.compile.launch_constants import checked_constants
from labrunner.compile.source import read_source
from labrunner.exit_codes import AttnlabError, ExitCode, environment_error
from labrunner.grader_cache import grader_cache_dir
from labrunner.labs.definition import MAX_SHARED_BYTES, Lab

CHILD = Path(__file__).with_name("triton_child.py")
IMPORT_CHILD = Path(__file__).with_name("triton_import_child.py")
PTXAS_CHILD = Path(__file__).with_name("ptxas_child.py")
SUFFIX = ".py"
# Triton imports LLVM and runs ptxas: a few hundred MiB at most for the shipped kernels, a ceiling
# well above that (the child's whole address space, as for NVRTC's).
DEFAULT_TRITON_MEMORY_MIB = 4096
CUBIN_LIMIT_BYTES = 32 << 20  # far above a kernel's cubin (the shipped ones are under 200 KB)
THREADS_PER_WARP = 32
WARP_COUNTS = (1, 2, 4, 8, 16, 32)  # Triton's num_warps: a power of two, a block of at most 1024 threads
MAX_STAGES = 16
ENTRY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")
# A lab parameter's C type (`Lab.entry_point_types`) as Triton's signature writes it.
TRITON_TYPES = {"float*": "*fp32", "int*": "*i32", "int": "i32"}
# Launch facts the grader does not run yet: each must come back as this value.
UNSUPPORTED = {
    "global_scratch_size": (0, "global scratch memory"),
    "profile_scratch_size": (0, "profile scratch memory"),
    "num_ctas": (1, "clusters of CTAs (num_ctas)"),
    "cooperative": (False, "a cooperative grid"),
    "pdl": (False, "programmatic dependent launch"),
    "tmem_size": (0, "tensor memory"),
}
NUM_WARPS = "attnlab_num_warps"
DESCRIPTOR = "make_tensor_descriptor"  # a device-side tensor descriptor: its TMA descriptor lives in global scratch
# ptxas is a program its box's child starts, so its limits are set first by this small program, which
# then becomes that child: an address space, CPU seconds and no core, inherited by ptxas through the
# exec and the fork (a limit is never raised past one the box already has).
_LIMITED_EXEC = (
    "import os, resource, sys\n"
    "for which, value in ((resource.RLIMIT_AS, int(sys.argv[1]) << 20), (resource.RLIMIT_CPU, int(sys.argv[2])),"
    " (resource.RLIMIT_CORE, 0)):\n"
    "    hard = resource.getrlimit(which)[1]\n"
    "    value = value if hard == resource.RLIM_INFINITY else min(value, hard)\n"
    "    resource.setrlimit(which, (value, value))\n"
    "os.execv(sys.argv[3], sys.argv[3:])\n"
)


@dataclass(frozen=True)
class TritonKernel:
    name: str  # the lab's kernel name
    entry: str  # the cubin's function name
    cubin: bytes
    num_warps: int
    num_stages: int
    shared_bytes: int
    constexprs: dict[str, int | bool]


@dataclass(frozen=True)
class TritonModule:
    label: str
    source: str  # the file's Python, as read
    package: str  # its kernel package (`triton_package`), as JSON: what every backend builds from
    triton: str  # Triton's version, as the box's compiler said it
    arch: str
    kernels: dict[str, TritonKernel]
    constants: dict[str, int]  # the lab's launch constants, checked


@dataclass(frozen=True)
class TritonBounds:
    """What each Triton box's process sets on itself before it reads a byte of the file or its package
    (`attnlab doctor` shows them): its address space, its CPU seconds (the soft limit, whose SIGXCPU is
    read as the compile's time; the hard one, 5 s later, kills), and for the sealed import the largest
    file it may write. Each box runs one process that can start no other (the import and the build are
    sealed by seccomp; ptxas is one program at a time under the same limits), so these bound the box."""

    memory_mib: int
    cpu_s: int
    import_file_bytes: int = 0  # the sealed import writes no file (it can open none either)


def triton_bounds(limits: CompileLimits = CompileLimits()) -> TritonBounds:
    return TritonBounds(memory_mib=max(limits.memory_mib, DEFAULT_TRITON_MEMORY_MIB), cpu_s=int(limits.triton_cpu_s))


def is_triton_file(path: Path) -> bool:
    return path.suffix == SUFFIX


def compile_triton(
    lab: Lab, path: Path, label: str, arch: str, limits: CompileLimits = CompileLimits(), target: Backend = Backend.GPU
) -> TritonModule:
    """The file's kernels, packaged (sealed), built for `target` ("gpu": cubins; "cpu": Triton's front end
    and lowering checked, no cubin) and checked."""
    if not lab.triton_blocks:
        raise AttnlabError(
            f"{label}: error: {lab.name} takes a .cu file; Triton files are graded in labs whose "
            "starter has a Triton form (`attnlab starter LAB --lang triton`)",
            ExitCode.USAGE,
        )
    source = read_source(path, label)
    if not source.strip():
        raise AttnlabError(
            f"{label}: error: file is empty; `attnlab starter {lab.name} --lang triton` prints the file to start from",
            ExitCode.COMPILE_ERROR,
        )
    version = triton_installed()
    refuse_unboxed_python(label, limits)
    unsealable = syscall_filter.availability()
    if unsealable is not None:  # the grader's own lack, said as such before any box starts
        raise environment_error(
            f"{label}: a Triton file's top level runs sealed by seccomp, which is unavailable here: {unsealable}"
        )
    number = _arch_number(arch, label)
    bounds = triton_bounds(limits)
    types_ = {name: [TRITON_TYPES[t] for t in types] for name, types in lab.entry_point_types().items()}
    package = import_kernels(lab, source, label, limits, bounds)
    package_text = triton_package.dumps(package)
    key = _cache_key(package_text, types_, number, target, version)
    reply = _cached(key)
    if reply is None:
        reply = _build(package, types_, label, limits, bounds, number, target)
        if target == Backend.GPU:
            cubins = _assemble(reply, label, limits, bounds, number)
            for name, cubin in cubins.items():
                reply["kernels"][name]["cubin"] = cubin
        _checked(lab, reply, label, arch, source, package_text, package["launch"].get("constants"), target)
        _keep(key, reply)
    return _checked(lab, reply, label, arch, source, package_text, package["launch"].get("constants"), target)


def triton_installed() -> str:
    """Triton's version as installed beside attnlab, found by the driver itself (a box's word on it is not
    taken): else an environment error (exit 6) before any box starts."""
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        raise environment_error(
            "Triton is not installed: install attnlab's Triton extra (pip install 'attnlab[triton]') to grade .py files"
        ) from None


def _wall(limits: CompileLimits) -> float:
    return limits.triton_cpu_s * TRITON_WALL_FACTOR + 10


def _box_reply(out: bytes, status: int | None, label: str, memory_mib: int, who: str) -> dict[str, Any]:
    """A box's reply as a table with a status, or the compile error its death says."""
    try:
        reply = json.loads(out)
    except (ValueError, UnicodeDecodeError, RecursionError):  # nested past the parser's depth: no reply either
        reply = None
    if isinstance(reply, dict) and isinstance(reply.get("status"), str):
        if reply["status"] == "error":
            raise compile_error(label, _text(reply.get("detail")))
        if reply["status"] == "done":
            return reply
    if status == -signal.SIGXCPU:
        raise AttnlabError(f"{label}: error: {who} ran out of CPU time (--compile-timeout)", ExitCode.COMPILE_ERROR)
    if status in (-signal.SIGABRT, -signal.SIGSEGV, -signal.SIGKILL):
        raise AttnlabError(
            f"{label}: error: {who} stopped (exit status {status}); it may have needed more than {memory_mib} MiB",
            ExitCode.COMPILE_ERROR,
        )
    raise AttnlabError(
        f"{label}: error: {who} stopped without an answer (exit status {status})", ExitCode.COMPILE_ERROR
    )


def compile_error(label: str, detail: str) -> AttnlabError:
    """A box's words about the file as its compile error, in the form NVRTC's and the CPU build's errors
    take (and CI annotations read): `label(LINE): error: ...` where they name a line of the file
    (`label:LINE[:COL]: ...`, Python's way; the column is the caret's under the quoted line), else
    `label: error: ...`."""
    located = re.match(rf"{re.escape(label)}:(\d+)(?::\d+)?: ", detail)
    if located is not None:
        return AttnlabError(f"{label}({located.group(1)}): error: {detail[located.end() :]}", ExitCode.COMPILE_ERROR)
    if detail.startswith(f"{label}: "):
        detail = detail[len(label) + 2 :]
    return AttnlabError(f"{label}: error: {detail}", ExitCode.COMPILE_ERROR)


def import_kernels(lab: Lab, source: str, label: str, limits: CompileLimits, bounds: TritonBounds) -> dict[str, Any]:
    """Step 1: the file's top level, sealed, and the kernel package it leaves (checked as data)."""
    request = {
        "source": source,
        "filename": label,
        "kernels": list(lab.entry_point_types()),
        "constants": sorted(lab.launch_defaults),
    }
    out, status = run_limited_child(
        lambda workdir: [
            sys.executable,
            "-I",
            str(IMPORT_CHILD),
            str(bounds.memory_mib),
            str(bounds.cpu_s),
            str(bounds.import_file_bytes),
        ],
        json.dumps(request).encode(),
        label,
        limits,
        boxes.TRITON_COMPILE,
        environment=triton_environment,
        wall_s=_wall(limits),
        reply_limit=2 * triton_package.PACKAGE_LIMIT_BYTES,
        who="the file's top level",
    )
    reply = _box_reply(out, status, label, bounds.memory_mib, "the file's top level")
    try:
        return triton_package.loads(json.dumps(reply.get("package")), list(lab.entry_point_types()))
    except triton_package.PackageError as exc:
        raise compile_error(label, str(exc)) from None


def _build(
    package: dict[str, Any],
    types_: dict[str, list[str]],
    label: str,
    limits: CompileLimits,
    bounds: TritonBounds,
    arch: int,
    target: Backend,
) -> dict[str, Any]:
    """Step 2: Triton's compiler over the package, sealed against new processes."""
    request = {"package": package, "filename": label, "kernels": types_}
    out, status = run_limited_child(
        lambda workdir: [
            sys.executable,
            "-I",
            str(CHILD),
            str(bounds.memory_mib),
            str(bounds.cpu_s),
            str(arch),
            target,
        ],
        json.dumps(request).encode(),
        label,
        limits,
        boxes.TRITON_COMPILE,
        environment=triton_environment,
        wall_s=_wall(limits),
        who="the Triton compiler",
    )
    return _box_reply(out, status, label, bounds.memory_mib, "the Triton compiler")


def _assemble(
    reply: dict[str, Any], label: str, limits: CompileLimits, bounds: TritonBounds, arch: int
) -> dict[str, str]:
    """Step 3 (the GPU): ptxas over each kernel's PTX, in a box of its own, under the Triton boxes' address
    space and CPU seconds (set by `_LIMITED_EXEC`, so that ptxas, a program its child starts, inherits them)."""
    kernels = reply.get("kernels")
    if not isinstance(kernels, dict):
        raise AttnlabError(f"{label}: error: the Triton compiler's reply holds no kernels", ExitCode.COMPILE_ERROR)
    request = {}
    for name, facts in kernels.items():
        ptx = facts.get("ptx") if isinstance(facts, dict) else None
        if not isinstance(ptx, str) or len(ptx) > CUBIN_LIMIT_BYTES:
            raise AttnlabError(
                f"{label}: error: {name}: no PTX came back from the Triton compiler", ExitCode.COMPILE_ERROR
            )
        request[str(name)] = {"ptx": ptx, "fp_fusion": facts.get("fp_fusion") is not False}
    ptxas = ptxas_path()
    out, status = run_limited_child(
        lambda workdir: [
            sys.executable,
            "-I",
            "-S",
            "-c",
            _LIMITED_EXEC,
            str(bounds.memory_mib),
            str(bounds.cpu_s),
            sys.executable,
            "-I",
            "-S",
            str(PTXAS_CHILD),
            ptxas,
            f"sm_{arch}a" if arch >= 90 else f"sm_{arch}",
        ],
        json.dumps(request).encode(),
        label,
        limits,
        boxes.COMPILE,
        readable=(str(Path(ptxas).parent),),
        wall_s=_wall(limits),
        who="ptxas",
    )
    said = _box_reply(out, status, label, bounds.memory_mib, "ptxas")
    cubins = said.get("cubins")
    if not isinstance(cubins, dict) or not all(isinstance(v, str) for v in cubins.values()):
        raise AttnlabError(f"{label}: error: ptxas gave back no cubins", ExitCode.COMPILE_ERROR)
    return cubins


def ptxas_path() -> str:
    """The ptxas Triton ships (and its own compile runs), found without importing Triton."""
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        raise environment_error(
            "Triton is not installed: install attnlab's Triton extra (pip install 'attnlab[triton]')"
        )
    found = Path(next(iter(spec.submodule_search_locations))) / "backends" / "nvidia" / "bin" / "ptxas"
    if not found.is_file():
        raise environment_error(f"Triton's ptxas is missing ({found}): reinstall attnlab's Triton extra")
    return str(found)


def _cache_key(package_text: str, types_: dict[str, list[str]], arch: int, target: Backend, version: str) -> str:
    """A digest of everything a build is made from: the package, the lab's types, the target, Triton's
    version and the three programs that make it."""
    digest = hashlib.sha256()
    for part in (package_text, json.dumps(types_, sort_keys=True), str(arch), target, version):
        digest.update(part.encode() + b"\0")
    for program in (CHILD, PTXAS_CHILD, Path(triton_package.__file__)):
        digest.update(program.read_bytes())
    return digest.hexdigest()


def _cached(key: str) -> dict[str, Any] | None:
    """A build kept by an earlier grade, checked again as any reply is; None where there is none."""
    folder = grader_cache_dir("triton")
    if folder is None:
        return None
    try:
        reply = json.loads((folder / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return reply if isinstance(reply, dict) else None


def _keep(key: str, reply: dict[str, Any]) -> None:
    """A checked build, kept under its key (written aside and renamed, so no reader sees half of it)."""
    folder = grader_cache_dir("triton")
    if folder is None:
        return
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, suffix=".part")
        with os.fdopen(handle, "w") as out:
            json.dump(reply, out)
        os.replace(temporary, folder / f"{key}.json")
    except OSError:
        pass  # a cache that cannot be written only costs the next grade a compile


def refuse_unboxed_python(label: str, limits: CompileLimits) -> None:
    """A Triton file is a Python program, and its compile runs it: where no box can be made, that would
    be the student's code on the grader's machine, as the grader. Refused (exit 6), unless --unsafe-cpu
    says the file is the user's own. A process already in a box starts its children in that box."""
    if os.environ.get(boxes.INSIDE_VARIABLE) or limits.unboxed_python or boxes.boxed():
        return
    raise environment_error(
        f"{label}: a Triton file's compile runs its Python, and no box can be made here: {boxes.availability()}. "
        "It is not compiled unboxed; install bubblewrap, or pass --unsafe-cpu for a file you wrote yourself"
    )


def triton_environment(workdir: str) -> dict[str, str]:
    """A Triton box's: the NVRTC child's, with Triton's caches in the private folder."""
    return {
        **child_environment(workdir),
        "TRITON_CACHE_DIR": os.path.join(workdir, "triton-cache"),
        "TRITON_HOME": workdir,
    }


def _arch_number(arch: str, label: str) -> int:
    match = re.fullmatch(r"sm_(\d{2,3})a?", arch)
    if match is None:
        raise AttnlabError(
            f"{label}: error: --arch {arch}: Triton compiles for a real GPU (sm_90, say)", ExitCode.USAGE
        )
    return int(match.group(1))


def _text(value: object) -> str:
    """A string from the box, cut short; every report escapes it when it shows it (`untrusted_text`)."""
    return (value if isinstance(value, str) else repr(value))[:4000]


def _checked(
    lab: Lab,
    reply: dict[str, Any],
    label: str,
    arch: str,
    source: str,
    package: str = "",
    constants: object = None,
    target: Backend = Backend.GPU,
) -> TritonModule:
    def refuse(problem: str) -> AttnlabError:
        return AttnlabError(f"{label}: error: {problem}", ExitCode.COMPILE_ERROR)

    kernels = reply.get("kernels")
    expected = list(lab.entry_point_types())
    if not isinstance(kernels, dict) or sorted(kernels) != sorted(expected):
        raise refuse(f"the compiler's reply does not hold exactly the lab's kernels ({', '.join(expected)})")
    constexprs_said = reply.get("constexprs")
    built: dict[str, TritonKernel] = {}
    for name in expected:
        facts = kernels[name]
        if not isinstance(facts, dict):
            raise refuse(f"the compiler's reply for {name} is not a table")
        cubin = b""  # the CPU backend's interpreter runs the package, never a cubin
        if target == Backend.GPU:
            cubin_hex = facts.get("cubin")
            if not isinstance(cubin_hex, str) or len(cubin_hex) > 2 * CUBIN_LIMIT_BYTES:
                raise refuse(f"{name}: no cubin of at most {CUBIN_LIMIT_BYTES >> 20} MiB came back")
            try:
                cubin = bytes.fromhex(cubin_hex)
            except ValueError:
                raise refuse(f"{name}: the cubin that came back is not hexadecimal") from None
            if not cubin.startswith(b"\x7fELF"):
                raise refuse(f"{name}: what came back as its cubin is not an ELF image")
        entry = facts.get("entry")
        if not isinstance(entry, str) or ENTRY_NAME.fullmatch(entry) is None:
            raise refuse(f"{name}: the cubin's function name is not an identifier")
        warps = _integer(facts, "num_warps", name, refuse)
        if warps not in WARP_COUNTS:
            raise refuse(f"{name}: num_warps = {warps} must be one of {', '.join(map(str, WARP_COUNTS))}")
        stages = _integer(facts, "num_stages", name, refuse)
        if not 0 <= stages <= MAX_STAGES:
            raise refuse(f"{name}: num_stages = {stages} must be 0 to {MAX_STAGES}")
        shared = _integer(facts, "shared", name, refuse)
        if not 0 <= shared <= MAX_SHARED_BYTES:
            raise refuse(f"{name}: it needs {shared} bytes of shared memory; a block has at most {MAX_SHARED_BYTES}")
        for key, (allowed, what) in UNSUPPORTED.items():
            if facts.get(key, allowed) != allowed or type(facts.get(key, allowed)) is not type(allowed):
                if key == "global_scratch_size" and DESCRIPTOR in package:
                    raise compile_error(
                        label,
                        f"{_descriptor_place(package, label)}{name}: a tensor descriptor made in the kernel "
                        f"(tl.{DESCRIPTOR}) needs global scratch memory, which attnlab does not run; load the tile "
                        "through tl.make_block_ptr (with boundary_check) or through pointers and a mask instead",
                    )
                raise refuse(f"{name}: it uses {what}, which attnlab does not run; write the kernel without it")
        values = constexprs_said.get(name) if isinstance(constexprs_said, dict) else None
        if not isinstance(values, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, bool)) for k, v in values.items()
        ):
            raise refuse(f"{name}: the compiler's reply does not say its constexpr values")
        built[name] = TritonKernel(name, entry, cubin, warps, stages, shared, dict(values))
    return TritonModule(
        label=label,
        source=source,
        package=package,
        triton=_text(reply.get("triton", "?"))[:40],
        arch=arch,
        kernels=built,
        constants=_launch_constants(lab, {} if constants is None else constants, built, label),
    )


def _descriptor_place(package: str, label: str) -> str:
    """`label:LINE: ` for the first line of the package's functions that makes a tensor descriptor, where
    the package (the driver's own checked copy) says it; else nothing."""
    try:
        functions = json.loads(package)["functions"]
        found = [
            entry["line"] + number
            for entry in functions.values()
            for number, text in enumerate(entry["source"].splitlines())
            if DESCRIPTOR in text
        ]
    except (ValueError, KeyError, TypeError, AttributeError):
        return ""
    return f"{label}:{min(found)}: " if found else ""


def _integer(facts: dict[str, Any], key: str, name: str, refuse: Callable[[str], AttnlabError]) -> int:
    value = facts.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise refuse(f"{name}: the compiler's reply has no integer {key}")
    return value


def _launch_constants(lab: Lab, said: object, kernels: dict[str, TritonKernel], label: str) -> dict[str, int]:
    """The lab's constants with the file's module-level values, checked as a `.cu` file's are. A block's
    threads and shared memory (`Lab.triton_blocks`) are not the file's: they are 32 x num_warps and the
    shared memory Triton's compiler allotted each kernel (`TritonKernel`), set here from the compile."""
    if not isinstance(said, dict):
        raise AttnlabError(
            f"{label}: error: the compiler's reply does not say the launch constants", ExitCode.COMPILE_ERROR
        )
    compiled: dict[str, int] = {}
    for kernel, (threads, shared) in lab.triton_blocks.items():
        compiled[threads] = THREADS_PER_WARP * kernels[kernel].num_warps
        if shared is not None:
            compiled[shared] = kernels[kernel].shared_bytes
    exported: dict[str, int] = {}
    for name, value in said.items():
        if not isinstance(name, str) or name not in lab.launch_defaults:
            continue
        if name in compiled:
            raise AttnlabError(
                f"{label}: error: {name} is not a Triton file's to set: a block's threads are 32 x "
                f"{NUM_WARPS} and its shared memory is what Triton's compiler allots",
                ExitCode.COMPILE_ERROR,
            )
        if isinstance(value, bool) or not isinstance(value, int):
            raise AttnlabError(
                f"{label}: error: {name} must be a whole number (the file sets it to {_text(value)})",
                ExitCode.COMPILE_ERROR,
            )
        exported[name] = value
    return checked_constants(lab, {**exported, **compiled}, label)
