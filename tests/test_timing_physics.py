"""Timing cannot post what physics forbids, and lab 1's kernels are timed only inside checked calls.

First the rule alone (`measure.physics.impossible`) with an H200's numbers; then the driver
(`benchmark.time_pipeline`, `time_speedup`) fed a worker's reply with one impossible figure; then
the worker's real timing code on the numpy stand-in, with a timer that reports an impossibly short
time for one kernel; and last `bench` as a user runs it: verdict, exit code, JSON and terminal. No
test here times anything: the figures are scripted, and what is checked is the rule applied to them.
"""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
from gpu_standin import CountingTimer, InProcessWorker, NumpyGpu
from result_schema import timing_json, validate_result

import labrunner.pipeline.timing_stage as benchmark
from labrunner.labs import get_lab
from labrunner.labs.definition import Lab
from labrunner.measure.physics import MIB, Limits, impossible, limits
from labrunner.measure.roofline import tensor_core_peak
from labrunner.measure.sampling import TimingOptions
from labrunner.pipeline.timing_stage import (
    Contender,
    Contenders,
    CpuReferences,
    Sampling,
    TimedShape,
    WholeCall,
    attention_bytes_must_move,
    bytes_each_kernel_must_move,
    l2_parts_each_kernel,
    time_pipeline,
    time_speedup,
)
from labrunner.records.timing import Stats
from labrunner.report.results import RunResult

LAB1, LAB2, LAB3 = get_lab("lab1"), get_lab("lab2"), get_lab("lab3")
H200_FACTS = {
    "sm_count": 132,
    "compute_capability": [9, 0],
    "max_sm_clock_mhz": 1980,
    "max_memory_clock_mhz": 3201,
    "memory_bus_width_bits": 6144,
    "measured_copy_bytes_per_s": None,
}
H200_PEAK = 132 * 1980e6 * 4096  # 1,071 TFLOP/s
H200_L2 = 50 * MIB
H200 = Limits(4.13e12, H200_L2, H200_PEAK, "132 SMs x 1980 MHz x 4096 FLOP per clock, dense FP16")
NO_TIME = "a kernel that does all of its own work on every call cannot be this fast, so no time is reported"

# The attack found against the old timing, where each of lab 1's kernels was also timed on calls of its
# own: its softmax, at T = 2048, as this rule reports a figure like it
SOFTMAX_AT_0_1_MS = (
    "faster than this GPU can move the bytes: attn_softmax at T=2048 moved 768 MiB in 0.100 ms "
    "(its fastest timed call) = 8.05 TB/s, above this run's device copy (4.13 TB/s); even with "
    "100 MiB of it left to L2, the rest needs 1.70x the copy's bandwidth, and no kernel reaches "
    f"1.10x: {NO_TIME}"
)


# --- the rule ---------------------------------------------------------------------------------------


def test_the_tensor_core_peak_is_counted_from_the_hardware():
    assert tensor_core_peak(H200_FACTS) == (H200_PEAK, "132 SMs x 1980 MHz x 4096 FLOP per clock, dense FP16")
    assert tensor_core_peak(
        {**H200_FACTS, "compute_capability": [8, 0], "sm_count": 108, "max_sm_clock_mhz": 1410}
    ) == (108 * 1410e6 * 2048, "108 SMs x 1410 MHz x 2048 FLOP per clock, dense FP16")
    assert tensor_core_peak({**H200_FACTS, "compute_capability": [6, 1]}) == (
        None,
        "no tensor-core rate is known for compute capability [6, 1]",
    )
    assert tensor_core_peak({**H200_FACTS, "max_sm_clock_mhz": None}) == (
        None,
        "the GPU reported no SM count or clock, so its tensor-core peak is unknown",
    )


def test_a_kernel_faster_than_the_copy_can_move_its_bytes_is_refused_with_the_numbers():
    must, parts = bytes_each_kernel_must_move(2048), l2_parts_each_kernel(2048)
    assert must["attn_softmax"] == 805_437_440 and parts["attn_softmax"] == (268_566_528, 536_870_912)
    assert (
        impossible("attn_softmax at T=2048", 0.100, must["attn_softmax"], 0, H200, parts["attn_softmax"])
        == SOFTMAX_AT_0_1_MS
    )


