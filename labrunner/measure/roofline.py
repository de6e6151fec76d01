"""The roofline: a GPU's two ceilings, a kernel's point under them, and the verdict in words.

A kernel does `flops` of arithmetic and moves `bytes` through HBM. Its arithmetic intensity,
flops / bytes, places it on the x axis. The GPU has two ceilings: the arithmetic peak (here FP32,
what the labs compute in) and the HBM bandwidth. At intensity I the attainable rate is
min(peak, I * bandwidth); the two meet at the ridge point, peak / bandwidth FLOP per byte. Left of
the ridge a kernel is memory-bound (move fewer bytes), right of it compute-bound (do less
arithmetic, or do it at a faster precision). `lesson_roofline` is the lesson's function as
written; `place` adds the measured time, so the verdict can say how close to its roof a kernel is.

The FP32 peak is counted from the hardware, not looked up: SMs x clock x FP32 lanes per SM x 2
(a fused multiply-add is two FLOPs). An H200 has 132 SMs with 128 FP32 lanes each at up to
1.98 GHz: 132 * 1.98e9 * 128 * 2 = 66.9 TFLOP/s. HBM bandwidth is the memory clock x the bus width
x 2 (HBM moves data on both clock edges), both read from NVML; where NVML cannot say, a timed
device-to-device copy stands in, and the figures say which (`gpu_facts` reads them on the GPU side;
this module is arithmetic only and runs anywhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labrunner.records.roofline import Ceilings, GpuFacts, RooflinePoint

# FP32 fused multiply-add lanes per SM, by compute capability (major, minor): the CUDA C++
# Programming Guide's table of arithmetic instruction throughput. 7.x and 8.0 have 64; 8.6 and
# later consumer parts, Hopper and Blackwell have 128.
FP32_LANES_PER_SM: dict[tuple[int, ...], int] = {
    (7, 0): 64,
    (7, 2): 64,
    (7, 5): 64,
    (8, 0): 64,
    (8, 6): 128,
    (8, 7): 128,
    (8, 9): 128,
    (9, 0): 128,
    (10, 0): 128,
    (10, 3): 128,
    (12, 0): 128,
    (12, 1): 128,
}
FLOPS_PER_FMA = 2

# Dense FP16 tensor-core FLOP per clock per SM (a multiply-add counts two), by compute capability:
# NVIDIA's datasheet peaks over SMs x boost clock (V100 125 TFLOP/s, A100 312, H100 SXM 989; the
# consumer parts at FP16 accumulation, their faster rate). It is the ceiling `physics` holds every
# timed figure to, because no arithmetic a lab's float32 products can run on is faster: one FP16
# product per float32 product already sits at the edge of the lab's tolerance (TF32, with the same
# mantissa, fails some seeds), and the faster types need several products per float32 product to
# reach that precision (an INT8 operand split in two slices makes three products at twice the FP16
# rate; FP8 and INT4 need more slices), so a float32 product costs them more than one FP16 product;
# 2:4 sparsity needs zeros the inputs do not have. A capability missing here has no known ceiling.
TENSOR_FP16_FLOP_PER_CLOCK: dict[tuple[int, ...], int] = {
    (7, 0): 1024,
    (7, 5): 1024,
    (8, 0): 2048,
    (8, 6): 1024,
    (8, 9): 1024,
    (9, 0): 4096,
    (10, 0): 8192,
    (12, 0): 1024,
}


def lesson_roofline(
    flops: float, bytes_moved: float, peak_flops: float, bw_bytes_per_s: float
) -> tuple[float, float, float, str]:
    """The lesson's `roofline`: (intensity, ridge, attainable FLOP/s, "memory-bound" or "compute-bound")."""
    ai = flops / bytes_moved
    ridge = peak_flops / bw_bytes_per_s
    attainable = min(peak_flops, ai * bw_bytes_per_s)
    bound = "memory-bound" if ai < ridge else "compute-bound"
    return ai, ridge, attainable, bound


def fp32_lanes(compute_capability: tuple[int, ...]) -> int | None:
    return FP32_LANES_PER_SM.get(tuple(compute_capability))


def fp32_peak_flops(sm_count: int, clock_hz: float, lanes_per_sm: int) -> float:
    """SMs x clock x lanes x 2: every lane finishes one fused multiply-add per clock."""
    return sm_count * clock_hz * lanes_per_sm * FLOPS_PER_FMA


def tensor_core_peak(facts: GpuFacts) -> tuple[float | None, str]:
    """The dense FP16 tensor-core peak from what the GPU said of itself (`read_gpu_facts`), FLOP/s,
    with how it was counted; or None and why not."""
    capability = tuple(facts.get("compute_capability") or (0, 0))
    per_clock = TENSOR_FP16_FLOP_PER_CLOCK.get(capability)
    sms, clock_mhz = facts.get("sm_count"), facts.get("max_sm_clock_mhz")
    if not per_clock:
        return None, f"no tensor-core rate is known for compute capability {facts.get('compute_capability')}"
    if not sms or not clock_mhz:
        return None, "the GPU reported no SM count or clock, so its tensor-core peak is unknown"
    return (sms * clock_mhz * 1e6 * per_clock, f"{sms} SMs x {clock_mhz} MHz x {per_clock} FLOP per clock, dense FP16")


