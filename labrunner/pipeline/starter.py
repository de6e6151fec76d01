"""`attnlab starter`: the file a student starts a lab from (CUDA C++, or Triton where the lab takes it), printed
or written."""

from __future__ import annotations

from pathlib import Path

from labrunner.exit_codes import usage_error
from labrunner.labs import LABS, get_lab
from labrunner.report.reporter import Reporter

LANGUAGES = ("cuda", "triton")


def starter_path(lab_name: str, language: str = "cuda") -> Path:
    lab = get_lab(lab_name)
    if language == "cuda":
        return lab.starter_path
    if not lab.triton_blocks:
        takes = ", ".join(name for name, other in LABS.items() if other.triton_blocks)
        raise usage_error(f"{lab_name} has no Triton starter: it takes a .cu file (Triton files: {takes})")
    return lab.triton_starter_path


def starter_text(lab: str, language: str = "cuda") -> str:
    return starter_path(lab, language).read_text()


def write_starter(lab: str, output: Path, force: bool, language: str, reporter: Reporter) -> None:
    """Writes the starter to `output`; an existing file is kept unless `force`."""
    text = starter_text(lab, language)
    if output.exists() and not force:
        raise usage_error(f"{output} exists; nothing was written (use --force to overwrite it)")
    try:
        output.write_text(text)
    except OSError as exc:
        raise usage_error(f"{output}: cannot be written ({exc.strerror}); check the folder exists") from None
    reporter.note(f"wrote {output}; grade it with: attnlab grade {lab} {output}")
