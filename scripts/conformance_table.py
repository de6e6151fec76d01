"""The exploit conformance table as the README prints it, rendered from tests/fixtures/conformance.toml.

    python scripts/conformance_table.py        # prints the Markdown tables: fixtures, then pygpubench's Python exploits

tests/test_conformance.py holds the README's copy to this rendering, so the table cannot drift from
the data, and the data cannot drift from the fixtures' expected verdicts.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TABLE = REPO / "tests" / "fixtures" / "conformance.toml"


def cell(verdict: str) -> str:
    """A verdict as a table cell: `n/a (CPU only): why` keeps its first words (the why is in the data)."""
    return verdict.split(":", 1)[0] if verdict.startswith("n/a") else f"`{verdict}`"


def conformance() -> dict:
    return tomllib.loads(TABLE.read_text())


def render() -> str:
    rows = conformance()["fixture"]
    lines = ["| class | source | fixture | CPU | GPU |", "|---|---|---|---|---|"]
    for row in rows:
        fixture = row["fixture"].removeprefix("tests/fixtures/")
        lines.append(f"| {row['class']} | {row['source']} | `{fixture}` | {cell(row['cpu'])} | {cell(row['gpu'])} |")
    return "\n".join(lines)


def render_python() -> str:
    """pygpubench's Python exploits: whether a `.cu` file and a Triton file can carry each out."""
    entries = [e for e in conformance()["published"] if "triton" in e]
    lines = ["| exploit | `.cu` file | Triton file | Triton fixtures |", "|---|---|---|---|"]
    for entry in entries:
        name = entry["exploit"].removeprefix("gpu-mode/pygpubench exploits/")
        fixtures = ", ".join(f"`{f.removeprefix('tests/fixtures/')}`" for f in entry["triton_fixtures"]) or "-"
        lines.append(f"| {name} | {entry['applies']} | {entry['triton']} | {fixtures} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render())
    print()
    print(render_python())
