"""The timing rules, checked on the CPU with a scripted timer and clock.

A fake timer returns the duration each contender scripts for its call, and a
fake clock advances a fixed step per reading, so every stopping decision is
deterministic and the expected counts can be worked out by hand.
"""

import math
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from labrunner.measure.device_state import (
    DeviceState,
    clock_drop_warning,
    cuda_version_text,
    read_device_state,
)
from labrunner.measure.sampling import (
    RunningMoments,
    TimingOptions,
    VerificationSchedule,
    compare,
    comparison_from_json,
    measure,
    paired_speedup_ci,
    pool_rounds,
)
from labrunner.records.timing import Comparison, Stats

REPO_ROOT = Path(__file__).resolve().parents[1]


class FakeTimer:
    """Runs the launch and returns whatever duration the launching contender set."""

    def __init__(self, log: list):
        self.log = log
        self.pending_ms: float | None = None

    def flush_caches(self) -> None:
        self.log.append(("flush",))

    def time_ms(self, launch) -> float:
        self.pending_ms = None
        launch()
        assert self.pending_ms is not None, "launch did not run inside the timer"
        return self.pending_ms


class ScriptedContender:
    """Logs every call and hands the timer its next scripted duration, cycling."""

    def __init__(self, name: str, durations_ms, timer: FakeTimer):
        self.name = name
        self._durations = list(durations_ms)
        self._calls = 0
        self._timer = timer

    def prepare(self, input_index: int, verify: bool) -> None:
        self._timer.log.append(("prepare", self.name, input_index, verify))

    def launch(self, input_index: int) -> None:
        self._timer.log.append(("launch", self.name, input_index))
        self._timer.pending_ms = self._durations[self._calls % len(self._durations)]
        self._calls += 1

    def collect(self, input_index: int, verify: bool) -> None:
        self._timer.log.append(("collect", self.name, input_index, verify))


class SteppingClock:
    """A clock that moves `step_s` forward every time it is read."""

    def __init__(self, step_s: float):
        self.now = 0.0
        self.step_s = step_s

    def __call__(self) -> float:
        self.now += self.step_s
        return self.now


def frozen_clock() -> float:
    return 0.0


def single(durations, **option_overrides):
    log: list = []
    timer = FakeTimer(log)
    contender = ScriptedContender("A", durations, timer)
    return contender, timer, log, TimingOptions(**option_overrides)


def timed_calls(log, name):
    """The (prepare, launch, collect) of every call of `name`, in order, warm-up included."""
    prepares = [e for e in log if e[0] == "prepare" and e[1] == name]
    launches = [e for e in log if e[0] == "launch" and e[1] == name]
    collects = [e for e in log if e[0] == "collect" and e[1] == name]
    assert len(prepares) == len(launches) == len(collects)
    return list(zip(prepares, launches, collects))


def test_summary_statistics_are_exact_on_a_known_sequence():
    durations = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0]
    contender, timer, _, options = single(durations, min_samples=7, max_samples=7, warmup=0, noise_target=1e-9)
    stats = measure(contender, 1, timer, options, clock=frozen_clock)
    assert stats.count == 7
    assert stats.samples_ms == durations
    assert stats.median_ms == 3.0
    assert stats.min_ms == 1.0
    assert stats.max_ms == 9.0
    assert stats.mean_ms == pytest.approx(25.0 / 7)
    expected_rse = np.std(durations, ddof=1) / math.sqrt(7) / np.mean(durations)
    assert stats.rse == pytest.approx(expected_rse)
    assert stats.stopped_by == "max_samples"
    assert not stats.noise_met


def test_warmup_calls_are_not_recorded():
    contender, timer, log, options = single([100.0, 100.0, 100.0, 1.0], warmup=3, min_samples=4, max_samples=4)
    stats = measure(contender, 1, timer, options, clock=frozen_clock)
    assert len(timed_calls(log, "A")) == 3 + 4
    # The three 100 ms calls were the warm-up; the samples start with the 1 ms one.
    assert stats.samples_ms == [1.0, 100.0, 100.0, 100.0]


def test_stops_at_min_samples_when_already_quiet():
    contender, timer, _, options = single([2.0], min_samples=20, warmup=0)
    stats = measure(contender, 1, timer, options, clock=frozen_clock)
    assert stats.count == 20
    assert stats.noise_met
    assert stats.warning is None
    assert stats.stopped_by == "noise"


