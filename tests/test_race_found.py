"""Races found without asking, and named by evidence.

On the CPU a failing case is rerun under two other thread orders (`RERUN_WHEN_FAILING`): an output
that moves with the order is a race, not a wrong formula. The kernel named is the one whose own
thread order moves the output while every other kernel keeps the first order, or failing that, the
first whose own result carries the shared-memory poison; never the last kernel by default. On a GPU a
wrong grade of a file with `__shared__` ends by suggesting --race-check.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from labrunner.pipeline.grade import race_check_advice
from labrunner.report.results import CaseResult, RunResult
from labrunner.truth.verdict import Status

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests/fixtures"


def grade(tmp_path: Path, fixture: str, *extra: str) -> tuple[int, dict]:
    report = tmp_path / "result.json"
    lab = fixture.split("/")[0]
    command = [sys.executable, "-m", "labrunner", "grade", lab, str(FIXTURES / fixture), "--device", "cpu"]
    completed = subprocess.run(
        [*command, "--json", str(report), *extra], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert report.exists(), completed.stderr[-2000:]
    return completed.returncode, json.loads(report.read_text())


def decisive(result: dict) -> dict:
    return next(c for c in result["cases"] if c["status"] not in ("pass", "skipped"))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fixture", "case", "kernel"),
    [
        # wrong under threads in order; a random order moves it: the softmax, not the first kernel
        ("lab1/wrong/softmax_max_overwritten.cu", "T17", "attn_softmax"),
        # the merge reads warps' states never written: decode_partial, not the launch's last kernel
        ("lab3/wrong/partial_merge_unsynced.cu", "single-token", "decode_partial"),
    ],
)
def test_a_race_is_found_unasked_and_named_by_evidence(tmp_path, fixture, case, kernel):
    code, result = grade(tmp_path, fixture)
    assert code == 4
    assert result["verdict"] == "race"
    first = decisive(result)
    assert first["name"] == case
    assert first["message"].endswith(f"; in kernel {kernel}")
    assert [h["hazard"] for h in result["hints"]][:1] == ["race"]


@pytest.mark.slow
def test_the_unasked_rerun_says_which_order_moved_the_output(tmp_path):
    code, result = grade(tmp_path, "lab2/wrong/tile_overwritten_early.cu")
    assert (code, result["verdict"]) == (4, "race")
    first = decisive(result)
    assert first["name"] == "C1-P1000"
    assert first["message"].startswith("the output depends on thread order: with each block's threads in ")
    assert first["message"].endswith("a missing __syncthreads()?; in kernel flash_prefill")


@pytest.mark.slow
def test_every_case_carrying_the_race_is_called_a_race(tmp_path):
    # the one-row cases' first run is NaN without the poison's payload; under reversed threads the poison
    # shows, on the first case and on C1-P1000 too, which runs after the race was already found
    code, result = grade(tmp_path, "lab2/wrong/no_barrier_after_tile_load.cu")
    assert (code, result["verdict"]) == (4, "race")
    ran = [c for c in result["cases"] if c["status"] != "skipped"]
    assert {c["status"] for c in ran} == {"race"}
    one_row = [c for c in ran if c["rows"] == 1]
    assert [c["name"] for c in one_row] == ["C1-P31", "C1-P1000"]
    for case in one_row:
        assert case["message"] == (
            "with each block's threads in reverse order between barriers, row 0, head 0, col 0: read shared "
            "memory no thread had written since the last barrier: a missing __syncthreads()? (2048 of 2048 "
            "elements carry the shared-memory poison); in kernel flash_prefill"
        )


@pytest.mark.slow
def test_a_plainly_wrong_kernel_stays_wrong_after_its_reruns(tmp_path):
    # scale_missing is wrong the same way under every order: the reruns agree, the verdict stays wrong
    code, result = grade(tmp_path, "lab2/wrong/scale_missing.cu")
    assert (code, result["verdict"]) == (1, "wrong")
    assert [h["hazard"] for h in result["hints"]][:1] == ["scale"]


def wrong_result(backend: str) -> RunResult:
    result = RunResult("grade", "lab2", backend=backend)
    result.cases.append(CaseResult("C1-P31", Status.WRONG, "row 0 ...", 1, 31))
    return result


SHARED_SOURCE = 'extern "C" __global__ void k() {\n    __shared__ float tile[64];\n}\n'


def test_a_wrong_gpu_grade_of_a_file_with_shared_memory_suggests_the_race_check():
    submission = SimpleNamespace(source=SHARED_SOURCE, label="flash.cu")
    assert race_check_advice("gpu", False, wrong_result("gpu"), submission) == (
        "the file uses shared memory (__shared__ at line 2), and a missing __syncthreads() can make values wrong "
        "in a way that looks like a wrong formula: run again with --race-check, and compute-sanitizer looks for a race"
    )


def test_the_race_check_is_suggested_only_where_it_could_help():
    shared = SimpleNamespace(source=SHARED_SOURCE, label="flash.cu")
    # in a comment, __shared__ is no shared memory
    unshared = SimpleNamespace(source='// __shared__ would help\nextern "C" __global__ void k() {}\n', label="f.cu")
    assert race_check_advice("cpu", False, wrong_result("cpu"), shared) is None  # the CPU reruns unasked
    assert race_check_advice("gpu", True, wrong_result("gpu"), shared) is None  # already asked
    assert race_check_advice("gpu", False, wrong_result("gpu"), unshared) is None
    passed = RunResult("grade", "lab2", backend="gpu")
    passed.cases.append(CaseResult("C1-P31", Status.PASS, "", 1, 31))
    assert race_check_advice("gpu", False, passed, shared) is None


def test_a_race_check_that_found_nothing_says_what_ran():
    from labrunner.labs import get_lab
    from labrunner.pipeline.correctness import race_check_words
    from labrunner.pipeline.grading_run import CaseOptions
    from labrunner.truth.cases import Seed

    lab = get_lab("lab2")
    options = CaseOptions(seed=Seed(7, "--seed"), race_check=True)
    constants = lab.constants({})
    results = [
        CaseResult("C1-P31", Status.PASS, "", 1, 31),
        CaseResult("C17-P31", Status.WRONG, "", 17, 31),
        CaseResult("C33-P31", Status.TIMEOUT, "", 33, 31),  # stopped: no schedule ran
        CaseResult("C2048-P2048", Status.PASS, "", 2048, 2048),  # too large for the sanitizer
    ]
    assert race_check_words(lab, "cpu", options, constants, results) == (
        "--race-check: 3 cases (C1-P31, C17-P31, C2048-P2048) each ran again under 6 other schedules (blocks in "
        "ascending order, reverse order and 4 random orders), and every output agreed with its first run"
    )
    assert race_check_words(lab, "gpu", options, constants, results) == (
        "--race-check: compute-sanitizer's racecheck and synccheck ran on 2 cases (C1-P31, C17-P31) and "
        "reported no hazard"
    )
    raced = [*results, CaseResult("C1-P1000", Status.RACE, "", 1, 1000)]
    assert race_check_words(lab, "cpu", options, constants, raced) is None
    unasked = CaseOptions(seed=Seed(7, "--seed"))
    assert race_check_words(lab, "cpu", unasked, constants, results) is None
