"""Which files a batch grades, and the names of their reports."""

from __future__ import annotations

import os
import re
from pathlib import Path

from labrunner.exit_codes import usage_error
from labrunner.run.untrusted_text import shown_path

RESERVED_NAMES = ("junit", "gradebook")  # the batch's own files in --out-dir


def expand_submissions(paths: tuple[Path, ...]) -> list[Path]:
    """Files as given, and each folder's .cu entries (sorted by name), in the order named."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():  # the folder as named; reading each entry walks its path as build/source.py says
            found = folder_entries(path)
            if not found:
                raise usage_error(
                    f"{shown_path(path)}: a folder with no .cu files; name the submissions or their folder"
                )
            files += found
        else:  # a file, or anything else: reading it says what it is
            files.append(path)
    return files


def folder_entries(folder: Path) -> list[Path]:
    """Every entry of `folder` named *.cu that is not itself a folder, without following links.

    A link, a FIFO or a device named `x.cu` is listed like a file: grading it gives that submission
    its usage error (build/source.py), so it has its row in the gradebook and is never graded as
    whatever it points at. Folders are not descended into. Names come as the OS gives them, a name
    that is not UTF-8 with surrogate escapes (`os.fsdecode`), and are only ever shown escaped."""
    try:
        with os.scandir(folder) as entries:
            found = [
                folder / entry.name
                for entry in entries
                if Path(entry.name).suffix == ".cu" and not entry.is_dir(follow_symlinks=False)
            ]
    except OSError as exc:
        raise usage_error(f"{shown_path(folder)}: cannot list it ({exc.strerror}); check its permissions") from None
    return sorted(found, key=lambda p: p.name)


# A report's file name keeps these characters of the submission's stem and writes `_` for any other:
# a name with a newline, an escape sequence, a `;` or bytes that are not UTF-8 becomes a name any
# shell, spreadsheet or file system takes as it is. A leading dot or dash would hide the file or
# read as an option, so it becomes `_` too.
_REPORT_NAME_KEEPS = re.compile(r"[^A-Za-z0-9_.-]")
REPORT_NAME_MAX = 100


def report_name(path: Path) -> str:
    """The stem of `path` as a safe file name (before it is made unique)."""
    stem = _REPORT_NAME_KEEPS.sub("_", path.stem)[:REPORT_NAME_MAX]
    return re.sub(r"^[.-]", "_", stem) or "submission"


def report_names(files: list[Path]) -> list[str]:
    """A report name per submission: its safe stem, made unique (a.cu twice becomes a, a-2; unique without
    regard to case, for file systems that ignore it) and never the batch's own."""
    used = {name.lower() for name in RESERVED_NAMES}
    names = []
    for path in files:
        stem = report_name(path)
        name, n = stem, 1
        while name.lower() in used:
            n += 1
            name = f"{stem}-{n}"
        used.add(name.lower())
        names.append(name)
    return names
