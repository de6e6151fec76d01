"""The course report's figures as numbers: how a batch's timed figure is spread, and its roofline's points.

The HTML page (html_report.py) only draws what is computed here, so each chart's numbers can be tested
exactly without a browser.

Which figure a lab is graded on is read from its results, as the timing recorded it
(records/timing.py), never from the lab's name:

- a timing with a `bandwidth` (lab 3): the fraction of the same run's device-to-device copy the
  student's call reached, the figure its gate holds;
- any other comparison (lab 2): SPEEDUP, the baseline's median over the student's;
- lab 1's pipeline: each kernel's fraction of the device copy at the largest size measured against
  the bytes it must move (`must_move`), one distribution per kernel.

The histogram's bins are "nice" (a width of 1, 2, 2.5 or 5 times a power of ten, edges at its
multiples) so a reader can say which bin a number falls in without a calculator.

The roofline holds the kernels that passed and were profiled (`--profile`'s Range pass): each one's
whole call as Nsight Compute measured it, against the ceilings of the GPU it ran on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from labrunner.measure.roofline import ceilings_from_facts
from labrunner.records.roofline import Ceilings
from labrunner.run.untrusted_text import shown
from labrunner.truth.verdict import Status

MOST_BINS = 10
NICE_MANTISSAS = (1.0, 2.0, 2.5, 5.0)
# A value on a bin's edge belongs to the bin it opens; this slack keeps 0.3 / 0.1 (2.9999999999999996
# in floating point) on the edge it is on.
EDGE_SLACK = 1e-9


# --- the distribution --------------------------------------------------------------------------


@dataclass(frozen=True)
class Distribution:
    """One figure across the batch: `values` as (file, value), in the batch's order; `threshold` is what
    a gate asked for, where one decided."""

    title: str
    axis: str
    values: list[tuple[str, float]]
    threshold: float | None = None
    threshold_text: str = ""  # the threshold as the page writes it: "2x", "60%"
    percent: bool = False  # a fraction, shown as a percentage


@dataclass(frozen=True)
class Bin:
    """Values v with low <= v < high (the last bin holds its high edge too), and whose they are."""

    low: float
    high: float
    files: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.files)


def _tidy(x: float) -> float:
    """An edge computed as k * step, with the floating-point dust taken off (0.30000000000000004 -> 0.3)."""
    return float(f"{x:.12g}")


def _index(value: float, step: float) -> int:
    return math.floor(value / step + EDGE_SLACK)


def nice_step(low: float, high: float, most: int = MOST_BINS) -> float:
    """The narrowest nice width whose bins, edges at its multiples, cover [low, high] in at most `most`."""
    span = high - low
    if span <= 0:
        span = abs(high) or 1.0
    exponent = math.floor(math.log10(span / most))
    while True:
        for mantissa in NICE_MANTISSAS:
            step = mantissa * 10.0**exponent
            if _index(high, step) - _index(low, step) + 1 <= most:
                return step
        exponent += 1


def histogram(entries: list[tuple[str, float]], most: int = MOST_BINS) -> list[Bin]:
    """Every bin from the one holding the smallest value to the one holding the largest, empty ones too."""
    if not entries:
        return []
    values = [v for _, v in entries]
    step = nice_step(min(values), max(values), most)
    first, last = _index(min(values), step), _index(max(values), step)
    bins = [Bin(_tidy((first + i) * step), _tidy((first + i + 1) * step)) for i in range(last - first + 1)]
    for file, value in entries:
        bins[_index(value, step) - first].files.append(file)
    return bins


def _file(result: dict[str, Any]) -> str:
    return shown(str(result.get("file") or "?"))


def _number(value: Any) -> float | None:
    """A figure as a finite float, or None (absent, null, or written as a word: "nan")."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _gate_figure(results: list[dict[str, Any]], key: str) -> float | None:
    """What the first gate that decided asked for (`required_speedup`, `required_fraction`)."""
    for result in results:
        required = _number((result.get("gate") or {}).get(key))
        if required is not None:
            return required
    return None


def distributions(results: list[dict[str, Any]]) -> list[Distribution]:
    """The batch's graded figure, as the module's docstring says; empty where nothing was timed."""
    timed = [(r, r["timing"]) for r in results if isinstance(r.get("timing"), dict)]
    comparisons = [(r, t) for r, t in timed if t.get("kind") == "speedup"]
    bandwidth = [(_file(r), _number((t.get("bandwidth") or {}).get("copy_fraction"))) for r, t in comparisons]
    fractions = [(f, v) for f, v in bandwidth if v is not None]
    if fractions:
        required = _gate_figure(results, "required_fraction")
        return [
            Distribution(
                "Fraction of the device copy's bandwidth reached",
                "student's TB/s over the same run's device-to-device copy",
                fractions,
                required,
                "" if required is None else f"{100 * required:.0f}%",
                percent=True,
            )
        ]
    speedups = [(_file(r), _number(t.get("speedup"))) for r, t in comparisons]
    timed_speedups = [(f, v) for f, v in speedups if v is not None]
    if timed_speedups:
        baselines = {str(t.get("baseline_label")) for _, t in comparisons if t.get("baseline_label")}
        over = f" over {baselines.pop()}" if len(baselines) == 1 else ""
        required = _gate_figure(results, "required_speedup")
        return [
            Distribution(
                f"SPEEDUP{over}",
                "SPEEDUP (the baseline's median time over the student's)",
                timed_speedups,
                required,
                "" if required is None else f"{required:g}x",
            )
        ]
    return _pipeline_distributions([(r, t) for r, t in timed if t.get("kind") == "pipeline"])


