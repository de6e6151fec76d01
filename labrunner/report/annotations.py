"""CI annotations: GitHub Actions' `::error file=...,line=...::` workflow commands.

GitHub reads these lines from a job's log and pins each message to the line of the file it names
(in the run's summary and, on a pull request, in the diff). A compile error points at the
compiler's line; a failing case points at the kernel's definition, the nearest line a wrong number
can name.

Everything in a message can come from the submission (a compiler quotes the student's source),
and so can the file's name. Both are `shown` first (untrusted_text.py: no control character, no
escape sequence), then escaped exactly as GitHub's runner unescapes them: in the message `%` as
`%25`, CR as `%0D`, LF as `%0A`; in a property (file=, title=) those and also `:` as `%3A` and `,`
as `%2C`, because `::` ends the properties and `,` separates them. A workflow command ends at a
newline, so a student's text can never start a command of its own, nor end ours early.
"""

from __future__ import annotations

import re
from pathlib import Path

from labrunner.build.source import read_source
from labrunner.exit_codes import AttnlabError
from labrunner.run.untrusted_text import shown, shown_text
from labrunner.truth.verdict import NOT_RUN, Status

COMPILER_LINE = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<kind>error|warning): (?P<text>.*)$")


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, file: str, message: str, line: int | None = None, title: str | None = None) -> str:
    properties = [f"file={escape_property(shown(file))}"]
    if line is not None:
        properties.append(f"line={int(line)}")
    if title:
        properties.append(f"title={escape_property(shown(title))}")
    return f"::{kind} {','.join(properties)}::{escape_data(shown_text(message))}"


def kernel_line(path: Path, entry_points: tuple[str, ...]) -> int | None:
    """The line where the file defines its first entry point, or None when it cannot be read or found.

    Read as the grade read it (build/source.py): never through a link, never more than 1 MiB."""
    try:
        lines = read_source(path, "").splitlines()
    except AttnlabError:
        return None
    for number, text in enumerate(lines, start=1):
        if any(re.search(rf"\b{re.escape(name)}\s*\(", text) for name in entry_points):
            return number
    return None


def github_annotations(data: dict) -> list[str]:
    """The workflow commands for one result: compile errors and failing cases (and a missed speed gate)."""
    file = data.get("file")
    if not file:
        return []
    lab = data.get("lab") or ""
    lines: list[str] = []
    error = data.get("error")
    if error and data.get("verdict") == Status.COMPILE_ERROR:
        for text in error.splitlines():
            found = COMPILER_LINE.match(text)
            if found and found["kind"] == "error":
                lines.append(command("error", file, found["text"], int(found["line"]), f"attnlab {lab}: compile error"))
        if not lines:
            lines.append(command("error", file, error, title=f"attnlab {lab}: compile error"))
        return lines
    if error:
        return [command("error", file, error, title=f"attnlab {lab}: {data.get('verdict')}")]
    failing = [c for c in data.get("cases") or [] if c["status"] not in (Status.PASS, *NOT_RUN)]
    gate = data.get("gate") or {}
    if not failing and gate.get("passed", True):
        return []
    line = kernel_line(Path(file), entry_point_names(lab))
    for case in failing:
        lines.append(command("error", file, case["message"], line, f"attnlab {lab} {case['name']}: {case['status']}"))
    if not gate.get("passed", True):
        lines.append(command("error", file, gate["message"], line, f"attnlab {lab}: speed gate"))
    return lines


def entry_point_names(lab: str) -> tuple[str, ...]:
    from labrunner.labs import LABS

    definition = LABS.get(lab)
    return tuple(e.name for e in definition.entry_points) if definition else ()


def github_batch_annotations(results: list[dict]) -> list[str]:
    """The workflow commands for a batch's results."""
    return [line for data in results for line in github_annotations(data)]
