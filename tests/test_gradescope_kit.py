"""The Gradescope kit (examples/gradescope/): setup.sh and run_autograder run as Gradescope runs them, on
Gradescope's /autograder tree (source/, submission/, results/) laid out under a temporary root.

setup.sh runs with ATTNLAB_SKIP_INSTALL=1 and ATTNLAB_VENV naming the environment these tests run in (its
apt-get and pip steps are the only part not run here). Every results.json is checked against the
Gradescope schema tests/data/gradescope-results.schema.json. The uploads that do not grade, and the
faults of the grader, take a few seconds each (one attnlab process), and the Triton file, the hang and the crash
grade for real, so the whole file is slow; tests/test_gradescope_folder.py runs the same rules in-process, fast."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from test_gradescope import valid

from labrunner.pipeline.backend import gpu_status

REPO = Path(__file__).resolve().parent.parent
KIT = REPO / "examples" / "gradescope"
KIT_FILES = ("setup.sh", "run_autograder", "attnlab.conf")
VENV = Path(sys.executable).parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "lab2"
pytestmark = pytest.mark.slow
FAULT = "(a fault of the grader, not of the submission: no results.json; fix the autograder and regrade)"


def kit_environment(root: Path, **more: str) -> dict[str, str]:
    environment = {**os.environ, "AUTOGRADER_ROOT": str(root), "ATTNLAB_VENV": str(VENV), **more}
    environment.pop("ATTNLAB_SEED", None)  # the kit's seed file is the secret
    return environment


def setup(root: Path, **more: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(root / "source" / "setup.sh")],
        cwd=root / "source",
        env=kit_environment(root, ATTNLAB_SKIP_INSTALL="1", **more),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """source/ as setup.sh leaves it when Gradescope builds the image: the kit, and its secret seed."""
    assert (VENV / "bin" / "attnlab").exists(), f"the tests' environment {VENV} has no attnlab: pip install -e ."
    root = tmp_path_factory.mktemp("image")
    (root / "source").mkdir()
    for name in KIT_FILES:
        shutil.copy2(KIT / name, root / "source" / name)
    done = setup(root)
    assert done.returncode == 0, done.stderr
    return root / "source"


@pytest.fixture
def autograder(tmp_path, built) -> Path:
    """A fresh /autograder for one submission: the built source/, an empty submission/ and results/."""
    root = tmp_path / "autograder"
    shutil.copytree(built, root / "source")
    (root / "submission").mkdir()
    (root / "results").mkdir()
    return root


def configure(root: Path, *lines: str) -> None:
    """Lines added to the course's attnlab.conf: a setting given again replaces the kit's."""
    with open(root / "source" / "attnlab.conf", "a") as conf:
        conf.write("\n".join(lines) + "\n")


def submit(root: Path, files: dict[str, bytes | Path]) -> None:
    for name, content in files.items():
        path = root / "submission" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.read_bytes() if isinstance(content, Path) else content)


def run_autograder(root: Path, **more: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(root / "source" / "run_autograder")],
        cwd=root,
        env=kit_environment(root, **more),
        capture_output=True,
        text=True,
        timeout=600,
    )


def published(root: Path, run: subprocess.CompletedProcess) -> dict:
    """The results.json a run left, checked against Gradescope's format; the run must have exited 0."""
    assert run.returncode == 0, run.stderr[-3000:]
    return valid(json.loads((root / "results" / "results.json").read_text()))


def record(results: dict) -> tuple:
    attnlab = results["extra_data"]["attnlab"]
    return attnlab["verdict"], attnlab["exit_code"], results["score"]


def last_paragraph(results: dict) -> str:
    return results["tests"][0]["output"].split("\n\n")[-1]


def refused_without_a_score(root: Path, run: subprocess.CompletedProcess) -> str:
    """A fault of the grader: no results.json, a non-zero exit, and the reason in what staff see."""
    assert run.returncode == 1, run.stderr[-3000:]
    assert list((root / "results").iterdir()) == []
    return " ".join(run.stderr.split())


# --- setup.sh -----------------------------------------------------------------------------------------


