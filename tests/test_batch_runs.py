"""A batch survives what courses do to it: Ctrl-C and SIGTERM, a deadline, a re-run of unchanged files,
a folder per student, and a secret seed of any text.

Each runs the real command line on the CPU backend with one small case (`--case C1-P31`): these are
about the batch, not the kernels."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixture_suite import FIXTURES, REPO
from test_batch import needs_cpu_backend

from labrunner.cli import main
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.pipeline.batch import files as batch_files
from labrunner.pipeline.batch.files import Found, NotGraded
from labrunner.truth.cases import DEFAULT_SEED, Seed, resolve_seed, secret_seed

SOLUTION = REPO / "kernels/lab2/solution.cu"
STARTER = REPO / "kernels/lab2/starter.cu"
HANG = FIXTURES / "lab2/hostile/hang.cu"
WRONG = FIXTURES / "lab2/wrong"
QUICK = ("--case", "C1-P31", "--device", "cpu")


def environment() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("ATTNLAB_SEED", None)
    return env


def attnlab(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "labrunner", *args],
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def gradebook(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def grading_processes(folder: Path) -> list[str]:
    """Every `labrunner grade` process still alive that writes its report under `folder` (a stopped batch
    must leave none; other batches on the machine are not this test's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                words = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            mine = any(word.startswith(os.fsencode(folder)) for word in words)
            if b"labrunner" in words and b"grade" in words and b"--json" in words and mine:
                found.append(entry.name)
    return found


# --- interrupts --------------------------------------------------------------------------------


def interrupted_batch(tmp_path: Path, signum: signal.Signals) -> tuple[int, float, str, Path]:
    """A batch of three, one at a time: the solution, a kernel that hangs for a minute, the starter. The
    signal comes once the first has its verdict, while the second hangs. Returns the exit code, the
    seconds from the signal to the exit, standard error and the --out-dir."""
    out = tmp_path / "out"
    driver = subprocess.Popen(
        [sys.executable, "-m", "labrunner", "grade", "lab2", str(SOLUTION), str(HANG), str(STARTER)]
        + [*QUICK, "--timeout", "60", "--jobs", "1", "--out-dir", str(out), "--no-timing"],
        cwd=tmp_path,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert driver.stderr is not None
    lines = []
    for line in driver.stderr:  # a log's progress: one line as each submission finishes
        lines.append(line)
        if line.startswith("[1/3]"):
            break
    time.sleep(3)  # the hanging kernel's grade is under way
    signalled = time.monotonic()
    driver.send_signal(signum)
    _, rest = driver.communicate(timeout=60)
    return driver.returncode, time.monotonic() - signalled, "".join(lines) + rest, out


@needs_cpu_backend
@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_batch_within_ten_seconds_and_keeps_what_finished(tmp_path, signum, code):
    exit_code, seconds, stderr, out = interrupted_batch(tmp_path, signum)
    assert exit_code == code, stderr[-3000:]
    assert seconds < 10, f"{seconds:.1f} s from {signum.name} to the exit"
    rows = gradebook(out / "gradebook.csv")
    assert [(r["file"], r["verdict"], r["exit_code"]) for r in rows] == [
        (str(SOLUTION), "pass", "0"),
        (str(HANG), "interrupted", str(code)),
        (str(STARTER), "interrupted", str(code)),
    ]
    hang = json.loads((out / "hang.json").read_text())
    assert hang["error"].startswith(f"interrupted by {signum.name}: "), hang["error"]
    starter = json.loads((out / "starter.json").read_text())
    assert starter["error"] == f"not graded: the batch was interrupted by {signum.name}"
    assert (out / "junit.xml").is_file()
    assert f"error: the batch was interrupted by {signum.name}: the reports of what finished are written" in stderr
    assert grading_processes(tmp_path) == []


@needs_cpu_backend
@pytest.mark.slow
def test_the_batch_deadline_stops_what_is_left(tmp_path):
    out = tmp_path / "out"
    started = time.monotonic()
    completed = attnlab(
        "grade",
        "lab2",
        str(SOLUTION),
        str(HANG),
        *QUICK,
        "--timeout",
        "60",
        "--jobs",
        "2",
        "--no-timing",
        "--batch-timeout",
        "25",
        "--out-dir",
        str(out),
        cwd=tmp_path,
    )
    assert completed.returncode == 143, completed.stderr[-3000:]
    assert time.monotonic() - started < 25 + 10  # the deadline, then the 5 s grace and the reports
    rows = gradebook(out / "gradebook.csv")
    assert [(r["verdict"], r["exit_code"]) for r in rows] == [("pass", "0"), ("interrupted", "143")]
    assert "error: the batch's deadline (--batch-timeout 25 s) passed first" in completed.stderr
    assert grading_processes(tmp_path) == []


# --- re-runs -----------------------------------------------------------------------------------


@needs_cpu_backend
@pytest.mark.slow
def test_an_unchanged_rerun_reuses_every_report_and_a_change_regrades_only_it(tmp_path):
    folder = tmp_path / "subs"
    folder.mkdir()
    wrong = sorted(WRONG.glob("*.cu"))[:2]
    for source in (SOLUTION, STARTER, *wrong):
        (folder / source.name).write_bytes(source.read_bytes())
    out = tmp_path / "out"
    command = ("grade", "lab2", str(folder), *QUICK, "--no-timing", "--jobs", "2", "--out-dir", str(out))
    first = attnlab(*command, cwd=tmp_path)
    assert "reused" not in first.stderr
    before = gradebook(out / "gradebook.csv")

    started = time.monotonic()
    again = attnlab(*command, cwd=tmp_path)
    assert time.monotonic() - started < 10
    assert again.returncode == first.returncode
    assert (
        "note: reused 4 of 4 reports: the same bytes, lab, options, seed and attnlab version as when they were "
        "graded (--regrade grades them again)"
    ) in " ".join(again.stderr.split())
    after = gradebook(out / "gradebook.csv")
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in after] == [
        {k: v for k, v in r.items() if k != "seconds"} for r in before
    ]

    (folder / "starter.cu").write_text((folder / "starter.cu").read_text() + "\n// changed\n")
    changed = attnlab(*command, cwd=tmp_path)
    assert "reused 3 of 4 reports" in " ".join(changed.stderr.split())

    other_option = attnlab(*command, "--seed", "7", cwd=tmp_path)
    assert "reused" not in other_option.stderr
    forced = attnlab(*command, "--seed", "7", "--regrade", cwd=tmp_path)
    assert "reused" not in forced.stderr


# --- layouts -----------------------------------------------------------------------------------


def test_a_folder_per_student_names_each_student_and_lists_what_it_skips(tmp_path):
    subs = tmp_path / "subs"
    for student, files in {
        "alice": ["flash.cu"],
        "bob": ["flash.cu", "notes.txt"],
        "carol": ["flash.CU"],
        "dave": ["kernel.cpp"],
        "erin": [],
    }.items():
        (subs / student).mkdir(parents=True)
        for name in files:
            (subs / student / name).write_text("")
    (subs / "bob" / "old").mkdir()
    (subs / "top.cu").write_text("")
    (subs / ".git").mkdir()
    (subs / "alice" / "._flash.cu").write_text("")
    found, skipped = batch_files.expand_submissions((subs,))
    assert found == [  # by name: a student's folder and a file at the top are sorted together
        Found(subs / "alice/flash.cu", "alice"),
        Found(subs / "bob/flash.cu", "bob"),
        Found(subs / "top.cu"),
    ]
    assert skipped == [
        NotGraded(subs / ".git", "a hidden folder, not searched"),
        NotGraded(
            subs / "alice/._flash.cu", "a hidden file (such as the ._ copies macOS's archiver leaves), not graded"
        ),
        NotGraded(subs / "bob/notes.txt", "not a .cu file"),
        NotGraded(
            subs / "bob/old", "a folder inside a student's folder (only the student's folder itself is searched)"
        ),
        NotGraded(subs / "carol/flash.CU", "named .CU, not .cu: rename it flash.cu to grade it"),
        NotGraded(subs / "carol", "a student's folder with no .cu file in it"),
        NotGraded(subs / "dave/kernel.cpp", "a C++ source or header: a lab's kernels are graded from one .cu file"),
        NotGraded(subs / "dave", "a student's folder with no .cu file in it"),
        NotGraded(subs / "erin", "a student's folder with no .cu file in it"),
    ]
    assert batch_files.report_names(found) == ["alice-flash", "bob-flash", "top"]


def test_a_glob_over_student_folders_keeps_the_student_in_each_report_name():
    files = [Found(Path(f"subs/{s}/flash.cu")) for s in ("alice", "bob")] + [Found(Path("subs/carol/other.cu"))]
    assert batch_files.report_names(files) == ["alice-flash", "bob-flash", "other"]


@needs_cpu_backend
@pytest.mark.slow
def test_a_batch_over_student_folders_grades_each_and_says_what_it_did_not(tmp_path):
    subs = tmp_path / "subs"
    for student in ("alice", "bob"):
        (subs / student).mkdir(parents=True)
        (subs / student / "flash.cu").write_bytes(SOLUTION.read_bytes())
    (subs / "bob" / "flash.cpp").write_text("")
    out = tmp_path / "out"
    completed = attnlab("grade", "lab2", str(subs), *QUICK, "--no-timing", "--out-dir", str(out), cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert sorted(p.name for p in out.glob("*.json")) == ["alice-flash.json", "bob-flash.json"]
    said = " ".join(completed.stderr.split())
    assert (
        f"note: not graded: {subs / 'bob/flash.cpp'}: a C++ source or header: a lab's kernels are graded from one "
        ".cu file"
    ) in said


def test_a_folder_with_nothing_to_grade_is_a_usage_error(tmp_path):
    (tmp_path / "empty" / "alice").mkdir(parents=True)
    result = CliRunner().invoke(main, ["grade", "lab2", str(tmp_path / "empty"), "--device", "cpu"])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {tmp_path / 'empty'}: a folder with no .cu files, nor a folder per student holding them; "
        "name the submissions or their folder\n"
    )


def test_gradescope_for_a_batch_of_several_files_is_a_usage_error(tmp_path):
    # Several files named (a folder with --gradescope is one student's upload: tests/test_gradescope_kit.py).
    for name in ("a.cu", "b.cu"):
        (tmp_path / name).write_text("")
    files = [str(tmp_path / "a.cu"), str(tmp_path / "b.cu")]
    result = CliRunner().invoke(
        main, ["grade", "lab2", *files, "--device", "cpu", "--gradescope", str(tmp_path / "results.json")]
    )
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: --gradescope {tmp_path / 'results.json'}: Gradescope's results.json is one student's, and this "
        "batch has 2 files; grade each submission on its own (as Gradescope's autograder does)\n"
    )


