"""The CI recipes work as written: the README's course-CI block, and the example GitHub Actions and
GitLab jobs, which keep their CI systems' published schemas (checked with check-jsonschema, which
vendors both; a broken copy shows the check can fail) and whose every step runs here on the CPU
(this machine has no GPU, like most CI runners: tests/ci_runners.py runs the jobs as their runners
do); and the set-up the README promises (a CPU-only install, a licence that matches the package's)."""

from __future__ import annotations

import csv
import functools
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

# The recipes are read as YAML with ruamel.yaml, which the dev extra brings (through check-jsonschema); a GPU
# host that runs only `pytest -m gpu` may lack it, and these tests are no GPU tests.
pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with the dev extra (pip install -e '.[dev]')")
from ci_runners import load_recipe, run_github_job, run_gitlab_job
from package_source import copy_source, outside_environment
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


RECIPES = REPO / "examples"
# The published schema of each recipe's CI system, as check-jsonschema vendors it (GitHub's workflow
# schema and GitLab's CI schema, from SchemaStore and GitLab's own repository).
SCHEMAS = {"github-actions.yml": "vendor.github-workflows", "gitlab-ci.yml": "vendor.gitlab-ci"}
SECRET = "31337"
T = TypeVar("T")


def schema_check(path: Path, schema: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_recipe_in_examples_has_a_schema_to_keep():
    # examples/gradescope/ is the Gradescope kit, a folder of scripts: tests/test_gradescope_kit.py runs it.
    assert sorted(p.name for p in RECIPES.iterdir() if p.name != "gradescope") == sorted(SCHEMAS)


@pytest.mark.parametrize("recipe", sorted(SCHEMAS))
def test_each_recipe_keeps_its_ci_systems_published_schema(recipe):
    completed = schema_check(RECIPES / recipe, SCHEMAS[recipe])
    assert (completed.returncode, completed.stdout, completed.stderr) == (0, "ok -- validation done\n", "")


def broken_copy(folder: Path, recipe: str, text: str, broken: str) -> Path:
    original = (RECIPES / recipe).read_text()
    assert original.count(text) == 1, f"{recipe} no longer holds {text!r} once: break it elsewhere"
    path = folder / recipe
    path.write_text(original.replace(text, broken))
    return path


def test_the_check_refuses_a_recipe_that_is_not_yaml(tmp_path):
    # What GitHub refused the workflow for: an unquoted ": " inside a plain scalar starts a mapping there.
    quoted = '- name: "Install attnlab (CPU only: no CuPy)"'
    broken = broken_copy(tmp_path, "github-actions.yml", quoted, quoted.replace('"', ""))
    line = 1 + broken.read_text().splitlines().index("      - name: Install attnlab (CPU only: no CuPy)")
    completed = schema_check(broken, SCHEMAS["github-actions.yml"])
    assert completed.returncode == 1
    assert f"Failed to parse {broken}\n    ScannerError: mapping values are not allowed here\n" in completed.stdout
    assert f"(line: {line})" in completed.stdout


@pytest.mark.parametrize(
    ("recipe", "text", "broken", "error", "detail"),
    [
        (
            "github-actions.yml",
            "    runs-on: ubuntu-latest\n",
            "    run-on: ubuntu-latest\n",
            # the job matches none of the schema's job forms; the closest one names what it lacks
            "$.jobs['grade-cpu']: {'run-on': 'ubuntu-latest', 'steps': [",
            "  Best Match:\n    $.jobs['grade-cpu']: 'runs-on' is a required property\n",
        ),
        (
            "gitlab-ci.yml",
            "  before_script:\n",
            "  before_scripts:\n",
            "$['grade-cpu']: Additional properties are not allowed ('before_scripts' was unexpected)\n",
            "",
        ),
    ],
    ids=["github-actions.yml", "gitlab-ci.yml"],
)
def test_the_check_refuses_a_recipe_that_breaks_its_schema(tmp_path, recipe, text, broken, error, detail):
    path = broken_copy(tmp_path, recipe, text, broken)
    completed = schema_check(path, SCHEMAS[recipe])
    assert completed.returncode == 1
    assert completed.stdout.startswith("Schema validation errors were encountered.\n")
    assert f"\n  {path}::{error}" in completed.stdout
    assert detail in completed.stdout


@pytest.fixture
def runner(tmp_path):
    """The environment a CI runner gives a job: no attnlab anywhere (the job installs it), and `sudo` and
    `apt-get` as stand-ins that log what they were asked to do, in the file $APT_LOG (a test cannot
    install system packages; this machine has the g++ and bubblewrap the jobs install)."""
    stand_ins = tmp_path / "runner-bin"
    stand_ins.mkdir()
    (stand_ins / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    (stand_ins / "apt-get").write_text('#!/bin/sh\necho "apt-get $*" >> "$APT_LOG"\n')
    for stand_in in stand_ins.iterdir():
        stand_in.chmod(0o755)
    environment = outside_environment()
    environment["PATH"] = f"{stand_ins}:{environment['PATH']}"
    return environment


def checkout(folder: Path) -> Path:
    """A course's grading repository as a job checks it out: two submissions, the committed gates file,
    and attnlab's source in the folder `attnlab` (a git submodule, say)."""
    (folder / "submissions").mkdir(parents=True)
    shutil.copy(SOLUTION, folder / "submissions" / "ana.cu")
    shutil.copy(COMPILE_ERROR, folder / "submissions" / "bo.cu")
    (folder / "gates.json").write_text(
        json.dumps({"schema": "attnlab.gates/1", "lab2": {"NVIDIA H200": {"solution_speedup": 13.0, "fraction": 0.5}}})
    )
    copy_source(folder / "attnlab")
    return folder


@pytest.fixture(scope="module")
def attnlab_url(tmp_path_factory) -> str:
    """attnlab's source as the URL form of ATTNLAB_SOURCE reaches it (git+https://HOST/attnlab@TAG in a
    course; a git repository on this machine here, as git+file:// with a tag)."""
    source = copy_source(tmp_path_factory.mktemp("attnlab-git") / "attnlab")
    git = ["git", "-c", "user.name=course", "-c", "user.email=course@example.org", "-C", str(source)]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "attnlab"], ["tag", "v0.1.0"]):
        subprocess.run([*git, *command], check=True, capture_output=True, timeout=60)
    # file://localhost/PATH, not file:///PATH: the pip that a venv of Python 3.11 starts with (23.2) refuses a
    # git+file URL without a host as an invalid requirement (a git+https URL always has one)
    return f"git+file://localhost{source}@v0.1.0"


