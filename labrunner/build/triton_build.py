"""Triton submissions: a `.py` file's kernels compiled ahead of time in a box, and what comes back checked.

A Triton submission defines each of the lab's kernels as a `@triton.jit` function of the lab's name,
taking the lab's parameters in the lab's order (buffers as pointers, sizes as integers) and then only
`tl.constexpr` ones. Its launch is module-level data: the lab's own launch constants (lab 2's
`attnlab_rows_per_block` and `attnlab_heads_per_block` shape the grid as they do for a `.cu` file),
`attnlab_num_warps` and `attnlab_num_stages`, and `attnlab_constexprs = {kernel: {name: value}}`.
A block's threads are its warps' (32 * num_warps) and its shared memory is what Triton's compiler
says it uses, so neither is the file's to state (the lab's `*_threads` and `*_smem_bytes` constants
are a CUDA file's).

The file's Python runs only in `triton_child.py`, in a compile box: it imports the file, compiles each
kernel with Triton's compiler for the architecture asked (no GPU is needed) and replies with cubins
and numbers. That reply comes from a process that ran the student's code, so it is checked here as
hostile data (`_checked`): the kernels the lab names and no other, each cubin an ELF image of bounded
size, every number an integer in its range, and nothing the grader does not run (global scratch
memory, clusters of CTAs, cooperative or programmatic launches, tensor memory). The launch constants
it states are then checked as a `.cu` file's are (`launch_constants.checked_constants`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labrunner import box as boxes
from labrunner.build.compiler_process import CompileLimits, child_environment, run_limited_child
from labrunner.build.launch_constants import checked_constants
from labrunner.build.source import read_source
from labrunner.exit_codes import AttnlabError, ExitCode, environment_error
from labrunner.labs.definition import MAX_SHARED_BYTES, Lab

CHILD = Path(__file__).with_name("triton_child.py")
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
    triton: str  # Triton's version, as the box's compiler said it
    arch: str
    kernels: dict[str, TritonKernel]
    constants: dict[str, int]  # the lab's launch constants, checked


def is_triton_file(path: Path) -> bool:
    return path.suffix == SUFFIX


def compile_triton(
    lab: Lab, path: Path, label: str, arch: str, limits: CompileLimits = CompileLimits()
) -> TritonModule:
    """Compile the file's kernels in a box (`triton_child.py`) and check what comes back."""
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
    refuse_unboxed_python(label, limits)
    number = _arch_number(arch, label)
    memory_mib = max(limits.memory_mib, DEFAULT_TRITON_MEMORY_MIB)
    request = {
        "source": source,
        "filename": label,
        "kernels": {name: [TRITON_TYPES[t] for t in types] for name, types in lab.entry_point_types().items()},
        "constants": sorted(lab.launch_defaults),
    }
    out, status = run_limited_child(
        lambda workdir: [
            sys.executable,
            "-I",
            str(CHILD),
            str(memory_mib),
            str(int(limits.timeout_s) + 2),
            str(number),
            os.path.join(workdir, "submission"),
        ],
        json.dumps(request).encode(),
        label,
        limits,
        boxes.TRITON_COMPILE,
        readable=(str(CHILD.parent),),
        environment=triton_environment,
    )
    reply = _reply(out, status, label, memory_mib)
    return _checked(lab, reply, label, arch, source)


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
    """The compile child's: the NVRTC child's, with Triton's caches in the private folder."""
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


def _reply(out: bytes, status: int | None, label: str, memory_mib: int) -> dict[str, Any]:
    try:
        reply = json.loads(out)
    except (ValueError, UnicodeDecodeError):
        reply = None
    if not isinstance(reply, dict) or not isinstance(reply.get("status"), str):
        if status in (-signal.SIGXCPU,):
            raise AttnlabError(f"{label}: error: the compiler ran out of CPU time", ExitCode.COMPILE_ERROR)
        if status in (-signal.SIGABRT, -signal.SIGSEGV, -signal.SIGKILL):
            raise AttnlabError(
                f"{label}: error: the Triton compiler stopped (exit status {status}); it may have needed more "
                f"than {memory_mib} MiB",
                ExitCode.COMPILE_ERROR,
            )
        raise AttnlabError(
            f"{label}: error: the Triton compiler stopped without an answer (exit status {status})",
            ExitCode.COMPILE_ERROR,
        )
    said = reply["status"]
    if said == "no-triton":
        raise environment_error(
            f"Triton is not available to the compiler ({_text(reply.get('detail'))}): "
            "install attnlab's Triton extra (pip install 'attnlab[triton]')"
        )
    if said == "out-of-memory":
        raise AttnlabError(f"{label}: error: the compiler needed more than {memory_mib} MiB", ExitCode.COMPILE_ERROR)
    if said == "error":
        raise AttnlabError(f"{label}: error: {_text(reply.get('detail'))}", ExitCode.COMPILE_ERROR)
    if said != "done":
        raise AttnlabError(
            f"{label}: error: the Triton compiler failed ({_text(reply.get('detail'))})", ExitCode.COMPILE_ERROR
        )
    return reply


def _text(value: object) -> str:
    """A string from the box, cut short; every report escapes it when it shows it (`untrusted_text`)."""
    return (value if isinstance(value, str) else repr(value))[:4000]


def _checked(lab: Lab, reply: dict[str, Any], label: str, arch: str, source: str) -> TritonModule:
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
        triton=_text(reply.get("triton", "?"))[:40],
        arch=arch,
        kernels=built,
        constants=_launch_constants(lab, reply.get("constants"), built, label),
    )


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