def test_stops_as_soon_as_the_noise_target_is_met():
    # Noisy at first, then steady: the rse falls below 0.5% somewhere past 20.
    rng = np.random.default_rng(7)
    durations = list(1.0 + rng.uniform(-0.2, 0.2, 30)) + [1.0] * 2000
    target = 0.005
    expected = next(
        n
        for n in range(20, len(durations))
        if np.std(durations[:n], ddof=1) / math.sqrt(n) / np.mean(durations[:n]) < target
    )
    assert expected > 30  # the case really exercises "keep going past min_samples"

    contender, timer, _, options = single(durations, warmup=0, noise_target=target)
    stats = measure(contender, 1, timer, options, clock=frozen_clock)
    assert stats.count == expected
    assert stats.noise_met
    assert stats.rse < target


def test_stops_at_the_budget_with_an_exact_warning():
    # Alternating 1 ms and 2 ms: after 10 samples the mean is 1.5 and the
    # rse is sqrt(10 * 0.25 / 9) / sqrt(10) / 1.5 = 11.11%. The clock reads
    # 0.5 s further on each time, so the 5 s budget runs out after sample 10.
    contender, timer, _, options = single([1.0, 2.0], warmup=0, budget_s=5.0, min_samples=5)
    stats = measure(contender, 1, timer, options, clock=SteppingClock(0.5))
    assert stats.count == 10
    assert stats.stopped_by == "budget"
    assert not stats.noise_met
    assert stats.warning == "noise 11.11% > 0.50% after 10 samples (budget 5.0 s)"


def test_budget_before_min_samples_is_reported_as_too_few_samples():
    contender, timer, _, options = single([1.0, 2.0], warmup=0, budget_s=2.0)
    stats = measure(contender, 1, timer, options, clock=SteppingClock(0.5))
    assert stats.count < options.min_samples
    assert not stats.noise_met
    assert stats.warning.startswith(f"only {stats.count} samples (minimum 20), noise ")
    assert stats.warning.endswith("(budget 2.0 s)")


def test_max_samples_ends_an_unreachable_target():
    contender, timer, _, options = single([1.0, 2.0], warmup=0, max_samples=50, noise_target=1e-6)
    stats = measure(contender, 1, timer, options, clock=frozen_clock)
    assert stats.count == 50
    assert stats.stopped_by == "max_samples"
    assert stats.warning == "noise 4.76% > 0.00% after 50 samples (budget 3.0 s)"


def test_each_call_prepares_then_flushes_then_launches_then_collects():
    contender, timer, log, options = single([1.0], warmup=2, min_samples=5, max_samples=5)
    measure(contender, 3, timer, options, clock=frozen_clock)
    kinds = [entry[0] for entry in log]
    assert kinds == ["prepare", "flush", "launch", "collect"] * (2 + 5)


def test_single_contender_rotates_its_input_sets():
    contender, timer, log, options = single([1.0], warmup=2, min_samples=7, max_samples=7)
    measure(contender, 3, timer, options, clock=frozen_clock)
    launched = [e[2] for e in log if e[0] == "launch"]
    # Warm-up 0 1, then samples 0 1 2 0 1 2 0.
    assert launched == [0, 1] + [0, 1, 2, 0, 1, 2, 0]


def test_compare_interleaves_student_and_baseline_on_the_same_inputs():
    log: list = []
    timer = FakeTimer(log)
    student = ScriptedContender("student", [1.0], timer)
    baseline = ScriptedContender("baseline", [2.0], timer)
    options = TimingOptions(warmup=2, min_samples=8, max_samples=8)
    result = compare(student, baseline, 3, timer, options, clock=frozen_clock)

    launches = [(e[1], e[2]) for e in log if e[0] == "launch"]
    warmup = [(name, k % 3) for k in range(2) for name in ("student", "baseline")]
    timed = [(name, k % 3) for k in range(8) for name in ("student", "baseline")]
    assert launches == warmup + timed
    assert result.student.count == result.baseline.count == 8


def test_compare_stops_only_when_both_series_are_quiet():
    log: list = []
    timer = FakeTimer(log)
    student = ScriptedContender("student", [1.0], timer)
    # The baseline settles only after 40 noisy calls.
    baseline = ScriptedContender("baseline", [1.0, 3.0] * 20 + [2.0] * 5000, timer)
    options = TimingOptions(warmup=0)
    result = compare(student, baseline, 1, timer, options, clock=frozen_clock)
    assert result.student.count == result.baseline.count > 40
    assert result.student.noise_met and result.baseline.noise_met
    assert result.student.stopped_by == "noise"


def test_speedup_is_baseline_median_over_student_median():
    log: list = []
    timer = FakeTimer(log)
    student = ScriptedContender("student", [1.0, 2.0, 9.0], timer)
    baseline = ScriptedContender("baseline", [5.0, 7.0, 6.0], timer)
    options = TimingOptions(warmup=0, min_samples=3, max_samples=3, min_verified=2)
    result = compare(student, baseline, 1, timer, options, clock=frozen_clock)
    assert isinstance(result, Comparison)
    assert result.student.median_ms == 2.0
    assert result.baseline.median_ms == 6.0
    assert result.speedup == 3.0


