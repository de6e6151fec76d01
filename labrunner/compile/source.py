"""Reading a submission: one regular UTF-8 text file of sensible size, or a usage error saying why not.

Whatever a student hands in is hostile, and that includes what kind of file it is. A symbolic link
named `flash.cu` may point at a classmate's file (their PASS) or at a secret (its lines, quoted back
by the compiler's diagnostics); a FIFO would make the grader wait forever; `/dev/zero` or a sparse
1.5 GB file would fill its memory. So a submission is read in one way only:

1. Each folder on its path is opened in turn, without following links, from the working folder
   down, and the file is opened inside the last one with `O_NOFOLLOW` (a link is refused, never
   followed), `O_NONBLOCK` (a FIFO cannot make the open wait) and `O_CLOEXEC` (no child inherits it).
   The file's type is asked first without following anything (`lstat`), so a FIFO or a device is
   never opened at all, and asked again of the open descriptor (`fstat`), which is the answer that
   counts: the name cannot be swapped for something else between the check and the read.
2. It must be a regular file, of at most `MAX_SOURCE_BYTES`, and at most that many bytes plus one
   are ever read: a file that grows while it is read is refused on the extra byte.

Which folders are walked without following links: those below the working folder. A student can
make any of them a link (git stores links, an archive unpacks them), and a glob such as
`subs/*/kernels/flash.cu` would reach through `alice/kernels -> ../bob/kernels` to Bob's file. The
working folder itself, and a path that lies outside it (an absolute path elsewhere, `../`), are
where the grader chose to look, and those are taken as named: links above the submissions (a home
folder on a cluster's shared disk, macOS's /var, the installed package) are the grader's machine,
not a student's doing. Paths are normalised (`a/../b`) before the walk, as the user wrote them.

The messages name the file by `label`, which the caller has already escaped for display; nothing
here prints a path of its own.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from labrunner.exit_codes import AttnlabError, usage_error

MAX_SOURCE_BYTES = 1 << 20

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
# A folder is only walked through, never listed: O_PATH (Linux) needs no read permission on it.
_FOLDER_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC

IS_A_LINK = "is a symbolic link; grade the file itself, not a link to it"
IS_A_FOLDER = "is a folder, not a .cu file"
# What each kind of file that is not a regular one is called when it is refused.
_NOT_REGULAR = (
    (stat.S_ISLNK, IS_A_LINK),
    (stat.S_ISDIR, IS_A_FOLDER),
    (stat.S_ISFIFO, "is a FIFO, not a regular file"),
    (stat.S_ISCHR, "is a character device, not a regular file"),
    (stat.S_ISBLK, "is a block device, not a regular file"),
    (stat.S_ISSOCK, "is a socket, not a regular file"),
)


UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")

# What reading the submission found and set right, said once by the command that read it (`take_notes`).
_notes: list[str] = []


def read_source(path: Path, label: str) -> str:
    """The submission's text, or a usage error (exit 2) that says what is wrong with the file.

    A UTF-8 byte-order mark (an editor's "UTF-8 with BOM") is removed, with a note: the compilers would
    read its three bytes as code and give errors about a line that looks empty. It takes no line, so
    every line number stays the student's. Any other encoding is refused in one line that says where."""
    data = read_source_bytes(path, label)
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM) :]
        if label:
            _notes.append(
                f"{label}: starts with a UTF-8 byte-order mark, removed before compiling (save the file as "
                "UTF-8 without BOM to silence this note)"
            )
    if data.startswith(UTF16_BOMS):
        raise usage_error(f"{label}: is UTF-16 text, which the compilers do not read; save it as UTF-8") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise usage_error(
            f"{label}: is not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}, column {column} "
            "(a file saved as Latin-1 or Windows-1252?); save it as UTF-8"
        ) from None


def take_notes() -> list[str]:
    """The notes reading submissions left (a byte-order mark removed), each said once: taken, they are gone."""
    notes = list(_notes)
    _notes.clear()
    return notes


