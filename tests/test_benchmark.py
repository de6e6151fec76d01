"""Timing's two sides: the driver's (rounds, checked calls judged, rounds pooled) and the worker's.

First a scripted worker answers each timing request with chosen samples and with outputs for
the checked calls (the oracle's on the set it names, or deliberately wrong), so what the driver
does with them is checked exactly. Then the worker's real timing code runs in process on a numpy
stand-in for the GPU, whose "kernel" is the oracle itself, or a cheat that tries to skip work.
The driver's references come from `CpuReferences`: the numpy definition of each input set and
the CPU oracle, the same definitions the GPU oracle is proven against.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from gpu_standin import CountingTimer, InProcessWorker, NumpyGpu
from result_schema import timing_json

import labrunner.pipeline.timing_stage as benchmark
from labrunner.labs import get_lab
from labrunner.measure.sampling import TimingOptions
from labrunner.pipeline.timing_stage import (
    Contender,
    Contenders,
    CpuReferences,
    DrawnSets,
    Sampling,
    TimedShape,
    WholeCall,
    per_input_set_medians,
    time_pipeline,
    time_speedup,
    verify_timed_outputs,
)
from labrunner.records.timing import Stats
from labrunner.truth import oracle
from labrunner.truth.poison import POISON_BITS
from labrunner.truth.timing_sets import make_set

LAB = get_lab("lab2")
ROWS, PREFIX = 3, 31
KEY = [12345, 67890]


def stats(samples: list[float]) -> dict:
    return Stats(
        median_ms=float(np.median(samples)),
        min_ms=min(samples),
        max_ms=max(samples),
        mean_ms=float(np.mean(samples)),
        count=len(samples),
        rse=0.001,
        noise_met=True,
        warning=None,
        samples_ms=samples,
        verified_count=1,
        stopped_by="noise",
    ).to_json(include_samples=True)


def right_answer(key, number: int, rows: int = ROWS, prefix: int = PREFIX) -> np.ndarray:
    s = make_set(tuple(key), number, rows, prefix)
    return oracle.attention(s["q"], s["k"], s["v"], prefix=prefix).astype(np.float32).ravel()


class ScriptedWorker:
    """Answers round k with student samples `student_ms[k]` and baseline samples `baseline_ms[k]`;
    both checked on set 1 of the round's key, right unless told otherwise."""

    def __init__(self, student_ms, baseline_ms, wrong_in_round: int | None = None, student_set: int = 1):
        self.student_ms, self.baseline_ms = student_ms, baseline_ms
        self.wrong_in_round = wrong_in_round
        self.student_set = student_set  # the set whose answer the student's output is
        self.events: list[str] = []
        self.seeds: list[int] = []
        self.keys: list[list[int]] = []
        self.round = 0

    def restart(self) -> None:
        self.events.append("restart")

    def time(self, request: dict, timeout_s: float) -> dict:
        self.events.append("time")
        self.seeds.append(request["options"]["seed"])
        sets = request["sets"]
        self.keys.append(sets["key"])
        assert (sets["rows"], sets["prefix"]) == (ROWS, PREFIX)
        student_out = right_answer(sets["key"], self.student_set)
        if self.round == self.wrong_in_round:
            student_out[5] += 1.0
        k = self.round
        self.round += 1
        student, baseline = self.student_ms[k], self.baseline_ms[k]
        ratio = float(np.median(baseline) / np.median(student))
        state = {"sm_clock_mhz": 1980}
        return {
            "comparison": {
                "student": stats(student),
                "baseline": stats(baseline),
                "speedup": ratio,
                "ci_low": ratio,
                "ci_high": ratio,
                "level": 0.95,
            },
            "checked": {
                "student": {"sets": np.array([1]), "outputs": student_out[None, :]},
                "baseline": {"sets": np.array([1]), "outputs": right_answer(sets["key"], 1)[None, :]},
            },
            "sets_drawn": 10,
            "overhead": {"median_ms": 0.003},
            "l2_flush_bytes": 1 << 27,
            "state_before": state,
            "state_after": state,
        }


