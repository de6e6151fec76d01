"""Launch constants: the launch geometry a submission exports, read from its compiled module.

`extern "C" __constant__ int attnlab_threads = 128;` and the like are how a student changes tile
and block sizes without touching Python. The values come from the PTX the compiler wrote (never
from the source text), and each lab says which names it reads and which values are possible.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.labs.definition import Lab

if TYPE_CHECKING:
    from labrunner.build.nvrtc import CompiledModule

LAUNCH_CONSTANT_PREFIX = "attnlab_"
# A constant exported as 0 is emitted with no initializer (the memory starts zeroed).
_CONSTANT = re.compile(r"\.const\s+\.align\s+\d+\s+\.[bsu]32\s+(" + LAUNCH_CONSTANT_PREFIX + r"\w+)\s*(?:=\s*(-?\d+)\s*)?;")


def parse_launch_constants(ptx: str) -> dict[str, int]:
    """`extern "C" __constant__ int attnlab_x = N;` values, exactly as the compiled module holds them."""
    values = {}
    for name, value in _CONSTANT.findall(ptx):
        number = int(value or 0)
        values[name] = number - (1 << 32) if number >= 1 << 31 else number
    return values


def check_launch_constants(lab: Lab, module: CompiledModule, label: str) -> dict[str, int]:
    unknown = sorted(set(module.launch_constants) - set(lab.launch_defaults))
    if unknown:
        known = ", ".join(lab.launch_defaults)
        raise AttnlabError(f"{label}: error: unknown launch constant {unknown[0]} ({lab.name} reads "
                           f"{known})", ExitCode.COMPILE_ERROR)
    constants = lab.constants(module.launch_constants)
    problems = lab.validate(constants)
    if problems:
        raise AttnlabError(f"{label}: error: launch constants: {'; '.join(problems)}", ExitCode.COMPILE_ERROR)
    return constants
