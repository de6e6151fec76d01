"""NVRTC with the shared prelude, and no GPU or driver needed.

NVRTC is the compiler CuPy uses, so a file that passes here compiles the same way at grading
time. It is reached through cuda-bindings (which finds the nvidia-cuda-nvrtc wheel's library),
because CuPy itself refuses to compile where no driver is, and always in a child process with a
clock and a memory ceiling (`compiler_process`), never in the driver's own. It also reads what the compiled
module says about itself: its entry points and their parameters' PTX types, the launch
constants a student exports, and ptxas's resource report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Literal, overload

from labrunner.compile.compiler_process import CompileLimits, run_compiler
from labrunner.compile.diagnostics import compiler_error_message, nvrtc_diagnostics
from labrunner.compile.launch_constants import parse_launch_constants
from labrunner.exit_codes import AttnlabError, ExitCode, environment_error

INCLUDE_DIR = Path(__file__).parent.parent / "include"
# NVRTC ships no C or C++ standard headers; these stand in for the few a kernel includes
# (<cfloat>, <cmath>, <cstdint> and their .h forms). The CPU build searches here too, for a kernel
# file only (after labrunner/run/cpu/include, whose <cmath> it takes instead), so both read the same macros.
NVRTC_STANDARD_HEADERS = INCLUDE_DIR / "nvrtc_std"
# Every NVRTC compile of a submission searches these and nothing else: the gate's here, and the
# GPU worker's (CuPy's RawModule) in labrunner/run/gpu_device.py, so both see the same headers.
NVRTC_INCLUDE_OPTIONS = (f"--include-path={INCLUDE_DIR}", f"--include-path={NVRTC_STANDARD_HEADERS}")
PRELUDE_INCLUDE = "#include <attnlab/prelude.cuh>"
DEFAULT_ARCH = "sm_90"

if TYPE_CHECKING:
    from labrunner.compile.triton_build import TritonKernel


@dataclass
class KernelResources:
    registers: int | None = None
    shared_bytes: int | None = None
    stack_bytes: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None


@dataclass
class CompiledModule:
    """What the gate learned from one successful compile."""

    filename: str
    composed_source: str
    ptx: str
    entry_points: dict[str, list[str]]  # name -> PTX parameter types (u64 pointer, u32 int)
    launch_constants: dict[str, int]  # attnlab_* -> value, as the module holds it
    resources: dict[str, KernelResources] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    arch: str = DEFAULT_ARCH  # the architecture it was built for
    # The machine code the gate's boxed compile built (`arch` real): what the GPU worker loads, so that no
    # second compile of the student's text happens in it. Bytes from a compiler that read the student's
    # file: only ever handed to a box, never loaded by the driver.
    cubin: bytes = b""
    # A Triton file's kernels, each its own cubin with its launch facts (`triton_build`); empty for a `.cu`
    # file. `composed_source` is then its kernel package (`triton_package`), which the CPU backend's
    # interpreter rebuilds the kernels from.
    triton: dict[str, TritonKernel] = field(default_factory=dict)
    triton_version: str = ""  # Triton's version, as the compile box said it


def compose_source(user_source: str, filename: str) -> str:
    """The prelude, then the student's file with its own line numbers restored by `#line 1`."""
    quoted = filename.replace("\\", "\\\\").replace('"', '\\"')
    return f'{PRELUDE_INCLUDE}\n#line 1 "{quoted}"\n{user_source}'


def _nvrtc() -> ModuleType:
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # cuda-bindings missing altogether
        raise environment_error(
            f"NVRTC is not available ({exc}): install attnlab with its dependencies "
            "(pip install -e .) so cuda-bindings and nvidia-cuda-nvrtc are present"
        ) from None
    module: ModuleType = nvrtc  # cuda-bindings ships no type information
    return module


def nvrtc_version() -> str:
    """NVRTC's version as 'major.minor', or raises the environment error that says how to get it."""
    nvrtc = _nvrtc()
    try:
        result, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # the shared library itself could not be loaded
        raise environment_error(f"NVRTC's library could not be loaded ({exc}): pip install nvidia-cuda-nvrtc") from None
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise environment_error(f"NVRTC answered {result.name}: reinstall nvidia-cuda-nvrtc")
    return f"{major}.{minor}"


