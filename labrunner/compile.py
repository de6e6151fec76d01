"""The compile gate: NVRTC with the shared prelude, and no GPU or driver needed.

NVRTC is the compiler CuPy uses, so a file that passes here compiles the same way at grading
time. It is reached through cuda-bindings (which finds the nvidia-cuda-nvrtc wheel's library),
because CuPy itself refuses to compile where no driver is. The gate also reads what the
compiled module says about itself: its entry points and their parameters, the launch constants
a student exports (`extern "C" __constant__ int attnlab_...`), and ptxas's resource report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from labrunner.exit_codes import AttnlabError, ExitCode, environment_error

INCLUDE_DIR = Path(__file__).parent / "include"
PRELUDE_INCLUDE = "#include <attnlab/prelude.cuh>"
DEFAULT_ARCH = "sm_90"
LAUNCH_CONSTANT_PREFIX = "attnlab_"


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


_FILE_DIRECTIVES = ("include", "include_next", "import", "embed")
_ALLOWED_INCLUDE = re.compile(r"^<attnlab/[A-Za-z0-9_]+\.cuh>$")
_HAS_INCLUDE = re.compile(r"\b__has_include(_next)?\b")


def refuse_foreign_includes(user_source: str, filename: str) -> None:
    """A submission may include only the driver's own headers, checked before any compiler runs.

    A grading job must never print a server's file into a log, so `#include "/etc/passwd"`,
    `#include "../secret.h"`, macro-built names and `__has_include` probes are refused here. The
    scan follows the preprocessor's own first phases (line splices, then comments replaced by a
    space, block comments across lines included, and the `%:` digraph for `#`), so a directive
    cannot hide from it. NVRTC is also run with no search path but the driver's include folder.
    """
    for line_number, text in _logical_lines(user_source):
        if match := _HAS_INCLUDE.search(text):
            raise _refused(filename, line_number, match.group(0))
        stripped = text.lstrip()
        if stripped.startswith("%:"):
            stripped = "#" + stripped[2:]
        if not stripped.startswith("#"):
            continue
        words = stripped[1:].lstrip()
        name = re.match(r"[A-Za-z_]\w*", words)
        if not name or name.group(0) not in _FILE_DIRECTIVES:
            continue
        argument = words[name.end():].strip()
        if name.group(0) != "include" or not _ALLOWED_INCLUDE.match(argument):
            raise _refused(filename, line_number, f"#{name.group(0)} {argument}".strip())


def _refused(filename: str, line_number: int, what: str) -> AttnlabError:
    return AttnlabError(
        f"{filename}({line_number}): error: `{what}` is refused: a submission may include only "
        "the driver's headers (<attnlab/...>); paste what you need into the file itself",
        ExitCode.COMPILE_ERROR,
    )


def _logical_lines(source: str) -> list[tuple[int, str]]:
    """The source as the preprocessor sees its directives: (first physical line, text) per logical line.

    Backslash-newlines are spliced away; comments become one space (so a block comment spanning
    lines joins them); string and character literals are kept whole.
    """
    chars: list[tuple[str, int]] = []  # each surviving character with its physical line
    line, i = 1, 0
    while i < len(source):
        if source[i] == "\\" and source[i + 1:i + 2] == "\n":
            line, i = line + 1, i + 2
            continue
        chars.append((source[i], line))
        line += source[i] == "\n"
        i += 1
    lines: list[tuple[int, str]] = []
    current: list[str] = []
    start = 1
    i = 0
    while i < len(chars):
        c = chars[i][0]
        following = chars[i + 1][0] if i + 1 < len(chars) else ""
        if c == "/" and following == "/":
            while i < len(chars) and chars[i][0] != "\n":
                i += 1
            current.append(" ")
            continue
        if c == "/" and following == "*":
            i += 2
            while i < len(chars) and not (chars[i][0] == "*" and i + 1 < len(chars) and chars[i + 1][0] == "/"):
                i += 1
            i += 2
            current.append(" ")
            continue
        if c in "\"'":
            quote, current_literal = c, [c]
            i += 1
            while i < len(chars) and chars[i][0] not in (quote, "\n"):
                if chars[i][0] == "\\" and i + 1 < len(chars):
                    current_literal.append(chars[i][0])
                    i += 1
                current_literal.append(chars[i][0])
                i += 1
            if i < len(chars) and chars[i][0] == quote:
                current_literal.append(quote)
                i += 1
            current.extend(current_literal)
            continue
        if c == "\n":
            lines.append((start, "".join(current)))
            current = []
            start = chars[i + 1][1] if i + 1 < len(chars) else chars[i][1] + 1
            i += 1
            continue
        current.append(c)
        i += 1
    lines.append((start, "".join(current)))
    return lines


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


def compile_gate(user_source: str, filename: str, arch: str = DEFAULT_ARCH) -> CompiledModule:
    """Compiles like grading does and returns what the module holds, or raises with the compiler's words."""
    refuse_foreign_includes(user_source, filename)
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
# A constant exported as 0 is emitted with no initializer (the memory starts zeroed).
_CONSTANT = re.compile(r"\.const\s+\.align\s+\d+\s+\.[bsu]32\s+(" + LAUNCH_CONSTANT_PREFIX + r"\w+)\s*(?:=\s*(-?\d+)\s*)?;")


def parse_entry_points(ptx: str) -> dict[str, list[str]]:
    return {name: _PARAM.findall(params) for name, params in _ENTRY.findall(ptx)}


def parse_launch_constants(ptx: str) -> dict[str, int]:
    """`extern "C" __constant__ int attnlab_x = N;` values, exactly as the compiled module holds them."""
    values = {}
    for name, value in _CONSTANT.findall(ptx):
        number = int(value or 0)
        values[name] = number - (1 << 32) if number >= 1 << 31 else number
    return values


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
