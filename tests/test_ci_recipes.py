"""The CI recipes work as written: the README's course-CI block and the example GitHub Actions and
GitLab jobs, run here on the CPU (this machine has no GPU, like most CI runners); and the set-up
the README promises (a CPU-only install, a licence that matches the package's)."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from result_schema import validate_file

REPO = Path(__file__).resolve().parent.parent
SOLUTION = REPO / "kernels/lab2/solution.cu"
COMPILE_ERROR = REPO / "tests/fixtures/lab2/hostile/foreign_include.cu"


def cpu_backend_ready() -> bool:
    from labrunner.run.cpu_device import cpu_backend_status

    return cpu_backend_status()[0]


needs_cpu_backend = pytest.mark.skipif(not cpu_backend_ready(), reason="no C++ compiler for the CPU backend")


@pytest.fixture
def course(tmp_path):
    """A course's grading repository: two submissions, a committed gates file, and `attnlab` on PATH."""
    (tmp_path / "submissions").mkdir()
    shutil.copy(SOLUTION, tmp_path / "submissions" / "ana.cu")
    shutil.copy(COMPILE_ERROR, tmp_path / "submissions" / "bo.cu")
    (tmp_path / "gates.json").write_text(
        json.dumps({"schema": "attnlab.gates/1", "lab2": {"NVIDIA H200": {"solution_speedup": 13.0, "fraction": 0.5}}})
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "attnlab").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m labrunner "$@"\n')
    (bin_dir / "attnlab").chmod(0o755)
    environment = {k: v for k, v in os.environ.items() if k not in ("ATTNLAB_SEED", "COLUMNS")}
    environment.update({"PATH": f"{bin_dir}:{environment['PATH']}", "PYTHONPATH": str(REPO), "GRADING_SECRET": "31337"})
    return tmp_path, environment


def run_bash(script: str, cwd: Path, environment: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=environment, capture_output=True, text=True, timeout=600)


def check_reports(out: Path) -> None:
    ana, bo = validate_file(out / "ana.json"), validate_file(out / "bo.json")
    assert (ana["verdict"], ana["exit_code"], ana["backend"], ana["seed"]) == ("pass", 0, "cpu", "secret")
    assert (bo["verdict"], bo["exit_code"]) == ("compile-error", 3)
    rows = list(csv.reader((out / "gradebook.csv").read_text().splitlines()))
    assert (rows[1][0], rows[1][2], rows[1][3]) == ("submissions/ana.cu", "pass", "0")  # every field quoted
    assert (out / "junit.xml").exists()


def readme_block(heading: str) -> str:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index(heading) :]
    start = section.index("```bash\n") + len("```bash\n")
    return section[start : section.index("```", start)]


@needs_cpu_backend
@pytest.mark.slow
def test_the_readmes_course_ci_block_runs_unchanged_without_a_gpu(course):
    folder, environment = course
    completed = run_bash(readme_block("### In a course's CI"), folder, environment)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.rstrip().endswith("worst exit: 3")
    assert "--gates gates.json: not applied on the cpu backend, which takes no timings" in completed.stderr
    assert "::error file=submissions/bo.cu,line=2,title=attnlab lab2%3A compile error::" in completed.stdout
    check_reports(folder / "out")


def grading_commands(path: Path) -> list[tuple[str, str]]:
    """(job, command) for every `attnlab grade` line of an example file."""
    found, job = [], None
    for line in path.read_text().splitlines():
        named = re.match(r"^ {0,2}(grade-[\w-]+):$", line)
        if named:
            job = named[1]
        command = re.sub(r"^\s*(- )?", "", line)
        if command.startswith("attnlab grade "):
            found.append((job, command))
    return found


@needs_cpu_backend
@pytest.mark.parametrize("example", ["github-actions.yml", "gitlab-ci.yml"])
@pytest.mark.slow
def test_the_examples_grading_commands_run_on_the_cpu(course, example):
    folder, environment = course
    commands = grading_commands(REPO / "examples" / example)
    assert [job for job, _ in commands] == ["grade-gpu", "grade-cpu"]
    for job, command in commands:
        if job == "grade-gpu":  # the GPU job insists on a GPU; here everything else in it is checked
            assert " --device gpu " in command
            command = command.replace(" --device gpu ", " --device cpu ")
        shutil.rmtree(folder / "out", ignore_errors=True)
        completed = run_bash(f'export ATTNLAB_SEED="$GRADING_SECRET"; {command}', folder, environment)
        assert completed.returncode == 3, (job, completed.stderr[-2000:])
        check_reports(folder / "out")


def test_the_readme_shows_a_cpu_only_install_that_pulls_no_cupy():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if "cupy" in d.lower()]
    block = readme_block("Without a GPU, the base install")
    assert block == (
        "python3 -m venv .venv && .venv/bin/pip install -e . && "
        ".venv/bin/attnlab grade lab2 kernels/lab2/solution.cu --device cpu\n"
    )


def test_the_licence_file_matches_the_package():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "MIT"}
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text