@pytest.fixture
def fixed_key(monkeypatch):
    """Every round's key is KEY, so the numbers in a message can be written down."""
    monkeypatch.setattr(benchmark, "new_key", lambda: list(KEY))


def run(worker: ScriptedWorker, rounds: int):
    constants = LAB.constants({})
    return timing_json(
        time_speedup(
            LAB,
            worker,
            Contenders(Contender("flash.cu", constants), Contender("starter.cu", constants)),
            TimedShape(ROWS, PREFIX),
            Sampling(seed=7, options=TimingOptions(rounds=rounds, seed=7, min_verified=1), references=CpuReferences()),
        )
    )


def test_one_round_is_one_request_and_its_own_figures():
    worker = ScriptedWorker([[2.0, 2.0, 2.2]], [[26.0, 26.0, 26.4]])
    timing, failure = run(worker, rounds=1)
    assert failure is None
    assert worker.events == ["time"]
    assert timing["speedup"] == 13.0
    assert (timing["comparison"]["ci_low"], timing["comparison"]["ci_high"]) == (13.0, 13.0)
    assert [r["speedup"] for r in timing["rounds"]] == [13.0]
    assert timing["verified_calls"] == {"student": 1, "baseline": 1}
    assert timing["input_sets"] == 10
    assert "samples_ms" not in timing["comparison"]["student"]


def test_rounds_run_in_fresh_workers_and_pool_every_sample():
    student = [[2.0, 2.0, 2.0], [2.1, 2.1, 2.1], [2.2, 2.2, 2.2]]
    baseline = [[26.0, 26.0, 26.0]] * 3
    worker = ScriptedWorker(student, baseline)
    timing, failure = run(worker, rounds=3)
    assert failure is None
    assert worker.events == ["time", "restart", "time", "restart", "time"]
    assert worker.seeds == [7, 8, 9]  # each round its own bootstrap seed
    assert len({tuple(key) for key in worker.keys}) == 3  # and its own key: its own input sets
    assert timing["speedup"] == pytest.approx(26.0 / 2.1)  # medians over all nine pairs
    assert [round(r["speedup"], 4) for r in timing["rounds"]] == [13.0, 12.381, 11.8182]
    assert timing["comparison"]["student"]["count"] == 9
    assert timing["rounds"][1]["student_per_input_set_ms"] == [2.1, 2.1, 2.1]  # three input slots
    assert timing["verified_calls"] == {"student": 3, "baseline": 3}
    # the spread between rounds is in the interval, though each round alone looks exact
    assert timing["comparison"]["ci_low"] < 12.0 and timing["comparison"]["ci_high"] > 12.9


def test_a_wrong_verified_call_in_a_later_round_means_no_time(fixed_key):
    worker = ScriptedWorker([[2.0]] * 3, [[26.0]] * 3, wrong_in_round=1)
    timing, failure = run(worker, rounds=3)
    assert timing is None
    assert worker.events == ["time", "restart", "time"]  # nothing more is timed after a failed check
    assert failure.status == "wrong"
    assert failure.message == (
        "flash.cu: a timed call on fresh input set 1 (output re-poisoned) failed: "
        "row 0, head 0, col 5: got 1.17342, expected 0.173422 "
        "(|err| > 1e-4 + 1e-3*|ref|); "
        "1 of 6144 elements wrong; a kernel must compute every call, so no time is reported"
    )


def test_an_answer_for_another_set_is_wrong(fixed_key):
    # right for set 0 of the key, but the checked call ran on set 1: the reference is set 1's
    worker = ScriptedWorker([[2.0]], [[26.0]], student_set=0)
    timing, failure = run(worker, rounds=1)
    assert timing is None
    assert failure.status == "wrong"
    assert failure.message.startswith(
        "flash.cu: a timed call on fresh input set 1 (output re-poisoned) failed: row 0, head 0, col 0: got "
    )


