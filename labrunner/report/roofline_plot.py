"""The roofline as a picture (`attnlab profile --plot PATH.png`), with matplotlib from the `profile` extra.

Log-log axes: arithmetic intensity (FLOP per DRAM byte) across, FLOP/s up. The slanted roof is
the HBM bandwidth times the intensity, the flat one the FP32 peak; they meet at the ridge point.
Each measured kernel is a point; one far below its roof has room the roofline does not explain
(occupancy, latency, bank conflicts: the Range pass's other columns).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from labrunner.exit_codes import environment_error


def require_matplotlib() -> ModuleType:
    """pyplot, drawing to files only; or the error that says how to install it (asked before any work)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise environment_error(
            "--plot needs matplotlib, which is not installed: pip install 'attnlab[profile]'"
        ) from None
    pyplot: ModuleType = plt  # matplotlib here ships no type information
    return pyplot


def plot_roofline(ceilings: dict[str, Any], points: list[dict[str, Any]], title: str, path: Path) -> None:
    """`ceilings` and each point as in the profile's JSON (`label`, `intensity_flop_per_byte`,
    `achieved_flops_per_s`)."""
    plt = require_matplotlib()
    peak, bandwidth, ridge = ceilings["peak_flops"], ceilings["bandwidth"], ceilings["ridge_flop_per_byte"]
    placed = [p for p in points if p.get("intensity_flop_per_byte")]
    low = min([ridge / 100] + [p["intensity_flop_per_byte"] / 4 for p in placed])
    high = max([ridge * 100] + [p["intensity_flop_per_byte"] * 4 for p in placed])
    figure, axes = plt.subplots(figsize=(8, 5))
    xs = [low, ridge, high]
    axes.loglog(xs, [min(peak, x * bandwidth) for x in xs], color="black", linewidth=2)
    axes.axvline(ridge, color="grey", linestyle=":", linewidth=1)
    axes.annotate(f"ridge {ridge:.1f} FLOP/B", (ridge, peak), textcoords="offset points", xytext=(6, -14))
    axes.annotate(f"FP32 peak {peak / 1e12:.1f} TFLOP/s", (high, peak), textcoords="offset points", xytext=(-150, 6))
    axes.annotate(f"HBM {bandwidth / 1e12:.2f} TB/s", (low, low * bandwidth), textcoords="offset points", xytext=(6, 6))
    for point in placed:
        axes.plot(
            point["intensity_flop_per_byte"],
            point["achieved_flops_per_s"],
            "o",
            markersize=8,
            label=f"{point['label']}: {point['verdict']}",
        )
    axes.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
    axes.set_ylabel("FLOP/s")
    axes.set_title(title)
    if placed:
        axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