def verified_call_indices(log, name, warmup):
    calls = timed_calls(log, name)[warmup:]
    prepared = {k for k, (p, _, _) in enumerate(calls) if p[3]}
    collected = {k for k, (_, _, c) in enumerate(calls) if c[3]}
    return prepared, collected


def test_verified_calls_are_announced_to_prepare_and_collect_alike():
    log: list = []
    timer = FakeTimer(log)
    student = ScriptedContender("student", [1.0], timer)
    baseline = ScriptedContender("baseline", [2.0], timer)
    options = TimingOptions(warmup=3)
    result = compare(student, baseline, 4, timer, options, clock=frozen_clock)

    for name, stats in (("student", result.student), ("baseline", result.baseline)):
        prepared, collected = verified_call_indices(log, name, options.warmup)
        assert prepared == collected
        assert len(prepared) >= 2
        assert stats.verified_count == len(prepared)
    # Warm-up calls are never verified: they are not the calls being reported.
    warm = [c for name in ("student", "baseline") for c in timed_calls(log, name)[:3]]
    assert not any(p[3] or c[3] for p, _, c in warm)


def test_about_a_tenth_of_calls_are_verified_and_the_choice_is_not_the_seeds():
    def verified_set(draw):
        contender, timer, log, options = single([1.0, 2.0], warmup=0, max_samples=1000, noise_target=1e-9, seed=0)
        measure(contender, 1, timer, options, clock=frozen_clock, draw=draw)
        prepared, collected = verified_call_indices(log, "A", 0)
        assert prepared == collected
        return prepared

    first = verified_set(random.Random(0))
    assert 50 <= len(first) <= 150
    assert verified_set(random.Random(0)) == first  # a test can make it reproducible
    # Left alone, the choice comes from the system's entropy: the same options (and seed) check
    # other calls every time, so a kernel that knew the seed still cannot tell which.
    assert isinstance(VerificationSchedule(TimingOptions(seed=0))._rng, random.SystemRandom)
    assert verified_set(None) != verified_set(None)


def test_a_comparison_checks_student_and_baseline_on_the_same_rounds():
    log: list = []
    timer = FakeTimer(log)
    student = ScriptedContender("student", [1.0], timer)
    baseline = ScriptedContender("baseline", [2.0], timer)
    options = TimingOptions(warmup=2, min_samples=300, max_samples=300)
    compare(student, baseline, 3, timer, options, clock=frozen_clock)
    student_checked, _ = verified_call_indices(log, "student", options.warmup)
    baseline_checked, _ = verified_call_indices(log, "baseline", options.warmup)
    assert len(student_checked) >= 2
    assert student_checked == baseline_checked  # one reference checks both


def test_a_budget_cut_short_still_verifies_two_calls():
    # The budget is gone by the first reading, so the loop stops after the
    # two samples any spread needs, plus at most two forced-verified calls.
    contender, timer, log, options = single([1.0], warmup=0, budget_s=0.1, verify_fraction=0.0)
    stats = measure(contender, 1, timer, options, clock=SteppingClock(1.0))
    prepared, _ = verified_call_indices(log, "A", 0)
    assert len(prepared) == 2
    assert stats.verified_count == 2
    assert stats.stopped_by == "budget"
    assert stats.count <= 4


def synthetic_pairs(true_ratio, n, seed):
    """Paired samples sharing a per-pair drift, with independent jitter on each."""
    rng = np.random.default_rng(seed)
    drift = rng.uniform(0.9, 1.1, n)
    student = 1.0 * drift * rng.lognormal(0.0, 0.05, n)
    baseline = true_ratio * drift * rng.lognormal(0.0, 0.05, n)
    return student, baseline


def test_bootstrap_interval_contains_the_true_ratio_and_is_tight():
    student, baseline = synthetic_pairs(2.0, 400, seed=3)
    speedup, low, high = paired_speedup_ci(student, baseline, seed=0)
    assert speedup == pytest.approx(np.median(baseline) / np.median(student))
    assert low < 2.0 < high
    assert low <= speedup <= high
    assert high - low < 0.2


def test_bootstrap_keeps_pairs_together():
    # A large drift shared by both calls of each pair (clock changes, say) and
    # almost no independent jitter: resampling the pairs intact sees a ratio
    # of almost exactly 2 every time, whereas resampling the two series
    # separately would let the drift through and widen the interval tenfold.
    rng = np.random.default_rng(6)
    drift = rng.uniform(0.5, 1.5, 300)
    student = drift * rng.lognormal(0.0, 0.001, 300)
    baseline = 2.0 * drift * rng.lognormal(0.0, 0.001, 300)
    _, low, high = paired_speedup_ci(student, baseline)
    assert low < 2.0 < high
    assert high - low < 0.01


