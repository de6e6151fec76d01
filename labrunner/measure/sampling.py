"""How attnlab times a kernel, and how it decides the number is worth reporting.

Everything here is arithmetic and bookkeeping; the GPU work happens behind two
small protocols. A `Timer` knows how to flush the caches and how to time one
launch with events; a `Contender` knows how to prepare, launch and check one
call. Keeping the loop ignorant of CUDA lets the tests drive it on a CPU with
scripted durations, so the rules below are checked exactly, not approximately.

The rules follow NVIDIA's nvbench, Triton's do_bench and the GPU MODE
leaderboard harness:

* Every sample is one call, cold: caches are flushed before it, and the input
  sets rotate so no call reads what the previous one left behind.
* Sampling stops when the mean is known well enough (its relative standard
  error is below the noise target), never before a minimum number of samples,
  and always when the wall-clock budget or the sample cap runs out. If the
  target was not reached, the result says so, with numbers.
* A comparison interleaves the two contenders call by call, so a clock change
  or a noisy neighbour hurts both equally instead of biasing the ratio.
* A few timed calls, picked at random from the operating system's entropy,
  are verified: a kernel cannot be fast only on the calls nobody checks.
* A call of several kernels (lab 1's three) is timed as one call with an
  event between every two launches, so each kernel's time is a part of the
  very calls whose output is checked. A kernel timed on a call of its own
  would have no output of the lab's to check, and could skip its work there.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard

import numpy as np
import numpy.typing as npt

from labrunner.records.timing import Comparison, Stats


class Timer(Protocol):
    """The two things the sampling loop needs from a GPU backend."""

    def flush_caches(self) -> None:
        """Evict the caches, so the next timed call starts cold."""

    def time_ms(self, launch: Callable[[], None]) -> float:
        """Run `launch` between timing events, wait for it, return elapsed ms."""

    def time_stages_ms(self, launches: list[Callable[[], None]]) -> list[float]:
        """Run the launches back to back, an event before each and one after the last; each one's ms."""


class Contender(Protocol):
    """One implementation being timed: the student's kernel, or the baseline.

    `prepare` and `collect` run outside the timing events. When `verify` is
    true, `prepare` must re-poison the output of that input set and `collect`
    must check it afterwards, so the check proves that this very call wrote it.

    A contender whose call is several launches may name them in `stages`; it
    then gives them one by one (`stage_launches`) and each is timed apart,
    inside the same call (`Timer.time_stages_ms`).
    """

    name: str

    def prepare(self, input_index: int, verify: bool) -> None: ...

    def launch(self, input_index: int) -> None: ...

    def collect(self, input_index: int, verify: bool) -> None: ...


class StagedContender(Contender, Protocol):
    """A contender whose call is several launches, named in `stages` and given one by one."""

    stages: tuple[str, ...]

    def stage_launches(self, input_index: int) -> list[Callable[[], None]]: ...


def has_stages(contender: Contender) -> TypeGuard[StagedContender]:
    return bool(getattr(contender, "stages", ()))


@dataclass
class TimingOptions:
    """The knobs of the sampling loop; the defaults suit kernels of 10 µs to 10 ms."""

    noise_target: float = 0.005
    min_samples: int = 20
    max_samples: int = 2000
    budget_s: float = 3.0
    warmup: int = 3
    verify_fraction: float = 0.1
    seed: int = 0
    min_verified: int = 2
    # Independent repetitions of a whole comparison, each in a fresh worker process on fresh
    # buffers. The driver runs them and pools them (`pool_rounds`); this loop runs one.
    rounds: int = 1

    def __post_init__(self) -> None:
        # Reject nonsense early: a loop running on a silly setting produces a
        # figure that looks fine and means nothing.
        if not self.noise_target > 0:
            raise ValueError(f"noise_target must be positive, got {self.noise_target}")
        if self.min_samples < 2:
            raise ValueError(f"min_samples must be at least 2, got {self.min_samples}")
        if self.max_samples < self.min_samples:
            raise ValueError(f"max_samples ({self.max_samples}) is below min_samples ({self.min_samples})")
        if not self.budget_s > 0:
            raise ValueError(f"budget_s must be positive, got {self.budget_s}")
        if self.warmup < 0:
            raise ValueError(f"warmup cannot be negative, got {self.warmup}")
        if not 0.0 <= self.verify_fraction <= 1.0:
            raise ValueError(f"verify_fraction must lie in [0, 1], got {self.verify_fraction}")
        if self.rounds < 1:
            raise ValueError(f"rounds must be at least 1, got {self.rounds}")
        if not 0 <= self.min_verified <= self.min_samples:
            raise ValueError(f"min_verified must lie in [0, min_samples], got {self.min_verified}")


