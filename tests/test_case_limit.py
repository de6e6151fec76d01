"""How long a case may run: on the CPU, from the case's size and the shipped solution's cost on this machine
(a hang named in seconds, a slow but correct kernel never cut); --timeout wins; the message says where the
limit came from."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labrunner.labs import get_lab
from labrunner.pipeline import case_limit as limits
from labrunner.pipeline.case_limit import CaseLimit, case_limit, case_work
from labrunner.truth.catalogue import Case

LAB1, LAB2, LAB3 = get_lab("lab1"), get_lab("lab2"), get_lab("lab3")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def reference_machine(monkeypatch):
    """This machine as fast as the reference machine, and idle, whatever it is."""
    monkeypatch.setattr(limits, "machine_factor", lambda: 1.0)
    monkeypatch.setattr(limits.os, "getloadavg", lambda: (0.5, 0.5, 0.5))


def test_a_busy_machine_gets_a_longer_limit(reference_machine, monkeypatch):
    case = Case("C33-P1000", rows=33, prefix=1000)
    idle = case_limit(LAB2, "cpu", case, None)
    monkeypatch.setattr(limits.os, "getloadavg", lambda: (5.0 * (os.cpu_count() or 1), 0.0, 0.0))
    busy = case_limit(LAB2, "cpu", case, None)
    assert busy.reference_s == pytest.approx(5 * idle.reference_s)


def test_a_small_case_gets_seconds_and_the_message_says_where_they_came_from(reference_machine):
    limit = case_limit(LAB1, "cpu", Case("T1", rows=1), None)
    # one tile of 64 x 64 pairs at 2.5e-5 s, plus 0.05 s: 0.1524 s; 20 times that, plus 3 s
    assert limit == CaseLimit(pytest.approx(20 * 0.1524 + 3.0), "T1", "reference", pytest.approx(0.1524))
    assert limit.timed_out() == (
        "no result in 6.0 s, the limit for case T1 on this machine: 20 x the reference solution's 0.15 s "
        "plus 3 s to start; the kernel was stopped (--timeout sets it)"
    )


def test_the_limit_grows_with_the_work_a_case_asks(reference_machine):
    lab2 = [
        case_limit(LAB2, "cpu", Case(n, rows=r, prefix=p), None).seconds
        for n, r, p in (("C1-P31", 1, 31), ("C1-P1000", 1, 1000), ("C2048-P2048", 2048, 2048))
    ]
    assert lab2 == sorted(lab2) and lab2[2] > 100 * lab2[0]
    # the solutions compute whole tiles: a row costs what 64 do
    assert case_work(Case("C1-P1000", rows=1, prefix=1000)) == case_work(Case("C23-P1000", rows=23, prefix=1000))
    # a decode batch: every sequence's keys by the page, and a block each
    assert case_work(Case("two", rows=2, prefix=17, lengths=(17, 1))) == 32 + 64 + 16 + 64


def test_a_slower_machine_gets_a_longer_limit_and_a_faster_one_never_a_shorter(monkeypatch):
    case = Case("C1-P31", rows=1, prefix=31)
    monkeypatch.setattr(limits.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(limits, "_speed_loop", lambda: time.sleep(3 * limits.REFERENCE_LOOP_S))
    limits.machine_factor.cache_clear()
    slow = case_limit(LAB2, "cpu", case, None)
    monkeypatch.setattr(limits, "_speed_loop", lambda: None)
    limits.machine_factor.cache_clear()
    fast = case_limit(LAB2, "cpu", case, None)
    limits.machine_factor.cache_clear()
    assert slow.reference_s >= 3 * fast.reference_s
    assert fast.reference_s == pytest.approx(0.05 + 1.2e-5 * 64 * 64)


def test_timeout_wins_and_the_gpu_keeps_its_fixed_limit(reference_machine):
    case = Case("C1-P31", rows=1, prefix=31)
    assert case_limit(LAB2, "cpu", case, 2.5).timed_out() == (
        "no result in 2.5 s, the limit --timeout set; the kernel was stopped"
    )
    assert case_limit(LAB2, "gpu", case, None).timed_out() == (
        "no result in 20.0 s, the GPU's limit for one case; the kernel was stopped (--timeout sets it)"
    )
    never_measured = dataclasses.replace(
        LAB2, name="lab9", cpu_seconds_per_unit=None, interpreted_seconds_per_unit=None
    )
    assert case_limit(never_measured, "cpu", case, None).seconds == 120.0  # a lab whose solution was never measured


def test_a_timeout_names_the_launch_that_was_running():
    case = Case("T17", rows=17)
    assert case_limit(LAB1, "cpu", case, 2.5).timed_out("attn_softmax (launch 2 of 3)") == (
        "no result in 2.5 s, the limit --timeout set; attn_softmax (launch 2 of 3) was running, and was stopped"
    )
    assert case_limit(LAB1, "gpu", case, None).timed_out("attn_scores (launch 1 of 3)") == (
        "no result in 20.0 s, the GPU's limit for one case; attn_scores (launch 1 of 3) was running, and was "
        "stopped (--timeout sets it)"
    )


@pytest.mark.slow
def test_the_lab1_hang_is_named_timeout_within_15_seconds_with_default_options(tmp_path):
    """The issue's hang took 122 s to be named on the CPU; default options now name it in seconds."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    started = time.monotonic()
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "labrunner",
            "grade",
            "lab1",
            "tests/fixtures/lab1/hostile/hang.cu",
            "--json",
            str(tmp_path / "r.json"),
        ],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    seconds = time.monotonic() - started
    # 15 s on an idle machine; a busy one slows the compile, the worker's start and (`contention`) the limit
    busy = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    data = json.loads((tmp_path / "r.json").read_text())
    assert (completed.returncode, data["verdict"], data["decisive_case"]) == (4, "timeout", "T1"), completed.stderr
    assert seconds < 15 * busy, (seconds, busy)
    message = data["cases"][0]["message"]
    assert (
        message.startswith("no result in ")
        and ", the limit for case T1 on this machine: 20 x the reference " in message
    )
    assert message.endswith(
        " s plus 3 s to start; attn_softmax (launch 2 of 3) was running, and was stopped (--timeout sets it)"
    )
    assert float(message.removeprefix("no result in ").split(" s,")[0]) <= 9.0 * busy


def test_each_lab_prices_its_cpu_limits_from_its_own_definition(monkeypatch):
    # the figures measured on the reference machine live with each lab, not in a table of lab names
    monkeypatch.setattr(limits, "machine_factor", lambda: 1.0)
    monkeypatch.setattr(limits, "contention", lambda: 1.0)
    case = Case("C33-P1000", rows=33, prefix=1000)
    work = case_work(case)
    assert [lab.cpu_seconds_per_unit for lab in (LAB1, LAB2, LAB3)] == [2.5e-5, 1.2e-5, 1.2e-4]
    assert [lab.interpreted_seconds_per_unit for lab in (LAB1, LAB2, LAB3)] == [None, 3e-4, 3e-3]
    assert case_limit(LAB2, "cpu", case, None).reference_s == pytest.approx(limits.FIXED_SECONDS + 1.2e-5 * work)
    interpreted = case_limit(LAB2, "cpu", case, None, interpreted=True)
    assert interpreted.reference_s == pytest.approx(limits.FIXED_SECONDS + 3e-4 * work)
    # lab 1 takes no Triton file, so its interpreter was never priced: the generous fixed limit
    assert case_limit(LAB1, "cpu", case, None, interpreted=True).seconds == limits.UNKNOWN_LAB_LIMIT_S == 120.0