def test_bootstrap_is_reproducible_with_its_seed():
    student, baseline = synthetic_pairs(1.5, 200, seed=4)
    assert paired_speedup_ci(student, baseline, seed=11) == paired_speedup_ci(student, baseline, seed=11)
    assert paired_speedup_ci(student, baseline, seed=11) != paired_speedup_ci(student, baseline, seed=12)


def test_interval_width_follows_the_level():
    # The bootstrap ratio is close to normal here, so a 50% interval spans
    # about z(0.75) / z(0.975) = 0.674 / 1.960 = 0.34 of the 95% one.
    student, baseline = synthetic_pairs(1.2, 400, seed=5)
    _, low_50, high_50 = paired_speedup_ci(student, baseline, level=0.50)
    _, low_95, high_95 = paired_speedup_ci(student, baseline, level=0.95)
    _, low_99, high_99 = paired_speedup_ci(student, baseline, level=0.99)
    assert low_99 < low_95 < low_50 < high_50 < high_95 < high_99
    assert 0.25 < (high_50 - low_50) / (high_95 - low_95) < 0.45


def test_paired_samples_must_match_in_length():
    with pytest.raises(ValueError, match=r"^paired samples must be two non-empty sequences of equal length$"):
        paired_speedup_ci([1.0, 2.0], [1.0])


def test_nonsense_options_are_rejected():
    with pytest.raises(ValueError, match=r"^max_samples \(10\) is below min_samples \(20\)$"):
        TimingOptions(max_samples=10, min_samples=20)
    with pytest.raises(ValueError, match=r"^noise_target must be positive, got 0$"):
        TimingOptions(noise_target=0)
    with pytest.raises(ValueError, match=r"^verify_fraction must lie in \[0, 1\], got 1\.5$"):
        TimingOptions(verify_fraction=1.5)


def test_json_leaves_out_raw_samples_unless_asked():
    contender, timer, _, options = single([1.0], warmup=0, min_samples=5, max_samples=5)
    stats = measure(contender, 1, timer, options, clock=frozen_clock)
    assert isinstance(stats, Stats)
    plain = stats.to_json()
    assert "samples_ms" not in plain
    assert plain["median_ms"] == 1.0 and plain["count"] == 5 and plain["noise_met"]
    assert stats.to_json(include_samples=True)["samples_ms"] == [1.0] * 5

    comparison = Comparison(stats, stats, 1.0, 0.9, 1.1)
    data = comparison.to_json()
    assert data["speedup"] == 1.0 and data["ci_low"] == 0.9 and data["ci_high"] == 1.1
    assert "samples_ms" not in data["student"]


def test_cuda_versions_read_as_major_dot_minor():
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(13000) == "13.0"


def test_clock_drop_warning_text_is_exact():
    warning = clock_drop_warning(DeviceState(sm_clock_mhz=1980), DeviceState(sm_clock_mhz=1755))
    assert warning == (
        "SM clock fell from 1980 MHz to 1755 MHz during timing (-11.4%):"
        " the GPU may be throttling; rerun for a trustworthy figure"
    )


def test_clock_drop_warning_stays_quiet_for_small_drops_rises_and_unknowns():
    assert clock_drop_warning(1980, 1950) is None
    assert clock_drop_warning(1755, 1980) is None
    assert clock_drop_warning(DeviceState(), DeviceState(sm_clock_mhz=1000)) is None
    assert clock_drop_warning(1980, None) is None
    assert clock_drop_warning(1980, 1800, threshold=0.05) is not None


def test_device_state_without_nvml_or_cupy_is_all_none(monkeypatch):
    # A None entry in sys.modules makes the import fail, as on a machine
    # without the packages.
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert read_device_state() == DeviceState()


def test_device_state_never_raises_on_this_machine():
    state = read_device_state()
    assert isinstance(state, DeviceState)
    assert state.sm_clock_mhz is None or state.sm_clock_mhz > 0
    assert state.driver != "0.0"


def test_timing_module_does_not_import_cupy():
    script = "import sys, labrunner.measure.sampling; print('cupy' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def paired_round(student_ms, baseline_ms, warning=None) -> Comparison:
    def series(samples):
        return Stats(
            median_ms=float(np.median(samples)),
            min_ms=min(samples),
            max_ms=max(samples),
            mean_ms=float(np.mean(samples)),
            count=len(samples),
            rse=0.001,
            noise_met=warning is None,
            warning=warning,
            samples_ms=list(samples),
            verified_count=2,
            stopped_by="noise",
        )

    speedup, low, high = paired_speedup_ci(student_ms, baseline_ms)
    return Comparison(series(student_ms), series(baseline_ms), speedup, low, high)


