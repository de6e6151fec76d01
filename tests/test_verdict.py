"""The verdict's rules (truth/verdict.py): every status, its severity, its exit code, a batch's order.

Each rule is pinned with the input that would tell a wrong rule apart, and the tables are held to
the two documents a user reads them in: the JSON schema's enums and README's tables.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from labrunner.exit_codes import ExitCode
from labrunner.truth.verdict import (
    BATCH_EXIT_CODES,
    CASE_EXIT_CODES,
    ERROR_VERDICTS,
    NOT_RUN,
    SEVERITY,
    WORST_FIRST,
    Status,
    decisive_index,
    failure_status,
    run_exit_code,
    run_verdict,
    worst_exit_code,
)

REPO = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((REPO / "labrunner/report/schema/result-1.json").read_text())
README = (REPO / "README.md").read_text()

# The strings every report carries, byte for byte.
STRINGS = [
    ("CRASH", "crash"),
    ("TIMEOUT", "timeout"),
    ("OUT_OF_BOUNDS", "out-of-bounds"),
    ("INPUT_MUTATED", "input-mutated"),
    ("RACE", "race"),
    ("RACE_CHECK_INCONCLUSIVE", "race-check-inconclusive"),
    ("NEVER_WRITTEN", "never-written"),
    ("WRONG", "wrong"),
    ("SPEED_GATE", "speed-gate"),
    ("PASS", "pass"),
    ("NOT_RUN", "not-run"),
    ("SKIPPED", "skipped"),
    ("COMPILE_ERROR", "compile-error"),
    ("USAGE_ERROR", "usage-error"),
    ("ENVIRONMENT_MISSING", "environment-missing"),
    ("INTERRUPTED", "interrupted"),
    ("ERROR", "error"),
]


def test_every_status_is_its_string():
    assert [(status.name, status.value) for status in Status] == STRINGS
    assert all(
        status == value and str(status) == value and f"{status}" == value for status, (_, value) in zip(Status, STRINGS)
    )
    assert json.dumps([Status.OUT_OF_BOUNDS]) == '["out-of-bounds"]'


def test_the_case_statuses_most_severe_first_with_their_exit_codes():
    assert [(status.value, int(code)) for status, code in CASE_EXIT_CODES.items()] == [
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
    assert tuple(CASE_EXIT_CODES) == SEVERITY
    assert NOT_RUN == ("not-run", "skipped")


def test_an_error_names_the_verdict_its_exit_code_means():
    assert {int(code): status.value for code, status in ERROR_VERDICTS.items()} == {
        3: "compile-error",
        2: "usage-error",
        6: "environment-missing",
        4: "crash",
        130: "interrupted",
        143: "interrupted",
    }


def test_a_batch_orders_exit_codes_worst_first_and_names_each():
    assert [(int(code), words) for code, words in BATCH_EXIT_CODES.items()] == [
        (130, "interrupted"),
        (143, "terminated"),
        (6, "environment missing"),
        (2, "usage error"),
        (3, "compile error"),
        (4, "misbehaving kernel"),
        (1, "wrong answer"),
        (5, "speed gate missed"),
        (0, "pass"),
    ]
    assert tuple(BATCH_EXIT_CODES) == WORST_FIRST


# --- the documents ----------------------------------------------------------------------------


def test_the_json_schemas_status_enums_are_the_statuses_exactly():
    case_enum = SCHEMA["$defs"]["case"]["properties"]["status"]["enum"]
    verdict_enum = SCHEMA["properties"]["verdict"]["enum"]
    assert sorted(case_enum) == sorted([*SEVERITY, *NOT_RUN])
    assert sorted(verdict_enum) == sorted(status for status in Status if status not in NOT_RUN)
    assert sorted(set(case_enum) | set(verdict_enum)) == sorted(Status)
    assert sorted(SCHEMA["properties"]["exit_code"]["enum"]) == sorted(int(code) for code in ExitCode)


def readme_table(heading: str) -> list[list[str]]:
    """The rows of the first table under README's `heading`, cells stripped (header and rule left out)."""
    section = README.split(f"\n{heading}\n", 1)[1]
    table = itertools.dropwhile(lambda line: not line.startswith("|"), section.splitlines())
    lines = list(itertools.takewhile(lambda line: line.startswith("|"), table))
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]


def test_readmes_verdict_table_is_the_severity_order_with_each_exit_code():
    rows = [(re.fullmatch(r"`([a-z-]+)`", verdict)[1], exit) for verdict, exit, *_ in readme_table("### Verdicts")]
    # the first ten are the case statuses, most severe first (README: "a case's status is one of the first ten")
    assert [(verdict, int(exit)) for verdict, exit in rows[:10]] == [
        (status.value, int(code)) for status, code in CASE_EXIT_CODES.items()
    ]
    errors = {verdict: exit for verdict, exit in rows[10:]}
    # `error`: an error whose exit code names no verdict (calibrate without a correct, timed solution, exit 1)
    assert errors.pop("error") == "its own"
    by_verdict: dict[str, list[str]] = {}
    for code, status in ERROR_VERDICTS.items():
        if status != Status.CRASH:  # a crash outside any case is still `crash`, the table's first row
            by_verdict.setdefault(status.value, []).append(str(int(code)))
    assert errors == {verdict: " / ".join(codes) for verdict, codes in by_verdict.items()}
    assert {verdict for verdict, _ in rows} == {status.value for status in Status if status not in NOT_RUN}


