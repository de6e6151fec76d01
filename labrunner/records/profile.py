"""`attnlab profile`'s record (schema attnlab.profile/1): the Trace timeline, the Range pass, the roofline, the model.

The measuring stage hands up these records and their pieces (`KernelMetrics` from ncu's CSV, the roofline's
`Ceilings` and `RooflinePoint`, the lesson's `Traffic`, the trace's launches as `KernelSlice`); the records
here put them together as the report reads them, and derive, once, the figures the report shows beside them:
each call's total and span on the timeline, and the DRAM bytes ncu counted against the lesson's model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labrunner.records.kernel_slice import KernelSlice
from labrunner.records.roofline import Ceilings, GpuFacts, RooflinePoint
from labrunner.records.serialize import JsonRecord, figure, key
from labrunner.records.traffic import Traffic

OMIT_NONE = key(omit_none=True)

SCHEMA = "attnlab.profile/1"


# --- the Trace timeline -----------------------------------------------------------------------


@dataclass(frozen=True)
class TraceCall(JsonRecord):
    """One call at one shape on the timeline: its launches in order, their summed GPU time, and the time
    from the first one's start to the last one's end (gaps between launches included)."""

    shape: str
    call: int
    launches: tuple[KernelSlice, ...]

    json_layout = ("shape", "call", "total_ms", "span_ms")  # the launches are the trace's own `slices`

    @property
    def total_ms(self) -> float:
        return sum(s.duration_ms for s in self.launches)

    @property
    def span_ms(self) -> float:
        return (self.launches[-1].end_ns - self.launches[0].start_ns) / 1e6


@dataclass(frozen=True)
class Trace(JsonRecord):
    """K calls at every timing shape, every launch's GPU start and end (CUPTI's records, else CUDA events)."""

    source: str  # "cupti" or "events"
    why_not_cupti: str | None
    cupti_version: str | None
    calls: int  # calls per shape
    shapes: list[str]
    slices: list[KernelSlice]
    file: str | None = None  # the Perfetto trace written, where --trace asked for one

    json_layout = ("source", "why_not_cupti", "cupti_version", "calls", "shapes", "slices", "file", "call_totals",
                   "longest_call_ms")  # fmt: skip

    def calls_at(self, shape: str) -> list[TraceCall]:
        """The calls at `shape`, by call number, each with its launches in the order they ran."""
        calls: dict[int, list[KernelSlice]] = {}
        for s in self.slices:
            if s.shape == shape:
                calls.setdefault(s.call, []).append(s)
        return [TraceCall(shape, call, tuple(launches)) for call, launches in sorted(calls.items())]

    def longest_ms(self, shape: str) -> float:
        """The longest call's summed GPU time at `shape`: the length of a full bar."""
        return max((call.total_ms for call in self.calls_at(shape)), default=0.0)

    @property
    def kernels(self) -> list[str]:
        """Every kernel traced, in the order each first ran."""
        return list(dict.fromkeys(s.kernel for s in self.slices))

    @property
    def call_totals(self) -> list[TraceCall]:
        """Every call's total and span, shape by shape."""
        return [call for shape in self.shapes for call in self.calls_at(shape)]

    @property
    def longest_call_ms(self) -> dict[str, float]:
        return {shape: self.longest_ms(shape) for shape in self.shapes}


# --- the roofline -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RooflineCeilings(JsonRecord):
    """What the GPU said of itself, and the two roofs from it (or why there are none); the profile writes
    these keys among its own."""

    gpu_facts: GpuFacts = field(default_factory=lambda: GpuFacts())
    ceilings: Ceilings | None = None
    problem: str | None = field(default=None, metadata=key(name="ceilings_problem"))  # why there are no ceilings

    json_layout = ("gpu_facts", "problem", "ceilings")


# --- the Range pass ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RangeShape(JsonRecord):
    label: str
    rows: int | None = None
    prefix: int | None = None


