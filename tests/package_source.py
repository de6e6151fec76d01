"""attnlab's source as pip builds it, and a clean place to install it.

pip builds a folder in place (it leaves `build/` and `*.egg-info` beside the sources), so the tests
build a copy, never the working tree. What the copy holds is read from pyproject.toml: the top-level
files the build reads and the folders its packages come from (`labrunner/`, and each folder that
`[tool.setuptools.package-dir]` maps into it, such as `kernels/` as `labrunner/bundled_kernels`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The files at the top of the repository that a build reads: the build's configuration, the readme
# that becomes the package's description, and the licence that setuptools copies into the wheel.
BUILD_FILES = ("pyproject.toml", "README.md", "LICENSE")
# What is never part of the source, wherever it lies.
NOT_SOURCE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def package_folders() -> dict[str, str]:
    """{where a folder lies in the installed package: where it lies in the repository}."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {"labrunner": "labrunner"}
    for package, folder in setuptools.get("package-dir", {}).items():
        folders[package.replace(".", "/")] = folder
    return folders


def copy_source(destination: Path) -> Path:
    """A copy of attnlab's source at `destination` (created), as a course would check it out."""
    destination.mkdir(parents=True)
    for name in BUILD_FILES:
        shutil.copy(REPO / name, destination / name)
    for folder in sorted(set(package_folders().values())):
        shutil.copytree(REPO / folder, destination / folder, ignore=NOT_SOURCE)
    return destination


def source_files() -> list[str]:
    """Every file of the repository that a commit would hold (tracked, or new and not ignored) and that
    still exists, as paths relative to the repository."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(name for name in set(listed.split("\0")) if name and (REPO / name).is_file())


def outside_environment() -> dict[str, str]:
    """os.environ as a user's shell outside the repository has it: no PYTHONPATH or virtual environment
    pointing into the repository, no `attnlab` command on PATH (the repository's own .venv), and no
    grading seed or CI flag of the caller's."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "CI", "COLUMNS") and not key.startswith("ATTNLAB_")
    }
    folders = environment.get("PATH", "").split(os.pathsep)
    environment["PATH"] = os.pathsep.join(f for f in folders if f and not (Path(f) / "attnlab").exists())
    return environment


def make_venv(folder: Path) -> Path:
    """A new virtual environment at `folder` made by this Python, with nothing installed: its bin folder."""
    made = subprocess.run([sys.executable, "-m", "venv", str(folder)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr[-2000:]
    return folder / "bin"
