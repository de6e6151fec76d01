"""Results: a run's verdict, its exit code, and the JSON and JUnit forms a CI job reads.

A CI job branches on the exit code alone, so the mapping is pinned number by number, and every
rule that decides a verdict (severity order, ties, cases that did not run, the speed gate, an
error before any case) is tried with the case that would tell a wrong rule apart.
"""

from __future__ import annotations

import json
import math
from xml.etree import ElementTree

import numpy as np
import pytest

from labrunner.exit_codes import AttnlabError, ExitCode, environment_error, usage_error
from labrunner.records.compile import CompileSummary
from labrunner.records.device import DeviceFacts
from labrunner.records.gate import Gate
from labrunner.records.timing import Comparison, Series, SpeedupTiming
from labrunner.report.junit import write_junit
from labrunner.report.results import NOT_RUN, SCHEMA, STATUS_EXIT_CODES, CaseResult, RunResult, write_json


def case(name: str, status: str) -> CaseResult:
    return CaseResult(name, status, f"{name} ended {status}", rows=1)


def run(*statuses: str, gate: dict | None = None, **fields) -> RunResult:
    """A run of cases with these statuses; a gate given as its JSON is read into its record."""
    cases = [case(f"c{i}", s) for i, s in enumerate(statuses)]
    return RunResult(
        "grade", "lab2", "flash.cu", cases=cases, gate=None if gate is None else Gate.from_json(gate), **fields
    )


MISSED = {"status": "missed", "passed": False, "message": "missed: SPEEDUP 1.00x against the 6.50x required"}
MET = {"status": "met", "passed": True, "message": "met"}


# --- the numbers a CI job branches on ---------------------------------------------------------


def test_every_exit_code_keeps_its_number():
    assert {code.name: int(code) for code in ExitCode} == {
        "PASS": 0,
        "WRONG_ANSWER": 1,
        "USAGE": 2,
        "COMPILE_ERROR": 3,
        "MISBEHAVED": 4,
        "SPEED_GATE": 5,
        "ENVIRONMENT": 6,
        "INTERRUPTED": 130,
        "TERMINATED": 143,
    }


def test_every_case_status_maps_to_its_exit_code_most_severe_first():
    assert [(status, int(code)) for status, code in STATUS_EXIT_CODES.items()] == [
        ("crash", 4),
        ("timeout", 4),
        ("out-of-bounds", 4),
        ("input-mutated", 4),
        ("race", 4),
        ("race-check-inconclusive", 4),
        ("never-written", 1),
        ("wrong", 1),
        ("speed-gate", 5),
        ("pass", 0),
    ]
    assert NOT_RUN == ("not-run", "skipped")


@pytest.mark.parametrize(("status", "code"), [(s, c) for s, c in STATUS_EXIT_CODES.items()])
def test_one_case_decides_the_verdict_and_exit_code(status, code):
    result = run("pass", status)
    assert (result.verdict, result.exit_code) == (status, code)
    assert result.decisive_case is (None if status == "pass" else result.cases[1])


def test_the_most_severe_case_decides_and_the_first_of_equals_is_named():
    result = run("wrong", "pass", "timeout", "crash", "crash")
    assert (result.verdict, result.exit_code, result.decisive_case.name) == ("crash", ExitCode.MISBEHAVED, "c3")
    assert run("wrong", "never-written").decisive_case.name == "c1"
    assert run("never-written", "wrong").decisive_case.name == "c0"


def test_cases_that_did_not_run_say_nothing_about_the_kernel():
    result = run("pass", "not-run", "skipped")
    assert (result.verdict, result.exit_code, result.decisive_case) == ("pass", ExitCode.PASS, None)


def test_no_cases_is_a_pass():
    assert (RunResult("check").verdict, RunResult("check").exit_code) == ("pass", ExitCode.PASS)


# --- the speed gate ------------------------------------------------------------------------------


def test_a_missed_gate_after_every_case_passed_is_exit_5():
    result = run("pass", "skipped", gate=MISSED)
    assert (result.verdict, result.exit_code, result.decisive_case) == ("speed-gate", ExitCode.SPEED_GATE, None)
    assert int(result.exit_code) == 5


def test_a_met_gate_or_no_gate_for_this_gpu_is_a_pass():
    assert (run("pass", gate=MET).verdict, run("pass", gate=MET).exit_code) == ("pass", ExitCode.PASS)
    none = {"status": "none", "passed": True, "message": "no speed gate for NVIDIA H200"}
    assert run("pass", gate=none).exit_code == ExitCode.PASS
    calibrated = {"status": "calibrated", "passed": True, "message": "wrote the lab2 gate for NVIDIA H200"}
    assert run("pass", gate=calibrated).exit_code == ExitCode.PASS  # calibrate's own record