def test_one_round_pools_to_itself():
    alone = paired_round([2.0, 2.1, 2.2], [26.0, 26.1, 26.2])
    assert pool_rounds([alone]) is alone


def test_pooled_rounds_take_medians_over_every_sample_and_keep_counts_and_warnings():
    first = paired_round([2.0, 2.0, 3.0], [20.0, 20.0, 20.0])
    second = paired_round([4.0, 4.0, 4.0], [20.0, 20.0, 20.0], warning="noise 0.80% > 0.50% after 3 samples")
    pooled = pool_rounds([first, second])
    assert pooled.speedup == 20.0 / 3.5  # the median of 2, 2, 3, 4, 4, 4
    assert (pooled.student.count, pooled.student.verified_count) == (6, 4)
    assert (pooled.student.min_ms, pooled.student.max_ms) == (2.0, 4.0)
    assert not pooled.student.noise_met and pooled.baseline.noise_met is False
    assert pooled.student.warning == "round 2: noise 0.80% > 0.50% after 3 samples"


def test_a_shift_between_rounds_widens_the_pooled_interval():
    # Three rounds, each with almost no noise of its own, at 12.7x, 13.0x and 13.3x: each
    # round's own interval is a hair wide, but the pooled one must reach from one end to the other.
    rng = np.random.default_rng(2)
    rounds = []
    for ratio in (12.7, 13.0, 13.3):
        student = 2.0 * rng.lognormal(0.0, 0.001, 40)
        rounds.append(paired_round(student, ratio * student))
    assert all(r.ci_high - r.ci_low < 0.05 for r in rounds)
    pooled = pool_rounds(rounds, seed=0)
    assert pooled.speedup == pytest.approx(13.0, abs=0.01)
    assert pooled.ci_low < 12.75 and pooled.ci_high > 13.25


def test_rounds_without_raw_samples_cannot_be_pooled():
    bare = paired_round([2.0], [26.0])
    bare.student.samples_ms = []
    with pytest.raises(ValueError, match="raw paired samples"):
        pool_rounds([bare, bare])


def test_a_comparison_survives_its_json_with_samples():
    contender, timer, _, options = single([1.0, 3.0], warmup=0, min_samples=4, max_samples=4)
    stats = measure(contender, 1, timer, options, clock=frozen_clock)
    original = Comparison(stats, stats, 1.0, 0.9, 1.1)
    assert comparison_from_json(original.to_json(include_samples=True)) == original
    # JSON has no infinity: an unmeasurable noise travels as None and comes back as inf
    unmeasurable = Stats(1.0, 1.0, 1.0, 1.0, 1, math.inf, False, "only 1 samples", [1.0])
    data = Comparison(unmeasurable, unmeasurable, 1.0, 1.0, 1.0).to_json(include_samples=True)
    assert data["student"]["rse"] is None
    assert comparison_from_json(data).student.rse == math.inf


# --- the rules' edges, each with its exact message ---------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"noise_target": 0}, "noise_target must be positive, got 0"),
        ({"min_samples": 1}, "min_samples must be at least 2, got 1"),
        ({"min_samples": 5, "max_samples": 4}, "max_samples (4) is below min_samples (5)"),
        ({"budget_s": 0}, "budget_s must be positive, got 0"),
        ({"warmup": -1}, "warmup cannot be negative, got -1"),
        ({"verify_fraction": -0.1}, "verify_fraction must lie in [0, 1], got -0.1"),
        ({"verify_fraction": 1.01}, "verify_fraction must lie in [0, 1], got 1.01"),
        ({"rounds": 0}, "rounds must be at least 1, got 0"),
        ({"min_verified": -1}, "min_verified must lie in [0, min_samples], got -1"),
        ({"min_samples": 4, "min_verified": 5}, "min_verified must lie in [0, min_samples], got 5"),
    ],
)
def test_every_nonsense_option_is_named_with_its_value(options, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        TimingOptions(**options)


def test_the_edges_of_every_option_are_accepted():
    """Does not raise: each value sits exactly on the edge of what its rule allows, so a rule that
    drifted by one (`<` for `<=`) would refuse a setting the README and the CLI offer."""
    TimingOptions(min_samples=2, max_samples=2, min_verified=2, verify_fraction=1.0, warmup=0, rounds=1)
    TimingOptions(min_verified=0, verify_fraction=0.0, budget_s=1e-9, noise_target=1e-9)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"student_ms": [], "baseline_ms": []}, "paired samples must be two non-empty sequences of equal length"),
        (
            {"student_ms": [[1.0]], "baseline_ms": [[1.0]]},
            "paired samples must be two non-empty sequences of equal length",
        ),
        ({"student_ms": [1.0], "baseline_ms": [1.0], "level": 0}, "level must lie in (0, 1), got 0"),
        ({"student_ms": [1.0], "baseline_ms": [1.0], "level": 1}, "level must lie in (0, 1), got 1"),
        ({"student_ms": [1.0], "baseline_ms": [1.0], "resamples": 0}, "resamples must be at least 1, got 0"),
    ],
)
def test_a_bootstrap_with_nonsense_arguments_is_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        paired_speedup_ci(**kwargs)