@dataclass
class KernelMetrics(JsonRecord):
    """One profiled launch as ncu's CSV gave it (`measure.range_pass.parse_ncu_csv`): which kernel, and its
    counters in base units (ns, bytes, percent, counts), written among its own keys."""

    index: int = field(metadata=key(absent=0))
    kernel: str
    block: str = field(metadata=key(absent=""))
    grid: str = field(metadata=key(absent=""))
    values: dict[str, float | None] = field(default_factory=dict, metadata=key(inline=True))

    json_layout = ("index", "kernel", "block", "grid", "values", "dram_bytes")

    @property
    def dram_bytes(self) -> float | None:
        read, write = self.values.get("dram_read_bytes"), self.values.get("dram_write_bytes")
        return None if read is None or write is None else read + write


@dataclass(frozen=True)
class RangeKernel(JsonRecord):
    """One profiled launch: ncu's counters (base units), the lab's FLOPs for it, and its roofline point."""

    metrics: KernelMetrics = field(metadata=key(inline=True))
    flops: float | None
    point: RooflinePoint | None

    @property
    def kernel(self) -> str:
        return self.metrics.kernel

    @property
    def duration_ns(self) -> float | None:
        return self.metrics.values.get("duration_ns")

    @property
    def sm_throughput_pct(self) -> float | None:
        return self.metrics.values.get("sm_throughput_pct")

    @property
    def dram_read_bytes(self) -> float | None:
        return self.metrics.values.get("dram_read_bytes")

    @property
    def dram_write_bytes(self) -> float | None:
        return self.metrics.values.get("dram_write_bytes")

    @property
    def l2_hit_rate_pct(self) -> float | None:
        return self.metrics.values.get("l2_hit_rate_pct")

    @property
    def achieved_occupancy_pct(self) -> float | None:
        return self.metrics.values.get("achieved_occupancy_pct")

    @property
    def registers_per_thread(self) -> float | None:
        return self.metrics.values.get("registers_per_thread")

    @property
    def shared_bank_conflicts(self) -> float | None:
        return self.metrics.values.get("shared_bank_conflicts")

    @property
    def fma_pipe_pct(self) -> float | None:
        return self.metrics.values.get("fma_pipe_pct")


@dataclass(frozen=True)
class RangeContender(JsonRecord):
    """One file's call under ncu: each kernel's row, and the whole call's duration, DRAM bytes and point."""

    label: str
    role: str = field(metadata=key(absent=""))  # "student" or "starter"
    kernels: list[RangeKernel]
    duration_ms: float | None
    dram_bytes: float | None
    flops: float | None
    point: RooflinePoint | None


_UNSET: Any = object()  # a field the report never reached, so its key is absent (not null) in the JSON
PASS_RAN = key(only_if="available")  # the figures, once ncu's launches matched the ones made


@dataclass(frozen=True)
class RangeReport(JsonRecord):
    """Nsight Compute's Range pass over one call of each contender, or why there is none (`message`).

    Its JSON holds what the pass reached: only `available` and `message` where it was not asked for; the
    shape and the warm-up calls where ncu could not run; the GPU's facts (null where unreadable) once the
    target ran; every figure once ncu's launches matched the ones made."""

    available: bool
    message: str | None
    shape: RangeShape | None = field(default=None, metadata=OMIT_NONE)
    warmup_calls: int | None = field(default=None, metadata=key(only_if="shape"))
    gpu_facts: GpuFacts | None = field(default=_UNSET, metadata=key(only_if="facts_read"))
    seconds: float | None = field(default=None, metadata=PASS_RAN)
    command: list[str] | None = field(default=None, metadata=PASS_RAN)
    dropped_metrics: list[str] = field(default_factory=list, metadata=PASS_RAN)
    contenders: list[RangeContender] = field(default_factory=list, metadata=PASS_RAN)

    json_layout = ("shape", "warmup_calls", "gpu_facts", "available", "message", "seconds", "command",
                   "dropped_metrics", "contenders")  # fmt: skip

    @property
    def facts_read(self) -> bool:
        return self.gpu_facts is not _UNSET

    @property
    def facts(self) -> GpuFacts | None:
        return self.gpu_facts if self.facts_read else None