class OnThisMachine:
    """The GPU job's grade asks for a GPU, which this machine lacks: its `--device gpu` is graded with
    `--device cpu` here, everything else in the command as written. Counts what it rewrote."""

    def __init__(self) -> None:
        self.rewritten = 0

    def __call__(self, script: str) -> str:
        self.rewritten += script.count(" --device gpu ")
        return script.replace(" --device gpu ", " --device cpu ")


ANNOTATION = "::error file=submissions/bo.cu,"
JOBS = ("grade-gpu", "grade-cpu")  # each recipe's jobs, in its order


def attnlab_sources(url: str) -> dict[str, str]:
    """ATTNLAB_SOURCE for each job: the URL form for the GPU job, and for the CPU job a plain folder of its
    checkout (the form pip refused as "Invalid requirement" before the recipes turned it into a path)."""
    return {"grade-gpu": url, "grade-cpu": "attnlab"}


def side_by_side(jobs: dict[str, Callable[[], T]]) -> dict[str, T]:
    """Run the jobs at once, as a CI system runs a pipeline's jobs on runners of their own: their installs,
    which mostly wait on unpacking wheels to disk, overlap, and the test takes less time than job after job."""
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        started = {job: pool.submit(run) for job, run in jobs.items()}
        return {job: future.result() for job, future in started.items()}


