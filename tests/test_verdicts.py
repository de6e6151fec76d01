"""Verdicts a student can act on: cases from the file's own geometry, skipped cases counted, races
named, non-finite errors shown, the stage check, hints, and the messages that point at a cause."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest
from rich.console import Console

from labrunner.compile.diagnostics import gcc_diagnostics
from labrunner.labs import get_lab
from labrunner.pipeline.correctness import select_cases
from labrunner.pipeline.grading_run import CaseOptions
from labrunner.report import terminal
from labrunner.report.junit import write_junit
from labrunner.report.results import CaseResult, RunResult, write_json
from labrunner.run.cpu.module import cpu_compiler_available
from labrunner.run.racecheck import parse_hazard
from labrunner.truth.cases import Seed, load_catalogue, make_inputs
from labrunner.truth.checker import NEVER_WRITTEN, RACE, check_output
from labrunner.truth.hints import HAZARDS, decode_variant, derive_hints, gather_evidence
from labrunner.truth.poison import SHARED_POISON_BITS, WORKSPACE_POISON_BITS, filled, poisoned

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
SEED = Seed(20261129, "default")
CPU = cpu_compiler_available() is None


def attnlab(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "labrunner", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


# --- 1. a case that crosses every boundary of the file's own geometry ----------------------------


def names(cases) -> list[str]:
    """Case names; skipped cases come as (case, reason)."""
    return [(c[0] if isinstance(c, tuple) else c).name for c in cases]


def test_lab2_on_the_cpu_gets_a_case_spanning_three_of_the_files_blocks():
    lab = get_lab("lab2")
    run, skipped = select_cases(lab, "cpu", CaseOptions(SEED), lab.constants({}))
    derived = run[-1]
    assert (derived.name, derived.rows, derived.prefix, derived.cpu) == ("geometry-C129-P31", 129, 31, True)
    assert names(skipped) == ["planted-C33-P1000", "lastkey-C33-P1000", "C2048-P2048"]


def test_the_derived_case_follows_the_exported_rows_per_block():
    lab = get_lab("lab2")
    run, _ = select_cases(lab, "cpu", CaseOptions(SEED), lab.constants({"attnlab_rows_per_block": 32}))
    assert run[-1].name == "geometry-C65-P31"
    run, _ = select_cases(lab, "cpu", CaseOptions(SEED), lab.constants({"attnlab_rows_per_block": 16}))
    assert "geometry" not in " ".join(names(run))  # C33-P31 already spans three blocks of 16
    run, _ = select_cases(lab, "cpu", CaseOptions(SEED), lab.constants({"attnlab_rows_per_block": 0}))
    assert "geometry" not in " ".join(names(run))  # one block over all rows: no boundary to cross


def test_a_derived_case_past_the_cpu_budget_is_skipped_and_said():
    lab = get_lab("lab2")
    run, skipped = select_cases(lab, "cpu", CaseOptions(SEED), lab.constants({"attnlab_rows_per_block": 256}))
    assert "geometry-C513-P31" in names(skipped) and "geometry-C513-P31" not in names(run)
    run, skipped = select_cases(
        lab, "cpu", CaseOptions(SEED, full=True), lab.constants({"attnlab_rows_per_block": 256})
    )
    assert names(run)[-1] == "C2048-P2048" and skipped == []  # --full runs the 2048-row case, which spans them


def test_on_the_gpu_the_2048_row_case_spans_the_blocks_already():
    lab = get_lab("lab2")
    run, _ = select_cases(lab, "gpu", CaseOptions(SEED), lab.constants({}))
    assert names(run)[-1] == "C2048-P2048"
    run, _ = select_cases(lab, "gpu", CaseOptions(SEED), lab.constants({"attnlab_rows_per_block": 1024}))
    assert names(run)[-1] == "geometry-C2049-P31"


def test_lab1_takes_the_largest_tile_of_any_kernel():
    lab = get_lab("lab1")
    run, _ = select_cases(lab, "cpu", CaseOptions(SEED), lab.constants({}))
    assert "geometry" not in " ".join(names(run))  # 16-wide tiles: T33 spans three already
    run, _ = select_cases(lab, "cpu", CaseOptions(SEED), lab.constants({"attnlab_wsum_tile_rows": 128}))
    assert "geometry" not in " ".join(names(run))  # T257 spans three blocks of 128
    run, _ = select_cases(lab, "gpu", CaseOptions(SEED), lab.constants({"attnlab_scores_tile_keys": 256}))
    assert names(run)[-1] == "geometry-T513"


def test_rows_per_block_zero_is_one_block_over_all_rows():
    lab = get_lab("lab2")
    (launch,) = lab.plan_launches(lab.constants({"attnlab_rows_per_block": 0}), 129, 31)
    assert launch.grid == (1, 32, 1)
    assert lab.validate(lab.constants({"attnlab_rows_per_block": 0})) == []
    assert "attnlab_rows_per_block = 0 means one block over all rows" in lab.starter_path.read_text()


# --- 2. skipped cases are counted -----------------------------------------------------------------


def result_with(*statuses: str, backend: str = "cpu") -> RunResult:
    result = RunResult("grade", "lab2", "f.cu", backend=backend)
    result.cases = [CaseResult(f"c{i}", s, f"{s} message", 1, 31) for i, s in enumerate(statuses)]
    return result


def test_a_pass_with_skipped_cases_says_so_in_the_verdict_line_json_and_junit(tmp_path):
    result = result_with("pass", "pass", "skipped", "skipped", "skipped")
    assert result.summary == "pass (3 cases skipped on the CPU backend; --full runs them)"
    write_json(result, tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    assert (data["verdict"], data["summary"], data["skipped"]) == (
        "pass",
        "pass (3 cases skipped on the CPU backend; --full runs them)",
        3,
    )
    write_junit(result, tmp_path / "r.xml")
    suite = ElementTree.parse(tmp_path / "r.xml").getroot()
    assert (suite.get("tests"), suite.get("skipped"), suite.get("failures")) == ("5", "3", "0")
    console = Console(record=True, width=200)
    original, terminal.stdout = terminal.stdout, console
    try:
        terminal.verdict_line(result)
    finally:
        terminal.stdout = original
    assert console.export_text().strip() == "PASS (3 cases skipped on the CPU backend; --full runs them) (exit 0)"


def test_one_skipped_case_is_singular_and_none_says_nothing():
    assert result_with("pass", "skipped").summary == "pass (1 case skipped on the CPU backend; --full runs them)"
    assert result_with("pass").summary == "pass"


# --- 3. races -------------------------------------------------------------------------------------


def test_a_value_carrying_the_shared_memory_poison_is_a_race():
    ref = np.random.default_rng(0).standard_normal((3, 32, 64))
    out = ref.astype(np.float32)
    out[1, 4, 5:9] = filled(4, SHARED_POISON_BITS)
    checked = check_output(out, ref)
    assert checked.status == RACE
    assert checked.message == (
        "row 1, head 4, col 5: read shared memory no thread had written since the last "
        "barrier: a missing __syncthreads()? (4 of 6144 elements carry the shared-memory poison)"
    )


# Each shipped solution with one of its __syncthreads() removed: the one list, shared with the GPU's
# check (`scripts/barrier_variants.py --device gpu`, a step of scripts/gpu_check.sh).
sys.path.insert(0, str(REPO / "scripts"))
from barrier_variants import variants  # noqa: E402


def test_the_shipped_solutions_have_the_barriers_the_variants_remove():
    assert [(lab, line) for lab, line, _ in variants()] == [
        ("lab1", 227),
        ("lab1", 229),
        ("lab1", 446),
        ("lab1", 448),
        ("lab2", 120),
        ("lab2", 129),
        ("lab2", 155),
        ("lab3", 181),
    ]


@pytest.mark.skipif(not CPU, reason="no C++ compiler for the CPU backend")
@pytest.mark.parametrize("lab, line, text", [pytest.param(*v, id=f"{v[0]}-line-{v[1]}") for v in variants()])
@pytest.mark.slow
def test_removing_any_barrier_of_a_shipped_solution_is_a_race_under_race_check(tmp_path, lab, line, text):
    kernel = tmp_path / f"{lab}_without_barrier_{line}.cu"
    kernel.write_text(text)
    report = tmp_path / "r.json"
    completed = attnlab("grade", lab, str(kernel), "--device", "cpu", "--race-check", "--json", str(report))
    data = json.loads(report.read_text())
    decisive = next(c for c in data["cases"] if c["name"] == data["decisive_case"])
    assert (data["verdict"], completed.returncode) == ("race", 4), decisive["message"]
    assert "a missing __syncthreads()?" in decisive["message"]
    assert re.search(
        r"; in kernel (attn_scores|attn_softmax|attn_weighted_sum|flash_prefill|decode_partial)$", decisive["message"]
    )
    assert [h["hazard"] for h in data["hints"]] == ["race"]


@pytest.mark.skipif(not CPU, reason="no C++ compiler for the CPU backend")
@pytest.mark.parametrize("wait", [";", "cp_async_wait<2>();"], ids=["no-wait", "one-group-too-many-pending"])
@pytest.mark.slow
def test_the_lab1_weighted_sum_reading_p_before_its_copy_lands_is_a_race_under_race_check(tmp_path, wait):
    """P reaches shared memory by cp.async, and a thread may read its slots only once
    cp.async.wait_group has completed their group. Without the wait, or with one group too many
    left pending, the CPU backend has landed no copy yet: the thread reads the shared-memory poison,
    and the race is named in the weighted sum."""
    text = (REPO / "kernels/lab1/solution.cu").read_text()
    assert text.count("cp_async_wait<1>();") == 1
    kernel = tmp_path / "lab1_p_before_it_lands.cu"
    kernel.write_text(text.replace("cp_async_wait<1>();", wait))
    report = tmp_path / "r.json"
    completed = attnlab("grade", "lab1", str(kernel), "--device", "cpu", "--race-check", "--json", str(report))
    data = json.loads(report.read_text())
    decisive = next(c for c in data["cases"] if c["name"] == data["decisive_case"])
    assert (data["verdict"], completed.returncode, data["decisive_case"]) == ("race", 4, "T17")
    assert decisive["message"] == (
        "row 1, head 0, col 0: read shared memory no thread had written since the last "
        "barrier: a missing __syncthreads()? (32768 of 34816 elements carry the "
        "shared-memory poison); rows 1-16 fail (16 of 17); in kernel attn_weighted_sum"
    )


# --- 4. non-finite values -------------------------------------------------------------------------


def test_max_abs_err_is_nan_or_inf_when_any_element_is(tmp_path):
    ref = np.zeros((2, 32, 64))
    out = ref.astype(np.float32)
    out[0, 0, 0] = 7.35e-07
    out[1, 0, 0] = np.inf
    checked = check_output(out, ref)
    assert (checked.max_abs_err, checked.nonfinite) == (float("inf"), 1)
    out[1, 0, 1] = np.nan
    checked = check_output(out, ref)
    assert np.isnan(checked.max_abs_err) and checked.nonfinite == 2
    result = RunResult("grade", "lab2", "f.cu", backend="cpu")
    result.cases = [
        CaseResult(
            "C2",
            checked.status,
            checked.message,
            2,
            31,
            checked.max_abs_err,
            checked.bad_elements,
            checked.first_bad,
            checked.failing_rows,
            nonfinite=2,
        )
    ]
    write_json(result, tmp_path / "r.json")
    case = json.loads((tmp_path / "r.json").read_text())["cases"][0]
    assert (case["max_abs_err"], case["nonfinite"]) == ("nan", 2)
    console = Console(record=True, width=200)
    original, terminal.stdout = terminal.stdout, console
    try:
        terminal.cases_report(result)
    finally:
        terminal.stdout = original
    assert re.search(r"│ C2 +│ +2 │ +31 │ wrong +│ +nan │", console.export_text())


# --- 6. diagnoses that point at the cause ---------------------------------------------------------


def test_the_poison_is_never_written_or_computed_from_a_value_never_written():
    ref = np.zeros((1, 32, 64))
    out = poisoned(ref.shape)
    checked = check_output(out, ref)
    assert checked.status == NEVER_WRITTEN
    assert checked.message == (
        "row 0, head 0, col 0: never written, or computed from a value never written (an "
        "output or shared buffer read before it was set?); 2048 of 2048 elements never written"
    )


def test_a_value_computed_from_an_unwritten_workspace_says_so():
    ref = np.zeros((1, 32, 64))
    out = ref.astype(np.float32)
    out[0, 2, :2] = filled(2, WORKSPACE_POISON_BITS)
    checked = check_output(out, ref)
    assert checked.message.endswith(
        "2 of 2048 elements wrong; 2 were computed from a workspace value never written "
        "(the workspace read before it was set?)"
    )


def test_an_empty_file_is_file_is_empty(tmp_path):
    empty = tmp_path / "attention.cu"
    empty.write_text("\n  \n")
    completed = attnlab("check", "lab2", str(empty))
    assert completed.returncode == 3
    assert completed.stderr == (
        f"{empty}: error: file is empty; `attnlab starter lab2` prints the file to start from\n"
    )


def test_cpu_compiler_lines_read_as_nvrtcs():
    # the CPU build's g++ log goes through the compile gate's filter: its lines in NVRTC's form, the rest dropped
    assert gcc_diagnostics(
        "attention.cu:20:5: error: 'x' was not declared\nattention.cu: In function 'k':\n"
        "attention.cu:3:1: note: declared here",
        "attention.cu",
        "attention.cu",
    ) == ["attention.cu(20): error: 'x' was not declared", "attention.cu(3): note: declared here"]


def test_lab1s_table_has_no_prefix_column():
    result = RunResult("grade", "lab1", "f.cu", backend="cpu")
    result.cases = [CaseResult("T17", "pass", "ok", 17, 0, 1e-7)]
    console = Console(record=True, width=200)
    original, terminal.stdout = terminal.stdout, console
    try:
        terminal.cases_report(result)
    finally:
        terminal.stdout = original
    header = next(line for line in console.export_text().splitlines() if "case" in line and "status" in line)
    assert [cell.strip() for cell in header.strip("│┃ ").split("┃")] == [
        "case",
        "rows",
        "status",
        "max |err|",
        "details",
    ]


RACECHECK_REPORT = (
    "========= COMPUTE-SANITIZER\n"
    "========= Error: Race reported between Write access at flash_prefill+0x1fe0 in /tmp/attention.cu:63:"
    "flash_prefill(const float *, const float *, const float *, float *, int, int)\n"
    "=========     and Read access at flash_prefill+0x6360 in /tmp/attention.cu:123:"
    "flash_prefill(const float *, const float *, const float *, float *, int, int) [1088 hazards]\n"
    "=========\n"
    "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n"
)

SYNCCHECK_REPORT = """========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in block
=========     at blockReduce+0x1a0 in attention.cu:67:attn_softmax(float *, int)
=========     by thread (31,0,0) in block (0,0,0)
========= ERROR SUMMARY: 1 error
"""


def test_racecheck_reports_the_first_hazard_with_kernel_and_lines():
    assert parse_hazard("racecheck", RACECHECK_REPORT) == (
        "racecheck: shared-memory race in kernel flash_prefill between a write at attention.cu:63 and a read at "
        "attention.cu:123: a missing __syncthreads()?"
    )
    assert parse_hazard("synccheck", SYNCCHECK_REPORT) == (
        "synccheck: barrier error in kernel attn_softmax at attention.cu:67: Divergent thread(s) in block"
    )
    assert (
        parse_hazard("racecheck", "========= COMPUTE-SANITIZER\n========= RACECHECK SUMMARY: 0 hazards displayed\n")
        is None
    )


# --- 7. hints -------------------------------------------------------------------------------------


def evidence(**given) -> dict:
    base = {
        "case": "C1-P31",
        "status": "wrong",
        "rows": 1,
        "prefix": 31,
        "planted": False,
        "last_key": False,
        "nonfinite": 0,
        "workspace_poisoned": 0,
        "failing_rows": [0],
        "heads_wrong": list(range(32)),
        "matches": [],
        "kv_heads_read": {},
        "compared": True,
    }
    return {**base, **given}


@pytest.mark.parametrize(
    "cases, hazards",
    [
        ([evidence(planted=True, nonfinite=5)], ["max-subtraction"]),
        ([evidence(planted=True, nonfinite=5), evidence(case="C17-P31", nonfinite=0)], []),
        ([evidence(last_key=True)], ["rescale"]),
        (
            [
                evidence(matches=["rescale-missing"], rescale_missing={"tile": 1, "left_out": "acc"}),
                evidence(case="C1-P1000", matches=["rescale-missing"], rescale_missing={"tile": 1, "left_out": "acc"}),
            ],
            ["rescale"],
        ),
        ([evidence(matches=["causal-minus-one"])], ["causal-mask"]),
        ([evidence(matches=["prefix-ignored"])], ["prefix-offset"]),
        ([evidence(heads_wrong=list(range(4, 32)))], ["gqa-mapping"]),
        ([evidence(heads_wrong=[1, 2], kv_heads_read={1: 1, 2: 2})], ["gqa-mapping"]),
        ([evidence(rows=17, failing_rows=list(range(16, 17)))], ["bounds"]),
        ([evidence(rows=17, failing_rows=list(range(1, 17)))], []),
        ([evidence(matches=["scale-missing"])], ["scale"]),
        ([evidence(status="race")], ["race"]),
        ([evidence(status="never-written", rows=33, failing_rows=list(range(32, 33)))], ["bounds", "unwritten"]),
        ([evidence(status="never-written", rows=33, failing_rows=[0, 5])], ["unwritten"]),
        ([evidence(matches=["scale-missing"], compared=False)], []),
        ([], []),
    ],
)
def test_a_hint_needs_its_evidence(cases, hazards):
    hints = derive_hints(cases)
    assert [h["hazard"] for h in hints] == hazards
    assert all(h["hazard"] in HAZARDS and "\n" not in h["text"] for h in hints)


def decode_evidence(**given) -> dict:
    """A failing lab-3 case at p = 512: lengths 1, 2, 15, 16, 17, 511, 512, 513, 1024, 1025."""
    return evidence(
        **{
            "case": "lengths-around-p",
            "rows": 10,
            "prefix": 1025,
            "empty_partition_rows": list(range(9)),
            "partial_page_rows": [0, 1, 2, 4, 5, 7, 9],
            "nonfinite_rows": [],
            **given,
        }
    )


@pytest.mark.parametrize(
    "cases, hazards",
    [
        ([decode_evidence(matches=["combine-no-rescale"])], ["combine-rescale"]),
        ([decode_evidence(failing_rows=list(range(9)), nonfinite_rows=list(range(9)))], ["empty-partition"]),
        ([decode_evidence(failing_rows=list(range(8)), nonfinite_rows=list(range(8)))], []),
        ([decode_evidence(failing_rows=[0, 1, 9], nonfinite_rows=[0, 1, 9])], ["masked-nan"]),
        ([decode_evidence(failing_rows=[0, 1, 9], nonfinite_rows=[0, 1])], []),
        ([decode_evidence(failing_rows=[3], nonfinite_rows=[3])], []),
        ([decode_evidence(matches=["partition-tail"])], ["partition-tail"]),
        ([decode_evidence(matches=["page-key-minus-one", "page-table"])], ["page-table"]),
        ([decode_evidence(matches=["page-table"]), decode_evidence(case="skewed", matches=[])], []),
    ],
)
def test_a_decode_hint_needs_its_evidence(cases, hazards):
    assert [h["hazard"] for h in derive_hints(cases)] == hazards


@pytest.mark.parametrize(
    "change, match, hazard",
    [
        (dict(unrescaled_partition=64), "combine-no-rescale", "combine-rescale"),
        (dict(keys=lambda n: n // 64 * 64), "partition-tail", "partition-tail"),
        (dict(page_index=lambda j: np.maximum(j - 1, 0) // 16), "page-key-minus-one", "page-table"),
    ],
)
def test_decode_evidence_recognises_the_variant_that_made_the_output(change, match, hazard):
    case = next(c for c in load_catalogue("lab3").cases if c.name == "lengths-around-p").resolved(64)
    inputs = make_inputs(case, 5)
    reference = inputs.reference()
    out = decode_variant(inputs, **change).astype(np.float32)
    checked = check_output(out, reference)
    found = gather_evidence(case, inputs, out, reference, checked.status, checked.failing_rows)
    assert match in found["matches"]
    assert [h["hazard"] for h in derive_hints([found])][:1] == [hazard]


def test_decode_evidence_names_the_sequences_with_empty_partitions_and_partial_pages():
    case = next(c for c in load_catalogue("lab3").cases if c.name == "lengths-around-p").resolved(64)
    inputs = make_inputs(case, 5)
    found = gather_evidence(case, inputs, inputs.reference().astype(np.float32), inputs.reference(), "wrong", [0])
    assert inputs.lengths == [1, 2, 15, 16, 17, 63, 64, 65, 128, 129]
    assert found["empty_partition_rows"] == list(range(9))
    assert found["partial_page_rows"] == [0, 1, 2, 4, 5, 7, 9]
    assert found["nonfinite_rows"] == []


def test_at_most_two_hints_most_specific_first():
    hints = derive_hints(
        [
            evidence(
                status="never-written",
                rows=17,
                failing_rows=[16],
                matches=["scale-missing"],
                heads_wrong=list(range(4, 32)),
            )
        ]
    )
    assert [h["hazard"] for h in hints] == ["gqa-mapping", "bounds"]


def test_the_hazard_list_is_fixed():
    assert HAZARDS == (
        "race",
        "max-subtraction",
        "causal-mask",
        "prefix-offset",
        "scale",
        "gqa-mapping",
        "rescale",
        "combine-rescale",
        "empty-partition",
        "partition-tail",
        "masked-nan",
        "page-table",
        "precision",
        "constant-factor",
        "bounds",
        "unwritten",
    )


# --- 8. lab 1's stage check -----------------------------------------------------------------------


@pytest.mark.skipif(not CPU, reason="no C++ compiler for the CPU backend")
@pytest.mark.slow
def test_the_stage_check_names_the_softmax_when_its_rows_do_not_sum_to_one(tmp_path):
    report = tmp_path / "r.json"
    attnlab(
        "grade",
        "lab1",
        str(FIXTURES / "lab1" / "wrong" / "softmax_unnormalized.cu"),
        "--device",
        "cpu",
        "--case",
        "T17",
        "--json",
        str(report),
    )
    (case,) = json.loads(report.read_text())["cases"]
    assert case["message"].endswith(
        "; stage check: attn_softmax is the first kernel whose result disagrees with "
        "the definition: row 1 of head 0 sums to 1.44668; every probability row sums to 1"
    )


@pytest.mark.skipif(not CPU, reason="no C++ compiler for the CPU backend")
@pytest.mark.slow
def test_the_stage_check_names_the_scores_kernel_when_its_scores_are_wrong(tmp_path):
    report = tmp_path / "r.json"
    attnlab(
        "grade",
        "lab1",
        str(FIXTURES / "lab1" / "wrong" / "wrong_kv_head.cu"),
        "--device",
        "cpu",
        "--case",
        "T17",
        "--json",
        str(report),
    )
    (case,) = json.loads(report.read_text())["cases"]
    assert re.search(
        r"; stage check: attn_scores is the first kernel whose result disagrees with the definition: "
        r"scores\[1\]\[0\]\[0\] is -?[0-9.]+, expected q\[0\]\[1\] \. k\[0\]\[0\] / 8 = -?[0-9.]+$",
        case["message"],
    ), case["message"]


@pytest.mark.skipif(not CPU, reason="no C++ compiler for the CPU backend")
@pytest.mark.slow
def test_the_stage_check_waits_for_a_case_with_more_than_one_key(tmp_path):
    # at T = 1 the softmax gives probability 1 whatever the scores: the one-key case cannot show the
    # scores kernel's wrong KV head, so the check runs on T17 and names attn_scores there
    report = tmp_path / "r.json"
    attnlab(
        "grade",
        "lab1",
        str(FIXTURES / "lab1" / "wrong" / "wrong_kv_head.cu"),
        "--device",
        "cpu",
        "--case",
        "T1",
        "--case",
        "T17",
        "--json",
        str(report),
    )
    one_key, seventeen = json.loads(report.read_text())["cases"]
    assert (one_key["name"], seventeen["name"]) == ("T1", "T17")
    assert "stage check" not in one_key["message"]
    assert one_key["message"].endswith("; row 0 fails (1 of 1)"), one_key["message"]
    assert re.search(
        r"; stage check: attn_scores is the first kernel whose result disagrees with the definition: "
        r"scores\[1\]\[0\]\[0\] is -?[0-9.]+, expected q\[0\]\[1\] \. k\[0\]\[0\] / 8 = -?[0-9.]+$",
        seventeen["message"],
    ), seventeen["message"]


def test_a_one_key_case_cannot_show_every_stage():
    from labrunner.pipeline.explain import shows_every_stage

    cases = {c.name: c for c in get_lab("lab1").catalogue.cases}
    assert [shows_every_stage(cases[n]) for n in ("T1", "T17")] == [False, True]


# --- the CPU backend's schedules ------------------------------------------------------------------


@pytest.mark.skipif(not CPU, reason="no C++ compiler for the CPU backend")
@pytest.mark.slow
def test_seeded_random_schedules_find_the_race_that_order_and_reverse_miss(tmp_path):
    from labrunner.run.cpu.module import CpuModule

    source = (
        '#include <attnlab/prelude.cuh>\n#line 1 "schedules.cu"\n'
        + (REPO / "tests" / "cpu_kernels" / "schedules.cu").read_text()
    )
    module = CpuModule.build(
        source,
        "schedules.cu",
        {"sums_racing": ["float*", "float*"], "sums_synced": ["float*", "float*"]},
        cache_dir=tmp_path,
    )
    x = np.arange(256, dtype=np.float32) / 256
    expected = np.float32(x.sum() * 1001)

    def run(kernel: str, schedule: int) -> np.ndarray:
        out = np.zeros(4 * 256, np.float32)
        module.launch(kernel, (4, 1, 1), (256, 1, 1), 0, [x, out], reverse_threads=schedule)
        return out

    for schedule in range(6):
        np.testing.assert_allclose(run("sums_synced", schedule), expected, rtol=1e-5)
    np.testing.assert_allclose(run("sums_racing", 0), expected, rtol=1e-5)
    np.testing.assert_allclose(run("sums_racing", 1), expected, rtol=1e-5)
    wrong = [s for s in range(2, 6) if not np.allclose(run("sums_racing", s), expected, rtol=1e-5)]
    assert wrong != []
    assert np.array_equal(run("sums_racing", wrong[0]), run("sums_racing", wrong[0]))  # a seed replays its race


@pytest.mark.skipif(not CPU, reason="no C++ compiler for the CPU backend")
@pytest.mark.slow
def test_a_misaligned_float4_names_the_address_and_the_alignment(tmp_path):
    report = tmp_path / "r.json"
    completed = attnlab(
        "grade",
        "lab2",
        str(FIXTURES / "lab2" / "hostile" / "misaligned_float4.cu"),
        "--device",
        "cpu",
        "--case",
        "C1-P31",
        "--json",
        str(report),
    )
    (case,) = json.loads(report.read_text())["cases"]
    assert (case["status"], completed.returncode) == ("crash", 4)
    assert re.fullmatch(
        # the grid's last block faults first: every case runs its blocks last first (pipeline/schedules.py)
        r"misaligned access in kernel flash_prefill, block \(0,31,0\), thread 0: a 16-byte access at "
        r"address 0x[0-9a-f]*4, which is 4 bytes past a multiple of 16 \(float4 and other "
        r"16-byte types need 16-byte alignment\)",
        case["message"],
    ), case["message"]
