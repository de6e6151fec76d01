"""What a box's /tmp may show: the first folder below /tmp of each path the box maps in read-only that
lies there (the package and its Python when the repository is checked out under /tmp, as CI may do, and
a test's stand-in tool), and nothing else of the host's /tmp."""

from __future__ import annotations

import sys
from pathlib import Path

from labrunner import box as boxes


def tmp_entries_of(*more: Path) -> list[str]:
    mapped = [boxes.package_folder(), Path(sys.prefix), Path(sys.base_prefix), *more]
    return sorted({Path(p).resolve().parts[2] for p in mapped if Path(p).resolve().parts[1:2] == ("tmp",)})
