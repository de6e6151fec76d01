"""Text that came from student code, shown and never interpreted.

A kernel's printf, a compiler's message about a student's line, an error a worker reports: any
of it can carry terminal escape sequences (a fake green PASS, a cleared screen, a cursor moved
over the verdict), a carriage return that overwrites the line it is on, bidirectional-text
controls that reorder what a reader sees, or characters XML 1.0 forbids (a JUnit file that no CI
can parse). `shown` writes every such character as a visible escape (`\\x1b`, `\\r`, `\\u202e`), so
the terminal, the JSON and the JUnit report all carry the same literal, harmless text.
"""

from __future__ import annotations

import re

# C0 controls but tab, DEL, the C1 controls (0x9b is a one-byte CSI), and the Unicode characters
# that move or reorder text: line and paragraph separators, bidi embeddings, overrides, isolates.
_CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069"
                       "\ufeff\ufff9-\ufffb\ufffe\uffff\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: str) -> str:
    """`text` on one line with every control character escaped (newlines too)."""
    return _CONTROLS.sub(_escape, text)


def shown_lines(text: str) -> list[str]:
    """`text` split at newlines, each line escaped."""
    return [shown(line) for line in text.split("\n")]


def shown_text(text: str) -> str:
    """`text` with its line breaks kept and everything else escaped: for messages of several lines."""
    return "\n".join(shown_lines(text))