def test_each_checked_set_is_referenced_once_and_by_its_own_number():
    asked = []

    class Recording(CpuReferences):
        def reference(self, key, number, rows, prefix):
            asked.append((key, number, rows, prefix))
            return super().reference(key, number, rows, prefix)

    checked = {"sets": np.array([2, 4]), "outputs": np.stack([right_answer(KEY, 2), right_answer(KEY, 4)])}
    failure = verify_timed_outputs(
        "timed",
        {"student": ("flash.cu", checked), "baseline": ("starter.cu", checked)},
        DrawnSets(KEY, 5, TimedShape(ROWS, PREFIX)),
        Recording(),
    )
    assert failure is None
    assert asked == [(tuple(KEY), 2, ROWS, PREFIX), (tuple(KEY), 4, ROWS, PREFIX)]


@pytest.mark.parametrize(
    "numbers, minimum, cut",
    [([5], 0, 0), ([2, 2], 0, 0), ([3, 1], 0, 0), ([1], 2, 0), ([1], 0, 64)],
    ids=["never drawn", "a set twice", "out of order", "too few", "an output cut short"],
)
def test_a_record_of_checked_calls_the_loop_cannot_make_is_refused(numbers, minimum, cut):
    outputs = np.stack([right_answer(KEY, n) for n in numbers])
    checked = {"sets": np.array(numbers), "outputs": outputs[:, : outputs.shape[1] - cut]}
    with pytest.raises(
        benchmark.WorkerFailure,
        match=rf"the worker's record of student's checked calls is not one the timing loop makes "
        rf"\({len(numbers)} calls, at least {minimum}, each on its own set of the 5 drawn, "
        rf"each output 3 x 32 x 64\)",
    ):
        verify_timed_outputs(
            "timed",
            {"student": ("flash.cu", checked)},
            DrawnSets(KEY, 5, TimedShape(ROWS, PREFIX)),
            CpuReferences(),
            minimum,
        )


def test_per_input_set_medians_follow_the_rotation():
    # sample k ran in input slot k % 3
    assert per_input_set_medians([1.0, 5.0, 9.0, 2.0, 6.0, 10.0, 3.0], 3) == [2.0, 5.5, 9.5]
    assert per_input_set_medians([4.0], 3) == [4.0]


# --- the worker's real timing code, in process, on a numpy stand-in for the GPU ---------------


@pytest.fixture
def in_process(monkeypatch):
    import labrunner.measure.gpu_timer
    import labrunner.measure.input_pool as input_pool

    monkeypatch.setattr(labrunner.measure.gpu_timer, "CupyTimer", CountingTimer)
    monkeypatch.setattr(input_pool, "CudaSets", input_pool.NumpySets)  # the twin's definition, in numpy
    monkeypatch.setattr(benchmark, "MIN_COPY_BYTES", 1 << 20)  # the device copy every run times, kept small here


def timed(worker, rounds):
    constants = LAB.constants({})
    return timing_json(
        time_speedup(
            LAB,
            worker,
            Contenders(Contender("flash.cu", constants), Contender("starter.cu", constants)),
            TimedShape(ROWS, PREFIX),
            Sampling(
                seed=3,
                options=TimingOptions(rounds=rounds, seed=3, min_samples=6, budget_s=0.05),
                references=CpuReferences(),
            ),
        )
    )


def test_the_worker_side_and_the_driver_side_agree_on_the_reply(in_process):
    worker = InProcessWorker(NumpyGpu(PREFIX))
    timing, failure = timed(worker, rounds=2)
    assert failure is None
    assert worker.restarts == 1
    assert timing["speedup"] == 1.0 and timing["comparison"]["ci_low"] == timing["comparison"]["ci_high"] == 1.0
    assert [r["student_per_input_set_ms"] for r in timing["rounds"]] == [[1.0, 1.0, 1.0]] * 2
    assert timing["verified_calls"]["student"] >= 4  # at least two checked calls in each round
    assert timing["verified_calls"]["student"] == timing["verified_calls"]["baseline"]
    # three warm-up calls and every sample, one fresh set each (the baseline runs on the student's)
    assert timing["input_sets"] == sum(3 + r["comparison"]["student"]["count"] for r in worker.replies)
    assert timing["overhead_ms"] == 1.0 and timing["l2_flush_bytes"] == 1 << 27