def test_a_wrong_case_outranks_a_missed_gate():
    result = run("pass", "wrong", gate=MISSED)
    assert (result.verdict, result.exit_code) == ("wrong", ExitCode.WRONG_ANSWER)


# --- an error before or instead of the cases --------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "verdict"),
    [
        (ExitCode.COMPILE_ERROR, "compile-error"),
        (ExitCode.USAGE, "usage-error"),
        (ExitCode.ENVIRONMENT, "environment-missing"),
        (ExitCode.WRONG_ANSWER, "error"),
        (ExitCode.MISBEHAVED, "crash"),  # a worker that failed while loading the kernel
        (ExitCode.INTERRUPTED, "interrupted"),
        (ExitCode.TERMINATED, "interrupted"),
    ],
)
def test_an_error_names_its_verdict_and_keeps_its_exit_code(code, verdict):
    result = run("pass", "pass", error="attention.cu(3): error: expected a ';'", error_code=code)
    assert (result.verdict, result.exit_code) == (verdict, code)


def test_an_error_outranks_a_case_verdict_and_a_missed_gate():
    result = run("crash", gate=MISSED, error="no GPU found", error_code=ExitCode.ENVIRONMENT)
    assert (result.verdict, result.exit_code) == ("environment-missing", ExitCode.ENVIRONMENT)


def test_attnlab_errors_carry_their_message_and_code():
    error = AttnlabError("attention.cu(1): error: refused", ExitCode.COMPILE_ERROR)
    assert (str(error), error.message, error.exit_code) == ("attention.cu(1): error: refused",) * 2 + (3,)
    assert (usage_error("--seed -1: must be 0 or more").exit_code, usage_error("x").message) == (ExitCode.USAGE, "x")
    assert (environment_error("no GPU").exit_code, environment_error("no GPU").message) == (
        ExitCode.ENVIRONMENT,
        "no GPU",
    )


# --- JSON and JUnit ----------------------------------------------------------------------------------


def test_the_json_form_is_the_documented_schema(tmp_path):
    result = run("pass", "wrong", gate=MISSED, seed="7", backend="cpu")
    result.cases[1].max_abs_err = np.float64(0.5)  # numpy scalars arrive from the checker
    result.cases[1].first_bad = {"row": 2, "head": 0, "col": 1, "got": np.float32(1.5), "expected": 1.0}
    path = tmp_path / "result.json"
    write_json(result, path)
    data = json.loads(path.read_text())
    assert {
        k: data[k]
        for k in (
            "schema",
            "command",
            "lab",
            "file",
            "backend",
            "seed",
            "verdict",
            "exit_code",
            "error",
            "decisive_case",
            "gate",
        )
    } == {
        "schema": SCHEMA,
        "command": "grade",
        "lab": "lab2",
        "file": "flash.cu",
        "backend": "cpu",
        "seed": "7",
        "verdict": "wrong",
        "exit_code": 1,
        "error": None,
        "decisive_case": "c1",
        "gate": MISSED,
    }
    assert SCHEMA == "attnlab.result/1"
    assert data["cases"][1] == {
        "name": "c1",
        "status": "wrong",
        "rows": 1,
        "prefix": 0,
        "max_abs_err": 0.5,
        "nonfinite": 0,
        "bad_elements": 0,
        "first_bad": {"row": 2, "head": 0, "col": 1, "got": 1.5, "expected": 1.0},
        "failing_rows": [],
        "message": "c1 ended wrong",
        "diagnosis": None,
    }
    assert path.read_text().endswith("}\n")


def test_json_writes_a_non_finite_error_as_a_word_and_refuses_any_other_nan_and_an_unknown_type(tmp_path):
    result = run("wrong", "wrong")
    result.cases[0].max_abs_err, result.cases[1].max_abs_err = math.nan, np.float64(-math.inf)
    write_json(result, tmp_path / "r.json")
    assert [c["max_abs_err"] for c in json.loads((tmp_path / "r.json").read_text())["cases"]] == ["nan", "-inf"]
    result.cases[0].first_bad = {"row": 0, "head": 0, "col": 0, "got": math.nan}  # a field the schema leaves open
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        write_json(result, tmp_path / "r.json")
    result.cases[0].first_bad = {"row": 0, "head": 0, "col": 0, "got": object()}  # a field the schema leaves open
    with pytest.raises(TypeError, match="^object is not JSON serializable$"):
        write_json(result, tmp_path / "r.json")