# --- the secret seed ---------------------------------------------------------------------------


def test_any_secret_text_is_a_seed_and_integers_stay_themselves(monkeypatch):
    monkeypatch.setenv("ATTNLAB_SEED", "c0ffee-secret-42")
    chosen = resolve_seed(None)
    assert chosen == Seed(secret_seed("c0ffee-secret-42"), "ATTNLAB_SEED")
    assert chosen.value == 3386478418143542815 and chosen.shown == "secret"  # sha256's first 63 bits
    assert secret_seed("12345") == 12345 and secret_seed("0x10") == 16
    assert secret_seed("-5") != 5 and secret_seed("-5") >= 0


def test_in_ci_an_unset_secret_is_a_usage_error(monkeypatch):
    monkeypatch.setenv("CI", "true")
    monkeypatch.delenv("ATTNLAB_SEED", raising=False)
    with pytest.raises(AttnlabError) as caught:
        resolve_seed(None)
    assert caught.value.exit_code == ExitCode.USAGE
    assert caught.value.message == (
        "$ATTNLAB_SEED is not set, and CI=true: a CI grade uses the course's secret seed; set $ATTNLAB_SEED "
        "from the CI system's secret (a fork's pull request gets none), or pass --public-seed to grade with the "
        "public inputs on purpose"
    )
    assert resolve_seed(None, public_seed=True) == Seed(DEFAULT_SEED, "default")
    assert resolve_seed(5) == Seed(5, "--seed")
    monkeypatch.delenv("CI")
    assert resolve_seed(None) == Seed(DEFAULT_SEED, "default")  # outside CI, no secret means the public inputs