def compile_module(
    user_source: str, filename: str, arch: str = DEFAULT_ARCH, limits: CompileLimits = CompileLimits()
) -> CompiledModule:
    """Compiles like grading does and returns what the module holds, or raises with the compiler's words."""
    composed = compose_source(user_source, filename)
    # -lineinfo as the GPU worker's build had it, so that compute-sanitizer names the student's lines
    compiled, log, ptx, cubin = run_nvrtc(
        composed, filename, arch, ["--ptxas-options=-v", "-lineinfo"], limits, with_binary=True
    )
    messages = nvrtc_diagnostics(log, filename)
    if not compiled:
        raise AttnlabError(compiler_error_message(messages, filename), ExitCode.COMPILE_ERROR)
    return CompiledModule(
        filename=filename,
        composed_source=composed,
        ptx=ptx,
        arch=arch,
        cubin=cubin,
        entry_points=parse_entry_points(ptx),
        launch_constants=parse_launch_constants(ptx),
        resources=parse_resources(log),
        warnings=[line for line in messages if ": warning" in line],
    )


@overload
def run_nvrtc(
    source: str,
    filename: str,
    arch: str,
    extra_options: list[str],
    limits: CompileLimits = ...,
    with_binary: Literal[False] = False,
) -> tuple[bool, str, str]: ...


@overload
def run_nvrtc(
    source: str, filename: str, arch: str, extra_options: list[str], limits: CompileLimits, with_binary: Literal[True]
) -> tuple[bool, str, str, bytes]: ...


@overload
def run_nvrtc(
    source: str,
    filename: str,
    arch: str,
    extra_options: list[str],
    limits: CompileLimits = ...,
    *,
    with_binary: Literal[True],
) -> tuple[bool, str, str, bytes]: ...


def run_nvrtc(
    source: str,
    filename: str,
    arch: str,
    extra_options: list[str],
    limits: CompileLimits = CompileLimits(),
    with_binary: bool = False,
) -> tuple[bool, str, str] | tuple[bool, str, str, bytes]:
    """One NVRTC compile, in a limited child process, with the driver's include folders and nothing
    else: (compiled, log, PTX), and the machine code after them when `with_binary`. The log is NVRTC's
    own; show it only through `diagnostics`."""
    options = [
        f"--gpu-architecture={arch}",
        "--std=c++17",
        "--no-source-include",
        *NVRTC_INCLUDE_OPTIONS,
        *extra_options,
    ]
    reply = run_compiler({"source": source, "name": filename, "options": options}, filename, limits)
    if reply["result"] == "NVRTC_ERROR_INVALID_OPTION":
        raise AttnlabError(f"--arch {arch} is not a GPU architecture NVRTC knows (try sm_90)", ExitCode.USAGE)
    if reply["result"] == "NVRTC_ERROR_PROGRAM_CREATION_FAILURE":
        raise environment_error(f"NVRTC could not start a program: {reply['result']}")
    compiled = reply["result"] == "NVRTC_SUCCESS"
    if not with_binary:
        return compiled, reply["log"], reply["ptx"]
    try:
        cubin = bytes.fromhex(reply.get("cubin") or "")
    except (TypeError, ValueError):
        cubin = b""  # not machine code as asked: the worker compiles the source itself
    return compiled, reply["log"], reply["ptx"], cubin


_ENTRY = re.compile(r"\.visible\s+\.entry\s+(\w+)\s*\(([^)]*)\)", re.DOTALL)
_PARAM = re.compile(r"\.param\s+\.(\w+)")


def parse_entry_points(ptx: str) -> dict[str, list[str]]:
    return {name: _PARAM.findall(params) for name, params in _ENTRY.findall(ptx)}


_FUNCTION = re.compile(r"Function properties for (\w+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_resources(log: str) -> dict[str, KernelResources]:
    """Registers, shared memory, stack and spills per kernel, from ptxas's -v report."""
    resources: dict[str, KernelResources] = {}
    current: KernelResources | None = None
    for line in log.splitlines():
        if match := _FUNCTION.search(line):
            current = resources.setdefault(match.group(1), KernelResources())
        elif current and (match := _FRAME.search(line)):
            current.stack_bytes, current.spill_stores, current.spill_loads = map(int, match.groups())
        elif current and (match := _USED.search(line)):
            current.registers = int(match.group(1))
            current.shared_bytes = int(match.group(2) or 0)
    return resources
