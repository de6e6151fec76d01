"""Entry points: every kernel the lab launches is present, `extern "C"`, and takes what the lab passes.

PTX shows each parameter's width only, so a second, syntax-only NVRTC pass checks the C++ types
the student wrote (a `const double*` where float data comes is named, not read as garbage).
"""

from __future__ import annotations

import re

from labrunner.compile.compiler_process import CompileLimits
from labrunner.compile.nvrtc import CompiledModule, run_nvrtc
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.labs import LABS
from labrunner.labs.definition import EntryPoint, Lab

# How PTX spells a kernel parameter, in the words a message should use.
PTX_PARAMETER_KINDS = {
    "u64": "a pointer",
    "b64": "a pointer",
    "s64": "a 64-bit integer",
    "u32": "a 32-bit integer",
    "s32": "a 32-bit integer",
    "b32": "a 32-bit integer",
    "f32": "a float",
    "f64": "a double",
}


def check_entry_points(lab: Lab, module: CompiledModule, label: str) -> None:
    for wanted in lab.entry_points:
        found = module.entry_points.get(wanted.name)
        needs = f"{lab.name} needs: {wanted.signature}"
        if found is None:
            mangled = [name for name in module.entry_points if name.startswith("_Z") and wanted.name in name]
            if mangled:
                raise AttnlabError(
                    f'{label}: error: {wanted.name} is not declared extern "C"; {needs}', ExitCode.COMPILE_ERROR
                )
            other = lab_it_looks_like(lab, module)
            if other is not None:
                names = [e.name for e in other.entry_points]
                defines = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
                raise AttnlabError(
                    f"{label}: error: missing entry point {wanted.name}; this looks like a {other.name} file (it "
                    f"defines {defines}): grade it with `attnlab grade {other.name} {label}`",
                    ExitCode.COMPILE_ERROR,
                )
            raise AttnlabError(f"{label}: error: missing entry point {wanted.name}; {needs}", ExitCode.COMPILE_ERROR)
        expected = [p.ptx_type for p in wanted.parameters]
        if len(found) != len(expected):
            raise AttnlabError(
                f"{label}: error: {wanted.name} takes {len(found)} parameters, not {len(expected)}; {needs}",
                ExitCode.COMPILE_ERROR,
            )
        for index, (got, want) in enumerate(zip(found, expected)):
            if got != want:
                param = wanted.parameters[index]
                kind = PTX_PARAMETER_KINDS.get(got, f"a .{got} value")
                raise AttnlabError(
                    f"{label}: error: parameter {index + 1} of {wanted.name} is {kind}, but "
                    f"`{param.c_type} {param.name}` is expected; {needs}",
                    ExitCode.COMPILE_ERROR,
                )


def lab_it_looks_like(lab: Lab, module: CompiledModule) -> Lab | None:
    """Another registered lab whose every entry point the module defines (`extern "C"`): a file graded
    as the wrong lab, recognised by its kernels' names. None where no other lab's set is complete."""
    for other in LABS.values():
        if other.name != lab.name and all(e.name in module.entry_points for e in other.entry_points):
            return other
    return None


SIGNATURE_CHECK_FILE = "attnlab-signature-check"
# What each parameter kind of a lab's signature accepts (see include/attnlab/signature_check.cuh).
PARAMETER_RULES = {
    "const float*": "input_pointer",
    "float*": "output_pointer",
    "int": "integer",
    "const int*": "int_input_pointer",
}
# '... "attnlab_signature::expect<false, T> [with T=const double *]" at line 2 of attnlab-signature-check'
_MISMATCH = re.compile(r'\[with T=(?P<type>[^\]]+)\]"? at line (?P<line>\d+) of "?' + SIGNATURE_CHECK_FILE)


def signature_probe(lab: Lab) -> tuple[str, list[tuple[EntryPoint, int]]]:
    """C++ that checks every parameter's type, one line each, and which (kernel, index) each line checks."""
    lines: list[str] = []
    checked: list[tuple[EntryPoint, int]] = []
    for kernel in lab.entry_points:
        for index, parameter in enumerate(kernel.parameters):
            rule = PARAMETER_RULES.get(parameter.c_type)
            if rule is None:
                continue  # a kind of parameter no rule is written for: its width is all PTX checks
            type_of = f"attnlab_signature::parameter<{index}, decltype({kernel.name})>::type"
            lines.append(
                f"constexpr int attnlab_check_{len(lines)} = "
                f"attnlab_signature::expect<attnlab_signature::{rule}<{type_of}>::value, {type_of}>::value;"
            )
            checked.append((kernel, index))
    source = f'\n#include <attnlab/signature_check.cuh>\n#line 1 "{SIGNATURE_CHECK_FILE}"\n' + "\n".join(lines) + "\n"
    return source, checked


def probe_parameter_types(
    lab: Lab, composed_source: str, label: str, arch: str, limits: CompileLimits = CompileLimits()
) -> tuple[bool, str]:
    """NVRTC's answer to the file with the signature probe appended: (compiled, log). It needs only the
    composed text, so the gate runs it beside the file's own compile (`gate.load_submission`)."""
    probe, _ = signature_probe(lab)
    compiled, log, _ = run_nvrtc(composed_source + probe, label, arch, ["--fdevice-syntax-only"], limits)
    return compiled, log


def check_parameter_types(
    lab: Lab,
    module: CompiledModule,
    label: str,
    arch: str,
    limits: CompileLimits = CompileLimits(),
    probed: tuple[bool, str] | None = None,
) -> None:
    """Each parameter's C++ type against what the lab passes (PTX shows only widths): `double*`
    where float data comes is a compile error naming the type, not garbage read at run time.
    `probed`: `probe_parameter_types`' answer for this module's text, where it was already asked."""
    _, checked = signature_probe(lab)
    compiled, log = probed or probe_parameter_types(lab, module.composed_source, label, arch, limits)
    if compiled:
        return
    match = _MISMATCH.search(log)
    if match is None:
        return  # the student's file compiled on its own; a probe it trips over in some other way decides nothing
    wanted, index = checked[int(match.group("line")) - 1]
    parameter = wanted.parameters[index]
    written = re.sub(r"\s+\*", "*", match.group("type").strip())
    raise AttnlabError(
        f"{label}: error: parameter {index + 1} of {wanted.name} is `{written}`, but "
        f"`{parameter.c_type} {parameter.name}` is expected; {lab.name} needs: {wanted.signature}",
        ExitCode.COMPILE_ERROR,
    )