def test_junit_has_one_test_case_per_case_with_failures_and_skips(tmp_path):
    result = run("pass", "wrong", "skipped", "not-run")
    path = tmp_path / "r.xml"
    write_junit(result, path)
    suite = ElementTree.parse(path).getroot()
    assert [suite.get(k) for k in ("name", "tests", "failures", "errors", "skipped", "time")] == [
        "attnlab lab2 flash.cu",
        "4",
        "1",
        "0",
        "2",
        "0.000",
    ]
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [("attnlab.lab2.flash", f"c{i}") for i in range(4)]
    assert [child.tag for c in cases for child in c] == ["failure", "skipped", "skipped"]
    failure = cases[1].find("failure")
    assert (failure.get("type"), failure.get("message"), failure.text) == ("wrong", "c1 ended wrong", "c1 ended wrong")
    assert cases[2].find("skipped").get("message") == "c2 ended skipped"
    assert path.read_text().startswith("<?xml version='1.0' encoding='utf-8'?>\n<testsuite ")


def test_junit_reports_an_error_as_one_more_failing_case(tmp_path):
    result = run("pass", error="attention.cu(3): error: expected a ';'", error_code=ExitCode.COMPILE_ERROR)
    path = tmp_path / "r.xml"
    write_junit(result, path)
    suite = ElementTree.parse(path).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    error_case = suite.findall("testcase")[-1]
    assert (error_case.get("classname"), error_case.get("name")) == ("attnlab.lab2.flash", "compile")
    failure = error_case.find("failure")
    assert (failure.get("type"), failure.get("message"), failure.text) == (
        "compile-error",
        "attention.cu(3): error: expected a ';'",
        "attention.cu(3): error: expected a ';'",
    )


def test_the_json_form_has_every_field_and_says_none_where_no_case_decided(tmp_path):
    comparison = Comparison(Series({"median_ms": 2.0}), Series({"median_ms": 26.0}), 13.0, 12.8, 13.1)
    timing = SpeedupTiming(2048, 2048, 51.55, "flash.cu", "starter.cu", comparison)
    result = RunResult(
        "grade",
        "lab2",
        "flash.cu",
        backend="gpu",
        device=DeviceFacts.from_json({"name": "NVIDIA H200"}),
        seed="secret",
        oracle_proof={"passed": True, "max_error": 0.0},
        cases=[case("c0", "pass")],
        timing=timing,
        gate=Gate.from_json(MET),
        compile=CompileSummary("sm_90", "13.0", {}, {}, {}, {}, []),
        notes=["a note"],
        kernel_output=["printed"],
    )
    path = tmp_path / "result.json"
    write_json(result, path)
    data = json.loads(path.read_text())
    assert {k: v for k, v in data.items() if k != "cases"} == {
        "schema": "attnlab.result/1",
        "command": "grade",
        "lab": "lab2",
        "file": "flash.cu",
        "backend": "gpu",
        "device": {"name": "NVIDIA H200"},
        "seed": "secret",
        "verdict": "pass",
        "summary": "pass",
        "exit_code": 0,
        "error": None,
        "skipped": 0,
        "hints": [],
        "decisive_case": None,
        "oracle_proof": {"passed": True, "max_error": 0.0},
        "compile": {
            "arch": "sm_90",
            "nvrtc": "13.0",
            "entry_points": {},
            "constants": {},
            "exported": {},
            "resources": {},
            "warnings": [],
        },
        "timing": timing.to_json(),
        "gate": MET,
        "notes": ["a note"],
        "kernel_output": ["printed"],
        "attnlab_version": "0.1.0",
        "sha256": None,
        "options": {},
        "gpu": "NVIDIA H200",
        "seconds": None,
        "timings": None,
    }
    assert (data["timing"]["kind"], data["timing"]["speedup"]) == ("speedup", 13.0)
    assert path.read_text().startswith('{\n  "schema": "attnlab.result/1",\n  "command": "grade",\n')


def test_junit_counts_every_failure_and_the_error(tmp_path):
    result = run("wrong", "crash", "pass", error="no GPU found", error_code=ExitCode.ENVIRONMENT)
    path = tmp_path / "r.xml"
    write_junit(result, path)
    suite = ElementTree.parse(path).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "2", "1")
    assert [c.get("name") for c in suite.findall("testcase")] == ["c0", "c1", "c2", "environment-missing"]
    assert [child.tag for c in suite.findall("testcase") for child in c] == ["failure", "failure", "error"]