def test_the_shipped_solutions_h200_figures_are_possible():
    # README: lab 1's solution at T = 2048 (each kernel inside the call), lab 2's expert, lab 3's solution
    must, parts = bytes_each_kernel_must_move(2048), l2_parts_each_kernel(2048)
    for name, ms in (("attn_scores", 0.114), ("attn_softmax", 0.205), ("attn_weighted_sum", 0.109)):
        assert impossible(name, ms, must[name], LAB1.flops(2048, 0, {}) / 2, H200, parts[name]) is None
    assert (
        impossible(
            "expert", 1.055, attention_bytes_must_move(2048, 2048), LAB2.flops(2048, 2048, {}), H200, (16 * MIB,)
        )
        is None
    )
    copy = Limits(4.27e12, H200_L2, H200_PEAK, "")
    assert impossible("decode", 1.108, 4_760_000_000, 9.5e9, copy, (MIB // 2,)) is None  # 1.01 of the copy


def test_the_margin_over_the_copy_is_ten_percent_and_what_l2_may_hold_is_spared():
    must = 1000 * MIB
    at_limit = (must - 50 * MIB) / (1.10 * 4.13e12) * 1e3  # the writes' part spared up to one L2
    assert impossible("k", at_limit * 1.0001, must, 0, H200, (200 * MIB,)) is None
    assert impossible("k", at_limit * 0.9999, must, 0, H200, (200 * MIB,)) == (
        f"faster than this GPU can move the bytes: k moved 1,000 MiB in {at_limit * 0.9999:.3f} ms (its fastest "
        f"timed call) = 4.78 TB/s, above this run's device copy (4.13 TB/s); even with 50 MiB of it left to L2, "
        f"the rest needs 1.10x the copy's bandwidth, and no kernel reaches 1.10x: {NO_TIME}"
    )
    # each part is spared up to one L2, and no part past its own size: 10 MiB of writes spare 10 MiB
    assert impossible("k", 0.2, 1000 * MIB, 0, H200, (10 * MIB,)) == (
        "faster than this GPU can move the bytes: k moved 1,000 MiB in 0.200 ms (its fastest timed call) = 5.24 TB/s, "
        "above this run's device copy (4.13 TB/s); even with 10 MiB of it left to L2, the rest needs 1.26x the "
        f"copy's bandwidth, and no kernel reaches 1.10x: {NO_TIME}"
    )
    # bytes that L2 may hold whole are never held to the copy: lab 1's softmax at T = 512 is 48 MiB
    assert (
        impossible(
            "attn_softmax at T=512",
            1e-6,
            bytes_each_kernel_must_move(512)["attn_softmax"],
            0,
            H200,
            l2_parts_each_kernel(512)["attn_softmax"],
        )
        is None
    )


def test_a_kernel_faster_than_the_tensor_cores_can_compute_is_refused_with_the_numbers():
    flops = LAB2.flops(2048, 2048, {})
    assert impossible(
        "flash.cu at C = 2048, P = 2048", 0.040, attention_bytes_must_move(2048, 2048), flops, H200, (16 * MIB,)
    ) == (
        "faster than this GPU can compute: flash.cu at C = 2048, P = 2048 did 51.55 GFLOP in 0.040 ms (its fastest "
        "timed call) = 1,289 TFLOP/s, above this GPU's tensor-core peak (1,071 TFLOP/s: 132 SMs x 1980 MHz x 4096 "
        f"FLOP per clock, dense FP16): {NO_TIME}"
    )


def test_a_bound_the_run_cannot_know_is_not_applied():
    unknown = Limits(None, H200_L2, None, "no tensor-core rate is known for compute capability [6, 1]")
    assert impossible("k", 1e-6, 10**9, 10**12, unknown, ()) is None
    assert unknown.to_json() == {
        "copy_tb_s": None,
        "copy_margin": 1.10,
        "l2_bytes": H200_L2,
        "peak_tflop_s": None,
        "peak_source": "no tensor-core rate is known for compute capability [6, 1]",
    }


def test_the_run_is_held_to_its_fastest_copy_counted_read_and_write():
    def copy(count, fastest_ms):
        return {"bytes": count, "stats": {"median_ms": 2 * fastest_ms, "min_ms": fastest_ms}}

    bounds = limits([copy(1 << 30, 0.5), copy(1 << 30, 0.52)], H200_L2, H200_FACTS)
    assert bounds == Limits(
        2 * (1 << 30) / 0.5e-3, H200_L2, H200_PEAK, "132 SMs x 1980 MHz x 4096 FLOP per clock, dense FP16"
    )
    assert limits([], 0, {}).copy_bytes_per_s is None


# --- the driver, fed the worker's reply -------------------------------------------------------------


def figure(samples: list[float]) -> dict:
    return Stats(
        median_ms=float(np.median(samples)),
        min_ms=min(samples),
        max_ms=max(samples),
        mean_ms=float(np.mean(samples)),
        count=len(samples),
        rse=0.001,
        noise_met=True,
        warning=None,
        samples_ms=list(samples),
        verified_count=0,
        stopped_by="noise",
    ).to_json(include_samples=True)


def no_checked_calls(out_count: int) -> dict:
    # the driver refuses a record with fewer checked calls than the loop makes; these runs ask for none
    # (`min_verified=0`), so the large shapes' references are never made here
    return {"sets": np.empty(0, dtype=np.int64), "outputs": np.empty((0, out_count), dtype=np.float32)}


def conditions(copy_bytes: int, copy_ms: float) -> dict:
    state = {"sm_clock_mhz": 1980}
    return {
        "copy": {"bytes": copy_bytes, "stats": figure([copy_ms, copy_ms * 1.01])},
        "l2_bytes": H200_L2,
        "gpu_facts": H200_FACTS,
        "overhead": {"median_ms": 0.003},
        "l2_flush_bytes": 2 * H200_L2,
        "state_before": state,
        "state_after": state,
    }


class ScriptedPipeline:
    """Answers lab 1's timing request with these kernels' times at every size, and an H200's conditions:
    a 512 MiB device copy at 4.13 TB/s (its fastest call), 50 MiB of L2."""

    def __init__(self, kernel_ms: dict[str, list[float]]):
        self.kernel_ms = kernel_ms

    def time(self, request: dict, timeout_s: float) -> dict:
        copy_bytes = request["copy_bytes"]
        sizes = []
        for size in request["sizes"]:
            stats = {name: figure(ms) for name, ms in self.kernel_ms.items()}
            stats["total"] = figure([sum(calls) for calls in zip(*self.kernel_ms.values())])
            sizes.append(
                {"T": size["T"], "stats": stats, "checked": no_checked_calls(size["out_count"]), "sets_drawn": 30}
            )
        return {"sizes": sizes, **conditions(copy_bytes, 2 * copy_bytes / 4.13e12 * 1e3)}


HONEST_KERNELS = {"attn_scores": [0.114, 0.115], "attn_softmax": [0.205, 0.206], "attn_weighted_sum": [0.109, 0.11]}
NO_CHECKS = TimingOptions(min_verified=0)


def test_honest_lab1_figures_are_posted_with_the_limits_they_were_held_to():
    timing, failure = timing_json(
        time_pipeline(
            LAB1,
            ScriptedPipeline(HONEST_KERNELS),
            WholeCall(LAB1.constants({})),
            [2048],
            Sampling(seed=3, options=NO_CHECKS, references=CpuReferences()),
        )
    )
    assert failure is None
    assert timing["physics"] == {
        "copy_tb_s": pytest.approx(4.13),
        "copy_margin": 1.10,
        "l2_bytes": H200_L2,
        "peak_tflop_s": H200_PEAK / 1e12,
        "peak_source": "132 SMs x 1980 MHz x 4096 FLOP per clock, dense FP16",
    }
    assert [row["kernels"]["attn_softmax"]["median_ms"] for row in timing["rows"]] == [0.2055]


def test_one_lab1_kernel_past_the_copy_means_no_time_at_all():
    kernels = {**HONEST_KERNELS, "attn_softmax": [0.205, 0.100]}  # one call of the softmax skipped work
    timing, failure = timing_json(
        time_pipeline(
            LAB1,
            ScriptedPipeline(kernels),
            WholeCall(LAB1.constants({})),
            [2048],
            Sampling(seed=3, options=NO_CHECKS, references=CpuReferences()),
        )
    )
    assert timing is None
    assert (failure.name, failure.status, failure.rows, failure.message) == (
        "timed T2048",
        "wrong",
        2048,
        SOFTMAX_AT_0_1_MS,
    )


class ScriptedPair:
    """Answers a SPEEDUP timing request: the student's and the baseline's samples, an H200's conditions."""

    def __init__(self, student_ms: list[float], baseline_ms: list[float], copy_tb_s: float = 4.13):
        self.student_ms, self.baseline_ms, self.copy_tb_s = student_ms, baseline_ms, copy_tb_s

    def time(self, request: dict, timeout_s: float) -> dict:
        ratio = float(np.median(self.baseline_ms) / np.median(self.student_ms))
        copy_bytes = request["copy_bytes"]
        return {
            "comparison": {
                "student": figure(self.student_ms),
                "baseline": figure(self.baseline_ms),
                "speedup": ratio,
                "ci_low": ratio,
                "ci_high": ratio,
                "level": 0.95,
            },
            "checked": {who: no_checked_calls(request["out_count"]) for who in ("student", "baseline")},
            "sets_drawn": 30,
            **conditions(copy_bytes, 2 * copy_bytes / (self.copy_tb_s * 1e12) * 1e3),
        }


def pair(lab, worker, rows, prefix):
    constants = lab.constants({})
    return timing_json(
        time_speedup(
            lab,
            worker,
            Contenders(Contender("flash.cu", constants), Contender("starter.cu", constants)),
            TimedShape(rows, prefix),
            Sampling(seed=3, options=NO_CHECKS, references=CpuReferences()),
        )
    )


def test_lab2_times_a_device_copy_and_holds_both_contenders_to_the_tensor_cores():
    timing, failure = pair(LAB2, ScriptedPair([1.055, 1.06], [27.4, 27.5]), 2048, 2048)
    assert failure is None and timing["physics"]["copy_tb_s"] == pytest.approx(4.13)
    timing, failure = pair(LAB2, ScriptedPair([0.040, 1.06], [27.4, 27.5]), 2048, 2048)
    assert timing is None
    assert (failure.name, failure.status, failure.message) == (
        "timed C2048-P2048",
        "wrong",
        "faster than this GPU can compute: flash.cu at C = 2048, P = 2048 did 51.55 GFLOP in 0.040 ms (its fastest "
        "timed call) = 1,289 TFLOP/s, above this GPU's tensor-core peak (1,071 TFLOP/s: 132 SMs x 1980 MHz x 4096 "
        f"FLOP per clock, dense FP16): {NO_TIME}",
    )
    # a baseline is held to the same floor: a file given to --vs is a student's file too
    timing, failure = pair(LAB2, ScriptedPair([1.055, 1.06], [0.040, 27.5]), 2048, 2048)
    assert failure.message.startswith("faster than this GPU can compute: starter.cu at C = 2048, P = 2048 did ")


def test_lab3_past_its_copy_is_wrong_with_the_bytes_that_must_move():
    timing, failure = pair(LAB3, ScriptedPair([1.108, 1.11], [10.5, 10.6], copy_tb_s=4.27), 64, 32768)
    assert failure is None and timing["bandwidth"]["bytes"] == 4_558_446_580
    timing, failure = pair(LAB3, ScriptedPair([0.900, 1.11], [10.5, 10.6], copy_tb_s=4.27), 64, 32768)
    assert timing is None
    assert (failure.name, failure.status, failure.message) == (
        "timed C64-P32768",
        "wrong",
        "faster than this GPU can move the bytes: flash.cu at B = 64, longest 32,768 moved 4,347 MiB in 0.900 ms "
        "(its fastest timed call) = 5.06 TB/s, above this run's device copy (4.27 TB/s); even with 0.5 MiB of it "
        f"left to L2, the rest needs 1.19x the copy's bandwidth, and no kernel reaches 1.10x: {NO_TIME}",
    )


# --- the worker's real code on the numpy stand-in ---------------------------------------------------


class RecordsKernels(NumpyGpu):
    """The stand-in GPU, keeping the name of every kernel it launched, in order."""

    def __init__(self):
        super().__init__(prefix=0)
        self.kernels: list[str] = []

    def launch(self, kernels, launch, buffers, reverse_threads=False):
        self.kernels.append(launch.kernel)
        super().launch(kernels, launch, buffers, reverse_threads)


class SkipsWhenAlone(RecordsKernels):
    """The attack on the old timing: the last kernel (where the stand-in computes the answer) does
    nothing when the kernel before it did not run just before, as when it is launched on a call of its own."""

    def __init__(self):
        super().__init__()
        self.alone = 0

    def compute(self, buffers):
        if self.kernels[-2:] != ["attn_softmax", "attn_weighted_sum"]:
            self.alone += 1
            return
        super().compute(buffers)


class KernelTimer(CountingTimer):
    """Each kernel takes the time `kernel_ms` gives it; anything timed as one launch (the empty kernel,
    the device copy) takes `copy_ms`. No L2 to spare any bytes."""

    l2_bytes = 0

    def __init__(self, device: RecordsKernels, kernel_ms: dict[str, float], copy_ms: float):
        self.device, self.kernel_ms, self.copy_ms = device, kernel_ms, copy_ms

    def time_ms(self, launch):
        launch()
        return self.copy_ms

    def time_stages_ms(self, launches):
        stages = []
        for launch in launches:
            launch()
            stages.append(self.kernel_ms[self.device.kernels[-1]])
        return stages


SIZES = [16, 32]
COPY_BYTES = 1 << 20  # the device copy's least size, cut from 1 GiB for the stand-in
COPY_MS = 2 * COPY_BYTES / 4e12 * 1e3  # 4.00 TB/s
HONEST_MS = {"attn_scores": 2e-4, "attn_softmax": 1e-4, "attn_weighted_sum": 2e-4}


@pytest.fixture
def standin(monkeypatch):
    import labrunner.measure.gpu_timer as gpu_timer
    import labrunner.measure.input_pool as input_pool

    monkeypatch.setattr(input_pool, "CudaSets", input_pool.NumpySets)
    monkeypatch.setattr(benchmark, "MIN_COPY_BYTES", COPY_BYTES)

    def run(device: RecordsKernels, kernel_ms: dict[str, float]):
        monkeypatch.setattr(gpu_timer, "CupyTimer", lambda: KernelTimer(device, kernel_ms, COPY_MS))
        return timing_json(
            time_pipeline(
                LAB1,
                InProcessWorker(device),
                WholeCall(LAB1.constants({})),
                SIZES,
                Sampling(
                    seed=3, options=TimingOptions(seed=3, min_samples=6, budget_s=0.05), references=CpuReferences()
                ),
            )
        )

    return run


def test_each_lab1_kernel_is_timed_inside_the_checked_whole_calls_only(standin):
    device = SkipsWhenAlone()
    timing, failure = standin(device, HONEST_MS)
    assert failure is None
    # no kernel ever ran on a call of its own: every call is the three kernels in order
    assert device.alone == 0
    assert device.kernels == ["attn_scores", "attn_softmax", "attn_weighted_sum"] * (len(device.kernels) // 3)
    for row in timing["rows"]:
        total = row["total"]
        assert total["verified_count"] >= 2
        for name, kernel in row["kernels"].items():
            # each kernel's figure counts the very calls of the whole, the checked ones among them
            assert (kernel["count"], kernel["verified_count"], kernel["median_ms"]) == (
                total["count"],
                total["verified_count"],
                HONEST_MS[name],
            )
        assert total["median_ms"] == pytest.approx(5e-4)
    assert timing["physics"]["copy_tb_s"] == pytest.approx(4.0) and timing["physics"]["l2_bytes"] == 0


def test_a_kernel_the_timer_reports_impossibly_fast_gets_no_time(standin):
    timing, failure = standin(RecordsKernels(), {**HONEST_MS, "attn_softmax": 1e-5})
    assert timing is None
    assert (failure.name, failure.status, failure.message) == (
        "timed T16",
        "wrong",
        "faster than this GPU can move the bytes: attn_softmax at T=16 moved 0.0479 MiB in 1e-05 ms (its fastest "
        "timed call) = 5.02 TB/s, above this run's device copy (4.00 TB/s); that needs 1.25x the copy's bandwidth, "
        f"and no kernel reaches 1.10x: {NO_TIME}",
    )


# --- bench, as a user runs it ------------------------------------------------------------------------


def test_bench_lab1_past_the_copy_is_wrong_exit_1_with_the_message_and_no_timing(monkeypatch):
    from rich.console import Console

    from labrunner.cli.guard import reporter_for
    from labrunner.pipeline import timing_stage as timing_module
    from labrunner.pipeline.grading_run import CaseOptions, GradingRun
    from labrunner.pipeline.timing_stage import TimingAsk
    from labrunner.report import terminal
    from labrunner.truth.cases import Seed

    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(terminal, "stdout", Console(file=out, width=2000, highlight=False))
    monkeypatch.setattr(terminal, "stderr", Console(file=err, width=2000, highlight=False))
    monkeypatch.setattr(benchmark, "gpu_references", CpuReferences)
    monkeypatch.setattr(Lab, "catalogue", property(lambda lab: SimpleNamespace(timing={"sizes": [2048]})))
    result = RunResult("bench", "lab1", backend="gpu")
    submission = SimpleNamespace(constants=LAB1.constants({}), label="skip_when_alone.cu")
    worker = ScriptedPipeline({**HONEST_KERNELS, "attn_softmax": [0.205, 0.100]})
    run = GradingRun(LAB1, submission, "gpu", worker, CaseOptions(Seed(3, "--seed")), reporter_for(result))
    timing_module.run_lab_timing(run, result, TimingAsk(seed=3, options=NO_CHECKS, arch="sm_90"))
    data = result.to_json()
    assert (data["verdict"], data["exit_code"], data["decisive_case"], data["timing"]) == (
        "wrong",
        1,
        "timed T2048",
        None,
    )
    assert data["cases"][0]["message"] == SOFTMAX_AT_0_1_MS
    assert err.getvalue() == f"note: timing the pipeline at T = 2048\nerror: timed T2048: {SOFTMAX_AT_0_1_MS}\n"
    validate_result(data)
    terminal.timing_report(result)
    assert out.getvalue() == ""  # nothing timed is shown


# --- the fixtures, on the CPU (which checks correctness only) ----------------------------------------


@pytest.mark.slow
def test_the_fixture_that_leaves_its_softmax_to_the_weighted_sum_is_right_on_the_cpu():
    # on the GPU its softmax's time is impossible (tests/fixtures/lab1/expected.toml); its output is right
    from fixture_suite import FIXTURES, Fixture, grade

    fixture = Fixture(
        "lab1",
        FIXTURES / "lab1" / "hostile" / "softmax_left_to_wsum.cu",
        {"verdict": "pass", "exit_code": 0, "timing": True},
    )
    outcome = grade(fixture, "cpu")
    assert outcome.mismatches == [], outcome.got["message"]


def test_the_cupy_timer_puts_an_event_before_the_first_launch_and_after_every_one():
    from labrunner.measure.gpu_timer import CupyTimer

    log: list = []

    class Event:
        def __init__(self):
            self.number = sum(1 for entry in log if entry[0] == "new")
            log.append(("new", self.number))

        def record(self):
            log.append(("record", self.number))

        def synchronize(self):
            log.append(("wait", self.number))

    def elapsed(before, after):
        return float(10 * before.number + after.number)  # which pair was asked for, as a number

    fake = SimpleNamespace(cuda=SimpleNamespace(Event=Event, get_elapsed_time=elapsed))
    timer = object.__new__(CupyTimer)  # no GPU here: only what time_stages_ms uses
    timer._cupy, timer._stage_events = fake, []
    launches = [lambda name=name: log.append(("launch", name)) for name in ("scores", "softmax", "wsum")]
    assert timer.time_stages_ms(launches) == [1.0, 12.0, 23.0]  # (0, 1), (1, 2), (2, 3)
    assert log[4:] == [
        ("record", 0),
        ("launch", "scores"),
        ("record", 1),
        ("launch", "softmax"),
        ("record", 2),
        ("launch", "wsum"),
        ("record", 3),
        ("wait", 3),
    ]
    log.clear()
    timer.time_stages_ms(launches[:2])  # the events are made once and reused
    assert [entry for entry in log if entry[0] == "new"] == []