def test_one_resample_is_enough_to_give_an_interval():
    speedup, low, high = paired_speedup_ci([1.0, 2.0], [2.0, 4.0], resamples=1)
    assert (speedup, low, high) == (2.0, 2.0, 2.0)


def test_the_relative_standard_error_needs_two_samples_and_a_positive_mean():
    moments = RunningMoments()
    moments.add(2.0)
    assert moments.relative_standard_error() == math.inf
    moments.add(4.0)  # mean 3, sample std sqrt(2): rse = sqrt(2) / sqrt(2) / 3
    assert moments.relative_standard_error() == pytest.approx(1 / 3, rel=1e-12)
    zeros = RunningMoments()
    zeros.add(0.0)
    zeros.add(0.0)
    assert zeros.relative_standard_error() == math.inf  # a zero mean has no relative error
    first = RunningMoments()
    first.add(5.0)
    assert (first.count, first.mean) == (1, 5.0)


def test_a_comparisons_interval_comes_from_the_paired_bootstrap_at_95_percent():
    log: list = []
    timer = FakeTimer(log)
    student = ScriptedContender("student", list(1.0 + np.random.default_rng(6).random(30)), timer)
    baseline = ScriptedContender("baseline", list(3.0 + np.random.default_rng(7).random(30)), timer)
    options = TimingOptions(warmup=0, min_samples=30, max_samples=30, seed=4)
    result = compare(student, baseline, 2, timer, options, clock=frozen_clock)
    speedup, low, high = paired_speedup_ci(result.student.samples_ms, result.baseline.samples_ms, level=0.95, seed=4)
    assert (result.speedup, result.ci_low, result.ci_high, result.level) == (speedup, low, high, 0.95)
    assert result.baseline.stopped_by == result.student.stopped_by == "max_samples"


def test_a_compared_pairs_warning_quotes_the_pairs_budget():
    log: list = []
    timer = FakeTimer(log)
    student = ScriptedContender("student", [1.0, 3.0], timer)
    baseline = ScriptedContender("baseline", [1.0, 3.0], timer)
    options = TimingOptions(warmup=0, min_samples=4, max_samples=4, budget_s=1.5)
    result = compare(student, baseline, 1, timer, options, clock=frozen_clock)
    assert result.student.warning.endswith("after 4 samples (budget 3.0 s)")


def test_pooled_rounds_keep_every_sample_figure_and_stopping_rule():
    first = paired_round([2.0, 2.0, 3.0], [20.0, 20.0, 20.0])
    second = paired_round([4.0, 4.0, 4.0], [20.0, 20.0, 20.0], warning="noise 0.80% > 0.50% after 3 samples")
    first.student.warning = "only 3 samples (minimum 20), noise 9.00% (budget 6.0 s)"
    second.student.stopped_by = "budget"
    pooled = pool_rounds([first, second], seed=0)
    student = pooled.student
    assert (student.median_ms, student.mean_ms, student.samples_ms) == (3.5, 19 / 6, [2.0, 2.0, 3.0, 4.0, 4.0, 4.0])
    assert student.rse == pytest.approx(np.std([2, 2, 3, 4, 4, 4], ddof=1) / math.sqrt(6) / (19 / 6), rel=1e-12)
    assert student.stopped_by == "budget,noise"
    assert student.warning == (
        "round 1: only 3 samples (minimum 20), noise 9.00% (budget 6.0 s); round 2: noise 0.80% > 0.50% after 3 samples"
    )
    assert pooled.level == 0.95
    assert comparison_from_json(pooled.to_json(include_samples=True)).level == 0.95


def test_pooling_nothing_is_refused_by_name():
    with pytest.raises(ValueError, match="^pool_rounds needs at least one round$"):
        pool_rounds([])
    bare = paired_round([2.0], [26.0])
    bare.student.samples_ms = []
    with pytest.raises(
        ValueError, match=r"^every round needs its raw paired samples \(Stats\.samples_ms\) to be pooled$"
    ):
        pool_rounds([bare, bare])


