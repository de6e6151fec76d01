"""Whose each submission is, so that a batch has one row per student, never two and never a guess.

A student is named by the layout the files came in:

- in a folder named on the command line, a file at its top is the student of its stem
  (`subs/alice.cu`: alice) and a file in a folder of its own is that folder's (`subs/erin/flash.cu`:
  erin);
- a file named on the command line is its folder's when the command line shows that folder to be a
  student's: it lies in a folder that is itself inside the folder of another file or folder named
  (`subs/alice.cu subs/erin/flash.cu`, `subs/ extra/erin/flash.cu` with `extra/bob.cu`), or files of the
  same name are named in several folders (a glob, `subs/*/flash.cu`). Otherwise its stem names it.

A student with more than one candidate file (`dave/a.cu` and `dave/b.cu`; `alice.cu` beside
`alice.py`; `alice.cu` beside the folder `alice/`) is not graded at all: which one the student meant
is theirs to say, so the row says so and scores 0, and the batch never picks one.

A file the batch found in a folder that cannot be graded as it is (a link, a FIFO or a device, an
unreadable, too large or undecodable file) is that student's fault, not the command's: the batch reads
each such file itself, as the grade reads it (compile/source.py), and a file it refuses is marked so. Its
grade still runs (and refuses it with the same words) so that its row and its report are the grade's
own. A path typed on the command line that cannot be graded stays the command's usage error.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from labrunner.compile.source import read_source, read_source_bytes, take_notes
from labrunner.exit_codes import AttnlabError
from labrunner.pipeline.batch.files import Found
from labrunner.run.untrusted_text import shown_path


@dataclass(frozen=True)
class Student:
    """One student's files, as the batch found them."""

    name: str
    files: tuple[Found, ...]
    listed: bool  # found in a folder the command named: a file that cannot be graded is the student's fault

    @property
    def several(self) -> str:
        """The row's words for a student with more than one candidate file, "" where there is one."""
        if len(self.files) < 2:
            return ""
        names = ", ".join(shown_path(Path(f.path.name)) for f in self.files)
        return f"{len(self.files)} files for one student ({names}): keep one and grade again; none of them was graded"

    @property
    def shown_file(self) -> str:
        """What the row names as the file: the one file, or for several the student's folder (or the first)."""
        first = self.files[0]
        return str(first.path.parent if first.student and len(self.files) > 1 else first.path)


def _folder(path: Path) -> str:
    return os.path.normpath(os.path.abspath(path))


def with_students(found: list[Found], typed: tuple[Path, ...]) -> list[Found]:
    """`found` with each file named on the command line that lies in a student's folder given that folder as
    its student (the module's docstring says when it does)."""
    named_files = [f for f in found if f.student is None and f.path in typed]
    named_folders = {_folder(p) for p in typed if p.is_dir()} | {_folder(f.path.parent) for f in named_files}
    stems = Counter(f.path.stem.lower() for f in named_files)
    students: dict[Path, str] = {}
    for f in named_files:
        parent = f.path.parent
        if not parent.name or parent.name in (".", ".."):
            continue
        inside_another = _folder(parent.parent) in named_folders and _folder(parent.parent) != _folder(parent)
        if inside_another or stems[f.path.stem.lower()] > 1:
            students[f.path] = parent.name
    return [Found(f.path, students[f.path]) if f.path in students else f for f in found]


def group_students(found: list[Found], typed: tuple[Path, ...]) -> list[Student]:
    """The students in the order their first file was found, each with every candidate file it has."""
    files: dict[str, list[Found]] = {}
    for f in found:
        files.setdefault(f.student or f.path.stem, []).append(f)
    typed_set = set(typed)
    return [
        Student(name, tuple(owned), listed=all(f.path not in typed_set for f in owned)) for name, owned in files.items()
    ]


def refused(path: Path) -> str | None:
    """Why the grade would refuse this file as the student handed it in, or None where it reads it."""
    try:
        read_source(path, shown_path(path))
    except AttnlabError as exc:
        return exc.message
    finally:
        take_notes()  # a byte-order mark's note is the grade's to say, once
    return None


def submitted_bytes(path: Path) -> bytes | None:
    """The file's bytes as the grade reads them (no link followed, at most 1 MiB), or None."""
    try:
        return read_source_bytes(path, "")
    except AttnlabError:
        return None
