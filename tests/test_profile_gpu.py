"""`attnlab profile` of the shipped solutions on the GPU, as a user runs it (`python -m labrunner profile`).

Lab 1: three kernels in every one of five calls at each timing size, in the JSON and in a trace file that
loads as trace-event JSON. Lab 2: the Range pass ran (Nsight Compute is part of the GPU image), the
solution is compute-bound, the starter has its row, and the trace's median duration of the solution is
within 5% of ncu's own gpu__time_duration (both are cold calls: the trace flushes L2 before every call,
ncu flushes every cache before its replays). Lab 3: both kernels in each of five calls at the timing
shape (its 4.8 GB of K and V filled on the GPU), the Range pass memory-bound for the solution and the
starter, and the lab's bytes that must move beside ncu's DRAM bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def profile(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict, float]:
    report = tmp_path / "profile.json"
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "labrunner", "profile", *args, "--json", str(report)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"},
    )
    wall = time.monotonic() - started
    print(completed.stdout, completed.stderr, f"\nwall time {wall:.1f} s", sep="\n")
    return completed, json.loads(report.read_text()), wall


@pytest.mark.gpu
def test_lab1_solution_shows_three_kernels_in_each_of_five_calls_at_every_size(tmp_path):
    trace_file = tmp_path / "trace1.json"
    completed, result, _ = profile(
        tmp_path, "lab1", "kernels/lab1/solution.cu", "--trace", str(trace_file), "--no-range"
    )
    assert completed.returncode == 0, completed.stderr
    trace = result["profile"]["trace"]
    assert trace["shapes"] == ["T = 512", "T = 1024", "T = 2048"]
    calls: dict = {}
    for s in trace["slices"]:
        calls.setdefault((s["shape"], s["call"]), []).append(s["kernel"])
        assert s["end_ns"] > s["start_ns"]
    assert calls == {
        (shape, call): ["attn_scores", "attn_softmax", "attn_weighted_sum"]
        for shape in trace["shapes"]
        for call in range(5)
    }
    events = json.loads(trace_file.read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == 45
    assert all(e["dur"] > 0 and set(e["args"]) >= {"grid", "block", "registers per thread"} for e in slices)
    assert "Trace timeline: 5 calls per shape" in completed.stdout


@pytest.mark.gpu
def test_lab2_solution_is_compute_bound_beside_the_starter_and_its_trace_agrees_with_ncu(tmp_path):
    completed, result, wall = profile(tmp_path, "lab2", "kernels/lab2/solution.cu")
    assert completed.returncode == 0, completed.stderr
    report = result["profile"]["range"]
    assert report["available"], report["message"]
    solution, starter = report["contenders"]
    assert (solution["role"], starter["role"]) == ("student", "starter")
    assert solution["point"]["bound"] == "compute-bound", solution["point"]["verdict"]
    assert starter["duration_ms"] > solution["duration_ms"]
    (agreement,) = result["profile"]["trace_vs_ncu"]
    assert abs(agreement["difference"]) <= 0.05, agreement
    print(f"profile lab2 took {wall:.1f} s (the issue asks for 90 s or less); ncu alone {report['seconds']:.1f} s")


@pytest.mark.gpu
def test_lab3_solution_is_memory_bound_with_both_kernels_in_each_of_five_calls(tmp_path):
    trace_file = tmp_path / "trace3.json"
    completed, result, wall = profile(tmp_path, "lab3", "kernels/lab3/solution.cu", "--trace", str(trace_file))
    assert completed.returncode == 0, completed.stderr
    profile_report = result["profile"]
    trace = profile_report["trace"]
    assert trace["shapes"] == ["B = 64, longest 32,768"]
    calls: dict = {}
    for s in trace["slices"]:
        calls.setdefault(s["call"], []).append(s["kernel"])
        assert s["end_ns"] > s["start_ns"]
    assert calls == {call: ["decode_partial", "decode_combine"] for call in range(5)}
    assert sum(e["ph"] == "X" for e in json.loads(trace_file.read_text())["traceEvents"]) == 10
    report = profile_report["range"]
    assert report["available"], report["message"]
    solution, starter = report["contenders"]
    assert (solution["role"], starter["role"]) == ("student", "starter")
    assert [k["kernel"] for k in solution["kernels"]] == ["decode_partial", "decode_combine"]
    assert solution["point"]["bound"] == starter["point"]["bound"] == "memory-bound", solution["point"]["verdict"]
    assert starter["duration_ms"] > solution["duration_ms"]
    # every visible key's K and V must come from DRAM at least once: ncu cannot count fewer bytes than that
    must_move = profile_report["must_move"]["bytes"]
    assert solution["dram_bytes"] >= 0.95 * must_move, (solution["dram_bytes"], must_move)
    assert "bytes one call must move at B = 64, longest 32,768" in completed.stdout
    print(
        f"profile lab3 took {wall:.1f} s; ncu alone {report['seconds']:.1f} s; solution "
        f"{solution['point']['verdict']}, DRAM {solution['dram_bytes'] / must_move:.3f}x the bytes that must move"
    )
