"""The files a command writes besides its output: each checked before the work, so no result is lost to it."""

from __future__ import annotations

import os
from pathlib import Path


def unwritable(path: Path) -> str | None:
    """Why a file cannot be written there, or None. Asked before the work, so no result is lost to it."""
    folder = path.parent
    if not folder.is_dir():
        return "No such file or directory"
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "Permission denied"
    return None
