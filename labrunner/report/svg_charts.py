"""The course report's two charts as inline SVG: a histogram of the batch's graded figure and a roofline.

Inline SVG needs nothing the page does not carry (no script, no library, no network), scales with the
page, and prints. Every text drawn here is passed through `html.escape` (file names reach the bars'
and points' tooltips), so a student's file name is only ever text in the picture.

The roofline is drawn as records/profile.py and measure/roofline.py define it: log-log axes,
arithmetic intensity (FLOP per DRAM byte) across and attained FLOP/s up; the slanted roof is the
HBM bandwidth times the intensity, the flat one the FP32 peak, and they meet at the ridge point.
"""

from __future__ import annotations

import html
import math

from labrunner.report.course_figures import Distribution, RooflineChart, RooflineDot, histogram

WIDTH = 760
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 24, 28, 60


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _n(x: float) -> str:
    """A coordinate, short: the SVG needs no more than a tenth of a pixel."""
    return f"{x:.1f}"


def figure_text(value: float, percent: bool) -> str:
    return f"{100 * value:.4g}%" if percent else f"{value:.4g}"


def si(value: float, unit: str) -> str:
    """1.2e13 FLOP/s as '12 TFLOP/s': the prefixes a GPU's figures need."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def histogram_svg(distribution: Distribution) -> str:
    """Bars of how many submissions fall in each bin, the count over each, a dashed line at the gate."""
    bins = histogram(distribution.values)
    height = 300
    plot_w, plot_h = WIDTH - MARGIN_LEFT - MARGIN_RIGHT, height - MARGIN_TOP - MARGIN_BOTTOM
    low, high = bins[0].low, bins[-1].high
    threshold = distribution.threshold
    if threshold is not None:
        low, high = min(low, threshold), max(high, threshold)
    most = max(b.count for b in bins)
    y_step = max(1, math.ceil(most / 5))
    y_top = y_step * (most // y_step + 1)  # a step of headroom, so the tallest bar's count fits above it

    def sx(v: float) -> float:
        return MARGIN_LEFT + (v - low) / (high - low) * plot_w

    def sy(count: float) -> float:
        return MARGIN_TOP + plot_h - count / y_top * plot_h

    label = distribution.title
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" '
        f'aria-label="{esc(label)}">'
    ]
    for tick in range(0, y_top + 1, y_step):
        y = sy(tick)
        parts.append(f'<line class="grid" x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT + plot_w}" y1="{_n(y)}" y2="{_n(y)}"/>')
        parts.append(f'<text class="tick" x="{MARGIN_LEFT - 8}" y="{_n(y + 4)}" text-anchor="end">{tick}</text>')
    for b in bins:
        x0, x1 = sx(b.low), sx(b.high)
        where = f"{figure_text(b.low, distribution.percent)} to {figure_text(b.high, distribution.percent)}"
        who = ", ".join(b.files)
        tip = f"{where}: {b.count} submission{'s' if b.count != 1 else ''}" + (f" ({who})" if who else "")
        if b.count:
            y = sy(b.count)
            parts.append(
                f'<rect class="bar" x="{_n(x0 + 1)}" y="{_n(y)}" width="{_n(max(x1 - x0 - 2, 1))}" '
                f'height="{_n(MARGIN_TOP + plot_h - y)}"><title>{esc(tip)}</title></rect>'
            )
            parts.append(
                f'<text class="count" x="{_n((x0 + x1) / 2)}" y="{_n(y - 5)}" text-anchor="middle">{b.count}</text>'
            )
    edges = [bins[0].low] + [b.high for b in bins]
    for edge in edges:
        x = sx(edge)
        parts.append(
            f'<line class="axis" x1="{_n(x)}" x2="{_n(x)}" y1="{MARGIN_TOP + plot_h}" y2="{MARGIN_TOP + plot_h + 5}"/>'
        )
        parts.append(
            f'<text class="tick" x="{_n(x)}" y="{MARGIN_TOP + plot_h + 19}" text-anchor="middle">'
            f"{esc(figure_text(edge, distribution.percent))}</text>"
        )
    parts.append(
        f'<line class="axis" x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT + plot_w}" y1="{MARGIN_TOP + plot_h}" '
        f'y2="{MARGIN_TOP + plot_h}"/>'
    )
    if threshold is not None:
        x = sx(threshold)
        parts.append(
            f'<line class="gate" x1="{_n(x)}" x2="{_n(x)}" y1="{MARGIN_TOP - 10}" y2="{MARGIN_TOP + plot_h}"/>'
        )
        parts.append(
            f'<text class="gate-label" x="{_n(x + 5)}" y="{MARGIN_TOP - 2}">'
            f"gate {esc(distribution.threshold_text)}</text>"
        )
    parts.append(
        f'<text class="label" x="{MARGIN_LEFT + plot_w / 2}" y="{height - 14}" text-anchor="middle">'
        f"{esc(distribution.axis)}</text>"
    )
    parts.append(
        f'<text class="label" transform="translate(16 {MARGIN_TOP + plot_h / 2}) rotate(-90)" '
        'text-anchor="middle">submissions</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _decades(low: float, high: float) -> tuple[int, int]:
    return math.floor(math.log10(low)), math.ceil(math.log10(high))


def roofline_svg(chart: RooflineChart) -> str:
    """The two roofs, the ridge, each student's call as a dot and the starter's as a hollow square."""
    height = 440
    plot_w, plot_h = WIDTH - MARGIN_LEFT - MARGIN_RIGHT - 10, height - MARGIN_TOP - MARGIN_BOTTOM
    peak, bandwidth = chart.ceilings.peak_flops, chart.ceilings.bandwidth
    ridge = peak / bandwidth
    dots = chart.points + ([chart.starter] if chart.starter else [])
    x_lo, x_hi = _decades(
        min([ridge / 10] + [d.intensity / 2 for d in dots]), max([ridge * 10] + [d.intensity * 2 for d in dots])
    )
    y_lo, y_hi = _decades(min([bandwidth * 10**x_lo] + [d.flops_per_s / 2 for d in dots]), peak * 1.2)

    def sx(v: float) -> float:
        return MARGIN_LEFT + (math.log10(v) - x_lo) / (x_hi - x_lo) * plot_w

    def sy(v: float) -> float:
        return MARGIN_TOP + plot_h - (math.log10(v) - y_lo) / (y_hi - y_lo) * plot_h

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" '
        'aria-label="roofline of the passing kernels">'
    ]
    for k in range(x_lo, x_hi + 1):
        x = sx(10.0**k)
        parts.append(f'<line class="grid" x1="{_n(x)}" x2="{_n(x)}" y1="{MARGIN_TOP}" y2="{MARGIN_TOP + plot_h}"/>')
        parts.append(
            f'<text class="tick" x="{_n(x)}" y="{MARGIN_TOP + plot_h + 19}" text-anchor="middle">{10.0**k:g}</text>'
        )
    for k in range(y_lo, y_hi + 1):
        y = sy(10.0**k)
        parts.append(f'<line class="grid" x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT + plot_w}" y1="{_n(y)}" y2="{_n(y)}"/>')
        parts.append(
            f'<text class="tick" x="{MARGIN_LEFT - 8}" y="{_n(y + 4)}" text-anchor="end">{esc(si(10.0**k, ""))}</text>'
        )
    left, right = 10.0**x_lo, 10.0**x_hi
    roof = [(left, bandwidth * left), (ridge, peak), (right, peak)]
    parts.append(f'<polyline class="roof" points="{" ".join(f"{_n(sx(x))},{_n(sy(y))}" for x, y in roof)}"/>')
    parts.append(
        f'<line class="ridge" x1="{_n(sx(ridge))}" x2="{_n(sx(ridge))}" y1="{_n(sy(peak))}" '
        f'y2="{MARGIN_TOP + plot_h}"/>'
    )
    parts.append(
        f'<text class="roof-label" x="{_n(sx(right) - 4)}" y="{_n(sy(peak) - 7)}" text-anchor="end">'
        f"FP32 peak {esc(si(peak, 'FLOP/s'))}</text>"
    )
    slope = math.degrees(math.atan2(sy(bandwidth * left) - sy(peak), sx(ridge) - sx(left)))
    hbm_x = 10 ** ((x_lo + math.log10(ridge)) / 2)
    parts.append(
        f'<text class="roof-label" transform="translate({_n(sx(hbm_x))} {_n(sy(bandwidth * hbm_x) - 7)}) '
        f'rotate({_n(-slope)})" text-anchor="middle">HBM {esc(si(bandwidth, "B/s"))}</text>'
    )
    parts.append(
        f'<text class="ridge-label" x="{_n(sx(ridge) + 5)}" y="{MARGIN_TOP + plot_h - 6}">'
        f"ridge {ridge:.3g} FLOP/B</text>"
    )
    for dot in chart.points:
        parts.append(
            f'<circle class="dot {esc(_bound_class(dot))}" cx="{_n(sx(dot.intensity))}" cy="{_n(sy(dot.flops_per_s))}" '
            f'r="5.5"><title>{esc(dot_text(dot))}</title></circle>'
        )
    if chart.starter:
        s = chart.starter
        x, y = sx(s.intensity), sy(s.flops_per_s)
        parts.append(
            f'<rect class="starter" x="{_n(x - 5)}" y="{_n(y - 5)}" width="10" height="10">'
            f"<title>{esc(dot_text(s))}</title></rect>"
        )
    parts.append(
        f'<text class="label" x="{MARGIN_LEFT + plot_w / 2}" y="{height - 14}" text-anchor="middle">'
        "arithmetic intensity (FLOP per DRAM byte)</text>"
    )
    parts.append(
        f'<text class="label" transform="translate(16 {MARGIN_TOP + plot_h / 2}) rotate(-90)" '
        'text-anchor="middle">attained FLOP/s</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _bound_class(dot: RooflineDot) -> str:
    return "compute" if dot.bound == "compute-bound" else "memory"


def dot_text(dot: RooflineDot) -> str:
    """A point's tooltip and table row in words: whose call, where it sits, how close to its roof."""
    return (
        f"{dot.file}: {si(dot.flops_per_s, 'FLOP/s')} at {dot.intensity:.3g} FLOP/B, {dot.bound}, "
        f"{100 * dot.fraction_of_roof:.0f}% of its roof"
    )
