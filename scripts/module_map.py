"""The module map of docs/ARCHITECTURE.md, made from the tree: every module of labrunner/, by folder, with the
first sentence of its docstring. `python scripts/module_map.py --write` rewrites the map in the document;
tests/test_architecture_doc.py fails when the document's map is not the tree's."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCUMENT = REPO / "docs" / "ARCHITECTURE.md"
BEGIN = "<!-- module map: made by scripts/module_map.py from each module's docstring; do not edit by hand -->"
END = "<!-- end of the module map -->"


def first_sentence(docstring: str) -> str:
    """The docstring's first sentence, on one line (its first paragraph where no sentence ends in it)."""
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    ended = re.search(r"[.!?](?=\s|$)", paragraph)
    return paragraph[: ended.end()] if ended else paragraph


def module_map(root: Path = REPO / "labrunner") -> str:
    """A table per folder of labrunner/ (the package itself first): each module and what it is."""
    folders: dict[Path, list[Path]] = {}
    for path in sorted(root.rglob("*.py")):
        folders.setdefault(path.parent, []).append(path)
    sections = []
    for folder in sorted(folders, key=lambda f: (f != root, str(f))):
        name = folder.relative_to(root.parent).as_posix() + "/"
        rows = [f"### `{name}`", "", "| module | what it is |", "|---|---|"]
        for path in folders[folder]:
            docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
            said = first_sentence(docstring).replace("|", "\\|")  # a table cell's own bar, escaped
            rows.append(f"| `{path.name}` | {said} |")
        sections.append("\n".join(rows))
    return "\n\n".join(sections) + "\n"


def with_map(document: str, table: str) -> str:
    """The document with the text between its two markers replaced by `table`."""
    start, end = document.index(BEGIN) + len(BEGIN), document.index(END)
    return document[:start] + "\n\n" + table + "\n" + document[end:]


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python scripts/module_map.py --write")
    DOCUMENT.write_text(with_map(DOCUMENT.read_text(), module_map()))