@pytest.mark.slow
def test_the_pooled_interval_is_the_central_95_percent_of_the_two_level_bootstrap():
    rng = np.random.default_rng(8)
    rounds = [paired_round(list(2.0 + rng.random(30)), list(20.0 + rng.random(30))) for _ in range(2)]
    pooled = pool_rounds(rounds, seed=3)
    # the same draws, written out: rounds with replacement, then pairs within each drawn round
    draws = np.random.default_rng(3)
    pairs = [(np.array(r.student.samples_ms), np.array(r.baseline.samples_ms)) for r in rounds]
    ratios = []
    for _ in range(2000):
        drawn = draws.integers(0, 2, size=2)
        s_parts, b_parts = [], []
        for index in drawn:
            s, b = pairs[index]
            picks = draws.integers(0, s.size, size=s.size)
            s_parts.append(s[picks])
            b_parts.append(b[picks])
        ratios.append(np.median(np.concatenate(b_parts)) / np.median(np.concatenate(s_parts)))
    assert (pooled.ci_low, pooled.ci_high) == tuple(np.percentile(ratios, [2.5, 97.5]))


def test_the_paired_interval_is_the_central_percentiles_of_resampled_pairs():
    rng = np.random.default_rng(11)
    student = list(1.0 + rng.random(40))
    baseline = list(3.0 + rng.random(40))
    speedup, low, high = paired_speedup_ci(student, baseline, level=0.9, resamples=300, seed=5)
    # the same draws, written out: pair indices with replacement, the ratio of medians per resample
    draws = np.random.default_rng(5)
    picks = draws.integers(0, 40, size=(300, 40))
    ratios = np.median(np.array(baseline)[picks], axis=1) / np.median(np.array(student)[picks], axis=1)
    assert speedup == np.median(baseline) / np.median(student)
    assert (low, high) == tuple(np.percentile(ratios, [5.0, 95.0]))


def test_a_long_series_is_resampled_in_chunks_to_the_same_count():
    student = list(np.linspace(1.0, 2.0, 1001))
    speedup, low, high = paired_speedup_ci(student, [2 * s for s in student], resamples=2000)
    assert (speedup, low, high) == pytest.approx((2.0, 2.0, 2.0), rel=1e-12)


def test_each_call_is_prepared_launched_and_collected_on_one_input_set():
    contender, timer, log, options = single([1.0], warmup=0, min_samples=4, max_samples=4)
    measure(contender, 3, timer, options, clock=frozen_clock)
    indices = [(e[0], e[2]) for e in log if e[0] != "flush"]
    assert indices == [(kind, i) for i in (0, 1, 2, 0) for kind in ("prepare", "launch", "collect")]


def test_sampling_without_inputs_is_refused_by_name():
    contender, timer, _, options = single([1.0])
    with pytest.raises(ValueError, match="^n_inputs must be at least 1, got 0$"):
        measure(contender, 0, timer, options, clock=frozen_clock)


def test_rounds_with_mismatched_or_empty_samples_are_refused_and_single_samples_pool():
    uneven = paired_round([2.0, 2.0], [26.0, 26.0])
    uneven.baseline.samples_ms = [26.0]
    empty = paired_round([2.0], [26.0])
    empty.student.samples_ms, empty.baseline.samples_ms = [], []
    for bad in (uneven, empty):
        with pytest.raises(ValueError, match=r"^every round needs its raw paired samples"):
            pool_rounds([paired_round([2.0], [26.0]), bad])
    assert pool_rounds([paired_round([2.0], [26.0]), paired_round([2.0], [24.0])]).speedup == 25.0 / 2.0


def test_a_comparison_keeps_its_level_through_json():
    stats = Stats(1.0, 1.0, 1.0, 1.0, 2, 0.0, True, None, [1.0, 1.0])
    assert comparison_from_json(Comparison(stats, stats, 1.0, 1.0, 1.0, level=0.9).to_json(True)).level == 0.9


# --- a call timed kernel by kernel: each stage a part of the very calls that are checked ------------


class StagedContender:
    """A call of named stages; stage k of call n takes `durations[k][n % len]` ms (the timer reads it)."""

    def __init__(self, durations: dict[str, list[float]], timer: "StageTimer"):
        self.name = "staged"
        self.stages = tuple(durations)
        self._durations = durations
        self._timer = timer
        self.calls = 0
        self.verified: list[bool] = []

    def prepare(self, input_index: int, verify: bool) -> None:
        self._timer.log.append(("prepare", verify))

    def launch(self, input_index: int) -> None:
        raise AssertionError("a staged call is launched stage by stage, never as one launch")

    def stage_launches(self, input_index: int):
        call = self.calls
        self.calls += 1

        def stage(name):
            def launch():
                self._timer.log.append(("launch", name))
                runs = self._durations[name]
                self._timer.pending.append(runs[call % len(runs)])

            return launch

        return [stage(name) for name in self.stages]

    def collect(self, input_index: int, verify: bool) -> None:
        self.verified.append(verify)


