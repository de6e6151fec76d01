"""attnlab: a lab runner and grading driver for CUDA attention labs."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """`kernels` or `cases`: the repository's folder in a source tree, the bundled copy once installed."""
    in_source_tree = _PACKAGE.parent / name
    return in_source_tree if in_source_tree.is_dir() else _PACKAGE / f"bundled_{name}"
