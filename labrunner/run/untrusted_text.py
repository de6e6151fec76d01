"""Text that came from a student, shown and never interpreted: the one place it is escaped.

A kernel's printf, a compiler's message about a student's line, an error a worker reports, and
the name of a student's file: any of it can carry terminal escape sequences (a fake green PASS, a
cleared screen, a cursor moved over the verdict), a carriage return that overwrites the line it
is on, a newline that starts a line of its own, bidirectional-text controls that reorder what a
reader sees, or characters XML 1.0 forbids (a JUnit file that no CI can parse). `shown` writes
every such character as a visible escape (`\\x1b`, `\\r` as `\\x0d`, `\\u202e`), so the terminal,
the logs, the JSON, the CSV and the JUnit report all carry the same literal, harmless text.

Three more things a CI log reads as commands, not as text, are neutralised the same way:

- a line that starts with `::` (after any spaces) is a GitHub workflow command
  (`::error::`, `::stop-commands::`, `::add-mask::`); its first colon is written `\\x3a`;
- `##[` anywhere on a line is the runner's older command syntax (`##[error]`); its first `#` is
  written `\\x23`;
- a file name that is not valid UTF-8 reaches Python with each bad byte as a lone surrogate
  (`os.fsdecode`'s surrogate escapes, U+DC80 to U+DCFF); it is written as that byte, `\\xff`,
  so the name on screen says which byte it was and the text can always be encoded.

Every function here is idempotent: what it writes contains nothing it would escape again, so text
may pass through it at every stage (the worker, the JSON, the report) and read the same.
"""

from __future__ import annotations

import os
import re

# C0 controls but tab, DEL, the C1 controls (0x9b is a one-byte CSI), and the Unicode characters
# that move or reorder text: line and paragraph separators, bidi embeddings, overrides, isolates.
_CONTROLS = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069"
    "\ufeff\ufff9-\ufffb\ufffe\uffff\ud800-\udfff]"
)
# GitHub's runner trims leading whitespace before it looks for `::`, and finds `##[` anywhere.
_WORKFLOW_COMMAND = re.compile(r"^(\s*):(?=:)|#(?=#\[)")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte of a file name that was not UTF-8
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _no_command(match: re.Match[str]) -> str:
    return f"{match.group(1)}\\x3a" if match.group(1) is not None else "\\x23"


def shown(text: str) -> str:
    """`text` on one line with every control character escaped (newlines too), never a CI command."""
    return _WORKFLOW_COMMAND.sub(_no_command, _CONTROLS.sub(_escape, text))


def shown_path(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> str:
    """A file's name or path as it is shown everywhere: decoded as the OS decodes names, then `shown`."""
    return shown(os.fsdecode(path))


def shown_lines(text: str) -> list[str]:
    """`text` split at newlines, each line escaped."""
    return [shown(line) for line in text.split("\n")]


def shown_text(text: str) -> str:
    """`text` with its line breaks kept and everything else escaped: for messages of several lines."""
    return "\n".join(shown_lines(text))