class StageTimer:
    """Runs the stages in order and returns what each launch set; `time_ms` is never used here."""

    def __init__(self):
        self.log: list = []
        self.pending: list[float] = []

    def flush_caches(self) -> None:
        self.log.append(("flush",))

    def time_ms(self, launch) -> float:
        raise AssertionError("a staged call is timed with time_stages_ms")

    def time_stages_ms(self, launches) -> list[float]:
        self.pending = []
        for launch in launches:
            launch()
        assert len(self.pending) == len(launches)
        return list(self.pending)


def test_a_staged_call_gives_each_stage_its_own_figures_from_the_same_calls():
    timer = StageTimer()
    contender = StagedContender({"a": [1.0, 3.0], "b": [0.5], "c": [2.0, 2.0, 5.0]}, timer)
    options = TimingOptions(warmup=1, min_samples=6, max_samples=6, noise_target=1e-9, min_verified=2)
    stats = measure(contender, 3, timer, options, clock=frozen_clock, draw=random.Random(4))
    assert list(stats.stages) == ["a", "b", "c"]
    a, b, c = (stats.stages[name] for name in "abc")
    # sample n is call n + 1 (call 0 was the warm-up)
    assert a.samples_ms == [3.0, 1.0, 3.0, 1.0, 3.0, 1.0]
    assert b.samples_ms == [0.5] * 6
    assert c.samples_ms == [2.0, 5.0, 2.0, 2.0, 5.0, 2.0]
    # the whole call is the sum of its stages, call by call
    assert stats.samples_ms == [x + y + z for x, y, z in zip(a.samples_ms, b.samples_ms, c.samples_ms)]
    # every stage was verified exactly when its call was, and counts the same calls
    assert a.count == b.count == c.count == stats.count == 6
    assert (
        a.verified_count
        == b.verified_count
        == c.verified_count
        == stats.verified_count
        == sum(contender.verified[1:])
        >= 2
    )
    # one flush per call, then the stages in order inside the same timing: no stage is ever launched alone
    assert timer.log.count(("flush",)) == 7
    launches = [entry[1] for entry in timer.log if entry[0] == "launch"]
    assert launches == ["a", "b", "c"] * 7


def test_the_loop_goes_on_until_every_stage_is_known_to_the_noise_target():
    # the whole call is steady from the start (1 + 2 ms or 2 + 1 ms), stage "a" is not: it alternates
    # 1 and 2 ms, so after 40 samples its noise is sqrt(40 * 0.25 / 39) / sqrt(40) / 1.5 = 5.34%, and the
    # loop runs to its sample cap for it
    timer = StageTimer()
    contender = StagedContender({"a": [1.0, 2.0], "b": [2.0, 1.0]}, timer)
    options = TimingOptions(warmup=0, min_samples=4, max_samples=40, noise_target=0.005)
    stats = measure(contender, 1, timer, options, clock=frozen_clock)
    assert stats.samples_ms == [3.0] * 40 and stats.noise_met and stats.warning is None
    assert stats.stopped_by == "max_samples"
    assert stats.stages["a"].warning == "noise 5.34% > 0.50% after 40 samples (budget 3.0 s)"
    assert not stats.stages["a"].noise_met


def test_a_staged_summary_goes_through_json_and_rounds_with_its_stages():
    timer = StageTimer()
    contender = StagedContender({"a": [1.0], "b": [2.0]}, timer)
    options = TimingOptions(warmup=0, min_samples=3, max_samples=3)
    stats = measure(contender, 1, timer, options, clock=frozen_clock)
    data = stats.to_json()
    assert "samples_ms" not in data and "samples_ms" not in data["stages"]["a"]
    assert (data["median_ms"], data["stages"]["a"]["median_ms"], data["stages"]["b"]["min_ms"]) == (3.0, 1.0, 2.0)
    comparison = Comparison(stats, stats, 1.0, 1.0, 1.0)
    again = comparison_from_json(comparison.to_json(include_samples=True))
    assert again.student.stages["b"].samples_ms == [2.0, 2.0, 2.0]
    pooled = pool_rounds([again, again])
    assert pooled.student.stages["a"].count == 6 and pooled.student.stages["a"].median_ms == 1.0
    # a call timed as one has no stages, and its JSON says nothing of them
    plain, plain_timer, _, plain_options = single([1.0], warmup=0, min_samples=2, max_samples=2)
    single_stats = measure(plain, 1, plain_timer, plain_options, clock=frozen_clock)
    assert single_stats.stages == {} and "stages" not in single_stats.to_json()
