"""What no honest time can show: bytes moved faster than this GPU's memory moves them, or arithmetic
done faster than its tensor cores do it.

Every time bench and grade post is the time of some work: lab 1's kernels and its whole call, lab 2's
call, lab 3's decode, and the baselines and peers beside them. The work sets two floors under that
time. The bytes its duty makes it read and write at least once must cross the memory bus, which moves
no more than so many bytes a second; its FLOPs must be done, and no arithmetic is faster than the
tensor cores'. A time under either floor is not the time of that work: a kernel skipped part of it, on
some calls or in some launches, or left it to another kernel. The output checks cannot see every such
trick (work moved from one of lab 1's kernels to the next leaves the output right); the floor sees
all of them. `impossible` is that rule, the one place it is written: a figure past it makes the run
`wrong`, and nothing of that run is timed.

The memory's speed is measured, not looked up: a device-to-device copy timed in the same worker,
between the same cache flushes (`timed_runs.DeviceCopy`). Each figure's fastest call is held to the
copy's fastest call, so every time the report can show (a median, a round's, an input set's) is
covered by the one check. Two things let honest work beat bytes / copy bandwidth, and both are
allowed for:

* A copy reads and writes equal amounts, and the memory loses cycles turning its bus around between
  the two; a kernel that mostly reads goes a little faster. Lab 3's decode, which reads all but its
  small output, reaches 1.01 to 1.03 of the copy on an H200. `COPY_MARGIN` sits above that and below
  the memory's own peak (NVML's clock x bus: 1.15 to 1.19 of the copy there): no honest kernel reaches it.
* L2 may spare a figure some bytes. What a kernel writes may still sit in L2 when its end event is
  recorded, and a kernel timed inside a call (lab 1's) may find what the kernel before it wrote
  still in L2. Each of those parts is spared up to one L2 (`l2_parts`); the cache flush before
  every call leaves nothing else there, so the inputs come from memory.

The arithmetic's speed is counted from the hardware (`roofline.tensor_core_peak`): SMs x maximum
clock x dense FP16 tensor-core FLOP per clock, the fastest arithmetic a float32 product that meets
the lab's tolerance can run on. Where the GPU's capability has no known rate, the FLOP floor is left
out, and the figures say so (`Limits.to_json`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labrunner.measure.roofline import tensor_core_peak
from labrunner.records.roofline import GpuFacts

MIB = 1024 * 1024
# How far past the same run's device copy a figure's bytes may go (see the module's docstring).
COPY_MARGIN = 1.10


@dataclass(frozen=True)
class Limits:
    """What one run's figures are held to: its device copy at its fastest (bytes read plus written per
    second; None where no copy was timed), its GPU's L2, and its tensor-core peak (None: unknown)."""

    copy_bytes_per_s: float | None
    l2_bytes: int
    peak_flops: float | None
    peak_source: str  # how the peak was counted, or why there is none

    def to_json(self) -> dict[str, Any]:
        return {
            "copy_tb_s": None if self.copy_bytes_per_s is None else self.copy_bytes_per_s / 1e12,
            "copy_margin": COPY_MARGIN,
            "l2_bytes": self.l2_bytes,
            "peak_tflop_s": None if self.peak_flops is None else self.peak_flops / 1e12,
            "peak_source": self.peak_source,
        }


def limits(copies: list[dict[str, Any]], l2_bytes: int, facts: GpuFacts | None) -> Limits:
    """A run's limits from its workers' replies: `copies` are their device copies (`{"bytes", "stats"}`,
    the fastest of them counts), `facts` what the GPU said of itself (`gpu_facts.read_gpu_facts`)."""
    rates = [
        2 * copy["bytes"] / (copy["stats"]["min_ms"] * 1e-3) for copy in copies if copy and copy["stats"]["min_ms"] > 0
    ]
    peak, source = tensor_core_peak(facts or {})
    return Limits(max(rates) if rates else None, int(l2_bytes), peak, source)


def impossible(
    what: str, fastest_ms: float, must_move: int, flops: float, bounds: Limits, l2_parts: tuple[int, ...] = ()
) -> str | None:
    """Why a figure cannot be the time of its work, in one line, or None where it can be.

    `what` names the figure ("attn_softmax at T=2048"); `fastest_ms` is its fastest timed call;
    `must_move` the bytes its duty makes it read and write at least once; `flops` its arithmetic (0:
    none counted); `l2_parts` the parts of those bytes that L2 may hold instead of the memory: each
    kernel's writes, and what a kernel reads of an earlier kernel's output in the same call. Each
    part is spared up to one L2.
    """
    seconds = fastest_ms * 1e-3
    spared = min(must_move, sum(min(part, bounds.l2_bytes) for part in l2_parts))
    if bounds.copy_bytes_per_s and must_move > spared:
        limit = COPY_MARGIN * bounds.copy_bytes_per_s
        if seconds <= 0 or (must_move - spared) / seconds > limit:
            rate = must_move / seconds if seconds > 0 else float("inf")
            rest = (must_move - spared) / seconds / bounds.copy_bytes_per_s if seconds > 0 else float("inf")
            left = f"even with {_mib(spared)} MiB of it left to L2, the rest" if spared else "that"
            return (
                f"faster than this GPU can move the bytes: {what} moved {_mib(must_move)} MiB in "
                f"{_ms(fastest_ms)} ms (its fastest timed call) = {_tb_s(rate)} TB/s, above this run's "
                f"device copy ({_tb_s(bounds.copy_bytes_per_s)} TB/s); {left} needs {rest:.2f}x the "
                f"copy's bandwidth, and no kernel reaches {COPY_MARGIN:.2f}x: a kernel that does all of its "
                "own work on every call cannot be this fast, so no time is reported"
            )
    if bounds.peak_flops and flops > 0 and (seconds <= 0 or flops / seconds > bounds.peak_flops):
        rate = flops / seconds if seconds > 0 else float("inf")
        return (
            f"faster than this GPU can compute: {what} did {flops / 1e9:,.2f} GFLOP in {_ms(fastest_ms)} ms "
            f"(its fastest timed call) = {rate / 1e12:,.0f} TFLOP/s, above this GPU's tensor-core peak "
            f"({bounds.peak_flops / 1e12:,.0f} TFLOP/s: {bounds.peak_source}): a kernel that does all of its "
            "own work on every call cannot be this fast, so no time is reported"
        )
    return None


# Figures as a reader takes them in: three decimals (or whole MiB) at the sizes the labs time, and
# three significant digits below them, so a small figure never prints as 0.
def _ms(value: float) -> str:
    return f"{value:.3f}" if value >= 0.01 else f"{value:.3g}"


def _mib(count: float) -> str:
    return f"{count / MIB:,.0f}" if count >= 10 * MIB else f"{count / MIB:.3g}"


def _tb_s(rate: float) -> str:
    return f"{rate / 1e12:.2f}" if rate >= 0.1e12 else f"{rate / 1e12:.3g}"
