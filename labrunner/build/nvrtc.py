"""NVRTC with the shared prelude, and no GPU or driver needed.

NVRTC is the compiler CuPy uses, so a file that passes here compiles the same way at grading
time. It is reached through cuda-bindings (which finds the nvidia-cuda-nvrtc wheel's library),
because CuPy itself refuses to compile where no driver is. It also reads what the compiled
module says about itself: its entry points and their parameters' PTX types, the launch
constants a student exports, and ptxas's resource report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from labrunner.build.launch_constants import parse_launch_constants
from labrunner.exit_codes import AttnlabError, ExitCode, environment_error

INCLUDE_DIR = Path(__file__).parent.parent / "include"
PRELUDE_INCLUDE = "#include <attnlab/prelude.cuh>"
DEFAULT_ARCH = "sm_90"


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
    entry_points: dict[str, list[str]]               # name -> PTX parameter types (u64 pointer, u32 int)
    launch_constants: dict[str, int]                 # attnlab_* -> value, as the module holds it
    resources: dict[str, KernelResources] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def compose_source(user_source: str, filename: str) -> str:
    """The prelude, then the student's file with its own line numbers restored by `#line 1`."""
    quoted = filename.replace("\\", "\\\\").replace('"', '\\"')
    return f'{PRELUDE_INCLUDE}\n#line 1 "{quoted}"\n{user_source}'


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # cuda-bindings missing altogether
        raise environment_error(
            f"NVRTC is not available ({exc}): install attnlab with its dependencies "
            "(pip install -e .) so cuda-bindings and nvidia-cuda-nvrtc are present"
        ) from None
    return nvrtc


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


def compile_module(user_source: str, filename: str, arch: str = DEFAULT_ARCH) -> CompiledModule:
    """Compiles like grading does and returns what the module holds, or raises with the compiler's words."""
    composed = compose_source(user_source, filename)
    compiled, log, ptx = run_nvrtc(composed, filename, arch, [b"--ptxas-options=-v"])
    if not compiled:
        raise AttnlabError(_compiler_errors(log, filename), ExitCode.COMPILE_ERROR)
    return CompiledModule(
        filename=filename,
        composed_source=composed,
        ptx=ptx,
        entry_points=parse_entry_points(ptx),
        launch_constants=parse_launch_constants(ptx),
        resources=parse_resources(log),
        warnings=[line for line in log.splitlines() if ": warning" in line],
    )


def run_nvrtc(source: str, filename: str, arch: str, extra_options: list[bytes]) -> tuple[bool, str, str]:
    """One NVRTC compile with the driver's include folder and nothing else: (compiled, log, PTX)."""
    nvrtc = _nvrtc()
    nvrtc_version()
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    result, program = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    if result != ok:
        raise environment_error(f"NVRTC could not start a program: {result.name}")
    options = [
        f"--gpu-architecture={arch}".encode(),
        b"--std=c++17",
        b"--no-source-include",
        f"--include-path={INCLUDE_DIR}".encode(),
        *extra_options,
    ]
    try:
        (compiled,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        log = _read(nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, program)
        if compiled == nvrtc.nvrtcResult.NVRTC_ERROR_INVALID_OPTION:
            raise AttnlabError(f"--arch {arch} is not a GPU architecture NVRTC knows (try sm_90)", ExitCode.USAGE)
        ptx = _read(nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, program) if compiled == ok else ""
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return compiled == ok, log, ptx


def _read(size_fn, read_fn, program) -> str:
    _, size = size_fn(program)
    buffer = b" " * size
    read_fn(program, buffer)
    return buffer.rstrip(b"\x00 ").decode(errors="replace")


def _compiler_errors(log: str, filename: str) -> str:
    """NVRTC's messages as `FILE(LINE): error: ...`, the student's lines first, counts last."""
    lines = [line for line in log.splitlines() if line.strip() and not line.startswith("ptxas info")]
    return "\n".join(lines) if lines else f"{filename}: error: NVRTC rejected the file without a message"


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