def test_the_reply_is_plain_data_with_the_shapes_the_driver_expects(in_process):
    worker = InProcessWorker(NumpyGpu(PREFIX))
    timed(worker, rounds=1)
    checked = worker.replies[0]["checked"]
    for who in ("student", "baseline"):
        sets, outputs = checked[who]["sets"], checked[who]["outputs"]
        assert sets.dtype == np.int64 and sets.ndim == 1
        assert outputs.dtype == np.float32 and outputs.shape == (sets.size, ROWS * 32 * 64)
    assert isinstance(worker.replies[0]["sets_drawn"], int)


def test_every_call_of_a_contender_sees_a_set_of_its_own_and_the_baseline_the_same_ones(in_process):
    device = NumpyGpu(PREFIX)
    worker = InProcessWorker(device)
    timing, failure = timed(worker, rounds=1)
    assert failure is None
    student, baseline = device.seen[0::2], device.seen[1::2]  # interleaved, student first
    for tensor in range(3):  # not one Q, not one K, not one V is ever seen twice
        assert len({call[tensor] for call in student}) == len(student)
    assert baseline == student  # paired: the same sets, in the same order
    # and call i ran on set i of the round's key, exactly as the driver makes it
    key = tuple(worker.keys[0])
    for number in (0, 1, len(student) - 1):
        s = make_set(key, number, ROWS, PREFIX)
        assert student[number] == (s["q"].tobytes(), s["k"].tobytes(), s["v"].tobytes())


def test_each_checked_call_is_judged_against_the_reference_of_its_own_set(in_process):
    asked = []

    class Recording(CpuReferences):
        def reference(self, key, number, rows, prefix):
            asked.append(number)
            return super().reference(key, number, rows, prefix)

    device = NumpyGpu(PREFIX)
    worker = InProcessWorker(device)
    constants = LAB.constants({})
    timing, failure = timing_json(
        time_speedup(
            LAB,
            worker,
            Contenders(Contender("flash.cu", constants), Contender("starter.cu", constants)),
            TimedShape(ROWS, PREFIX),
            Sampling(seed=3, options=TimingOptions(seed=3, min_samples=6, budget_s=0.05), references=Recording()),
        )
    )
    assert failure is None
    checked = worker.replies[0]["checked"]["student"]
    assert asked == sorted(checked["sets"].tolist())
    for number, out in zip(checked["sets"], checked["outputs"]):
        # the output the worker returned is the answer for the set the driver referenced
        assert np.array_equal(out, right_answer(worker.keys[0], int(number)))


def test_a_kernel_that_stops_computing_gets_no_time(in_process):
    # correct for its first launches (warm-up included), then it writes nothing: a re-poisoned,
    # checked call must catch it
    timing, failure = timed(InProcessWorker(NumpyGpu(PREFIX, skip_after=8)), rounds=1)
    assert timing is None
    assert failure.status == "never-written"
    assert failure.message.startswith("flash.cu: a timed call on fresh input set ")


def test_lab_1s_pipeline_timing_goes_through_the_same_worker_code(in_process):
    lab1 = get_lab("lab1")
    device = NumpyGpu(prefix=0)
    worker = InProcessWorker(device)
    timing, failure = timing_json(
        time_pipeline(
            lab1,
            worker,
            WholeCall(lab1.constants({})),
            [16, 32],
            Sampling(seed=3, options=TimingOptions(seed=3, min_samples=6, budget_s=0.05), references=CpuReferences()),
        )
    )
    assert failure is None
    assert [row["T"] for row in timing["rows"]] == [16, 32]
    assert list(timing["rows"][0]["kernels"]) == ["attn_scores", "attn_softmax", "attn_weighted_sum"]
    assert timing["rows"][1]["total"]["median_ms"] == 1.0
    assert timing["rows"][1]["implied_gb_s"] == pytest.approx(4 * 32 * 32 * 32 * 4 / 1e-3 / 1e9)
    assert [row["T"] for row in timing["projections"]] == [4096, 32768]
    # every call drew a set, and the kernels saw as many different sets as there were calls: no two
    # calls shared one (a whole call's three launches share its own, and no kernel runs on a call alone)
    assert len(set(device.seen)) == timing["input_sets"] > 0
    assert device.launches == 3 * timing["input_sets"]
    assert timing["rows"][1]["kernels"]["attn_softmax"]["count"] == timing["rows"][1]["total"]["count"]