@dataclass(frozen=True)
class TraceVsNcu(JsonRecord):
    """A student's kernel at the Range pass's shape: the trace's median beside ncu's one duration."""

    kernel: str
    trace_median_ms: float
    ncu_ms: float

    json_layout = ("kernel", "trace_median_ms", "ncu_ms", "difference")

    @property
    def difference(self) -> float:
        """The trace's median over ncu's duration, less one (0.05: the trace is 5% longer)."""
        return self.trace_median_ms / self.ncu_ms - 1


# --- the model beside what ncu counted ------------------------------------------------------------


@dataclass(frozen=True)
class MustMove(JsonRecord):
    """A lab's own model of the least bytes one call must move at the profiled shape (`Lab.bytes_to_move`)."""

    label: str
    bytes: int


PREFILL_ONLY = key(only_if="against_prefill")  # a decode batch is set against its bytes to move alone


@dataclass(frozen=True)
class DramBesideModel(JsonRecord):
    """The DRAM bytes ncu counted for one contender's call, as multiples of the model's figures: of the
    lesson's flash and naive traffic (a prefill), or of the bytes the lab says must move (a decode batch)."""

    label: str
    dram_bytes: float
    times_flash: float | None = field(default=None, metadata=PREFILL_ONLY)
    times_naive: float | None = field(default=None, metadata=PREFILL_ONLY)
    times_must_move: float | None = field(default=None, metadata=OMIT_NONE)

    @property
    def against_prefill(self) -> bool:
        return self.times_must_move is None


# --- the whole profile ---------------------------------------------------------------------------


@dataclass
class Profile(JsonRecord):
    """Everything `attnlab profile` found, or `--profile`'s Range pass alone.

    Mutable because it fills step by step as the command goes on, and its JSON holds what was reached:
    only the schema where the kernel failed its check (nothing more is profiled), then the trace with the
    GPU's facts and ceilings, the model, the Range pass (after which the ceilings may come from ncu's own
    facts), the trace beside ncu, and the plot where one was drawn."""

    trace: Trace | None = field(default=None, metadata=OMIT_NONE)
    roofline: RooflineCeilings | None = field(default=None, metadata=key(inline=True, omit_none=True))
    # why a lab without a starter has no row to compare with
    no_starter_row: str | None = field(default=None, metadata=OMIT_NONE)
    traffic: Traffic | None = field(default=None, metadata=OMIT_NONE)  # the lesson's prefill model
    # or the lab's own bytes that must move (a decode batch)
    must_move: MustMove | None = field(default=None, metadata=OMIT_NONE)
    range: RangeReport | None = field(default=None, metadata=OMIT_NONE)
    # only where the Range pass was asked for
    trace_vs_ncu: list[TraceVsNcu] | None = field(default=None, metadata=OMIT_NONE)
    plot: str | None = field(default=None, metadata=OMIT_NONE)
    schema: str = field(default=SCHEMA, init=False)

    json_layout = ("schema", "trace", "roofline", "no_starter_row", "traffic", "must_move", "range", "trace_vs_ncu",
                   figure("dram_beside_model", omit_empty=True), "plot")  # fmt: skip

    @property
    def ceilings(self) -> Ceilings | None:
        return None if self.roofline is None else self.roofline.ceilings

    @property
    def ceilings_problem(self) -> str | None:
        return None if self.roofline is None else self.roofline.problem

    @property
    def measured(self) -> list[RangeContender]:
        """The contenders whose DRAM bytes ncu counted (none where the pass did not run)."""
        if self.range is None or not self.range.available:
            return []
        return [c for c in self.range.contenders if c.dram_bytes]

    @property
    def dram_beside_model(self) -> list[DramBesideModel]:
        """Each measured contender's DRAM bytes against the model this profile holds."""
        rows = []
        for contender in self.measured:
            measured = contender.dram_bytes or 0.0
            if self.traffic is not None:
                rows.append(
                    DramBesideModel(
                        contender.label,
                        measured,
                        times_flash=measured / self.traffic.flash_bytes,
                        times_naive=measured / self.traffic.naive_bytes,
                    )
                )
            elif self.must_move is not None:
                rows.append(DramBesideModel(contender.label, measured, times_must_move=measured / self.must_move.bytes))
        return rows
