"""What a compiler said, cut down to what it said about the student's own file.

A compiler's log quotes source: the line of each error, with a caret under it, and for an error
inside a header, that header's lines. The include policy keeps every file but the driver's
headers out of the compiler, and this filter is the second wall behind it: only lines that begin
with the student's file name in the diagnostic form (`attention.cu(20): error: ...` from NVRTC,
`attention.cu:20:5: error: ...` from g++, rewritten to NVRTC's form) pass, plus NVRTC's closing
count line. Quoted source lines, carets, "detected during instantiation ... of /other/file" and
anything naming another file are dropped, so a log can never carry another file's text to the
terminal, the JSON or the JUnit report.
"""

from __future__ import annotations

import re

# "1 error detected in the compilation of "attention.cu"." (also "2 errors", "and 1 catastrophic error").
_COUNT = re.compile(
    r'^(?:\d+ errors?)? ?(?:and \d+ catastrophic errors? )?detected in the compilation of "(?P<name>.*)"\.$'
)
_GCC = re.compile(r"^(?P<line>\d+)(?::\d+)?: (?P<rest>(?:fatal )?(?:error|warning|note): .*)$")


def nvrtc_diagnostics(log: str, label: str) -> list[str]:
    """NVRTC's lines about the student's file (`label(N): ...`) and its count line; nothing else."""
    kept = []
    prefix = label + "("
    for line in log.splitlines():
        if line.startswith(prefix) and re.match(r"\d+\): ", line[len(prefix) :]):
            kept.append(line)
        elif (match := _COUNT.match(line.strip())) and match.group("name") == label:
            kept.append(line.strip())
    return kept


def gcc_diagnostics(log: str, source_name: str, label: str) -> list[str]:
    """g++'s lines about the student's file, as NVRTC writes them: `label(N): error: ...`.

    `source_name` is the name g++ was given for the file (its messages begin `source_name:N:C: `);
    "In function ...", "required from ...", included-from chains and other files' lines are dropped.
    """
    kept = []
    prefix = source_name + ":"
    for line in log.splitlines():
        if line.startswith(prefix) and (match := _GCC.match(line[len(prefix) :])):
            kept.append(f"{label}({match.group('line')}): {match.group('rest')}")
    return kept


def compiler_error_message(kept: list[str], label: str, compiler: str = "NVRTC") -> str:
    """The one message a failed compile gives: the student's lines, or a line saying why there are none."""
    about_the_file = [line for line in kept if line.startswith(label + "(")]
    if about_the_file:
        return "\n".join(kept)
    return (
        f"{label}: error: {compiler} rejected the file, but every message was about one of the driver's "
        "headers (not shown); check the macros defined before each #include"
    )