@needs_cpu_backend
@pytest.mark.slow
def test_every_step_of_the_github_workflow_runs_on_the_cpu(tmp_path, runner, attnlab_url):
    workflow = load_recipe(RECIPES / "github-actions.yml")
    assert list(workflow["jobs"]) == list(JOBS)
    sources = attnlab_sources(attnlab_url)
    rewrites = {job: OnThisMachine() for job in JOBS}
    ran = side_by_side(
        {
            job: functools.partial(
                run_github_job,
                workflow,
                job,
                checkout(tmp_path / job),
                {**runner, "APT_LOG": str(tmp_path / f"{job}.apt")},
                secrets={"GRADING_SECRET": SECRET},
                variables={"ATTNLAB_SOURCE": sources[job]},
                rewrite=rewrites[job],
            )
            for job in JOBS
        }
    )
    expected = {
        "grade-gpu": [
            ("actions/checkout@v4", 0),
            ("Install attnlab (CUDA 13 wheels; use [cuda12] with a CUDA 12 driver)", 0),
            ("Grade (exit code of the worst submission)", 3),
            ("actions/upload-artifact@v4", 0),
        ],
        "grade-cpu": [
            ("actions/checkout@v4", 0),
            ("Install bubblewrap (the box every CPU grade runs in)", 0),
            ("Install attnlab (CPU only: no CuPy)", 0),
            ("Grade correctness on the CPU backend (exit code of the worst submission)", 3),
            ("actions/upload-artifact@v4", 0),
        ],
    }
    installs = {"grade-gpu": [], "grade-cpu": ["apt-get update -qq", "apt-get install -y -qq bubblewrap"]}
    for job in JOBS:
        assert [(r.name, r.exit_code) for r in ran[job]] == expected[job], [r.stderr[-2000:] for r in ran[job]]
        assert rewrites[job].rewritten == (job == "grade-gpu")
        assert (tmp_path / f"{job}.github_path").read_text() == f"{tmp_path / job}/.venv/bin\n"
        assert apt_requests(tmp_path / f"{job}.apt") == installs[job]
        assert ANNOTATION in ran[job][-2].stdout  # --annotations github: pinned to the file that failed to compile
        check_reports(tmp_path / job / "out")


@needs_cpu_backend
@pytest.mark.slow
def test_every_line_of_the_gitlab_pipeline_runs_on_the_cpu(tmp_path, runner, attnlab_url):
    pipeline = load_recipe(RECIPES / "gitlab-ci.yml")
    assert list(pipeline) == list(JOBS)
    sources = attnlab_sources(attnlab_url)
    rewrites = {job: OnThisMachine() for job in JOBS}
    ran = side_by_side(
        {
            job: functools.partial(
                run_gitlab_job,
                pipeline,
                job,
                checkout(tmp_path / job),
                {**runner, "APT_LOG": str(tmp_path / f"{job}.apt")},
                variables={"ATTNLAB_SOURCE": sources[job], "ATTNLAB_SEED": SECRET},
                rewrite=rewrites[job],
            )
            for job in JOBS
        }
    )
    installs = {"grade-gpu": [], "grade-cpu": ["apt-get update -qq", "apt-get install -y -qq g++ bubblewrap"]}
    for job in JOBS:
        assert (ran[job].exit_code, ran[job].missing_artifacts) == (3, ()), ran[job].stderr[-2000:]
        assert rewrites[job].rewritten == (job == "grade-gpu")
        assert apt_requests(tmp_path / f"{job}.apt") == installs[job]
        check_reports(tmp_path / job / "out")


def apt_requests(log: Path) -> list[str]:
    """What a job asked apt-get to do (the stand-in's log; no file: nothing)."""
    return log.read_text().splitlines() if log.exists() else []


UNSET = "ATTNLAB_SOURCE: set the variable ATTNLAB_SOURCE to a git+https:// URL or a folder of attnlab"


def test_a_github_job_without_attnlab_source_stops_at_the_install_and_says_so(tmp_path, runner):
    # an unset repository variable reads as "" in the workflow: the install says what to set, before pip
    folder = checkout(tmp_path / "grade-cpu")
    workflow = load_recipe(RECIPES / "github-actions.yml")
    ran = run_github_job(workflow, "grade-cpu", folder, {**runner, "APT_LOG": str(tmp_path / "apt")}, {}, {})
    assert [r.exit_code for r in ran] == [0, 0, 1, None, 1]
    assert UNSET in ran[2].stderr
    assert not (folder / ".venv").exists()


def test_a_gitlab_job_without_attnlab_source_stops_at_the_install_and_says_so(tmp_path, runner):
    folder = checkout(tmp_path / "grade-cpu")
    pipeline = load_recipe(RECIPES / "gitlab-ci.yml")
    ran = run_gitlab_job(pipeline, "grade-cpu", folder, {**runner, "APT_LOG": str(tmp_path / "apt")}, {})
    assert (ran.exit_code, ran.missing_artifacts) == (1, ("out/", "out/junit.xml"))
    assert UNSET in ran.stderr
    assert not (folder / ".venv").exists()


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
    assert (project["license"], project["license-files"]) == ("MIT", ["LICENSE"])  # SPDX, as setuptools wants
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text
