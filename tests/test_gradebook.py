"""The gradebook: a CSV row per submission, read back from the JSON results."""

from __future__ import annotations

import csv

from labrunner.exit_codes import ExitCode
from labrunner.records.gate import Gate
from labrunner.records.timing import Comparison, Series, SpeedupTiming
from labrunner.report.batch_row import hints_text
from labrunner.report.gradebook import COLUMNS, row, spreadsheet_safe, write_gradebook
from labrunner.report.results import CaseResult, RunResult

SHA = "ab" * 32


def test_a_timed_gated_pass_fills_every_column():
    result = RunResult(
        "grade",
        "lab2",
        "subs/ana.cu",
        backend="gpu",
        sha256=SHA,
        seconds=41.0,
        cases=[CaseResult("C1-P31", "pass", "ok", 1, 31)],
        timing=SpeedupTiming(
            31,
            31,
            0.016,
            "subs/ana.cu",
            "starter.cu",
            Comparison(Series({"median_ms": 2.0}), Series({"median_ms": 25.9742}), 12.9871, 12.9, 13.1),
        ),
        gate=Gate("met", True, "met"),
    )
    assert row(result.to_json(), seconds=43.26) == {
        "file": "subs/ana.cu",
        "sha256": SHA,
        "verdict": "pass",
        "exit_code": 0,
        "backend": "gpu",
        "cases_run": 1,
        "cases_skipped": 0,
        "speedup": "12.987",
        "gate_met": "yes",
        "first_failing_case": "",
        "first_hint": "",
        "hints": "",
        "cluster_state": "",
        "cluster_elapsed_s": "",
        "cluster_reason": "",
        "seconds": "43.3",
    }


def test_a_cpu_pass_that_skipped_cases_says_so_and_never_reads_as_a_gpu_pass():
    cases = [CaseResult(name, "pass", "ok", 1, 31) for name in ("C1-P31", "C17-P31", "C33-P31")] + [
        CaseResult(name, "skipped", "skipped: outside the CPU backend's time budget; --full runs it", 33, 1000)
        for name in ("planted-C33-P1000", "lastkey-C33-P1000", "C2048-P2048")
    ]
    cpu = row(RunResult("grade", "lab2", "a.cu", backend="cpu", cases=cases).to_json())
    gpu = row(RunResult("grade", "lab2", "a.cu", backend="gpu", cases=cases[:3]).to_json())
    assert (cpu["verdict"], cpu["backend"], cpu["cases_run"], cpu["cases_skipped"]) == ("pass", "cpu", 3, 3)
    assert (gpu["verdict"], gpu["backend"], gpu["cases_run"], gpu["cases_skipped"]) == ("pass", "gpu", 3, 0)


def test_cases_not_run_after_a_crash_are_neither_run_nor_skipped():
    cases = [
        CaseResult("C1-P31", "pass", "ok", 1, 31),
        CaseResult("C17-P31", "crash", "boom", 17, 31),
        CaseResult("C33-P31", "not-run", "not run: case C17-P31 ended in a crash", 33, 31),
    ]
    entry = row(RunResult("grade", "lab2", "a.cu", backend="cpu", cases=cases).to_json())
    assert (entry["cases_run"], entry["cases_skipped"], entry["first_failing_case"]) == (2, 0, "C17-P31")


def test_a_compile_error_ran_no_case_on_no_backend():
    data = RunResult("grade", "lab2", "c.cu", error="c.cu(1): error: x", error_code=ExitCode.COMPILE_ERROR).to_json()
    assert (row(data)["backend"], row(data)["cases_run"], row(data)["cases_skipped"]) == ("", 0, 0)


def test_the_first_hint_has_a_column_of_its_own_beside_all_of_them():
    hints = [
        {"hazard": "rescale", "text": "when the max moves, rescale\nl and the accumulator"},
        {"hazard": "constant-factor", "text": "each failing row is off by a factor"},
    ]
    cases = [CaseResult("C1-P1000", "wrong", "bad", 1, 1000)]
    entry = row(RunResult("grade", "lab2", "e.cu", backend="cpu", cases=cases, hints=hints).to_json())
    assert entry["first_hint"] == "when the max moves, rescale l and the accumulator"
    assert entry["hints"] == "when the max moves, rescale l and the accumulator | each failing row is off by a factor"
    assert row(RunResult("grade", "lab2", "p.cu").to_json())["first_hint"] == ""


def test_the_clusters_state_and_elapsed_time_fill_their_columns_where_the_result_has_them(tmp_path):
    entry = written(tmp_path, "a.cu", cluster={"job_id": "4242_3", "state": "TIMEOUT", "elapsed_s": 61})[0]
    assert (entry["cluster_state"], entry["cluster_elapsed_s"]) == ("TIMEOUT", "61")
    entry = written(tmp_path, "a.cu", cluster={"job_id": "4242_4", "state": "COMPLETED", "elapsed_s": 12.25})[0]
    assert (entry["cluster_state"], entry["cluster_elapsed_s"]) == ("COMPLETED", "12.2")
    requeued = {"job_id": "4242_5", "state": "COMPLETED", "elapsed_s": 9, "reason": "node failure, requeued"}
    assert written(tmp_path, "a.cu", cluster=requeued)[0]["cluster_reason"] == "node failure, requeued"
    entry = written(tmp_path, "a.cu")[0]  # a local batch: no cluster, empty cells
    assert (entry["cluster_state"], entry["cluster_elapsed_s"], entry["cluster_reason"]) == ("", "", "")
    # another program's text is a text cell too: a state that looks like a formula stays text
    assert written(tmp_path, "a.cu", cluster={"state": "=CANCELLED by 0"})[0]["cluster_state"] == "'=CANCELLED by 0"
    assert written(tmp_path, "a.cu", cluster={"state": "x", "elapsed_s": "=1"})[0]["cluster_elapsed_s"] == ""


