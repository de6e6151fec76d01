"""The layers contract in pyproject.toml holds for the package, and bites on a wrong import."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    # lint-imports puts its working directory first on the path, so `root`'s package is the one read.
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120)


def copy_of_the_package(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "labrunner", tmp_path / "labrunner", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_package_keeps_every_contract():
    completed = lint_imports(REPO)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "Contracts: 3 kept, 0 broken." in completed.stdout


def test_a_lower_stage_importing_a_higher_one_breaks_the_layers(tmp_path):
    root = copy_of_the_package(tmp_path)
    oracle = root / "labrunner/truth/oracle.py"
    oracle.write_text(oracle.read_text() + "\nfrom labrunner.pipeline import grade  # noqa\n")
    completed = lint_imports(root)
    assert completed.returncode == 1
    assert "Stages import downward only BROKEN" in completed.stdout
    assert "labrunner.truth.oracle -> labrunner.pipeline.grade" in completed.stdout


def test_timing_that_imports_the_checker_breaks_its_contract(tmp_path):
    root = copy_of_the_package(tmp_path)
    timing = root / "labrunner/measure/sampling.py"
    timing.write_text(timing.read_text() + "\nfrom labrunner.truth import checker  # noqa\n")
    completed = lint_imports(root)
    assert completed.returncode == 1
    assert "Timing never knows what a correct answer is BROKEN" in completed.stdout
    assert "Stages import downward only KEPT" in completed.stdout
