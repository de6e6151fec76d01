"""The timing tables render what the timing produced: lab 1's cost table and lab 2's SPEEDUP line."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from labrunner.labs.definition import attention_flops
from labrunner.pipeline.timing_stage import PROJECTED_SIZES, bytes_each_kernel_must_move, pipeline_row
from labrunner.records.timing import PipelineTiming, SpeedupTiming
from labrunner.report import terminal
from labrunner.report.results import RunResult


@pytest.fixture
def printed(monkeypatch):
    buffer = io.StringIO()
    monkeypatch.setattr(terminal, "stdout", Console(file=buffer, width=150, highlight=False))
    return buffer


def stats(ms: float) -> dict:
    return {"median_ms": ms, "min_ms": ms, "max_ms": ms, "count": 20, "rse": 0.001, "warning": None}


def test_the_cost_table_shows_sizes_times_traffic_and_projections(printed):
    measured = {
        "attn_scores": stats(1.5),
        "attn_softmax": stats(0.25),
        "attn_weighted_sum": stats(1.25),
        "total": stats(3.0),
    }
    timing = PipelineTiming(
        rows=[pipeline_row(2048, measured)], projections=[pipeline_row(t, None) for t in PROJECTED_SIZES]
    )
    terminal.timing_report(RunResult("grade", "lab1", timing=timing))
    text = printed.getvalue()
    assert "scores ms" in text and "softmax ms" in text and "weighted_sum ms" in text
    row = next(line for line in text.splitlines() if line.startswith("│  2048"))
    cells = [cell.strip() for cell in row.strip("│").split("│")]
    # 512 MiB matrix, 40 MiB of tensors, 12.8x; 4 passes = 2048 MiB in 3 ms = 716 GB/s
    assert cells == ["2048", "512", "40.0", "12.8x", "1.500", "0.250", "1.250", "3.000", "2048 MiB", "716"]
    assert "2 GiB (projected)" in text and "128 GiB (projected)" in text


def test_the_bytes_each_lab1_kernel_must_move_follow_the_contract():
    # T = 4: 10 visible scores per head (4*5/2), 16 in the whole row block; Q and out 4*32*64 floats, K and V 4*8*64
    visible, whole, q, k = 32 * 10 * 4, 32 * 16 * 4, 4 * 32 * 64 * 4, 4 * 8 * 64 * 4
    assert bytes_each_kernel_must_move(4) == {
        "attn_scores": q + k + visible,
        "attn_softmax": visible + whole,
        "attn_weighted_sum": visible + k + q,
    }
    # T = 2048: 1.25 GiB of matrix traffic plus the 40 MiB of tensors
    assert (
        sum(bytes_each_kernel_must_move(2048).values())
        == 32 * 2048 * 2049 // 2 * 4 * 3 + 32 * 2048 * 2048 * 4 + 2 * (2048 * 32 * 64 + 2048 * 8 * 64) * 4
    )


def test_the_floor_table_sets_each_kernel_against_the_same_runs_copy(printed):
    measured = {
        "attn_scores": stats(0.25),
        "attn_softmax": stats(0.2),
        "attn_weighted_sum": stats(0.35),
        "total": stats(0.8),
    }
    row = pipeline_row(2048, measured, copy_bytes_per_s=4.0e12)
    must = bytes_each_kernel_must_move(2048)
    assert row.to_json()["must_move"]["attn_softmax"] == {
        "bytes": must["attn_softmax"],
        "gb_s": must["attn_softmax"] / 0.2e-3 / 1e9,
        "copy_fraction": must["attn_softmax"] / 0.2e-3 / 1e9 / 4000.0,  # of the same run's device copy
    }
    floor_ms = sum(must.values()) / 4.0e12 * 1e3
    assert row.to_json()["floor"] == {
        "bytes": sum(must.values()),
        "copy_gb_s": 4000.0,
        "ms": floor_ms,
        "times_floor": 0.8 / floor_ms,
    }
    timing = PipelineTiming(rows=[row])
    terminal.timing_report(RunResult("grade", "lab1", timing=timing))
    text = printed.getvalue()
    softmax = next(line for line in text.splitlines() if "attn_softmax" in line)
    # 256.1 MiB visible + 512 MiB whole = 768 MiB in 0.2 ms = 4027 GB/s, 101% of the copy's 4000 GB/s
    assert [cell.strip() for cell in softmax.strip("│").split("│")] == [
        "attn_softmax",
        "768 MiB",
        "0.200",
        "4027",
        "101%",
    ]
    assert (
        "floor: 1,320 MiB at this run's device-copy bandwidth (4000 GB/s, bytes read plus written) = 0.346 ms; "
        "the whole call takes 0.800 ms, 2.31x the floor"
    ) in text


def test_without_a_timed_copy_the_floor_is_said_to_be_unknown(printed, capsys):
    measured = {
        "attn_scores": stats(0.25),
        "attn_softmax": stats(0.2),
        "attn_weighted_sum": stats(0.35),
        "total": stats(0.8),
    }
    timing = PipelineTiming(rows=[pipeline_row(2048, measured)])
    terminal.timing_report(RunResult("grade", "lab1", timing=timing))
    assert capsys.readouterr().err == "note: no device copy was timed in this run, so the floor is not known\n"
    assert "of the copy" not in printed.getvalue()


def test_the_speedup_line_quotes_its_interval(printed):
    comparison = {"student": stats(2.0), "baseline": stats(26.0), "speedup": 13.0, "ci_low": 12.8, "ci_high": 13.1}
    timing = {
        "kind": "speedup",
        "rows": 2048,
        "prefix": 2048,
        "gflop": attention_flops(2048, 2048) / 1e9,
        "student_label": "flash.cu",
        "baseline_label": "starter.cu",
        "comparison": comparison,
        "overhead_ms": 0.0028,
        "warnings": [],
    }
    terminal.timing_report(RunResult("grade", "lab2", timing=SpeedupTiming.from_json(timing)))
    text = printed.getvalue()
    assert "SPEEDUP 13.00x (95% CI 12.80x to 13.10x, vs starter.cu)" in text
    assert "51.55 GFLOP" in text
    assert "25.77" in text  # 51.55 GFLOP in 2.0 ms


def test_rounds_are_listed_beside_the_pooled_speedup(printed):
    comparison = {"student": stats(2.0), "baseline": stats(26.0), "speedup": 13.0, "ci_low": 12.6, "ci_high": 13.3}
    rounds = [{"speedup": x} for x in (12.7, 13.0, 13.3)]
    timing = {
        "kind": "speedup",
        "rows": 2048,
        "prefix": 2048,
        "gflop": attention_flops(2048, 2048) / 1e9,
        "student_label": "flash.cu",
        "baseline_label": "starter.cu",
        "comparison": comparison,
        "rounds": rounds,
        "overhead_ms": 0.0028,
        "warnings": [],
    }
    terminal.timing_report(RunResult("grade", "lab2", timing=SpeedupTiming.from_json(timing)))
    assert (
        "3 rounds, each in a fresh worker process on fresh buffers; SPEEDUP per round: 12.70x, 13.00x, 13.30x\n"
        in printed.getvalue()
    )


def test_one_round_needs_no_rounds_line(printed):
    comparison = {"student": stats(2.0), "baseline": stats(26.0), "speedup": 13.0, "ci_low": 12.8, "ci_high": 13.1}
    timing = {
        "kind": "speedup",
        "rows": 2048,
        "prefix": 2048,
        "gflop": attention_flops(2048, 2048) / 1e9,
        "student_label": "flash.cu",
        "baseline_label": "starter.cu",
        "comparison": comparison,
        "rounds": [{"speedup": 13.0}],
        "overhead_ms": 0.0028,
        "warnings": [],
    }
    terminal.timing_report(RunResult("grade", "lab2", timing=SpeedupTiming.from_json(timing)))
    assert "round" not in printed.getvalue()