def test_readmes_exit_codes_are_every_exit_code_in_a_batchs_words():
    rows = readme_table("### Exit codes")
    assert [int(code) for code, _ in rows] == sorted(int(code) for code in ExitCode)
    for code, meaning in rows:
        if int(code) in BATCH_EXIT_CODES:
            assert re.match(rf"{re.escape(BATCH_EXIT_CODES[ExitCode(int(code))])}( \(|$)", meaning), (code, meaning)


# --- the rules --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["crash", "fault", "error", "compile"])
def test_every_failure_to_answer_but_a_time_limit_is_a_crash(kind):
    assert failure_status(kind) is Status.CRASH


def test_a_time_limit_is_a_timeout():
    assert failure_status("timeout") is Status.TIMEOUT


def test_a_fault_the_cpu_backend_placed_in_a_guard_is_out_of_bounds():
    assert failure_status("out-of-bounds") is Status.OUT_OF_BOUNDS


def test_nothing_failing_decides_nothing():
    assert decisive_index([]) is None
    assert decisive_index(["pass"]) is None
    assert decisive_index(["pass", "not-run", "skipped", "pass"]) is None


@pytest.mark.parametrize(("severe", "milder"), list(itertools.combinations(SEVERITY[:-1], 2)))
def test_the_more_severe_status_decides_wherever_it_stands(severe, milder):
    assert decisive_index([milder, severe]) == 1
    assert decisive_index([severe, milder]) == 0
    assert decisive_index(["pass", milder, "skipped", severe, "not-run"]) == 3


@pytest.mark.parametrize("status", SEVERITY[:-1])
def test_any_failing_status_decides_over_passes_and_cases_not_run(status):
    assert decisive_index(["pass", "skipped", status, "not-run", "pass"]) == 2


def test_the_first_of_equally_severe_cases_decides():
    assert decisive_index(["wrong", "pass", "timeout", "crash", "crash"]) == 3
    assert decisive_index(["skipped", "wrong", "wrong"]) == 1


def test_a_status_that_is_not_one_is_refused():
    with pytest.raises(ValueError):
        decisive_index(["pass", "oops"])


@pytest.mark.parametrize(("code", "verdict"), [(code, status) for code, status in ERROR_VERDICTS.items()])
def test_an_error_decides_before_any_case_or_gate(code, verdict):
    assert run_verdict(code, "wrong", gate_passed=False) is verdict


@pytest.mark.parametrize("code", [ExitCode.PASS, ExitCode.WRONG_ANSWER, ExitCode.SPEED_GATE])
def test_an_error_whose_code_names_no_verdict_is_error(code):
    assert run_verdict(code, None) is Status.ERROR


def test_the_decisive_case_decides_before_the_gate():
    assert run_verdict(None, "never-written", gate_passed=False) is Status.NEVER_WRITTEN
    assert run_verdict(None, "race") is Status.RACE


def test_a_missed_gate_is_the_verdict_only_where_every_case_passed():
    assert run_verdict(None, None, gate_passed=False) is Status.SPEED_GATE
    assert run_verdict(None, None, gate_passed=True) is Status.PASS
    assert run_verdict(None, None) is Status.PASS  # no gate applies: a pass


@pytest.mark.parametrize(("status", "code"), list(CASE_EXIT_CODES.items()))
def test_a_verdict_exits_with_its_code(status, code):
    assert run_exit_code(None, status.value) is code


def test_an_error_exits_with_its_own_code_whatever_the_verdict():
    assert run_exit_code(ExitCode.INTERRUPTED, "interrupted") is ExitCode.INTERRUPTED
    assert run_exit_code(ExitCode.WRONG_ANSWER, "error") is ExitCode.WRONG_ANSWER
    assert run_exit_code(ExitCode.USAGE, "pass") is ExitCode.USAGE


def test_a_batch_exits_with_its_worst_code():
    assert worst_exit_code([0, 1, 5]) is ExitCode.WRONG_ANSWER
    assert worst_exit_code([1, 4, 3]) is ExitCode.COMPILE_ERROR
    assert worst_exit_code([0, 6, 4]) is ExitCode.ENVIRONMENT
    assert worst_exit_code([3, 2]) is ExitCode.USAGE
    assert worst_exit_code([0, 5]) is ExitCode.SPEED_GATE
    assert worst_exit_code([0, 0]) is ExitCode.PASS
    assert worst_exit_code([]) is ExitCode.PASS


@pytest.mark.parametrize(("worse", "better"), list(itertools.combinations(WORST_FIRST, 2)))
def test_every_code_outranks_those_after_it(worse, better):
    assert worst_exit_code([int(better), int(worse), int(better)]) is worse
