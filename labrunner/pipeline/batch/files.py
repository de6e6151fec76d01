"""Which files a batch grades, and the names of their reports."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from labrunner.exit_codes import usage_error
from labrunner.run.untrusted_text import shown_path

RESERVED_NAMES = ("junit", "gradebook")  # the batch's own files in --out-dir


@dataclass(frozen=True)
class Found:
    """A file the batch grades, and the student it belongs to where the layout names one (a folder each)."""

    path: Path
    student: str | None = None


@dataclass(frozen=True)
class NotGraded:
    """An entry of a submissions folder that is not graded, and why, so no student is dropped unsaid."""

    path: Path
    reason: str


SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".c", ".cuh", ".h", ".hpp")


CU_ONLY = (".cu",)
WITH_TRITON = (".cu", ".py")  # a lab that takes Triton files (its `triton_blocks`)


def kinds(suffixes: tuple[str, ...]) -> str:
    """The kinds of file a folder's submissions are, in words: `.cu` or `.cu or .py`."""
    return " or ".join(suffixes)


def expand_submissions(
    paths: tuple[Path, ...], suffixes: tuple[str, ...] = CU_ONLY
) -> tuple[list[Found], list[NotGraded]]:
    """Files as given, and each folder's submissions, in the order named; and what the folders held that
    is not graded. A folder is either `DIR/*.cu` or `DIR/<student>/<file>.cu` (a folder per student,
    the student named by the folder), or both at once; `suffixes` are the kinds of file a folder's
    submissions are (`.py` too, in a lab that takes Triton)."""
    found: list[Found] = []
    skipped: list[NotGraded] = []
    for path in paths:
        if path.is_dir():  # the folder as named; reading each entry walks its path as compile/source.py says
            files, passed = folder_submissions(path, suffixes)
            if not files:
                raise usage_error(
                    # said of .cu files in every lab: a Triton lab's .py files are named in `grade --help`
                    f"{shown_path(path)}: a folder with no .cu files, nor a folder per student holding them; "
                    "name the submissions or their folder"
                )
            found += files
            skipped += passed
        else:  # a file, or anything else: reading it says what it is
            found.append(Found(path))
    return found, skipped


def folder_submissions(folder: Path, suffixes: tuple[str, ...] = CU_ONLY) -> tuple[list[Found], list[NotGraded]]:
    """A submissions folder's .cu entries (and .py, where `suffixes` has it), then each student folder's,
    sorted by name; and the rest.

    Links are never followed: a link, a FIFO or a device named `x.cu` is listed like a file, and grading
    it gives that submission its usage error (compile/source.py), so it has its row in the gradebook and is
    never graded as whatever it points at; a link to a folder is not a student's folder. Names come as
    the OS gives them (a name that is not UTF-8 with surrogate escapes) and are only ever shown escaped."""
    found: list[Found] = []
    skipped: list[NotGraded] = []
    for entry in sorted(listed(folder), key=lambda e: e.name):
        path = folder / entry.name
        if is_submission(entry, suffixes):
            found.append(Found(path))
        elif entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
            own = [e for e in sorted(listed(path), key=lambda e: e.name)]
            files = [e for e in own if is_submission(e, suffixes)]
            found += [Found(path / e.name, entry.name) for e in files]
            skipped += [
                NotGraded(path / e.name, why_not_graded(e, in_student_folder=True, suffixes=suffixes))
                for e in own
                if e not in files
            ]
            if not files:
                skipped.append(NotGraded(path, f"a student's folder with no {kinds(suffixes)} file in it"))
        else:
            skipped.append(NotGraded(path, why_not_graded(entry, in_student_folder=False, suffixes=suffixes)))
    return found, skipped


def is_submission(entry: os.DirEntry[str], suffixes: tuple[str, ...] = CU_ONLY) -> bool:
    """A `.cu` (or `.py`) entry that is not a folder and not hidden (`._flash.cu` is the copy macOS's
    archiver leaves)."""
    return (
        Path(entry.name).suffix in suffixes
        and not entry.is_dir(follow_symlinks=False)
        and not entry.name.startswith(".")
    )


def listed(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError as exc:
        raise usage_error(f"{shown_path(folder)}: cannot list it ({exc.strerror}); check its permissions") from None


def why_not_graded(entry: os.DirEntry[str], in_student_folder: bool, suffixes: tuple[str, ...] = CU_ONLY) -> str:
    suffix = Path(entry.name).suffix
    if entry.is_dir(follow_symlinks=False):
        if in_student_folder:
            return "a folder inside a student's folder (only the student's folder itself is searched)"
        return "a hidden folder, not searched"
    if entry.name.startswith("."):
        return "a hidden file (such as the ._ copies macOS's archiver leaves), not graded"
    if entry.is_symlink() and entry.is_dir():
        return "a link to a folder, not followed (a student's folder must be a folder)"
    if suffix.lower() in suffixes:
        right = suffix.lower()
        return f"named {suffix}, not {right}: rename it {Path(entry.name).stem}{right} to grade it"
    if suffix.lower() in SOURCE_SUFFIXES:
        return "a C++ source or header: a lab's kernels are graded from one .cu file"
    return f"not a {kinds(suffixes)} file"


# A report's file name keeps these characters of the submission's stem and writes `_` for any other:
# a name with a newline, an escape sequence, a `;` or bytes that are not UTF-8 becomes a name any
# shell, spreadsheet or file system takes as it is. A leading dot or dash would hide the file or
# read as an option, so it becomes `_` too.
_REPORT_NAME_KEEPS = re.compile(r"[^A-Za-z0-9_.-]")
REPORT_NAME_MAX = 100


def report_name(text: str) -> str:
    """`text` (a stem, the student's folder before it) as a safe file name (before it is made unique)."""
    stem = _REPORT_NAME_KEEPS.sub("_", text)[:REPORT_NAME_MAX]
    return re.sub(r"^[.-]", "_", stem) or "submission"


def report_names(files: list[Found]) -> list[str]:
    """A report name per submission: its safe stem, made unique (unique without regard to case, for file
    systems that ignore it) and never the batch's own. It keeps the student: a file in a student's folder
    is `<student>-<stem>`, and files named alike in different folders (a glob over `subs/*/flash.cu`)
    take their folder's name first, so `subs/alice/flash.cu` is `alice-flash`, never `flash-2`."""
    stems = [f.path.stem.lower() for f in files]
    used = {name.lower() for name in RESERVED_NAMES}
    names = []
    for found in files:
        owner = found.student or (found.path.parent.name if stems.count(found.path.stem.lower()) > 1 else "")
        stem = report_name(f"{owner}-{found.path.stem}" if owner else found.path.stem)
        name, n = stem, 1
        while name.lower() in used:
            n += 1
            name = f"{stem}-{n}"
        used.add(name.lower())
        names.append(name)
    return names