def _pipeline_distributions(timed: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[Distribution]:
    """Lab 1: per kernel, at the largest size measured against the bytes it must move (`largest_measured`)."""
    by_kernel: dict[tuple[str, int], list[tuple[str, float]]] = {}
    for result, timing in timed:
        measured = [row for row in timing.get("rows") or [] if row.get("must_move")]
        if not measured:
            continue
        row = measured[-1]
        for kernel, moved in row["must_move"].items():
            fraction = _number(moved.get("copy_fraction"))
            if fraction is not None:
                by_kernel.setdefault((str(kernel), row.get("T")), []).append((_file(result), fraction))
    return [
        Distribution(
            f"{kernel}: fraction of the device copy's bandwidth at T = {t}",
            f"{kernel}'s GB/s over the bytes it must move, over the same run's device copy",
            values,
            percent=True,
        )
        for (kernel, t), values in by_kernel.items()
    ]


# --- the roofline ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RooflineDot:
    """One call under the roofline: where it sits (FLOP per DRAM byte, FLOP/s) and what that means."""

    file: str
    label: str
    intensity: float
    flops_per_s: float
    bound: str
    fraction_of_roof: float


@dataclass(frozen=True)
class RooflineChart:
    """The roofs of the GPU most profiles ran on, each passing student's call beneath them, the starter's
    call once for reference (where the Range pass timed it), and each profile left off, with why."""

    ceilings: Ceilings
    points: list[RooflineDot]
    starter: RooflineDot | None
    left_out: list[str]


def profile_ceilings(profile: dict[str, Any]) -> Ceilings | None:
    """The ceilings a profile was placed against: `attnlab profile` writes them; `--profile`'s Range pass
    alone writes the GPU's facts, from which they are counted as they were then."""
    written = profile.get("ceilings")
    if isinstance(written, dict):
        return Ceilings(
            written["peak_flops"], written["bandwidth"], written["peak_source"], written["bandwidth_source"]
        )
    facts = (profile.get("range") or {}).get("gpu_facts") or profile.get("gpu_facts")
    return ceilings_from_facts(facts)[0] if facts else None


def _dot(file: str, contender: dict[str, Any]) -> RooflineDot | None:
    point = contender.get("point") or {}
    intensity, achieved = _number(point.get("intensity_flop_per_byte")), _number(point.get("achieved_flops_per_s"))
    if not intensity or not achieved or intensity <= 0 or achieved <= 0:
        return None
    return RooflineDot(
        file,
        shown(str(contender.get("label") or "")),
        intensity,
        achieved,
        str(point.get("bound") or ""),
        _number(point.get("fraction_of_roof")) or 0.0,
    )


def roofline(results: list[dict[str, Any]]) -> RooflineChart | None:
    """The chart, or None where no passing result holds a profiled call to draw."""
    placed: list[tuple[Ceilings, RooflineDot, RooflineDot | None]] = []
    left_out = []
    for result in results:
        profile = result.get("profile")
        if not isinstance(profile, dict):
            continue
        file = _file(result)
        if result.get("verdict") != Status.PASS:
            left_out.append(f"{file}: profiled, but its verdict is {shown(str(result.get('verdict')))}")
            continue
        report = profile.get("range") or {}
        if not report.get("available"):
            left_out.append(f"{file}: no Range pass ({shown(str(report.get('message') or 'none was run'))})")
            continue
        contenders = report.get("contenders") or []
        student = next((c for c in contenders if c.get("role") == "student"), None)
        starter = next((c for c in contenders if c.get("role") == "starter"), None)
        dot = None if student is None else _dot(file, student)
        ceilings = profile_ceilings(profile)
        if dot is None:
            left_out.append(f"{file}: Nsight Compute counted no DRAM bytes or time for its call")
        elif ceilings is None:
            left_out.append(f"{file}: the GPU's ceilings are unknown ({shown(str(profile.get('ceilings_problem')))})")
        else:
            placed.append((ceilings, dot, None if starter is None else _dot("starter", starter)))
    if not placed:
        return None
    counts: dict[tuple[float, float], int] = {}
    for ceilings, _, _ in placed:
        key = (ceilings.peak_flops, ceilings.bandwidth)
        counts[key] = counts.get(key, 0) + 1
    common = max(counts, key=lambda key: counts[key])  # the first of the most common, on a tie
    chosen = next(c for c, _, _ in placed if (c.peak_flops, c.bandwidth) == common)
    points, starter = [], None
    for ceilings, dot, reference in placed:
        if (ceilings.peak_flops, ceilings.bandwidth) != common:
            left_out.append(
                f"{dot.file}: profiled on a GPU with other ceilings "
                f"({ceilings.peak_flops / 1e12:.1f} TFLOP/s, {ceilings.bandwidth / 1e12:.2f} TB/s)"
            )
            continue
        points.append(dot)
        starter = starter or reference
    return RooflineChart(chosen, points, starter, left_out)
