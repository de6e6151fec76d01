"""The grader's own cache on this machine: what every grade would otherwise rebuild, built once.

What lies here is made by the driver alone, from the grader's own files (the CPU runtime's
preprocessed headers and its baseline object, the starter's compiled module), never from a
submission or from anything a box wrote: a box maps it read-only, so no submission can write to it
or plant something for the next. Each entry is named by a digest of everything it was made from
(compiler, flags, headers, source, architecture, attnlab's version), so a changed input makes a new
entry instead of reusing a stale one.

The folder is `$ATTNLAB_CACHE_DIR`, else `$XDG_CACHE_HOME/attnlab`, else `~/.cache/attnlab`. It must
be this user's own and writable by nobody else; where it is not (or cannot be made), nothing is
cached and every grade builds what it needs, as before.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

CACHE_VARIABLE = "ATTNLAB_CACHE_DIR"
# Inside a CPU box: the folder of the CPU build's shared parts (`labrunner/run/cpu/parts.py`), read-only.
CPU_PARTS_VARIABLE = "ATTNLAB_CPU_PARTS"


def grader_cache_dir(part: str) -> Path | None:
    """`part`'s folder in the grader's cache (made if missing), or None where the cache cannot be trusted."""
    base = os.environ.get(CACHE_VARIABLE)
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "attnlab")
    folder = Path(base) / part
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for checked in (Path(base), folder):
            st = checked.lstat()
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
                return None  # someone else's, or writable by others: what lies in it could be planted
    except OSError:
        return None
    return folder