class RunningMoments:
    """Mean and variance updated one sample at a time (Welford's method).

    The stopping rule is checked after every sample; recomputing the standard
    deviation from scratch each time would make a 2000-sample run quadratic.
    Welford's update is also numerically stable, unlike sum-of-squares.
    """

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self._sum_sq_dev = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self._sum_sq_dev += delta * (value - self.mean)

    def relative_standard_error(self) -> float:
        """std / sqrt(n) / mean: how uncertain the mean is, as a fraction of it."""
        if self.count < 2 or self.mean <= 0:
            return math.inf
        std = math.sqrt(self._sum_sq_dev / (self.count - 1))
        return std / math.sqrt(self.count) / self.mean


class VerificationSchedule:
    """Decides which rounds of timed calls are also verified.

    About `verify_fraction` of the rounds are picked at random, and on top of
    that `min_verified` positions are drawn among the first `min_samples`
    rounds, so even a short run checks a few. Every contender of a round is
    verified together: they ran on the same input set, so one reference
    checks them all.

    The choice comes from the operating system's entropy, never from a seed:
    the seed is public by default, and a kernel that knew it could count its
    calls and be correct exactly on the ones that are checked. Tests pass a
    seeded `random.Random` as `draw` to make the choice reproducible.
    """

    def __init__(self, options: TimingOptions, draw: random.Random | None = None) -> None:
        self._rng = draw if draw is not None else random.SystemRandom()
        self._fraction = options.verify_fraction
        self.minimum = options.min_verified
        self._guaranteed = set(self._rng.sample(range(options.min_samples), self.minimum))

    def should_verify(self, sample_index: int) -> bool:
        # Always draw, so the sequence of decisions does not depend on which
        # positions happen to be guaranteed.
        picked = self._rng.random() < self._fraction
        return picked or sample_index in self._guaranteed


class SampleSeries:
    """The samples of one contender, with what the stopping rule needs to know.

    A contender of several stages keeps a series per stage beside the whole call's; the noise
    target holds for each of them, since each is reported.
    """

    def __init__(self, options: TimingOptions, stages: tuple[str, ...] = ()) -> None:
        self.samples_ms: list[float] = []
        self.moments = RunningMoments()
        self.verified_count = 0
        self._options = options
        self.stages = {name: SampleSeries(options) for name in stages}

    @property
    def count(self) -> int:
        return self.moments.count

    def add(self, elapsed_ms: float, verified: bool, stage_ms: Sequence[float] = ()) -> None:
        self.samples_ms.append(elapsed_ms)
        self.moments.add(elapsed_ms)
        self.verified_count += int(verified)
        for stage, ms in zip(self.stages.values(), stage_ms, strict=True):
            stage.add(ms, verified)

    def noise_met(self) -> bool:
        return (
            self.count >= self._options.min_samples
            and self.moments.relative_standard_error() < self._options.noise_target
        )

    def noise_met_everywhere(self) -> bool:
        """The whole call's noise and every stage's: each is reported, so each must be known."""
        return self.noise_met() and all(stage.noise_met() for stage in self.stages.values())

    def verification_short(self) -> bool:
        return self.verified_count < self._options.min_verified


def run_call(contender: Contender, input_index: int, verify: bool, timer: Timer) -> tuple[float, list[float]]:
    """One call, in the order that keeps the measurement cold and the check honest: its time, and
    each stage's where the contender names stages (the whole call's time is then their sum: the
    time from the first event to the last).

    The flush comes after `prepare`, because re-poisoning the output writes it
    and would otherwise leave it warm in L2 for the timed launch.
    """
    contender.prepare(input_index, verify)
    timer.flush_caches()
    if has_stages(contender):
        stage_ms = list(timer.time_stages_ms(contender.stage_launches(input_index)))
        elapsed_ms = sum(stage_ms)
    else:
        stage_ms = []
        elapsed_ms = timer.time_ms(lambda: contender.launch(input_index))
    contender.collect(input_index, verify)
    return elapsed_ms, stage_ms


def stop_reason(series: list[SampleSeries], options: TimingOptions, elapsed_s: float, budget_s: float) -> str | None:
    """Why the loop should stop now, or None to keep going.

    Two samples are the least that gives a spread, so no rule stops sooner.
    """
    if series[0].count < 2:
        return None
    if all(s.noise_met_everywhere() for s in series):
        return "noise"
    if series[0].count >= options.max_samples:
        return "max_samples"
    if elapsed_s >= budget_s:
        return "budget"
    return None


def noise_warning(series: SampleSeries, options: TimingOptions, budget_s: float) -> str | None:
    """A sentence with numbers when the series did not reach the noise target."""
    if series.noise_met():
        return None
    rse = series.moments.relative_standard_error()
    if series.count < options.min_samples:
        return f"only {series.count} samples (minimum {options.min_samples}), noise {rse:.2%} (budget {budget_s:.1f} s)"
    return f"noise {rse:.2%} > {options.noise_target:.2%} after {series.count} samples (budget {budget_s:.1f} s)"