def test_the_first_failing_case_is_the_first_in_catalogue_order():
    cases = [
        CaseResult("C1-P31", "pass", "ok", 1, 31),
        CaseResult("C17-P31", "wrong", "bad", 17, 31),
        CaseResult("C33-P31", "crash", "boom", 33, 31),
    ]
    data = RunResult("grade", "lab2", "b.cu", backend="cpu", cases=cases, seconds=2.0).to_json()
    entry = row(data)
    assert (entry["verdict"], entry["exit_code"], entry["first_failing_case"], entry["seconds"]) == (
        "crash",
        4,
        "C17-P31",
        "2.0",
    )
    assert (entry["speedup"], entry["gate_met"]) == ("", "")


def test_a_compile_error_names_compile_as_the_failing_step():
    data = RunResult("grade", "lab2", "c.cu", error="c.cu(1): error: x", error_code=ExitCode.COMPILE_ERROR).to_json()
    assert (row(data)["verdict"], row(data)["exit_code"], row(data)["first_failing_case"]) == (
        "compile-error",
        3,
        "compile",
    )


def test_hints_are_read_from_the_result_where_present():
    assert hints_text(None) == ""
    assert (
        hints_text(["rescale l when the max grows", "  use one\nKV head per group "])
        == "rescale l when the max grows | use one KV head per group"
    )
    assert hints_text([{"case": "C1-P1000", "text": "rescale the accumulator"}]) == "rescale the accumulator"
    data = {**RunResult("grade", "lab2", "d.cu").to_json(), "hints": ["check the causal bound"]}
    assert row(data)["hints"] == "check the causal bound"


def test_the_hints_a_grade_gives_fill_the_column_in_their_order():
    hints = [
        {"hazard": "scale", "text": "every score is off by one factor: multiply Q.K by\n1/sqrt(64)"},
        {"hazard": "bounds", "text": "rows past the first block are wrong"},
    ]
    cases = [CaseResult("C1-P31", "wrong", "bad", 1, 31)]
    data = RunResult("grade", "lab2", "e.cu", backend="cpu", cases=cases, hints=hints).to_json()
    assert (
        row(data)["hints"]
        == "every score is off by one factor: multiply Q.K by 1/sqrt(64) | rows past the first block are wrong"
    )


def test_cells_a_spreadsheet_would_run_as_formulas_are_written_as_text(tmp_path):
    data = RunResult("grade", "lab2", '=HYPERLINK("http://x").cu', sha256=SHA).to_json()
    write_gradebook([row(data, seconds=1.0)], tmp_path / "g.csv")
    with open(tmp_path / "g.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == list(COLUMNS)
    assert rows[0]["file"] == '\'=HYPERLINK("http://x").cu'
    assert (rows[0]["sha256"], rows[0]["verdict"], rows[0]["exit_code"]) == (SHA, "pass", "0")


def written(tmp_path, file: str, **fields) -> tuple[dict, str]:
    data = {**RunResult("grade", "lab2", file, sha256=SHA).to_json(), **fields}
    write_gradebook([row(data, seconds=1.25)], tmp_path / "g.csv")
    raw = (tmp_path / "g.csv").read_text(encoding="utf-8")
    with open(tmp_path / "g.csv", newline="", encoding="utf-8") as handle:
        return next(csv.DictReader(handle)), raw


def test_every_field_is_quoted_and_the_grader_s_numbers_stay_numbers(tmp_path):
    entry, raw = written(tmp_path, "a.cu")
    assert raw.splitlines() == [
        '"file","sha256","verdict","exit_code","backend","cases_run","cases_skipped","speedup","gate_met",'
        '"first_failing_case","first_hint","hints","cluster_state","cluster_elapsed_s","cluster_reason","seconds",'
        '"student","student_id","name","section","score","max_score","unscored","not_graded","similar_to"',
        f'"a.cu","{SHA}","pass","0","","0","0","","","","","","","","","1.2","","","","","","","","",""',
    ]


def test_a_formula_after_a_separator_a_spreadsheet_splits_on_is_text_too(tmp_path):
    assert written(tmp_path, "y;=1+1;.cu")[0]["file"] == "y;'=1+1;.cu"
    assert written(tmp_path, "a,+1|@SUM(A1)\t-2.cu")[0]["file"] == "a,'+1|'@SUM(A1)\t'-2.cu"
    assert written(tmp_path, "a; =1.cu")[0]["file"] == "a;' =1.cu"  # spaces before the opener do not hide it
    assert written(tmp_path, "\t=1.cu")[0]["file"] == "'\t'=1.cu"
    assert written(tmp_path, "a-b;c=d.cu")[0]["file"] == "a-b;c=d.cu"  # inside a cell, `-` and `=` are text
    hinted = written(tmp_path, "ok.cu", hints=[{"text": "=HYPERLINK(1); -2"}])[0]
    assert (hinted["hints"], hinted["first_hint"]) == ("'=HYPERLINK(1);' -2", "'=HYPERLINK(1);' -2")


def test_a_name_with_controls_or_bytes_that_are_not_utf8_is_shown_not_a_crash(tmp_path):
    import os

    entry, raw = written(tmp_path, os.fsdecode(b"subs/\xff\n\x1b[2J.cu"))
    assert entry["file"] == "subs/\\xff\\x0a\\x1b[2J.cu"
    assert "\x1b" not in raw and len(raw.splitlines()) == 2


def test_spreadsheet_safe_is_idempotent():
    for text in ("y;=1+1;.cu", "=x", "a\t\t=1", "'=x", "plain"):
        assert spreadsheet_safe(spreadsheet_safe(text)) == spreadsheet_safe(text)