class SkipsWhenWritten(NumpyGpu):
    """The one-line cheat: return at once when the output already holds an answer (is not the poison)."""

    def __init__(self, prefix: int):
        super().__init__(prefix)
        self.skipped = 0

    def compute(self, buffers):
        if self.who == "student" and buffers["out"][:1].view(np.uint32)[0] != POISON_BITS:
            self.skipped += 1
            return
        super().compute(buffers)


class Memoizes(NumpyGpu):
    """Keeps each answer under its exact inputs and replays it when the same inputs come again.
    (Like every cheat here, it is the student's: the baseline is the honest stand-in.)"""

    def __init__(self, prefix: int):
        super().__init__(prefix)
        self.kept: dict[bytes, np.ndarray] = {}
        self.replayed = 0

    def compute(self, buffers):
        if self.who != "student":
            return super().compute(buffers)
        key = hashlib.sha256(buffers["q"].tobytes() + buffers["k"].tobytes() + buffers["v"].tobytes()).digest()
        if key in self.kept:
            self.replayed += 1
            buffers["out"][:] = self.kept[key]
            return None
        super().compute(buffers)
        self.kept[key] = buffers["out"].copy()
        return None


class RescalesKept(NumpyGpu):
    """The cheat that beat the old timing loop (which kept Q and K and only rescaled V): keep the first
    output and V seen under a key, and answer every later call under that key with the kept output
    times the ratio of the new V to the kept one. Attention is linear in V, so with Q and K unchanged
    that is the right answer, at no cost. `by`: "slot" keys by the input buffer (a pointer on a GPU),
    "q" by a hash of Q."""

    def __init__(self, prefix: int, by: str):
        super().__init__(prefix)
        self.by = by
        self.kept: dict = {}
        self.rescaled = 0

    def compute(self, buffers):
        if self.who != "student":
            return super().compute(buffers)
        q, v = buffers["q"], buffers["v"]
        key = id(q) if self.by == "slot" else hashlib.sha256(q.tobytes()).digest()
        if key in self.kept:
            kept_out, kept_v = self.kept[key]
            buffers["out"][:] = kept_out * (v.flat[0] / kept_v.flat[0])
            self.rescaled += 1
            return None
        super().compute(buffers)
        self.kept[key] = (buffers["out"].copy(), v.copy())
        return None


def test_the_rescaling_cheat_is_right_when_only_v_changes():
    # what makes it a cheat worth catching: on the old loop's inputs it is exact
    device = RescalesKept(PREFIX, by="slot")
    device.who = "student"
    s = make_set(tuple(KEY), 0, ROWS, PREFIX)
    buffers = {**s, "out": np.empty(ROWS * 32 * 64, dtype=np.float32)}
    device.compute(buffers)
    buffers["v"] *= np.float32(-1.5)
    device.compute(buffers)
    assert device.rescaled == 1
    expected = oracle.attention(s["q"], s["k"], buffers["v"], prefix=PREFIX).reshape(-1)
    assert np.max(np.abs(buffers["out"] - expected)) < 1e-5


def test_a_kernel_that_rescales_its_kept_output_per_slot_is_wrong_and_gets_no_time(in_process):
    device = RescalesKept(PREFIX, by="slot")
    timing, failure = timed(InProcessWorker(device), rounds=1)
    assert device.rescaled > 0
    assert timing is None
    assert failure.status == "wrong"
    assert failure.name == "timed C3-P31"
    assert failure.message.startswith("flash.cu: a timed call on fresh input set ")
    assert failure.message.endswith("a kernel must compute every call, so no time is reported")


def test_a_kernel_that_keys_its_kept_output_by_q_never_finds_it_again(in_process):
    device = RescalesKept(PREFIX, by="q")
    timing, failure = timed(InProcessWorker(device), rounds=2)
    assert failure is None
    assert device.rescaled == 0  # every Q was new, so it computed every call
    assert len(device.kept) == device.launches // 2


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
    assert len(device.kept) == device.launches // 2  # every student call, warm-up included


