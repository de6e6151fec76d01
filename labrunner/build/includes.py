"""The include policy: a submission may include only the driver's own headers.

Decided before any compiler runs, so no compiler ever opens a file a submission names.
"""

from __future__ import annotations

import re

from labrunner.exit_codes import AttnlabError, ExitCode

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
