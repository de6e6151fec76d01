"""Timing's two sides: the driver's (rounds, verified calls checked, rounds pooled) and the worker's.

First a scripted worker answers each timing request with chosen samples and with outputs for
the verified calls (the oracle's, or deliberately wrong), so what the driver does with them is
checked exactly. Then the worker's real timing code runs in process on a numpy stand-in for the
GPU, whose "kernel" is the oracle itself, or a cheat that tries to skip work.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from gpu_standin import CountingTimer, InProcessWorker, NumpyGpu
from labrunner.commands.benchmark import divide_out, per_input_set_medians, time_pipeline, time_speedup
from labrunner.labs import get_lab
from labrunner.measure.timing import Stats, TimingOptions
from labrunner.truth import oracle
from labrunner.truth.poison import POISON_BITS

LAB = get_lab("lab2")
ROWS, PREFIX = 3, 31
FACTOR = -1.5


def stats(samples: list[float]) -> dict:
    return Stats(median_ms=float(np.median(samples)), min_ms=min(samples), max_ms=max(samples),
                 mean_ms=float(np.mean(samples)), count=len(samples), rse=0.001, noise_met=True, warning=None,
                 samples_ms=samples, verified_count=1, stopped_by="noise").to_json(include_samples=True)


class ScriptedWorker:
    """Answers round k with student samples `student_ms[k]` and baseline samples `baseline_ms[k]`."""

    def __init__(self, student_ms, baseline_ms, wrong_in_round: int | None = None):
        self.student_ms, self.baseline_ms = student_ms, baseline_ms
        self.wrong_in_round = wrong_in_round
        self.events: list[str] = []
        self.seeds: list[int] = []
        self.round = 0

    def restart(self) -> None:
        self.events.append("restart")

    def time(self, request: dict, timeout_s: float) -> dict:
        self.events.append("time")
        self.seeds.append(request["options"]["seed"])
        s = request["input_sets"][0]
        # a verified call runs with V scaled by a factor, so its right answer is the reference times it
        right = (FACTOR * oracle.attention(s["q"], s["k"], s["v"], prefix=PREFIX)).astype(np.float32).ravel()
        student_out = right.copy()
        if self.round == self.wrong_in_round:
            student_out[5] += 1.0
        k = self.round
        self.round += 1
        student, baseline = self.student_ms[k], self.baseline_ms[k]
        ratio = float(np.median(baseline) / np.median(student))
        state = {"sm_clock_mhz": 1980}
        return {"comparison": {"student": stats(student), "baseline": stats(baseline), "speedup": ratio,
                               "ci_low": ratio, "ci_high": ratio, "level": 0.95},
                "verified": {"student": [(0, FACTOR, student_out)], "baseline": [(0, FACTOR, right)]},
                "overhead": {"median_ms": 0.003}, "l2_flush_bytes": 1 << 27,
                "state_before": state, "state_after": state}


def run(worker: ScriptedWorker, rounds: int):
    constants = LAB.constants({})
    return time_speedup(LAB, worker, constants, constants, ROWS, PREFIX, seed=7,
                        options=TimingOptions(rounds=rounds, seed=7), student_label="flash.cu",
                        baseline_label="starter.cu")


def test_one_round_is_one_request_and_its_own_figures():
    worker = ScriptedWorker([[2.0, 2.0, 2.2]], [[26.0, 26.0, 26.4]])
    timing, failure = run(worker, rounds=1)
    assert failure is None
    assert worker.events == ["time"]
    assert timing["speedup"] == 13.0
    assert (timing["comparison"]["ci_low"], timing["comparison"]["ci_high"]) == (13.0, 13.0)
    assert [r["speedup"] for r in timing["rounds"]] == [13.0]
    assert timing["verified_calls"] == {"student": 1, "baseline": 1}
    assert "samples_ms" not in timing["comparison"]["student"]


def test_rounds_run_in_fresh_workers_and_pool_every_sample():
    student = [[2.0, 2.0, 2.0], [2.1, 2.1, 2.1], [2.2, 2.2, 2.2]]
    baseline = [[26.0, 26.0, 26.0]] * 3
    worker = ScriptedWorker(student, baseline)
    timing, failure = run(worker, rounds=3)
    assert failure is None
    assert worker.events == ["time", "restart", "time", "restart", "time"]
    assert worker.seeds == [7, 8, 9]  # each round draws its own verification schedule
    assert timing["speedup"] == pytest.approx(26.0 / 2.1)  # medians over all nine pairs
    assert [round(r["speedup"], 4) for r in timing["rounds"]] == [13.0, 12.381, 11.8182]
    assert timing["comparison"]["student"]["count"] == 9
    assert timing["rounds"][1]["student_per_input_set_ms"] == [2.1, 2.1, 2.1]  # three timing input sets
    assert timing["verified_calls"] == {"student": 3, "baseline": 3}
    # the spread between rounds is in the interval, though each round alone looks exact
    assert timing["comparison"]["ci_low"] < 12.0 and timing["comparison"]["ci_high"] > 12.9


def test_a_wrong_verified_call_in_a_later_round_means_no_time():
    worker = ScriptedWorker([[2.0]] * 3, [[26.0]] * 3, wrong_in_round=1)
    timing, failure = run(worker, rounds=3)
    assert timing is None
    assert worker.events == ["time", "restart", "time"]  # nothing more is timed after a failed check
    assert failure.status == "wrong"
    # the student's element was off by 1.0 at V scaled by -1.5: -0.209866 + 1.0 / -1.5 once divided out
    assert failure.message == ("flash.cu: a timed call on fresh input set 0 (V scaled by -1.5, output re-poisoned) "
                               "failed: row 0, head 0, col 5: got -0.876533, expected -0.209866 "
                               "(|err| > 1e-4 + 1e-3*|ref|); "
                               "1 of 6144 elements wrong; a kernel must compute every call, so no time is reported")


def test_per_input_set_medians_follow_the_rotation():
    # sample k ran on input set k % 3
    assert per_input_set_medians([1.0, 5.0, 9.0, 2.0, 6.0, 10.0, 3.0], 3) == [2.0, 5.5, 9.5]
    assert per_input_set_medians([4.0], 3) == [4.0]


# --- the worker's real timing code, in process, on a numpy stand-in for the GPU ---------------

@pytest.fixture
def in_process(monkeypatch):
    import labrunner.measure.gpu_timer

    monkeypatch.setattr(labrunner.measure.gpu_timer, "CupyTimer", CountingTimer)


def timed(worker, rounds):
    constants = LAB.constants({})
    return time_speedup(LAB, worker, constants, constants, ROWS, PREFIX, seed=3,
                        options=TimingOptions(rounds=rounds, seed=3, min_samples=6, budget_s=0.05),
                        student_label="flash.cu", baseline_label="starter.cu")


def test_the_worker_side_and_the_driver_side_agree_on_the_reply(in_process):
    worker = InProcessWorker(NumpyGpu(PREFIX))
    timing, failure = timed(worker, rounds=2)
    assert failure is None
    assert worker.restarts == 1
    assert timing["speedup"] == 1.0 and timing["comparison"]["ci_low"] == timing["comparison"]["ci_high"] == 1.0
    assert [r["student_per_input_set_ms"] for r in timing["rounds"]] == [[1.0, 1.0, 1.0]] * 2
    assert timing["verified_calls"]["student"] >= 4  # at least two verified calls in each round
    assert timing["overhead_ms"] == 1.0 and timing["l2_flush_bytes"] == 1 << 27


def test_a_kernel_that_stops_computing_gets_no_time(in_process):
    # correct for its first launches (warm-up included), then it writes nothing: a re-poisoned,
    # verified call must catch it
    timing, failure = timed(InProcessWorker(NumpyGpu(PREFIX, skip_after=8)), rounds=1)
    assert timing is None
    assert failure.status == "never-written"
    assert failure.message.startswith("flash.cu: a timed call on fresh input set ")


def test_lab_1s_pipeline_timing_goes_through_the_same_worker_code(in_process):
    lab1 = get_lab("lab1")
    worker = InProcessWorker(NumpyGpu(prefix=0))
    timing, failure = time_pipeline(lab1, worker, lab1.constants({}), [16, 32], seed=3,
                                    options=TimingOptions(seed=3, min_samples=6, budget_s=0.05))
    assert failure is None
    assert [row["T"] for row in timing["rows"]] == [16, 32]
    assert list(timing["rows"][0]["kernels"]) == ["attn_scores", "attn_softmax", "attn_weighted_sum"]
    assert timing["rows"][1]["total"]["median_ms"] == 1.0
    assert timing["rows"][1]["implied_gb_s"] == pytest.approx(4 * 32 * 32 * 32 * 4 / 1e-3 / 1e9)
    assert [row["T"] for row in timing["projections"]] == [4096, 32768]


class SkipsWhenWritten(NumpyGpu):
    """The one-line cheat: return at once when the output already holds an answer (is not the poison)."""

    def __init__(self, prefix: int):
        super().__init__(prefix)
        self.skipped = 0

    def launch(self, kernels, launch, buffers):
        if buffers["out"][:1].view(np.uint32)[0] != POISON_BITS:
            self.skipped += 1
            return
        super().launch(kernels, launch, buffers)


class Memoizes(NumpyGpu):
    """Keeps each answer under its exact inputs and replays it when the same inputs come again."""

    def __init__(self, prefix: int):
        super().__init__(prefix)
        self.kept: dict[bytes, np.ndarray] = {}
        self.replayed = 0

    def launch(self, kernels, launch, buffers):
        key = hashlib.sha256(buffers["q"].tobytes() + buffers["k"].tobytes() + buffers["v"].tobytes()).digest()
        if key in self.kept:
            self.replayed += 1
            buffers["out"][:] = self.kept[key]
            return
        super().launch(kernels, launch, buffers)
        self.kept[key] = buffers["out"].copy()


def test_every_timed_call_starts_from_a_poisoned_output(in_process):
    device = SkipsWhenWritten(PREFIX)
    timing, failure = timed(InProcessWorker(device), rounds=1)
    assert failure is None and timing["speedup"] == 1.0
    assert device.skipped == 0  # it never once found an answer in its output, so it computed every call
    samples = timing["comparison"]["student"]["count"]
    assert device.launches == 2 * (3 + samples)  # student and baseline, three warm-up calls each and every sample


def test_no_timed_call_sees_inputs_it_has_seen_before(in_process):
    device = Memoizes(PREFIX)
    timing, failure = timed(InProcessWorker(device), rounds=2)
    assert failure is None
    assert device.replayed == 0
    assert len(device.kept) == device.launches


def test_dividing_out_the_factor_keeps_the_poison_bit_for_bit():
    out = np.array([1.5, -3.0, 0.0, 0.0], dtype=np.float32)
    out.view(np.uint32)[2] = POISON_BITS
    restored = divide_out(out, -1.5)
    assert restored.dtype == np.float32
    assert restored[[0, 1, 3]].tolist() == [-1.0, 2.0, 0.0]
    assert restored.view(np.uint32)[2] == POISON_BITS


class KeepsAnswerPerQK(NumpyGpu):
    """Computes once per (Q, K) and replays that answer: blind to V being remade before every timed call."""

    def __init__(self, prefix: int):
        super().__init__(prefix)
        self.kept: dict[bytes, np.ndarray] = {}

    def launch(self, kernels, launch, buffers):
        key = hashlib.sha256(buffers["q"].tobytes() + buffers["k"].tobytes()).digest()
        if key not in self.kept:
            super().launch(kernels, launch, buffers)
            self.kept[key] = buffers["out"].copy()
        buffers["out"][:] = self.kept[key]


def test_a_kernel_blind_to_the_fresh_v_of_a_timed_call_gets_no_time(in_process):
    # its case check would pass (one call, one answer); a verified timed call has V times a fresh
    # factor, so the kept answer is off by that factor and the check names the call
    timing, failure = timed(InProcessWorker(KeepsAnswerPerQK(PREFIX)), rounds=1)
    assert timing is None
    assert (failure.name, failure.status) == (f"timed C{ROWS}-P{PREFIX}", "wrong")
    assert failure.message.startswith("flash.cu: a timed call on fresh input set ")
    assert "(V scaled by " in failure.message and ", output re-poisoned) failed: row " in failure.message
    assert failure.message.endswith("; a kernel must compute every call, so no time is reported")