# --- the driver's GPU oracle, its logic run with numpy as the array module ----------------------


def numpy_gpu_oracle(sets=None):
    from labrunner.measure.input_pool import NumpySets
    from labrunner.run.gpu_oracle import GpuOracle

    return GpuOracle(xp=np, sets=sets or NumpySets)


def test_the_gpu_oracle_proves_itself_then_judges_as_the_checker_does():
    from labrunner.truth.checker import check_output

    gpu = numpy_gpu_oracle()
    assert gpu.proof["golden_max_error"] <= 1e-12
    assert gpu.proof["cpu_gpu_max_difference"] == 0.0  # one array module: the very same arithmetic
    reference = gpu.reference(tuple(KEY), 3, ROWS, PREFIX)
    assert np.array_equal(reference, CpuReferences().reference(tuple(KEY), 3, ROWS, PREFIX))
    right = right_answer(KEY, 3).reshape(ROWS, 32, 64)
    passed = gpu.check(right, reference)
    assert (passed.status, passed.message) == ("pass", "all 6144 elements within the pass rule")
    wrong = right.copy()
    wrong[2, 7, 9] += 0.5
    assert gpu.check(wrong, reference) == check_output(wrong, reference)
    assert gpu.check(wrong, reference).first_bad["row"] == 2


def test_a_gpu_whose_sets_differ_from_the_definition_refuses_to_time():
    from labrunner.exit_codes import AttnlabError
    from labrunner.measure.input_pool import NumpySets

    class OneBitOff(NumpySets):
        def fill(self, buffers, number):
            super().fill(buffers, number)
            buffers["k"].reshape(-1).view(np.uint32)[17] ^= 1

    with pytest.raises(
        AttnlabError,
        match=r"^the GPU made 1 elements of a timing input set differently from its "
        r"numpy definition: refusing to time; check the GPU and the CuPy install$",
    ) as refused:
        numpy_gpu_oracle(OneBitOff)
    assert refused.value.exit_code == 6


@pytest.mark.slow
def test_the_driver_times_with_the_gpu_oracles_logic_and_catches_the_rescaling_cheat(in_process):
    constants = LAB.constants({})
    options = TimingOptions(seed=3, min_samples=6, budget_s=0.05)
    honest, failure = timing_json(
        time_speedup(
            LAB,
            InProcessWorker(NumpyGpu(PREFIX)),
            Contenders(Contender("flash.cu", constants), Contender("starter.cu", constants)),
            TimedShape(ROWS, PREFIX),
            Sampling(seed=3, options=options, references=numpy_gpu_oracle()),
        )
    )
    assert failure is None and honest["oracle_proof"]["golden_max_error"] <= 1e-12
    cheat, failure = timing_json(
        time_speedup(
            LAB,
            InProcessWorker(RescalesKept(PREFIX, by="slot")),
            Contenders(Contender("flash.cu", constants), Contender("starter.cu", constants)),
            TimedShape(ROWS, PREFIX),
            Sampling(seed=3, options=options, references=numpy_gpu_oracle()),
        )
    )
    assert cheat is None and failure.status == "wrong"


def test_a_gpu_the_driver_cannot_use_is_an_environment_error(monkeypatch):
    import labrunner.run.gpu_oracle as gpu_oracle
    from labrunner.exit_codes import AttnlabError

    def busy():
        raise RuntimeError("cudaErrorDevicesUnavailable: CUDA-capable device(s) is/are busy or unavailable")

    monkeypatch.setattr(gpu_oracle, "_cupy", busy)
    with pytest.raises(
        AttnlabError,
        match=r"^the driver checks timed calls with the oracle on the GPU and could not "
        r"use it \(RuntimeError: cudaErrorDevicesUnavailable: .*\); a GPU in "
        r"exclusive-process compute mode cannot serve the driver and the worker at "
        r"once: `nvidia-smi -c DEFAULT` allows both$",
    ) as refused:
        benchmark.gpu_references()
    assert refused.value.exit_code == 6
