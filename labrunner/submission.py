"""A student's file, read and compile-gated against a lab: the steps before anything runs.

Reading can fail (missing, unreadable, not text), compiling can fail (the compiler's own
words with the student's line numbers), and a module that compiles can still be wrong for the
lab (a missing or mis-typed entry point, an impossible launch constant). Each failure is one
clear line with its exit code, raised before any GPU or CPU work starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from labrunner.compile import CompiledModule, compile_gate, run_nvrtc
from labrunner.exit_codes import AttnlabError, ExitCode, usage_error
from labrunner.labs.definition import EntryPoint, Lab

MAX_SOURCE_BYTES = 1 << 20
# How PTX spells a kernel parameter, in the words a message should use.
PTX_PARAMETER_KINDS = {
    "u64": "a pointer", "b64": "a pointer",
    "s64": "a 64-bit integer", "u32": "a 32-bit integer", "s32": "a 32-bit integer", "b32": "a 32-bit integer",
    "f32": "a float", "f64": "a double",
}


@dataclass
class Submission:
    path: Path
    label: str            # the name messages use: the path as the user typed it
    source: str
    module: CompiledModule
    constants: dict[str, int]  # every launch constant of the lab: defaults overridden by the file's


def read_source(path: Path, label: str) -> str:
    if not path.exists():
        raise usage_error(f"{label}: no such file; pass the path of your .cu file (`attnlab starter LAB` writes one)")
    if path.is_dir():
        raise usage_error(f"{label}: is a folder, not a .cu file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise usage_error(f"{label}: cannot be read ({exc.strerror}); check its permissions") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise usage_error(f"{label}: {len(data)} bytes is more than a kernel file needs (limit {MAX_SOURCE_BYTES})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise usage_error(f"{label}: is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def load_submission(lab: Lab, path: Path, label: str | None = None, arch: str = "sm_90") -> Submission:
    label = label or str(path)
    source = read_source(path, label)
    module = compile_gate(source, label, arch)
    check_entry_points(lab, module, label)
    check_parameter_types(lab, module, label, arch)
    constants = check_launch_constants(lab, module, label)
    return Submission(path, label, source, module, constants)


def check_entry_points(lab: Lab, module: CompiledModule, label: str) -> None:
    for wanted in lab.entry_points:
        found = module.entry_points.get(wanted.name)
        needs = f"{lab.name} needs: {wanted.signature}"
        if found is None:
            mangled = [name for name in module.entry_points if name.startswith("_Z") and wanted.name in name]
            if mangled:
                raise AttnlabError(f'{label}: error: {wanted.name} is not declared extern "C"; {needs}',
                                   ExitCode.COMPILE_ERROR)
            raise AttnlabError(f"{label}: error: missing entry point {wanted.name}; {needs}", ExitCode.COMPILE_ERROR)
        expected = [p.ptx_type for p in wanted.parameters]
        if len(found) != len(expected):
            raise AttnlabError(f"{label}: error: {wanted.name} takes {len(found)} parameters, not "
                               f"{len(expected)}; {needs}", ExitCode.COMPILE_ERROR)
        for index, (got, want) in enumerate(zip(found, expected)):
            if got != want:
                param = wanted.parameters[index]
                kind = PTX_PARAMETER_KINDS.get(got, f"a .{got} value")
                raise AttnlabError(f"{label}: error: parameter {index + 1} of {wanted.name} is {kind}, but "
                                   f"`{param.c_type} {param.name}` is expected; {needs}", ExitCode.COMPILE_ERROR)


SIGNATURE_CHECK_FILE = "attnlab-signature-check"
# What each parameter kind of a lab's signature accepts (see include/attnlab/signature_check.cuh).
PARAMETER_RULES = {"const float*": "input_pointer", "float*": "output_pointer", "int": "integer"}
# '... "attnlab_signature::expect<false, T> [with T=const double *]" at line 2 of attnlab-signature-check'
_MISMATCH = re.compile(r'\[with T=(?P<type>[^\]]+)\]"? at line (?P<line>\d+) of "?' + SIGNATURE_CHECK_FILE)


def signature_probe(lab: Lab) -> tuple[str, list[tuple[EntryPoint, int]]]:
    """C++ that checks every parameter's type, one line each, and which (kernel, index) each line checks."""
    lines, checked = [], []
    for kernel in lab.entry_points:
        for index, parameter in enumerate(kernel.parameters):
            rule = PARAMETER_RULES.get(parameter.c_type)
            if rule is None:
                continue  # a kind of parameter no rule is written for: its width is all PTX checks
            type_of = f"attnlab_signature::parameter<{index}, decltype({kernel.name})>::type"
            lines.append(f"constexpr int attnlab_check_{len(lines)} = "
                         f"attnlab_signature::expect<attnlab_signature::{rule}<{type_of}>::value, {type_of}>::value;")
            checked.append((kernel, index))
    source = ("\n#include <attnlab/signature_check.cuh>\n"
              f'#line 1 "{SIGNATURE_CHECK_FILE}"\n' + "\n".join(lines) + "\n")
    return source, checked


def check_parameter_types(lab: Lab, module: CompiledModule, label: str, arch: str) -> None:
    """Each parameter's C++ type against what the lab passes (PTX shows only widths): `double*`
    where float data comes is a compile error naming the type, not garbage read at run time."""
    probe, checked = signature_probe(lab)
    compiled, log, _ = run_nvrtc(module.composed_source + probe, label, arch, [b"--fdevice-syntax-only"])
    if compiled:
        return
    match = _MISMATCH.search(log)
    if match is None:
        return  # the student's file compiled on its own; a probe it trips over in some other way decides nothing
    wanted, index = checked[int(match.group("line")) - 1]
    parameter = wanted.parameters[index]
    written = re.sub(r"\s+\*", "*", match.group("type").strip())
    raise AttnlabError(f"{label}: error: parameter {index + 1} of {wanted.name} is `{written}`, but "
                       f"`{parameter.c_type} {parameter.name}` is expected; {lab.name} needs: {wanted.signature}",
                       ExitCode.COMPILE_ERROR)


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