def summarize(series: SampleSeries, options: TimingOptions, stopped_by: str, budget_s: float) -> Stats:
    samples = np.asarray(series.samples_ms, dtype=float)
    return Stats(
        median_ms=float(np.median(samples)),
        min_ms=float(samples.min()),
        max_ms=float(samples.max()),
        mean_ms=float(samples.mean()),
        count=series.count,
        rse=series.moments.relative_standard_error(),
        noise_met=series.noise_met(),
        warning=noise_warning(series, options, budget_s),
        samples_ms=list(series.samples_ms),
        verified_count=series.verified_count,
        stopped_by=stopped_by,
        stages={name: summarize(stage, options, stopped_by, budget_s) for name, stage in series.stages.items()},
    )


def sample_interleaved(
    contenders: list[Contender],
    n_inputs: int,
    timer: Timer,
    options: TimingOptions,
    clock: Callable[[], float],
    budget_s: float,
    draw: random.Random | None = None,
) -> tuple[list[SampleSeries], str]:
    """The shared loop: one call per contender per round, all on the same input set.

    Round k uses input set k % n_inputs for every contender, and either all
    of a round's calls are verified or none is. The loop keeps going past a
    stopping reason only to reach the minimum number of verified calls, and
    then it verifies every round until it has.
    """
    if n_inputs < 1:
        raise ValueError(f"n_inputs must be at least 1, got {n_inputs}")
    series = [SampleSeries(options, tuple(getattr(c, "stages", ()))) for c in contenders]
    schedule = VerificationSchedule(options, draw)

    # Warm-up runs the same path as a sample (flush, events and all), so
    # lazy compilation, module loading and clock ramp-up happen here, unrecorded.
    for k in range(options.warmup):
        for contender in contenders:
            run_call(contender, k % n_inputs, False, timer)

    # The budget clock starts after warm-up: a first-call compile must not
    # eat the time meant for sampling.
    start_s = clock()
    reason: str | None = None
    while True:
        input_index = series[0].count % n_inputs
        must_verify = reason is not None and any(s.verification_short() for s in series)
        verify = schedule.should_verify(series[0].count) or must_verify
        for contender, own in zip(contenders, series):
            elapsed_ms, stage_ms = run_call(contender, input_index, verify, timer)
            own.add(elapsed_ms, verify, stage_ms)
        reason = stop_reason(series, options, clock() - start_s, budget_s)
        if reason is not None and not any(s.verification_short() for s in series):
            return series, reason


def measure(
    contender: Contender,
    n_inputs: int,
    timer: Timer,
    options: TimingOptions | None = None,
    clock: Callable[[], float] = time.perf_counter,
    draw: random.Random | None = None,
) -> Stats:
    """Time one contender until its mean is known to `options.noise_target`."""
    options = options or TimingOptions()
    budget_s = options.budget_s
    (series,), reason = sample_interleaved([contender], n_inputs, timer, options, clock, budget_s, draw)
    return summarize(series, options, reason, budget_s)


def compare(
    student: Contender,
    baseline: Contender,
    n_inputs: int,
    timer: Timer,
    options: TimingOptions | None = None,
    clock: Callable[[], float] = time.perf_counter,
    draw: random.Random | None = None,
) -> Comparison:
    """Time student and baseline interleaved, and give the speedup with its 95% interval.

    Two things are measured, so the wall-clock budget is `budget_s` for each,
    `2 * budget_s` for the pair; the warnings quote the pair's budget because
    that is the limit the loop ran under.
    """
    options = options or TimingOptions()
    budget_s = 2 * options.budget_s
    (student_series, baseline_series), reason = sample_interleaved(
        [student, baseline], n_inputs, timer, options, clock, budget_s, draw
    )
    level = 0.95
    speedup, ci_low, ci_high = paired_speedup_ci(
        student_series.samples_ms, baseline_series.samples_ms, level=level, seed=options.seed
    )
    return Comparison(
        student=summarize(student_series, options, reason, budget_s),
        baseline=summarize(baseline_series, options, reason, budget_s),
        speedup=speedup,
        ci_low=ci_low,
        ci_high=ci_high,
        level=level,
    )