@pytest.mark.parametrize("ci", [None, "true"])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_secret_is_a_usage_error_in_ci_or_not(monkeypatch, ci, value):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    monkeypatch.setenv("ATTNLAB_SEED", value)
    with pytest.raises(AttnlabError) as caught:
        resolve_seed(None)
    assert caught.value.exit_code == ExitCode.USAGE
    assert caught.value.message == (
        "$ATTNLAB_SEED is empty: set it to the course's secret (a fork's pull request gets none, a misspelt "
        "secret's name an empty value), unset it, or pass --public-seed to grade with the public inputs on purpose"
    )
    assert resolve_seed(None, public_seed=True) == Seed(DEFAULT_SEED, "default")


@needs_cpu_backend
@pytest.mark.slow
def test_a_ci_batch_without_its_secret_stops_before_grading(tmp_path):
    env = {**environment(), "CI": "true"}
    completed = subprocess.run(
        [sys.executable, "-m", "labrunner", "grade", "lab2", str(SOLUTION), str(STARTER), *QUICK],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2
    assert completed.stderr.startswith("error: $ATTNLAB_SEED is not set, and CI=true: ")
    with_seed = subprocess.run(  # an explicit --seed is a seed: the batch goes on
        [sys.executable, "-m", "labrunner", "grade", "lab2", str(SOLUTION), str(STARTER), *QUICK, "--seed", "7"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert with_seed.returncode == 0, with_seed.stderr[-2000:]
    assert "[1/2]" not in completed.stderr


@needs_cpu_backend
@pytest.mark.slow
def test_a_batch_of_one_writes_gradescope_results_even_when_its_report_is_reused(tmp_path):
    out, results = tmp_path / "out", tmp_path / "results.json"
    command = ("grade", "lab2", str(SOLUTION), *QUICK, "--out-dir", str(out), "--gradescope", str(results))
    first = attnlab(*command, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    written = json.loads(results.read_text())
    results.unlink()
    again = attnlab(*command, cwd=tmp_path)
    assert "reused 1 of 1 reports" in " ".join(again.stderr.split())
    rewritten = json.loads(results.read_text())
    assert (rewritten["score"], [t["name"] for t in rewritten["tests"]]) == (
        written["score"],
        [t["name"] for t in written["tests"]],
    )
    assert rewritten["score"] == 80.0 and [t["status"] for t in rewritten["tests"]] == ["passed"]