def read_source_bytes(path: Path, label: str) -> bytes:
    """The submission's bytes, read as the module's docstring says, or a usage error."""
    fd = _open_submission(Path(path), label)
    try:
        status = os.fstat(fd)  # what was opened, whatever the name points at now
        _refuse_unless_regular(status.st_mode, label)
        _refuse_if_too_large(status.st_size, label)
        data = _read_at_most(fd, MAX_SOURCE_BYTES + 1)
    except OSError as exc:
        raise usage_error(f"{label}: cannot be read ({exc.strerror}); check its permissions") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SOURCE_BYTES:  # it grew after fstat: refused on the byte past the limit
        raise usage_error(
            f"{label}: more than {MAX_SOURCE_BYTES} bytes is more than a kernel file needs (limit {MAX_SOURCE_BYTES})"
        )
    return data


def submission_sha256(path: Path) -> str | None:
    """The sha256 of the file as `read_source_bytes` reads it, or None where it would refuse the file."""
    import hashlib

    try:
        return hashlib.sha256(read_source_bytes(path, "")).hexdigest()
    except AttnlabError:
        return None


def _open_submission(path: Path, label: str) -> int:
    start, folders, name = _walk_plan(path)
    if not name:  # the working folder itself, or `/`
        raise usage_error(f"{label}: {IS_A_FOLDER}")
    try:
        folder = os.open(start, _FOLDER_FLAGS)
    except OSError as exc:
        raise _not_found_or_unreadable(exc, label) from None
    try:
        for part in folders:
            try:
                inner = os.open(part, _FOLDER_FLAGS | os.O_NOFOLLOW, dir_fd=folder)
            except OSError as exc:
                if _is_link(part, folder):
                    raise usage_error(
                        f"{label}: a folder on its path is a symbolic link; name the file by its "
                        "real path, not through a link"
                    ) from None
                raise _not_found_or_unreadable(exc, label) from None
            os.close(folder)
            folder = inner
        try:
            before = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except OSError as exc:
            raise _not_found_or_unreadable(exc, label) from None
        _refuse_unless_regular(before.st_mode, label)  # a FIFO or a device is never opened
        _refuse_if_too_large(before.st_size, label)
        try:
            return os.open(name, _FILE_FLAGS, dir_fd=folder)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # became a link after the lstat
                raise usage_error(f"{label}: {IS_A_LINK}") from None
            raise _not_found_or_unreadable(exc, label) from None
    finally:
        os.close(folder)


def _walk_plan(path: Path) -> tuple[str, tuple[str, ...], str]:
    """Where the walk starts (taken as named), the folders walked without following links, the file's name."""
    absolute = Path(os.path.abspath(path))
    try:
        below = absolute.relative_to(os.getcwd())
    except (ValueError, OSError):  # outside the working folder, or no working folder at all
        return str(absolute.parent), (), absolute.name
    return ".", below.parts[:-1], below.name


def _is_link(name: str, folder: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _refuse_unless_regular(mode: int, label: str) -> None:
    if stat.S_ISREG(mode):
        return
    words = next((words for test, words in _NOT_REGULAR if test(mode)), "is not a regular file")
    raise usage_error(f"{label}: {words}")


def _refuse_if_too_large(size: int, label: str) -> None:
    if size > MAX_SOURCE_BYTES:
        raise usage_error(f"{label}: {size} bytes is more than a kernel file needs (limit {MAX_SOURCE_BYTES})")


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks, total = [], 0
    while total < limit:
        chunk = os.read(fd, min(limit - total, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _not_found_or_unreadable(exc: OSError, label: str) -> AttnlabError:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return usage_error(f"{label}: no such file; pass the path of your .cu file (`attnlab starter LAB` writes one)")
    return usage_error(f"{label}: cannot be read ({exc.strerror}); check its permissions")
