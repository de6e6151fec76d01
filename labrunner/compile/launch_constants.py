"""Launch constants: the launch geometry a submission exports, read from its compiled module.

`extern "C" __constant__ int attnlab_threads = 128;` and the like are how a student changes tile
and block sizes without touching Python. The values come from the PTX the compiler wrote (never
from the source text), and each lab says which names it reads and which values are possible.

The values are the student's, so they are checked before anything is sized from them: each against
its upper bound (the lab's `bounds`, stated in its starter), then the lab's own rules, then every
buffer the driver will build for the file (each case's inputs and output, each workspace, at every
shape it runs) against the memory bound (`labrunner.truth.memory_bound`). All of it is arithmetic
on the numbers: a file that asks for terabytes is refused in the time it takes to read them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.labs.definition import Lab
from labrunner.truth.cases import geometry_case
from labrunner.truth.memory_bound import OverBound

if TYPE_CHECKING:
    from labrunner.compile.nvrtc import CompiledModule

LAUNCH_CONSTANT_PREFIX = "attnlab_"
# A constant exported as 0 is emitted with no initializer (the memory starts zeroed).
_CONSTANT = re.compile(
    r"\.const\s+\.align\s+\d+\s+\.[bsu]32\s+(" + LAUNCH_CONSTANT_PREFIX + r"\w+)\s*(?:=\s*(-?\d+)\s*)?;"
)


def parse_launch_constants(ptx: str) -> dict[str, int]:
    """`extern "C" __constant__ int attnlab_x = N;` values, exactly as the compiled module holds them."""
    values = {}
    for name, value in _CONSTANT.findall(ptx):
        number = int(value or 0)
        values[name] = number - (1 << 32) if number >= 1 << 31 else number
    return values


def check_launch_constants(lab: Lab, module: CompiledModule, label: str) -> dict[str, int]:
    return checked_constants(lab, module.launch_constants, label)


def checked_constants(lab: Lab, exported: dict[str, int], label: str) -> dict[str, int]:
    """The lab's constants with the file's `exported` values, each checked (unknown names, bounds, the
    lab's rules, the memory bound): a compile error naming the first problem."""
    unknown = sorted(set(exported) - set(lab.launch_defaults))
    if unknown:
        known = ", ".join(lab.launch_defaults)
        raise AttnlabError(
            f"{label}: error: unknown launch constant {unknown[0]} ({lab.name} reads {known})", ExitCode.COMPILE_ERROR
        )
    constants = lab.constants(exported)
    problems = constant_problems(lab, constants)
    if problems:
        raise AttnlabError(f"{label}: error: launch constants: {'; '.join(problems)}", ExitCode.COMPILE_ERROR)
    try:
        build_plan(lab, constants)
    except OverBound as over:
        drivers = sizing_constants(lab, constants)
        named = f"; it is sized by {', '.join(f'{n} = {constants[n]}' for n in drivers)}" if drivers else ""
        raise AttnlabError(f"{label}: error: launch constants: {over.message}{named}", ExitCode.COMPILE_ERROR) from None
    return constants


def constant_problems(lab: Lab, constants: dict[str, int]) -> list[str]:
    """Every constant above its bound, then the lab's own rules about the others, each constant said once
    (a block of 2048 threads is above its bound; "2048 threads: a block holds at most 1024" adds nothing)."""
    over = lab.over_bounds(constants)
    named = [name for name in constants if constants[name] > lab.bounds[name]]
    return over + [
        problem for problem in lab.validate(constants) if not any(re.search(rf"\b{name}\b", problem) for name in named)
    ]


def planned_shapes(lab: Lab, constants: dict[str, int]) -> list[tuple[int, int]]:
    """(rows, prefix) of every shape the driver runs the file at: each case of the catalogue (a decode
    case's lengths written for the file's own partition size, as `grade` and `bench` resolve them), the
    case its geometry adds, and the timing shapes. Resolving a case sizes its inputs and output and
    checks them against the memory bound (OverBound past it); nothing is built."""
    catalogue = lab.catalogue
    own = lab.partition(constants)
    cases = [case.resolved(own or catalogue.geometry.get("partition_when_whole", 0), own) for case in catalogue.cases]
    derived = geometry_case(catalogue, lab.row_tiles(constants))
    cases += [derived] if derived else []
    return [(case.rows, case.prefix) for case in cases] + timing_shapes(catalogue.timing)


def build_plan(lab: Lab, constants: dict[str, int]) -> None:
    """Size, without building, every buffer the driver makes from the file's constants: each shape's
    inputs and output (`planned_shapes`) and its workspace. The timing shapes' inputs are the
    catalogue's, not the file's; their workspace is the file's. Raises OverBound at the first buffer
    past the memory bound."""
    for rows, prefix in planned_shapes(lab, constants):
        lab.workspace(constants, rows, prefix)


def timing_shapes(timing: dict[str, Any]) -> list[tuple[int, int]]:
    """(rows, prefix) of every shape the catalogue times: lab 1's pipeline sizes, or one (rows, prefix)."""
    if "sizes" in timing:
        return [(t, 0) for t in timing["sizes"]]
    return [(timing["rows"], timing["prefix"])] if "rows" in timing else []


def sizing_constants(lab: Lab, constants: dict[str, int]) -> list[str]:
    """The constants that drove a buffer past the bound: the fewest of those the file changed whose
    defaults bring every buffer within it (one, where one is enough; both of two tiles of the same
    size). Each changed constant is kept at the file's value where the others' defaults suffice. Empty
    where even the defaults do not fit: then the file did not size it."""
    defaults = lab.launch_defaults
    drivers = [name for name in defaults if constants[name] != defaults[name]]
    if not fits(lab, {**constants, **{name: defaults[name] for name in drivers}}):
        return []
    for name in list(drivers):
        rest = [d for d in drivers if d != name]
        if fits(lab, {**constants, **{d: defaults[d] for d in rest}}):
            drivers = rest
    return drivers


def fits(lab: Lab, constants: dict[str, int]) -> bool:
    try:
        build_plan(lab, constants)
    except OverBound:
        return False
    return True