def paired_speedup_ci(
    student_ms: npt.ArrayLike, baseline_ms: npt.ArrayLike, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Speedup median(baseline) / median(student), with a bootstrap confidence interval.

    Returns (speedup, low, high). The bootstrap resamples pair indices, not
    the two series separately: sample k of the student and sample k of the
    baseline ran back to back on the same input set, under the same clock and
    temperature, and keeping them together keeps that shared condition inside
    each resample. The seed makes the interval reproducible run to run.
    """
    student = np.asarray(student_ms, dtype=float)
    baseline = np.asarray(baseline_ms, dtype=float)
    if student.shape != baseline.shape or student.ndim != 1 or student.size == 0:
        raise ValueError("paired samples must be two non-empty sequences of equal length")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")

    with np.errstate(divide="ignore", invalid="ignore"):
        speedup = float(np.median(baseline) / np.median(student))
        rng = np.random.default_rng(seed)
        n = student.size
        ratios = np.empty(resamples)
        # Resample in chunks: one (resamples x n) index matrix at n = 2000
        # would take tens of megabytes for no benefit.
        chunk = max(1, 2_000_000 // n)
        for first in range(0, resamples, chunk):
            rows = min(chunk, resamples - first)
            pairs = rng.integers(0, n, size=(rows, n))
            ratios[first : first + rows] = np.median(baseline[pairs], axis=1) / np.median(student[pairs], axis=1)
    tail = (1 - level) / 2 * 100
    ci_low, ci_high = np.percentile(ratios, [tail, 100 - tail])
    return speedup, float(ci_low), float(ci_high)


def pool_rounds(rounds: list[Comparison], level: float = 0.95, resamples: int = 2000, seed: int = 0) -> Comparison:
    """Independent rounds of one comparison, pooled into one SPEEDUP with an honest interval.

    Each round ran in its own process on its own buffers. A round's interval only knows the
    noise between its own samples; whatever differs between processes (where the buffers
    landed, the device's state) moves a round's median as a whole and is invisible to it.
    So the pooled figure is the ratio of medians over every sample, and its interval comes
    from a two-level bootstrap: draw rounds with replacement, then pairs within each drawn
    round. A spread between rounds widens the interval, as it should. One round is returned
    as it is.
    """
    if not rounds:
        raise ValueError("pool_rounds needs at least one round")
    if len(rounds) == 1:
        return rounds[0]
    pairs = [
        (np.asarray(r.student_stats.samples_ms, dtype=float), np.asarray(r.baseline_stats.samples_ms, dtype=float))
        for r in rounds
    ]
    if any(s.size == 0 or s.shape != b.shape for s, b in pairs):
        raise ValueError("every round needs its raw paired samples (Stats.samples_ms) to be pooled")
    student_all = np.concatenate([s for s, _ in pairs])
    baseline_all = np.concatenate([b for _, b in pairs])
    rng = np.random.default_rng(seed)
    ratios = np.empty(resamples)
    for k in range(resamples):
        drawn = rng.integers(0, len(pairs), size=len(pairs))
        student_parts, baseline_parts = [], []
        for index in drawn:
            s, b = pairs[index]
            picks = rng.integers(0, s.size, size=s.size)
            student_parts.append(s[picks])
            baseline_parts.append(b[picks])
        ratios[k] = np.median(np.concatenate(baseline_parts)) / np.median(np.concatenate(student_parts))
    tail = (1 - level) / 2 * 100
    ci_low, ci_high = np.percentile(ratios, [tail, 100 - tail])
    return Comparison(
        student=pool_stats([r.student_stats for r in rounds]),
        baseline=pool_stats([r.baseline_stats for r in rounds]),
        speedup=float(np.median(baseline_all) / np.median(student_all)),
        ci_low=float(ci_low),
        ci_high=float(ci_high),
        level=level,
    )


def pool_stats(rounds: list[Stats]) -> Stats:
    """One series' rounds as one summary: figures over all samples, warnings and counts kept."""
    samples = np.concatenate([np.asarray(r.samples_ms, dtype=float) for r in rounds])
    moments = RunningMoments()
    for value in samples:
        moments.add(float(value))
    warnings = [f"round {i}: {r.warning}" for i, r in enumerate(rounds, 1) if r.warning]
    stages = {name: pool_stats([r.stages[name] for r in rounds]) for name in rounds[0].stages}
    return Stats(
        median_ms=float(np.median(samples)),
        min_ms=float(samples.min()),
        max_ms=float(samples.max()),
        mean_ms=float(samples.mean()),
        count=int(samples.size),
        rse=moments.relative_standard_error(),
        noise_met=all(r.noise_met for r in rounds),
        warning="; ".join(warnings) or None,
        samples_ms=samples.tolist(),
        verified_count=sum(r.verified_count for r in rounds),
        stopped_by=",".join(sorted({r.stopped_by for r in rounds})),
        stages=stages,
    )


def comparison_from_json(data: dict[str, Any]) -> Comparison:
    """A worker's reply (`Comparison.to_json(include_samples=True)`), read back with its samples."""
    return Comparison.from_json(data)
