"""The compile gate: a student's file, from bytes on disk to a module the lab can run, in order.

Each step can refuse the file with one clear line and its exit code, before any GPU or CPU work
starts:

1. reading (`source`): missing, unreadable, too large or not UTF-8 is a usage error;
2. the include policy (`includes`): the file lexed as the compiler lexes it; only the driver's
   headers and a few standard ones, decided before any compiler runs; with the same lexer, what
   would reach the linker, the assembler or the loader (`attributes`: section, constructor, asm
   labels, asm outside a function, #pragma weak, ...);
3. NVRTC with the shared prelude (`nvrtc`), in a child process under a clock and a memory
   ceiling (`compiler_process`): the compiler's own words about the student's lines only
   (`diagnostics`);
4. entry points and parameter types (`entry_points`): every kernel the lab launches, as it passes
   them (the type check is a second compile, in a child like the first, run beside it);
5. launch constants (`launch_constants`): the geometry the file exports, checked against the lab.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from labrunner.compile.attributes import refuse_linker_requests
from labrunner.compile.backend import Backend
from labrunner.compile.compiler_process import CompileLimits
from labrunner.compile.entry_points import check_entry_points, check_parameter_types, probe_parameter_types
from labrunner.compile.includes import refuse_foreign_includes
from labrunner.compile.launch_constants import check_launch_constants
from labrunner.compile.nvrtc import DEFAULT_ARCH, CompiledModule, compile_module, compose_source
from labrunner.compile.source import read_source
from labrunner.compile.triton_build import compile_triton, is_triton_file
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.labs.definition import Lab


@dataclass
class Submission:
    path: Path
    label: str  # the name messages use: the path as the user typed it
    source: str
    module: CompiledModule
    constants: dict[str, int]  # every launch constant of the lab: defaults overridden by the file's


def load_submission(
    lab: Lab,
    path: Path,
    label: str | None = None,
    arch: str = DEFAULT_ARCH,
    limits: CompileLimits = CompileLimits(),
    target: Backend = Backend.GPU,
    policy_passed: Callable[[str, str], None] | None = None,
) -> Submission:
    """The file compiled and checked; `target` is the backend that will run it ("cpu" leaves out a Triton
    file's cubins, which its interpreter never runs). `policy_passed(composed_source, label)` is told of a
    `.cu` file once it has passed every check that comes before a compiler may read it, as NVRTC starts:
    the CPU worker's own build starts then (`pipeline/worker_ahead.py`)."""
    label = label or str(path)
    if is_triton_file(path):
        return load_triton_submission(lab, path, label, arch, limits, target)
    source = read_source(path, label)
    if not source.strip():  # said as what it is, not as the entry points an empty file lacks
        raise AttnlabError(
            f"{label}: error: file is empty; `attnlab starter {lab.name}` prints the file to start from",
            ExitCode.COMPILE_ERROR,
        )
    refuse_before_compiling(source, label)
    if policy_passed is not None:
        policy_passed(compose_source(source, label), label)
    # The signature probe's compile needs only the text, so it runs beside the file's own (each in its
    # own box): the gate then costs the longer of the two, not their sum. Its answer counts only once
    # the file itself compiled and has its entry points; a failed compile waits for it, which fails as
    # fast (it is the same text).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnlab-probe") as pool:
        probed = pool.submit(probe_parameter_types, lab, compose_source(source, label), label, arch, limits)
        module = compile_module(source, label, arch, limits)
        check_entry_points(lab, module, label)
        check_parameter_types(lab, module, label, arch, limits, probed.result())
    constants = check_launch_constants(lab, module, label)
    return Submission(path, label, source, module, constants)


def load_triton_submission(
    lab: Lab, path: Path, label: str, arch: str, limits: CompileLimits, target: Backend = Backend.GPU
) -> Submission:
    """A `.py` file's kernels compiled by Triton in boxes (`triton_build`), as a module the worker loads:
    the GPU's its cubins, the CPU's its kernel package (`composed_source`), the same for both."""
    triton = compile_triton(lab, path, label, arch, limits, target)
    module = CompiledModule(
        filename=label,
        composed_source=triton.package,
        ptx="",
        entry_points={e.name: [p.ptx_type for p in e.parameters] for e in lab.entry_points},
        launch_constants=triton.constants,
        arch=arch,
        triton=triton.kernels,
        triton_version=triton.triton,
    )
    return Submission(path, label, triton.source, module, triton.constants)


def compile_gate(
    source: str, label: str, arch: str = DEFAULT_ARCH, limits: CompileLimits = CompileLimits()
) -> CompiledModule:
    """Steps 2 and 3 for source text already read: the include policy, then NVRTC."""
    refuse_before_compiling(source, label)
    return compile_module(source, label, arch, limits)


def refuse_before_compiling(source: str, label: str) -> None:
    """What no compiler may be shown: foreign includes, and what reaches the linker or loader."""
    refuse_foreign_includes(source, label)
    refuse_linker_requests(source, label)  # attributes, pragmas and asm forms that reach the linker or loader
