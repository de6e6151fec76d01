"""`attnlab starter`: the .cu file a student starts a lab from, printed or written."""

from __future__ import annotations

from pathlib import Path

from labrunner.exit_codes import usage_error
from labrunner.labs import get_lab
from labrunner.report import terminal


def starter_text(lab: str) -> str:
    return get_lab(lab).starter_path.read_text()


def write_starter(lab: str, output: Path, force: bool) -> None:
    """Writes the starter to `output`; an existing file is kept unless `force`."""
    text = starter_text(lab)
    if output.exists() and not force:
        raise usage_error(f"{output} exists; nothing was written (use --force to overwrite it)")
    try:
        output.write_text(text)
    except OSError as exc:
        raise usage_error(f"{output}: cannot be written ({exc.strerror}); check the folder exists") from None
    terminal.note(f"wrote {output}; grade it with: attnlab grade {lab} {output}")