def test_setup_makes_a_secret_seed_readable_by_its_owner_alone(built):
    seed = built / "attnlab-seed"
    assert stat.S_IMODE(seed.stat().st_mode) == 0o600
    text = seed.read_text()
    assert len(text) == 64 and set(text) <= set("0123456789abcdef")


def test_setup_keeps_the_course_seed_and_closes_its_mode(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in KIT_FILES:
        shutil.copy2(KIT / name, source / name)
    (source / "attnlab-seed").write_text("the course's own secret, the same in every image\n")
    (source / "attnlab-seed").chmod(0o644)
    done = setup(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "setup.sh: the course's seed file is kept (attnlab-seed, from the zip)\n"
    assert (source / "attnlab-seed").read_text() == "the course's own secret, the same in every image\n"
    assert stat.S_IMODE((source / "attnlab-seed").stat().st_mode) == 0o600


def test_setup_refuses_a_lab_attnlab_does_not_know(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in KIT_FILES:
        shutil.copy2(KIT / name, source / name)
    with open(source / "attnlab.conf", "a") as conf:
        conf.write("LAB=lab9\n")
    done = setup(tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == "setup.sh: attnlab.conf: LAB=lab9 is not a lab attnlab knows"
    assert not (source / "attnlab-seed").exists()


def test_setup_without_the_conf_says_what_to_zip(tmp_path):
    (tmp_path / "source").mkdir()
    shutil.copy2(KIT / "setup.sh", tmp_path / "source" / "setup.sh")
    done = setup(tmp_path)
    assert (done.returncode, done.stderr) == (
        1,
        "setup.sh: no attnlab.conf in the zip: zip it beside setup.sh and run_autograder\n",
    )


# --- uploads the student must fix: a results.json with score 0 and what to do --------------------------


def test_two_kernel_files(autograder):
    submit(autograder, {"flash.cu": FIXTURES / "correct/group_per_block.cu"})
    submit(autograder, {"old/flash.cu": REPO / "kernels/lab2/starter.cu"})
    results = published(autograder, run_autograder(autograder))
    assert record(results) == ("usage-error", 2, 0.0)
    assert last_paragraph(results) == (
        "2 kernel files were submitted (flash.cu, old/flash.cu): attnlab grades exactly one kernel file (.cu, or a "
        "Triton .py); keep the one you mean to hand in, upload that file alone and submit again"
    )


def test_no_kernel_file(autograder):
    submit(autograder, {"report.pdf": b"%PDF-1.7\n"})
    results = published(autograder, run_autograder(autograder))
    assert record(results) == ("usage-error", 2, 0.0)
    assert last_paragraph(results) == (
        "no kernel file was submitted: lab2 grades one .cu file or one Triton .py file, and the submission holds "
        "report.pdf. Upload your kernel file and submit again"
    )


def test_an_empty_file(autograder):
    submit(autograder, {"flash.cu": b""})
    results = published(autograder, run_autograder(autograder))
    assert record(results) == ("usage-error", 2, 0.0)
    assert last_paragraph(results) == (
        "flash.cu is empty: upload the file that holds your kernels and submit again (`attnlab starter lab2` "
        "prints the file to start from)"
    )


# --- uploads that grade: their normal verdict, published ------------------------------------------------


def test_a_triton_file(autograder):
    submit(autograder, {"flash.py": REPO / "kernels/lab2/solution.py"})
    results = published(autograder, run_autograder(autograder))
    assert record(results) == ("pass", 0, 80.0)
    assert results["extra_data"]["attnlab"]["file"] == "submission/flash.py"
    assert results["extra_data"]["attnlab"]["seed"] == "secret"
    assert {t["status"] for t in results["tests"]} == {"passed"}


def test_a_compile_error(autograder):
    submit(autograder, {"flash.cu": b"// one\nint int x;\n"})
    results = published(autograder, run_autograder(autograder))
    assert record(results) == ("compile-error", 3, 0.0)
    assert [(t["name"], t["status"]) for t in results["tests"]] == [("compile", "failed")]
    assert last_paragraph(results).startswith("submission/flash.cu(2): error: invalid combination of type specifiers")


def test_a_hang(autograder):
    configure(autograder, "GRADE_OPTIONS=(--timeout 5)")
    submit(autograder, {"flash.cu": FIXTURES / "hostile/hang.cu"})
    results = published(autograder, run_autograder(autograder))
    assert record(results) == ("timeout", 4, 0.0)
    assert (results["tests"][0]["name"], results["tests"][0]["status"]) == ("C1-P31", "failed")
    assert results["tests"][0]["output"].startswith("timeout: ")


def test_a_crash(autograder):
    submit(autograder, {"flash.cu": FIXTURES / "hostile/illegal_address.cu"})
    results = published(autograder, run_autograder(autograder))
    assert record(results) == ("crash", 4, 0.0)
    assert (results["tests"][0]["name"], results["tests"][0]["status"]) == ("C1-P31", "failed")
    assert results["tests"][0]["output"].startswith("crash: ")


# --- faults of the grader: no results.json (a stale one removed), a non-zero exit, the reason for staff ---


def test_no_box(autograder):
    submit(autograder, {"flash.cu": REPO / "kernels/lab2/solution.cu"})
    (autograder / "results" / "results.json").write_text('{"score": 80.0}')  # an earlier run's
    said = refused_without_a_score(autograder, run_autograder(autograder, ATTNLAB_BWRAP="/bin/false"))
    assert "error: the CPU backend cannot box its worker here: bubblewrap (/bin/false) cannot make a box" in said
    assert said.endswith(f"run_autograder: attnlab exited 6 and wrote no results.json; its reason is above {FAULT}")


def test_no_compiler(autograder):
    submit(autograder, {"flash.cu": REPO / "kernels/lab2/solution.cu"})
    (autograder / "results" / "results.json").write_text('{"score": 80.0}')
    said = refused_without_a_score(autograder, run_autograder(autograder, CXX="/nonexistent/g++"))
    assert (
        "error: the CPU backend cannot build kernels here: no C++ compiler: install g++ (apt-get install g++) or "
        "fix CXX=/nonexistent/g++" in said
    )
    assert said.endswith(f"run_autograder: attnlab exited 6 and wrote no results.json; its reason is above {FAULT}")


def test_no_gpu_where_the_course_asked_for_one(autograder):
    if gpu_status()[0]:
        pytest.skip("this machine has a GPU: --device gpu grades here")
    configure(autograder, "DEVICE=gpu")
    submit(autograder, {"flash.cu": REPO / "kernels/lab2/solution.cu"})
    said = refused_without_a_score(autograder, run_autograder(autograder))
    assert "--device gpu grades on a GPU only" in said
    assert said.endswith(f"run_autograder: attnlab exited 6 and wrote no results.json; its reason is above {FAULT}")


def test_a_bad_lab(autograder):
    configure(autograder, "LAB=lab9")
    submit(autograder, {"flash.cu": REPO / "kernels/lab2/solution.cu"})
    said = refused_without_a_score(autograder, run_autograder(autograder))
    assert said.startswith("error: unknown lab 'lab9': choose one of lab1, lab2, lab3")
    assert said.endswith(f"run_autograder: attnlab exited 2 and wrote no results.json; its reason is above {FAULT}")


def test_an_empty_seed_file(autograder):
    (autograder / "source" / "attnlab-seed").write_text("")
    submit(autograder, {"flash.cu": REPO / "kernels/lab2/solution.cu"})
    said = refused_without_a_score(autograder, run_autograder(autograder))
    assert "error: $ATTNLAB_SEED is empty: set it to the course's secret" in said
    assert said.endswith(f"run_autograder: attnlab exited 2 and wrote no results.json; its reason is above {FAULT}")


def test_a_setup_that_did_not_finish(autograder, tmp_path):
    (autograder / "source" / "attnlab-seed").unlink()
    submit(autograder, {"flash.cu": REPO / "kernels/lab2/solution.cu"})
    said = refused_without_a_score(autograder, run_autograder(autograder))
    seed = autograder / "source" / "attnlab-seed"
    assert said == (f"run_autograder: no seed file {seed}: setup.sh did not finish (see the image's build log) {FAULT}")
    nothing = tmp_path / "no-venv"
    said = refused_without_a_score(autograder, run_autograder(autograder, ATTNLAB_VENV=str(nothing)))
    assert said == (
        f"run_autograder: no attnlab at {nothing}/bin/attnlab: setup.sh did not finish (see the image's build "
        f"log) {FAULT}"
    )
