"""The roofline's records: what a GPU said of itself, its two roofs, and a kernel's point under them.

The arithmetic that makes them is the measuring stage's (`measure.roofline`, `measure.gpu_facts`); the
records sit below it, so the profile's record and the reports hold them without reaching that stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypedDict

from labrunner.records.serialize import JsonRecord


class GpuFacts(TypedDict, total=False):
    """What a GPU said of itself (`gpu_facts.read_gpu_facts`), each fact None where it could not be read;
    a fact left out reads as unknown too."""

    sm_count: int | None
    compute_capability: list[int] | None  # [major, minor]
    max_sm_clock_mhz: int | None
    max_memory_clock_mhz: int | None
    memory_bus_width_bits: int | None
    measured_copy_bytes_per_s: float | None  # only where NVML gave no memory clock


@dataclass(frozen=True)
class Ceilings(JsonRecord):
    """The two roofs of one GPU, with where each figure came from."""

    peak_flops: float
    bandwidth: float  # bytes per second
    peak_source: str
    bandwidth_source: str

    json_layout = ("peak_flops", "bandwidth", "peak_source", "bandwidth_source", "ridge_flop_per_byte")

    @property
    def ridge(self) -> float:
        """FLOP per byte where the two roofs meet."""
        return self.peak_flops / self.bandwidth

    @property
    def ridge_flop_per_byte(self) -> float:
        return self.ridge


@dataclass(frozen=True)
class RooflinePoint(JsonRecord):
    """A kernel (or a whole call) under the roofline, its figures as `measure.roofline.Point` computed them."""

    flops: float
    dram_bytes: float
    seconds: float
    achieved_flops_per_s: float
    achieved_bytes_per_s: float
    intensity_flop_per_byte: float | None  # None where no DRAM byte was counted
    attainable_flops_per_s: float
    bound: str  # "memory-bound" or "compute-bound"
    fraction_of_roof: float
    verdict: str

    @classmethod
    def of(cls, point: PlacedPoint) -> RooflinePoint:
        return point.summary()


class PlacedPoint(Protocol):
    """`measure.roofline.Point`, named by what is read of it: the records sit below the measuring stage."""

    def summary(self) -> RooflinePoint: ...
