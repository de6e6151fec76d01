"""The compile gate: a student's file, from bytes on disk to a module the lab can run, in order.

Each step can refuse the file with one clear line and its exit code, before any GPU or CPU work
starts:

1. reading (`source`): missing, unreadable, too large or not UTF-8 is a usage error;
2. the include policy (`includes`): only the driver's headers, decided before any compiler runs;
3. NVRTC with the shared prelude (`nvrtc`): the compiler's own words, against the student's lines;
4. entry points and parameter types (`entry_points`): every kernel the lab launches, as it passes them;
5. launch constants (`launch_constants`): the geometry the file exports, checked against the lab.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labrunner.build.entry_points import check_entry_points, check_parameter_types
from labrunner.build.includes import refuse_foreign_includes
from labrunner.build.launch_constants import check_launch_constants
from labrunner.build.nvrtc import DEFAULT_ARCH, CompiledModule, compile_module
from labrunner.build.source import read_source
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.labs.definition import Lab


@dataclass
class Submission:
    path: Path
    label: str            # the name messages use: the path as the user typed it
    source: str
    module: CompiledModule
    constants: dict[str, int]  # every launch constant of the lab: defaults overridden by the file's


def load_submission(lab: Lab, path: Path, label: str | None = None, arch: str = DEFAULT_ARCH) -> Submission:
    label = label or str(path)
    source = read_source(path, label)
    if not source.strip():  # said as what it is, not as the entry points an empty file lacks
        raise AttnlabError(f"{label}: file is empty; `attnlab starter {lab.name}` prints the file to start from",
                           ExitCode.COMPILE_ERROR)
    module = compile_gate(source, label, arch)
    check_entry_points(lab, module, label)
    check_parameter_types(lab, module, label, arch)
    constants = check_launch_constants(lab, module, label)
    return Submission(path, label, source, module, constants)


def compile_gate(source: str, label: str, arch: str = DEFAULT_ARCH) -> CompiledModule:
    """Steps 2 and 3 for source text already read: the include policy, then NVRTC."""
    refuse_foreign_includes(source, label)
    return compile_module(source, label, arch)
