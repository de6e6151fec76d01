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

A failing case's annotation carries the grade's hints (`hint (hazard): text`), since a hint says
why the numbers are wrong where the case only says that they are.

A batch is annotated once per failing submission, not once per failing case: GitHub shows at most
10 error annotations per step (and 50 per job) and drops the rest without a word, so 12 submissions
failing 4 cases each would show the first 10 lines of the first 3 students. Each failing submission
gets one line, its decisive failure (the worst case, the compile error, the error that stopped it,
or the missed gate) with its first hint; the worst submissions come first (the exit codes' order,
truth/verdict.py), at most 10 of them; and a notice, always there, counts the batch's exit codes
and says how many failing submissions were left out.
"""

from __future__ import annotations

import re
from pathlib import Path

from labrunner.compile.source import read_source
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.report.results import ResultJson
from labrunner.run.untrusted_text import shown, shown_text
from labrunner.truth.verdict import BATCH_EXIT_CODES, ERROR_VERDICTS, NOT_RUN, SEVERITY, WORST_FIRST, Status

COMPILER_LINE = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<kind>error|warning): (?P<text>.*)$")
# What GitHub shows of one step's annotations: 10 of each level (error, warning, notice), 50 in a job.
ERRORS_PER_STEP = 10


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, file: str | None, message: str, line: int | None = None, title: str | None = None) -> str:
    properties = [f"file={escape_property(shown(file))}"] if file is not None else []
    if line is not None:
        properties.append(f"line={int(line)}")
    if title:
        properties.append(f"title={escape_property(shown(title))}")
    return f"::{kind} {','.join(properties)}::{escape_data(shown_text(message))}"


def with_hints(message: str, hints: list[object] | None) -> str:
    """A failure's message, then each hint on a line of its own, as the terminal prints them."""
    lines = [message]
    for hint in hints or []:
        if isinstance(hint, dict) and hint.get("text"):
            lines.append(f"hint ({hint.get('hazard') or 'hint'}): {hint['text']}")
    return "\n".join(lines)


def kernel_line(path: Path, entry_points: tuple[str, ...]) -> int | None:
    """The line where the file defines its first entry point, or None when it cannot be read or found.

    Read as the grade read it (compile/source.py): never through a link, never more than 1 MiB."""
    try:
        lines = read_source(path, "").splitlines()
    except AttnlabError:
        return None
    for number, text in enumerate(lines, start=1):
        if any(re.search(rf"\b{re.escape(name)}\s*\(", text) for name in entry_points):
            return number
    return None


def github_annotations(data: ResultJson) -> list[str]:
    """The workflow commands for one result: compile errors and failing cases (and a missed speed gate)."""
    file = data.get("file")
    if not file:
        return []
    lab = data.get("lab") or ""
    lines: list[str] = []
    error = data.get("error")
    if error and data.get("verdict") == Status.COMPILE_ERROR:
        for found in compiler_errors(error):
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
        message = with_hints(case["message"], data.get("hints"))
        lines.append(command("error", file, message, line, f"attnlab {lab} {case['name']}: {case['status']}"))
    if not gate.get("passed", True):
        lines.append(command("error", file, gate["message"], line, f"attnlab {lab}: speed gate"))
    return lines


def compiler_errors(error: str) -> list[re.Match[str]]:
    """The compiler's `file(line): error: text` lines of a compile error, in its order (warnings left out)."""
    return [found for found in map(COMPILER_LINE.match, error.splitlines()) if found and found["kind"] == "error"]


def entry_point_names(lab: str) -> tuple[str, ...]:
    from labrunner.labs import LABS

    definition = LABS.get(lab)
    return tuple(e.name for e in definition.entry_points) if definition else ()


def submission_annotation(data: ResultJson) -> str | None:
    """One submission's line in a batch: its decisive failure with its first hint; None for a pass (or a
    result that names no file, which the batch's notice still counts)."""
    file = data.get("file")
    verdict = data.get("verdict")
    if not file or verdict == Status.PASS:
        return None
    lab = data.get("lab") or ""
    error = data.get("error")
    if error and verdict == Status.COMPILE_ERROR:
        errors = compiler_errors(error)
        if not errors:
            return command("error", file, error, title=f"attnlab {lab}: compile error")
        more = f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        return command("error", file, errors[0]["text"] + more, int(errors[0]["line"]), f"attnlab {lab}: compile error")
    if error:
        return command("error", file, error, title=f"attnlab {lab}: {verdict}")
    cases = [c for c in data.get("cases") or [] if c["status"] not in (Status.PASS, *NOT_RUN)]
    worst = next((c for c in cases if c["name"] == data.get("decisive_case")), None)
    if worst is None and cases:  # a result written before it named its decisive case
        worst = min(cases, key=lambda c: SEVERITY.index(Status(c["status"])))
    line = kernel_line(Path(file), entry_point_names(lab))
    if worst is not None:
        message = with_hints(worst["message"], (data.get("hints") or [])[:1])
        return command("error", file, message, line, f"attnlab {lab} {worst['name']}: {worst['status']}")
    gate = data.get("gate") or {}
    if not gate.get("passed", True):
        return command("error", file, gate["message"], line, f"attnlab {lab}: speed gate")
    return None


def exit_code_words(code: int | None) -> str:
    """An exit code as a batch counts it: `wrong answer`, `compile error`, `interrupted`."""
    if code is None:
        return "no exit code"
    try:
        known = ExitCode(code)
    except ValueError:
        return f"exit {code}"
    return BATCH_EXIT_CODES.get(known) or ERROR_VERDICTS.get(known, Status.ERROR).replace("-", " ")


def worst_first(data: ResultJson) -> tuple[int, int]:
    """Where a submission's line goes: by its exit code, in the order a batch picks its own exit code
    (truth/verdict.py's WORST_FIRST), then by how severe its verdict is; a code that order lacks goes last."""
    code = data.get("exit_code")
    by_code = next((i for i, known in enumerate(WORST_FIRST) if code == int(known)), len(WORST_FIRST))
    verdict = data.get("verdict")
    return by_code, SEVERITY.index(Status(verdict)) if verdict in SEVERITY else -1


def github_batch_annotations(results: list[ResultJson]) -> list[str]:
    """A batch's workflow commands: a notice that counts its exit codes, then one error per failing
    submission, worst first, at most `ERRORS_PER_STEP` (the notice says how many were left out)."""
    labs = sorted({str(data["lab"]) for data in results if data.get("lab")})
    title = f"attnlab {labs[0]}" if len(labs) == 1 else "attnlab"
    order = sorted(range(len(results)), key=lambda i: (worst_first(results[i]), i))
    errors = [line for line in (submission_annotation(results[i]) for i in order) if line is not None]
    counts: dict[str, int] = {}  # in exit codes' order, as the batch's own lines count them
    for code in sorted((data.get("exit_code") for data in results), key=lambda c: (c is None, c or 0)):
        counts[exit_code_words(code)] = counts.get(exit_code_words(code), 0) + 1
    summary = f"{len(results)} submission{'s' if len(results) != 1 else ''}"
    if counts:
        summary += ": " + ", ".join(f"{count} {words}" for words, count in counts.items())
    left_out = len(errors) - ERRORS_PER_STEP
    if left_out > 0:
        summary += (
            f"; {left_out} more failing submission{'s are' if left_out != 1 else ' is'} not annotated (GitHub "
            f"shows {ERRORS_PER_STEP} errors a step): the gradebook lists every one"
        )
    return [command("notice", None, summary, title=title), *errors[:ERRORS_PER_STEP]]
