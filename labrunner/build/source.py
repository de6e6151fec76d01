"""Reading a submission: one UTF-8 text file of sensible size, or a usage error saying why not."""

from __future__ import annotations

from pathlib import Path

from labrunner.exit_codes import usage_error

MAX_SOURCE_BYTES = 1 << 20


def read_source(path: Path, label: str) -> str:
    if not path.exists():
        raise usage_error(f"{label}: no such file; pass the path of your .cu file (`attnlab starter LAB` writes one)")
    if path.is_dir():
        raise usage_error(f"{label}: is a folder, not a .cu file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise usage_error(f"{label}: cannot be read ({exc.strerror}); check its permissions") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise usage_error(f"{label}: {len(data)} bytes is more than a kernel file needs (limit {MAX_SOURCE_BYTES})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise usage_error(f"{label}: is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
