"""docs/ARCHITECTURE.md names every module of the package, and no module the package does not have."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "module_map.py"
spec = importlib.util.spec_from_file_location("module_map", SCRIPT)
assert spec is not None and spec.loader is not None
module_map = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module_map)


def test_the_module_map_is_the_trees():
    document = module_map.DOCUMENT.read_text()
    assert document == module_map.with_map(document, module_map.module_map()), (
        "run: python scripts/module_map.py --write"
    )


def test_every_module_the_document_names_exists():
    document = module_map.DOCUMENT.read_text()
    prose = document[: document.index(module_map.BEGIN)] + document[document.index(module_map.END) :]
    named = set(re.findall(r"`((?:[a-z_]+/)*[a-z_]+\.py)`", prose))
    # a path as the prose writes it: from the repository, from labrunner/, or a file of the folder it speaks of
    files = [f.relative_to(module_map.REPO).as_posix() for f in module_map.REPO.glob("[lst]*/**/*.py")]
    missing = sorted(name for name in named if not any(f == name or f.endswith("/" + name) for f in files))
    assert missing == []