def hbm_bandwidth(memory_clock_hz: float, bus_width_bits: int) -> float:
    """Bytes per second: both clock edges carry data (double data rate) across the whole bus."""
    return memory_clock_hz * 2 * bus_width_bits / 8


def ceilings_from_facts(facts: GpuFacts) -> tuple[Ceilings | None, str | None]:
    """The ceilings from what the GPU said of itself (see `read_gpu_facts`), or None and why not."""
    lanes = fp32_lanes(tuple(facts.get("compute_capability") or (0, 0)))
    sms, clock_mhz = facts.get("sm_count"), facts.get("max_sm_clock_mhz")
    if not lanes:
        return None, f"no FP32 lane count is known for compute capability {facts.get('compute_capability')}"
    if not sms or not clock_mhz:
        return None, "the GPU reported no SM count or clock, so its FP32 peak is unknown"
    peak = fp32_peak_flops(sms, clock_mhz * 1e6, lanes)
    peak_source = f"{sms} SMs x {clock_mhz} MHz x {lanes} FP32 lanes x 2 FLOP per FMA"
    mem_mhz, bus = facts.get("max_memory_clock_mhz"), facts.get("memory_bus_width_bits")
    measured = facts.get("measured_copy_bytes_per_s")
    if mem_mhz and bus:
        bandwidth = hbm_bandwidth(mem_mhz * 1e6, bus)
        bandwidth_source = f"NVML: {mem_mhz} MHz x 2 (double data rate) x {bus}-bit bus"
    elif measured:
        bandwidth = measured
        bandwidth_source = "a timed device-to-device copy (bytes read plus written), NVML gave no memory clock"
    else:
        return None, "neither NVML nor a device copy gave this GPU's memory bandwidth"
    return Ceilings(peak, bandwidth, peak_source, bandwidth_source), None


@dataclass(frozen=True)
class Point:
    """One kernel (or one whole call) under the roofline."""

    flops: float
    dram_bytes: float
    seconds: float
    ceilings: Ceilings

    @property
    def achieved_flops(self) -> float:
        return self.flops / self.seconds

    @property
    def achieved_bandwidth(self) -> float:
        return self.dram_bytes / self.seconds

    @property
    def intensity(self) -> float:
        return self.flops / self.dram_bytes if self.dram_bytes else float("inf")

    @property
    def bound(self) -> str:
        return "memory-bound" if self.intensity < self.ceilings.ridge else "compute-bound"

    @property
    def attainable(self) -> float:
        return min(self.ceilings.peak_flops, self.intensity * self.ceilings.bandwidth)

    @property
    def fraction_of_roof(self) -> float:
        """How much of the roof above it the kernel reaches: FP32 peak if compute-bound, bandwidth if not."""
        if self.bound == "compute-bound":
            return self.achieved_flops / self.ceilings.peak_flops
        return self.achieved_bandwidth / self.ceilings.bandwidth

    @property
    def verdict(self) -> str:
        if self.bound == "compute-bound" and self.fraction_of_roof > 1:
            # No FP32 FMA pipe goes past its peak: the products ran on the tensor cores (lab 1's and the
            # expert's split-precision matmuls do), and their roof is not one this plot draws.
            return (
                f"compute-bound: {self.achieved_flops / 1e12:.1f} TFLOP/s, above the FP32 roof "
                f"({100 * self.fraction_of_roof:.0f}%): the tensor cores did the products, and their "
                "roof is not drawn here"
            )
        if self.bound == "compute-bound":
            return (
                f"compute-bound: {self.achieved_flops / 1e12:.1f} TFLOP/s, "
                f"{100 * self.fraction_of_roof:.0f}% of the FP32 roof"
            )
        return f"memory-bound: {self.intensity:.1f} FLOP/B, {100 * self.fraction_of_roof:.0f}% of HBM bandwidth"

    def summary(self) -> RooflinePoint:
        """The point as the profile's record holds it: every figure computed once, here."""
        return RooflinePoint(
            flops=self.flops,
            dram_bytes=self.dram_bytes,
            seconds=self.seconds,
            achieved_flops_per_s=self.achieved_flops,
            achieved_bytes_per_s=self.achieved_bandwidth,
            intensity_flop_per_byte=self.intensity if self.dram_bytes else None,
            attainable_flops_per_s=self.attainable,
            bound=self.bound,
            fraction_of_roof=self.fraction_of_roof,
            verdict=self.verdict,
        )

    def to_json(self) -> dict[str, Any]:
        return self.summary().to_json()
