"""The built package is whole: the wheel `pip install .` builds carries every file of the source tree that
attnlab reads (every lab's kernels, the case catalogues, the headers, the schema), and, installed into a
clean virtual environment with its dependencies from the package index, it gives every lab's starter and
grades it on the CPU backend from a folder outside the repository, with the verdict the fixture suite
expects of that starter in the source tree (tests/fixtures/<lab>/expected.toml).

The labs are the registry's (labrunner.labs.LABS), never a list here: a lab added to the registry and to
kernels/ is tested here without a line changed, and a lab whose files the wheel lacks fails here.

pip builds the wheel as a user's `pip install` would, in an isolated build environment holding what
pyproject.toml's build-system asks for (whatever this environment has or lacks). A build or an install
that cannot get its tools fails here, never skips.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from fixture_suite import Fixture, grade, load_fixtures
from package_source import copy_source, make_venv, outside_environment, package_folders, source_files

from labrunner.labs import LABS

PIP = ("-m", "pip", "--disable-pip-version-check", "-q")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """The copy of the source the wheel is built from (a file edited in the working tree meanwhile is not in it)."""
    return copy_source(tmp_path_factory.mktemp("wheel") / "src")


@pytest.fixture(scope="module")
def wheel(source) -> Path:
    folder = source.parent
    build = subprocess.run(
        [sys.executable, *PIP, "wheel", "--no-deps", "-w", str(folder / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (built,) = (folder / "dist").glob("attnlab-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The `attnlab` command of a fresh virtual environment holding the wheel and its dependencies."""
    bin_dir = make_venv(tmp_path_factory.mktemp("venv") / "venv")
    install = subprocess.run(
        [str(bin_dir / "python"), *PIP, "install", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        env=outside_environment(),
    )
    assert install.returncode == 0, install.stderr[-2000:]
    return bin_dir / "attnlab"


def in_the_wheel(name: str) -> str | None:
    """Where the repository's file `name` lies in the wheel, or None for a file outside the package."""
    for inside, folder in package_folders().items():
        if name.startswith(folder + "/"):
            return inside + name[len(folder) :]
    return None


@pytest.mark.slow
def test_the_wheel_carries_every_file_of_the_packages_folders_and_nothing_else(source, wheel):
    expected = {in_the_wheel(name): name for name in source_files() if in_the_wheel(name)}
    with zipfile.ZipFile(wheel) as archive:
        members = {n for n in archive.namelist() if not n.startswith("attnlab-") and not n.endswith("/")}
        missing, extra = sorted(set(expected) - members), sorted(members - set(expected))
        assert missing == [], f"in the source tree, missing from the wheel: {missing}"
        assert extra == [], f"in the wheel, not in the source tree: {extra}"
        changed = [n for n in members if archive.read(n) != (source / expected[n]).read_bytes()]
    assert changed == []
    # what the bug was: a lab's kernels left out of the wheel because pyproject.toml named the others
    for lab in LABS.values():
        assert f"labrunner/bundled_kernels/{lab.name}/starter.cu" in members


def starter_fixture(lab: str, path: Path) -> Fixture:
    """The fixture suite's expectation for `lab`'s shipped starter, for a copy of it at `path`."""
    shipped = LABS[lab].starter_path
    found = [f for f in load_fixtures(lab) if f.path == shipped]
    assert found, f"tests/fixtures/{lab}/expected.toml has no entry for kernels/{lab}/starter.cu: add its verdict"
    return Fixture(lab, path, found[0].expected)


@pytest.mark.slow
@pytest.mark.parametrize("lab", sorted(LABS))
def test_the_installed_package_gives_and_grades_every_labs_starter(installed, lab, tmp_path):
    elsewhere = tmp_path / "course"
    elsewhere.mkdir()
    environment = outside_environment()

    def attnlab(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(installed), *args], cwd=elsewhere, env=environment, capture_output=True, text=True, timeout=120
        )

    shipped = LABS[lab].starter_path.read_text()
    printed = attnlab("starter", lab)
    assert (printed.returncode, printed.stderr) == (0, "")
    assert printed.stdout == shipped
    written = attnlab("starter", lab, "-o", "attention.cu")
    assert written.returncode == 0, written.stderr[-1000:]
    assert (elsewhere / "attention.cu").read_text() == shipped
    # the compile gate finds the bundled headers (prelude, signature check) from the installed package
    checked = attnlab("check", lab, "attention.cu")
    assert checked.returncode == 0, checked.stderr[-1000:]
    assert checked.stdout.rstrip().endswith("PASS (exit 0)")

    fixture = starter_fixture(lab, elsewhere / "attention.cu")
    outcome = grade(fixture, "cpu", attnlab=(str(installed),), cwd=elsewhere, env=environment)
    assert outcome.mismatches == [], outcome.got["message"]
    assert (outcome.got["exit_code"], outcome.got["json_exit_code"]) == (fixture.expected["exit_code"],) * 2
