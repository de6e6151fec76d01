"""Gradescope's results.json: the documented fields, checked against a schema written from Gradescope's
documentation (tests/data/gradescope-results.schema.json), and scores that follow the lab's points table
exactly: what a pass, a wrong case, a crash, a compile error, a skipped case and a speed gate are worth."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.records.gate import Gate
from labrunner.records.timing import Comparison, Series, SpeedupTiming
from labrunner.report.gradescope import gradescope_results, split, write_gradescope
from labrunner.report.results import CaseResult, RunResult
from labrunner.run.untrusted_text import shown_path
from labrunner.truth.cases import DEFAULT_SEED
from labrunner.truth.catalogue import Points, load_catalogue

REPO = Path(__file__).resolve().parent.parent
SCHEMA = Path(__file__).resolve().parent / "data" / "gradescope-results.schema.json"


@functools.lru_cache(maxsize=1)
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def valid(results: dict) -> dict:
    problems = [f"{'/'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in validator().iter_errors(results)]
    assert not problems, "results.json breaks Gradescope's format: " + "; ".join(problems)
    return results


def scored(result: RunResult) -> dict:
    return valid(gradescope_results(result.to_json()))


def table_of(results: dict) -> list[tuple]:
    return [(t["name"], t["score"], t["max_score"], t["status"]) for t in results["tests"]]


def passing(name: str, rows: int = 1, prefix: int = 31) -> CaseResult:
    return CaseResult(name, "pass", "all 2048 elements within the pass rule", rows, prefix)


# --- the points table ----------------------------------------------------------------------------------


def test_every_lab_has_its_points_table():
    assert load_catalogue("lab1").points == Points(cases=100.0, speed=0.0)
    assert load_catalogue("lab2").points == Points(cases=80.0, speed=20.0)
    assert load_catalogue("lab3").points == Points(cases=80.0, speed=20.0)


@pytest.mark.parametrize(
    ("points", "problem"),
    [
        ("cases = 80\nspeeed = 20", ": unknown key 'speeed'; the keys are cases, speed and shares"),
        ("cases = -5", ": cases = -5; write a number of points, 0 or more"),
        ("cases = 0", ": cases = 0; the cases must be worth more than 0 points"),
        ("speed = inf", ": speed = inf; write a number of points, 0 or more"),
        ("cases = true", ": cases = True; write a number of points, 0 or more"),
        ("shares = 2", ": shares = 2; write a table, [points.shares], of case = share"),
        ("[points.shares]\nT9 = 2", ".shares: 'T9' is no case of this file; name one of its [[case]] entries"),
        ("[points.shares]\nT1 = 0", ".shares: T1 = 0; a share is a whole number, 1 or more"),
        ("[points.shares]\nT1 = 1.5", ".shares: T1 = 1.5; a share is a whole number, 1 or more"),
    ],
)
def test_a_points_table_that_would_change_scores_silently_is_refused(tmp_path, points, problem):
    (tmp_path / "labx.toml").write_text(f'lab = "labx"\n[[case]]\nname = "T1"\nrows = 1\n[points]\n{points}\n')
    with pytest.raises(AttnlabError) as raised:
        load_catalogue("labx", tmp_path)
    assert (raised.value.message, raised.value.exit_code) == (f"{tmp_path / 'labx.toml'} [points]{problem}", 2)
    assert isinstance(raised.value, ValueError)  # as the catalogue's other checks raise


def test_a_bad_points_table_ends_the_grade_in_a_usage_error_and_results_json_says_so(tmp_path, monkeypatch):
    import dataclasses

    from click.testing import CliRunner

    from labrunner.cli import main
    from labrunner.labs import LABS

    table = (REPO / "cases/lab2.toml").read_text().replace("\nspeed = 20\n", "\nspeeed = 20\n")
    (tmp_path / "lab2.toml").write_text(table)
    monkeypatch.setitem(
        LABS, "lab2", dataclasses.replace(LABS["lab2"], cases_dir=tmp_path, kernels_dir=REPO / "kernels")
    )
    out = tmp_path / "results.json"
    run = CliRunner().invoke(
        main, ["grade", "lab2", str(REPO / "kernels/lab2/solution.cu"), "--device", "cpu", "--gradescope", str(out)]
    )
    problem = f"{tmp_path / 'lab2.toml'} [points]: unknown key 'speeed'; the keys are cases, speed and shares"
    assert (run.exit_code, run.output) == (2, f"error: {problem}\n")
    results = valid(json.loads(out.read_text()))
    assert table_of(results) == [("usage-error", 0.0, 100.0, "failed")]  # scored by Points()'s defaults: 0
    assert results["tests"][0]["output"] == f"usage-error: none of the 100 case points\n\n{problem}"


def test_shares_split_the_points_in_hundredths_that_add_up_exactly():
    assert split(8000, [1] * 9) == [889] * 8 + [888]  # 80 points over 9 cases: the remainder to the first
    assert split(8000, [1, 1, 2]) == [2000, 2000, 4000]
    assert split(10000, [1, 1, 1]) == [3334, 3333, 3333]
    assert split(100, [3, 1]) == [75, 25]


def test_a_case_given_more_shares_is_worth_more(tmp_path):
    (tmp_path / "labx.toml").write_text(
        'lab = "labx"\n[[case]]\nname = "T1"\nrows = 1\n[[case]]\nname = "T2"\nrows = 2\n'
        "[points]\ncases = 90\n[points.shares]\nT2 = 2\n"
    )
    points = load_catalogue("labx", tmp_path).points
    assert (points.share("T1"), points.share("T2"), points.share("geometry-T9")) == (1, 2, 1)


# --- what each outcome scores ----------------------------------------------------------------------------


def test_a_cpu_pass_shares_the_case_points_among_the_cases_that_ran_and_counts_skipped_ones_neither_way():
    cases = [passing("C1-P31"), passing("C17-P31", 17), passing("C33-P31", 33), passing("geometry-C129-P31", 129)]
    skipped = [
        CaseResult(name, "skipped", "skipped: outside the CPU backend's time budget; --full runs it", 33, 1000)
        for name in ("planted-C33-P1000", "lastkey-C33-P1000")
    ]
    result = RunResult("grade", "lab2", "subs/ana.cu", backend="cpu", cases=cases + skipped, seconds=6.4)
    results = scored(result)
    assert table_of(results) == [
        ("C1-P31", 20.0, 20.0, "passed"),
        ("C17-P31", 20.0, 20.0, "passed"),
        ("C33-P31", 20.0, 20.0, "passed"),
        ("geometry-C129-P31", 20.0, 20.0, "passed"),  # the file's own geometry case: one share, like any
    ]
    assert (results["score"], results["execution_time"]) == (80.0, 6)
    assert results["output"].splitlines() == [
        "attnlab lab2 subs/ana.cu: PASS on the CPU backend (exit 0)",
        "score 80 of 80",
        "2 cases skipped on the CPU backend (its time budget; --full runs them), counted neither way: "
        "planted-C33-P1000, lastkey-C33-P1000",
        "the speed part (20 points) is not scored: the CPU backend checks correctness only",
    ]
    assert results["tests"][0]["output"] == (
        "pass: all 2048 elements within the pass rule\nthis case: a one-row chunk: decode's shape"
    )
    assert results["extra_data"]["attnlab"]["skipped"] == 2
    assert "leaderboard" not in results  # nothing was timed


def test_a_crash_scores_nothing_for_its_case_and_for_the_cases_it_kept_from_running():
    cases = [
        passing("C1-P31"),
        CaseResult("C17-P31", "crash", "the kernel faulted: illegal address", 17, 31),
        CaseResult("C33-P31", "not-run", "not run: case C17-P31 ended in a crash", 33, 31),
        CaseResult("C1-P1000", "not-run", "not run: case C17-P31 ended in a crash", 1, 1000),
    ]
    hints = [{"hazard": "bounds", "text": "rows past the first block are read out of bounds"}]
    results = scored(RunResult("grade", "lab2", "b.cu", backend="cpu", cases=cases, hints=hints))
    assert table_of(results) == [
        ("C1-P31", 20.0, 20.0, "passed"),
        ("C17-P31", 0.0, 20.0, "failed"),
        ("C33-P31", 0.0, 20.0, "failed"),
        ("C1-P1000", 0.0, 20.0, "failed"),
    ]
    assert results["score"] == 20.0
    assert [t["tags"] for t in results["tests"]] == [["pass"], ["crash"], ["not-run"], ["not-run"]]
    assert results["tests"][1]["output"] == (
        "crash: the kernel faulted: illegal address\n"
        "hint (bounds): rows past the first block are read out of bounds\n"
        "this case: a chunk and a prefix that are no tile multiple"
    )
    assert results["output"].splitlines()[0] == "attnlab lab2 b.cu: CRASH in case C17-P31 on the CPU backend (exit 4)"


def test_a_compile_error_is_one_failed_test_holding_every_case_point():
    error = 'subs/c.cu(3): error: expected a ";"\n1 error detected in the compilation of "subs/c.cu".'
    result = RunResult("grade", "lab1", "subs/c.cu", error=error, error_code=ExitCode.COMPILE_ERROR, seconds=0.4)
    results = scored(result)
    assert table_of(results) == [("compile", 0.0, 100.0, "failed")]  # lab 1: no speed part at all
    assert results["tests"][0]["output"] == f"compile-error: none of the 100 case points\n\n{error}"
    assert results["score"] == 0.0
    assert results["output"] == "attnlab lab1 subs/c.cu: COMPILE-ERROR (exit 3)\nscore 0 of 100"


def test_a_grade_that_could_not_run_is_named_for_its_verdict():
    result = RunResult("grade", "lab2", "a.cu", error="no GPU found", error_code=ExitCode.ENVIRONMENT)
    result.options = {"device": "gpu"}
    results = scored(result)
    assert table_of(results) == [("environment-missing", 0.0, 80.0, "failed"), ("speed gate", 0.0, 20.0, "failed")]
    assert results["tests"][1]["output"] == "not timed: the grade ended environment-missing before its timing"


def timed_pass(gate: Gate | None, speedup: float = 7.1) -> RunResult:
    comparison = Comparison(Series({"median_ms": 2.0}), Series({"median_ms": 2.0 * speedup}), speedup, 7.0, 7.2)
    return RunResult(
        "grade",
        "lab2",
        "fast.cu",
        backend="gpu",
        cases=[passing("C1-P31"), passing("C17-P31", 17)],
        timing=SpeedupTiming(2048, 2048, 1.0, "fast.cu", "starter.cu", comparison),
        gate=gate,
    )


def test_a_met_gate_earns_the_speed_points_and_a_missed_one_none():
    met = scored(timed_pass(Gate("met", True, "met: SPEEDUP 7.10x against the 6.50x required on NVIDIA H200")))
    assert table_of(met) == [
        ("C1-P31", 40.0, 40.0, "passed"),
        ("C17-P31", 40.0, 40.0, "passed"),
        ("speed gate", 20.0, 20.0, "passed"),
    ]
    assert (met["score"], met["leaderboard"]) == (100.0, [{"name": "SPEEDUP", "value": 7.1}])
    message = "missed: SPEEDUP 3.10x against the 6.50x required on NVIDIA H200"
    missed = scored(timed_pass(Gate("missed", False, message), 3.1))
    assert table_of(missed)[-1] == ("speed gate", 0.0, 20.0, "failed")
    assert (missed["tests"][-1]["output"], missed["tests"][-1]["tags"], missed["score"]) == (
        message,
        ["gate missed"],
        80.0,
    )
    assert missed["output"].splitlines()[:2] == [
        "attnlab lab2 fast.cu: SPEED-GATE on the GPU backend (exit 5)",
        "score 80 of 100",
    ]


def test_a_gpu_with_no_gate_leaves_the_speed_part_unscored():
    results = scored(timed_pass(Gate("none", True, "no speed gate for NVIDIA H200")))
    assert [t["name"] for t in results["tests"]] == ["C1-P31", "C17-P31"]
    assert results["output"].splitlines()[1:] == [
        "score 80 of 80",
        "the speed part (20 points) is not scored: no speed gate for NVIDIA H200",
    ]


def test_a_wrong_kernel_on_the_gpu_loses_the_speed_points_it_was_never_timed_for():
    cases = [passing("C1-P31"), CaseResult("C17-P31", "wrong", "row 3: got 1, expected 2", 17, 31)]
    results = scored(RunResult("grade", "lab2", "w.cu", backend="gpu", cases=cases))
    assert table_of(results) == [
        ("C1-P31", 40.0, 40.0, "passed"),
        ("C17-P31", 0.0, 40.0, "failed"),
        ("speed gate", 0.0, 20.0, "failed"),
    ]
    assert results["score"] == 40.0


def test_a_bandwidth_gate_puts_the_copy_fraction_on_the_leaderboard():
    data = timed_pass(Gate("met", True, "met")).to_json()
    data["lab"] = "lab3"
    data["timing"]["bandwidth"] = {"copy_fraction": 0.84213}
    assert valid(gradescope_results(data))["leaderboard"] == [
        {"name": "SPEEDUP", "value": 7.1},
        {"name": "fraction of the device copy", "value": 0.842},
    ]


def test_untrusted_text_is_shown_and_declared_plain_text(tmp_path):
    name = os.fsdecode(b"subs/<b>x</b>\n\x1b[32mPASS\xff.cu")
    error = f"{shown_path(name)}(1): error: bad token \x01\x1b[2J"  # as a grade names the file: shown
    result = RunResult("grade", "lab2", name, error=error, error_code=ExitCode.COMPILE_ERROR)
    write_gradescope(result.to_json(), tmp_path / "results.json")
    raw = (tmp_path / "results.json").read_text(encoding="utf-8")
    results = valid(json.loads(raw))
    assert results["output"].splitlines()[0] == (
        "attnlab lab2 subs/<b>x</b>\\x0a\\x1b[32mPASS\\xff.cu: COMPILE-ERROR (exit 3)"
    )
    assert results["tests"][0]["output"].endswith(
        "subs/<b>x</b>\\x0a\\x1b[32mPASS\\xff.cu(1): error: bad token \\x01\\x1b[2J"
    )
    assert results["extra_data"]["attnlab"]["file"] == "subs/<b>x</b>\\x0a\\x1b[32mPASS\\xff.cu"
    # Gradescope renders the top-level output as HTML unless told otherwise: every text is plain text
    assert (results["output_format"], results["test_output_format"], results["test_name_format"]) == ("text",) * 3
    assert {(t["output_format"], t["name_format"]) for t in results["tests"]} == {("text", "text")}
    assert "\x1b" not in raw and "\\u001b" not in raw


def test_the_schema_refuses_what_gradescope_does_not_document():
    assert not list(validator().iter_errors({"score": 1.0, "tests": [{"name": "a", "status": "passed"}]}))
    refused = [
        {"tests": [{"name": "a", "max_score": 1}]},  # no score anywhere
        {"score": 1, "tests": [{"name": "a", "status": "ok"}]},
        {"score": 1, "visibility": "students"},
        {"score": 1, "tests": [{"name": "a", "maxscore": 1}]},
        {"score": 1, "output_format": "rst"},
        {"score": 1, "leaderboard": [{"name": "SPEEDUP", "value": 2, "order": "up"}]},
    ]
    for results in refused:
        assert list(validator().iter_errors(results)), results


# --- results.json as the CLI writes it --------------------------------------------------------------------


def grade(tmp_path: Path, file: Path, *cases: str) -> tuple[int, dict]:
    out = tmp_path / f"{file.stem}.results.json"
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    environment.pop("ATTNLAB_SEED", None)
    options = [arg for case in cases for arg in ("--case", case)]
    run = subprocess.run(
        [sys.executable, "-m", "labrunner", "grade", "lab2", str(file), "--device", "cpu", "--seed", str(DEFAULT_SEED)]
        + options
        + ["--gradescope", str(out)],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.exists(), run.stderr
    return run.returncode, valid(json.loads(out.read_text()))


def test_a_compile_error_graded_through_the_cli_writes_results_json(tmp_path):
    broken = tmp_path / "broken.cu"
    broken.write_text("// one\nint int x;\n")
    code, results = grade(tmp_path, broken)
    assert code == 3
    assert table_of(results) == [("compile", 0.0, 80.0, "failed")]
    assert results["score"] == 0.0
    assert results["tests"][0]["output"].startswith(
        f"compile-error: none of the 80 case points\n\n{broken}(2): error: invalid combination of type specifiers\n"
    )
    assert results["output"].splitlines() == [
        f"attnlab lab2 {broken}: COMPILE-ERROR (exit 3)",
        "score 0 of 80",
        "the speed part (20 points) is not scored: the CPU backend checks correctness only",
    ]


@pytest.mark.slow
def test_the_solution_and_a_wrong_kernel_graded_through_the_cli_score_as_the_table_says(tmp_path):
    code, solution = grade(tmp_path, REPO / "kernels/lab2/solution.cu", "C1-P31", "C1-P1000")
    assert code == 0
    assert table_of(solution) == [("C1-P31", 40.0, 40.0, "passed"), ("C1-P1000", 40.0, 40.0, "passed")]
    assert solution["score"] == 80.0
    assert solution["extra_data"]["attnlab"] == {
        "lab": "lab2",
        "file": str(REPO / "kernels/lab2/solution.cu"),
        "verdict": "pass",
        "exit_code": 0,
        "backend": "cpu",
        "skipped": 0,
        "sha256": solution["extra_data"]["attnlab"]["sha256"],
        "seed": str(DEFAULT_SEED),
        "attnlab_version": solution["extra_data"]["attnlab"]["attnlab_version"],
    }
    import hashlib

    digest = hashlib.sha256((REPO / "kernels/lab2/solution.cu").read_bytes()).hexdigest()
    assert solution["extra_data"]["attnlab"]["sha256"] == digest

    wrong = REPO / "tests/fixtures/lab2/wrong/l_not_rescaled.cu"
    code, results = grade(tmp_path, wrong, "C1-P31", "C1-P1000")
    assert code == 1
    assert table_of(results) == [("C1-P31", 40.0, 40.0, "passed"), ("C1-P1000", 0.0, 40.0, "failed")]
    assert results["score"] == 40.0
    failed = results["tests"][1]["output"].splitlines()
    assert failed[0].startswith("wrong: row 0, head 0, col 0: got 0.0262298, expected 0.0377243")
    assert failed[1].startswith("hint (rescale): the output is the online softmax (")
    assert failed[-1] == "this case: one row against a long prefix"
    assert results["output"].splitlines()[:3] == [
        f"attnlab lab2 {wrong}: WRONG in case C1-P1000 on the CPU backend (exit 1)",
        "score 40 of 80",
        "the speed part (20 points) is not scored: the CPU backend checks correctness only",
    ]
