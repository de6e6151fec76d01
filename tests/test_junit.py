"""JUnit reports as CI viewers read them (parsed with junitparser, as GitLab and Jenkins plugins do):
counts that match the test cases written, failure text in the body and the message, classnames
that do not split a file name at its dots."""

from __future__ import annotations

import junitparser
import pytest

from labrunner.exit_codes import ExitCode
from labrunner.records.gate import Gate
from labrunner.report.junit import classname, write_aggregate, write_junit
from labrunner.report.results import CaseResult, RunResult


def wrong_case(name: str) -> CaseResult:
    return CaseResult(name, "wrong", "row 0, head 0, col 3: got 1.5, expected 0.25 (|err| > 1e-4 + 1e-3*|ref|)", 17, 31)


def parse(path) -> junitparser.TestSuite:
    """A single run's report: its root is one <testsuite>, as it always was."""
    from xml.etree import ElementTree

    assert ElementTree.parse(path).getroot().tag == "testsuite"
    (suite,) = list(junitparser.JUnitXml.fromfile(str(path)))
    return suite


def test_a_compile_error_is_one_test_case_with_one_failure_and_its_text_in_the_body(tmp_path):
    result = RunResult(
        "grade",
        "lab2",
        "subs/alice.v2.cu",
        error="subs/alice.v2.cu(41): error: expected an expression\n  int x = ;",
        error_code=ExitCode.COMPILE_ERROR,
        seconds=1.25,
    )
    write_junit(result, tmp_path / "r.xml")
    suite = parse(tmp_path / "r.xml")
    assert (suite.tests, suite.failures, suite.errors, suite.skipped, suite.time) == (1, 1, 0, 0, 1.25)
    (case,) = list(suite)
    assert (case.name, case.classname) == ("compile", "attnlab.lab2.alice_v2")
    (failure,) = case.result
    assert isinstance(failure, junitparser.Failure)
    assert failure.type == "compile-error"
    assert failure.message == "subs/alice.v2.cu(41): error: expected an expression"
    assert failure.text == "subs/alice.v2.cu(41): error: expected an expression\n  int x = ;"


def test_cases_failures_and_skips_are_counted_as_written(tmp_path):
    cases = [
        CaseResult("C1-P31", "pass", "all 2048 elements within the pass rule", 1, 31),
        wrong_case("C17-P31"),
        CaseResult(
            "C33-P31",
            "crash",
            "cudaErrorIllegalAddress in flash_prefill",
            33,
            31,
            diagnosis="Invalid __global__ write of size 4\n  at flash_prefill+0x90 in attention.cu:57",
        ),
        CaseResult(
            "C2048-P2048", "skipped", "skipped: outside the CPU backend's time budget; --full runs it", 2048, 2048
        ),
    ]
    write_junit(RunResult("grade", "lab2", "attention.cu", backend="cpu", cases=cases, seconds=3.5), tmp_path / "r.xml")
    suite = parse(tmp_path / "r.xml")
    assert (suite.tests, suite.failures, suite.errors, suite.skipped, suite.time) == (4, 2, 0, 1, 3.5)
    written = {case.name: case for case in suite}
    assert list(written) == ["C1-P31", "C17-P31", "C33-P31", "C2048-P2048"]
    assert written["C1-P31"].is_passed
    assert written["C17-P31"].result[0].text == wrong_case("C17-P31").message
    crash = written["C33-P31"].result[0]
    assert (crash.type, crash.message) == ("crash", "cudaErrorIllegalAddress in flash_prefill")
    assert crash.text == (
        "cudaErrorIllegalAddress in flash_prefill\n\ncompute-sanitizer:\n"
        "Invalid __global__ write of size 4\n  at flash_prefill+0x90 in attention.cu:57"
    )
    assert written["C2048-P2048"].is_skipped


def test_an_environment_that_could_not_grade_is_an_error_not_a_failure(tmp_path):
    result = RunResult(
        "grade",
        "lab2",
        "attention.cu",
        error="no GPU found. Grade on the CPU instead with --device cpu",
        error_code=ExitCode.ENVIRONMENT,
    )
    write_junit(result, tmp_path / "r.xml")
    suite = parse(tmp_path / "r.xml")
    assert (suite.tests, suite.failures, suite.errors) == (1, 0, 1)
    (case,) = list(suite)
    assert case.name == "environment-missing"
    assert isinstance(case.result[0], junitparser.Error)


def test_a_missed_speed_gate_is_a_failing_test_case(tmp_path):
    gate = {
        "status": "missed",
        "passed": False,
        "message": "missed: SPEEDUP 3.10x against the 6.50x required on NVIDIA H200",
    }
    result = RunResult(
        "grade",
        "lab2",
        "attention.cu",
        backend="gpu",
        cases=[CaseResult("C1-P31", "pass", "all 2048 elements within the pass rule", 1, 31)],
        gate=Gate.from_json(gate),
    )
    write_junit(result, tmp_path / "r.xml")
    suite = parse(tmp_path / "r.xml")
    assert (suite.tests, suite.failures) == (2, 1)
    assert [c.name for c in suite] == ["C1-P31", "speed-gate"]
    assert list(suite)[1].result[0].text == gate["message"]


def test_control_characters_from_a_compiler_message_still_make_valid_xml(tmp_path):
    result = RunResult(
        "grade",
        "lab2",
        "attention.cu",
        error="attention.cu(3): error: bad token \x01\x1b[31m",
        error_code=ExitCode.COMPILE_ERROR,
    )
    write_junit(result, tmp_path / "r.xml")
    (case,) = list(parse(tmp_path / "r.xml"))
    assert case.result[0].text == "attention.cu(3): error: bad token \\x01\\x1b[31m"


@pytest.mark.parametrize(
    "file, expected",
    [
        ("submissions/bob.cu", "attnlab.lab1.bob"),
        ("a.b/c.final.v3.cu", "attnlab.lab1.c_final_v3"),
        (None, "attnlab.lab1.grade"),
    ],
)
def test_classname_is_attnlab_lab_and_the_stem_without_dots(file, expected):
    assert classname("lab1", file, "grade") == expected


def test_the_aggregate_holds_every_suite_and_their_totals(tmp_path):
    one = RunResult("grade", "lab2", "a.cu", cases=[wrong_case("C1-P31"), wrong_case("C17-P31")], seconds=2.0)
    two = RunResult("grade", "lab2", "b.cu", error="b.cu(1): error: x", error_code=ExitCode.COMPILE_ERROR, seconds=0.5)
    write_aggregate([one.to_json(), two.to_json()], tmp_path / "all.xml", "attnlab lab2")
    xml = junitparser.JUnitXml.fromfile(str(tmp_path / "all.xml"))
    assert isinstance(xml, junitparser.JUnitXml)
    assert (xml.name, xml.tests, xml.failures, xml.errors, xml.skipped, xml.time) == ("attnlab lab2", 3, 3, 0, 0, 2.5)
    assert [(s.name, s.tests) for s in xml] == [("attnlab lab2 a.cu", 2), ("attnlab lab2 b.cu", 1)]


def test_a_hostile_file_name_is_shown_in_the_suite_and_its_classname(tmp_path):
    import os

    from labrunner.run.untrusted_text import shown_path

    name = os.fsdecode(b"subs/a\n::error::b\x1b[2J\xff.v2.cu")
    result = RunResult(
        "grade", "lab2", name, error=f"{shown_path(name)}: is a FIFO, not a regular file", error_code=ExitCode.USAGE
    )
    write_junit(result, tmp_path / "r.xml")
    raw = (tmp_path / "r.xml").read_text(encoding="utf-8")
    assert "\x1b" not in raw and "\n::" not in raw
    suite = parse(tmp_path / "r.xml")
    (case,) = list(suite)
    assert suite.name == "attnlab lab2 subs/a\\x0a::error::b\\x1b[2J\\xff.v2.cu"
    assert case.classname == "attnlab.lab2.a\\x0a::error::b\\x1b[2J\\xff_v2"
    assert case.result[0].message == "subs/a\\x0a::error::b\\x1b[2J\\xff.v2.cu: is a FIFO, not a regular file"


HINTS = [
    {"hazard": "rescale", "text": "when the max moves, rescale both l\nand the accumulator"},
    {"hazard": "constant-factor", "text": "each failing row is off by a factor of its own"},
]


def test_each_failure_carries_the_grades_hints_in_its_message_and_its_body(tmp_path):
    cases = [
        CaseResult("C1-P31", "pass", "all 2048 elements within the pass rule", 1, 31),
        wrong_case("C1-P1000"),
        CaseResult("C17-P1000", "crash", "cudaErrorIllegalAddress in flash_prefill", 17, 1000),
    ]
    write_junit(RunResult("grade", "lab2", "a.cu", backend="cpu", cases=cases, hints=HINTS), tmp_path / "r.xml")
    written = {case.name: case for case in parse(tmp_path / "r.xml")}
    wrong = written["C1-P1000"].result[0]
    assert wrong.message == (
        "row 0, head 0, col 3: got 1.5, expected 0.25 (|err| > 1e-4 + 1e-3*|ref|); "
        "hint (rescale): when the max moves, rescale both l and the accumulator"
    )
    assert wrong.text == (
        "row 0, head 0, col 3: got 1.5, expected 0.25 (|err| > 1e-4 + 1e-3*|ref|)\n\n"
        "hint (rescale): when the max moves, rescale both l and the accumulator\n"
        "hint (constant-factor): each failing row is off by a factor of its own"
    )
    crash = written["C17-P1000"].result[0]
    assert crash.message == (
        "cudaErrorIllegalAddress in flash_prefill; "
        "hint (rescale): when the max moves, rescale both l and the accumulator"
    )
    assert crash.text.endswith(
        "\n\nhint (rescale): when the max moves, rescale both l and the accumulator\n"
        "hint (constant-factor): each failing row is off by a factor of its own"
    )
    assert written["C1-P31"].is_passed


def test_the_aggregates_failures_carry_their_hints_too(tmp_path):
    hinted = RunResult("grade", "lab2", "a.cu", cases=[wrong_case("C1-P1000")], hints=HINTS[1:])
    plain = RunResult("grade", "lab2", "b.cu", cases=[wrong_case("C1-P31")])
    write_aggregate([hinted.to_json(), plain.to_json()], tmp_path / "all.xml", "attnlab lab2")
    first, second = junitparser.JUnitXml.fromfile(str(tmp_path / "all.xml"))
    (failure,) = list(first)[0].result
    assert failure.message.endswith("; hint (constant-factor): each failing row is off by a factor of its own")
    assert failure.text.endswith("\n\nhint (constant-factor): each failing row is off by a factor of its own")
    (failure,) = list(second)[0].result
    assert (failure.message, failure.text) == (wrong_case("C1-P31").message, wrong_case("C1-P31").message)


def test_a_grader_fault_carries_no_hint(tmp_path):
    result = RunResult("grade", "lab2", "a.cu", error="no GPU found", error_code=ExitCode.ENVIRONMENT, hints=HINTS)
    write_junit(result, tmp_path / "r.xml")
    (case,) = list(parse(tmp_path / "r.xml"))
    assert (case.result[0].message, case.result[0].text) == ("no GPU found", "no GPU found")
