"""`attnlab profile`'s record (schema attnlab.profile/1): the Trace timeline, the Range pass, the roofline, the model.

The measuring stage hands up its own typed pieces (`measure.range_pass.KernelMetrics`, `measure.roofline.Ceilings`
and `Point`, `measure.traffic.Traffic`, the trace's launches as `measure.kernel_slice.KernelSlice`); the records
here put them together as the report reads them, and derive, once, the figures the report shows beside them:
each call's total and span on the timeline, and the DRAM bytes ncu counted against the lesson's model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labrunner.measure.kernel_slice import KernelSlice
from labrunner.measure.range_pass import KernelMetrics
from labrunner.measure.roofline import Ceilings, GpuFacts, Point
from labrunner.measure.traffic import Traffic, TrafficShape

SCHEMA = "attnlab.profile/1"


# --- the Trace timeline -----------------------------------------------------------------------


@dataclass(frozen=True)
class TraceCall:
    """One call at one shape on the timeline: its launches in order, their summed GPU time, and the time
    from the first one's start to the last one's end (gaps between launches included)."""

    shape: str
    call: int
    launches: tuple[KernelSlice, ...]

    @property
    def total_ms(self) -> float:
        return sum(s.duration_ms for s in self.launches)

    @property
    def span_ms(self) -> float:
        return (self.launches[-1].end_ns - self.launches[0].start_ns) / 1e6

    def to_json(self) -> dict[str, Any]:
        return {"shape": self.shape, "call": self.call, "total_ms": self.total_ms, "span_ms": self.span_ms}


@dataclass(frozen=True)
class Trace:
    """K calls at every timing shape, every launch's GPU start and end (CUPTI's records, else CUDA events)."""

    source: str  # "cupti" or "events"
    why_not_cupti: str | None
    cupti_version: str | None
    calls: int  # calls per shape
    shapes: list[str]
    slices: list[KernelSlice]
    file: str | None = None  # the Perfetto trace written, where --trace asked for one

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

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "why_not_cupti": self.why_not_cupti,
            "cupti_version": self.cupti_version,
            "calls": self.calls,
            "shapes": self.shapes,
            "slices": [s.to_json() for s in self.slices],
            "file": self.file,
            "call_totals": [call.to_json() for shape in self.shapes for call in self.calls_at(shape)],
            "longest_call_ms": {shape: self.longest_ms(shape) for shape in self.shapes},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trace:
        return cls(
            source=data["source"],
            why_not_cupti=data.get("why_not_cupti"),
            cupti_version=data.get("cupti_version"),
            calls=data["calls"],
            shapes=list(data["shapes"]),
            slices=[KernelSlice.from_json(s) for s in data["slices"]],
            file=data.get("file"),
        )


# --- the roofline -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RooflinePoint:
    """A kernel (or a whole call) under the roofline, as `measure.roofline.Point` reports it."""

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
    def of(cls, point: Point) -> RooflinePoint:
        return cls.from_json(point.to_json())

    def to_json(self) -> dict[str, Any]:
        return {
            "flops": self.flops,
            "dram_bytes": self.dram_bytes,
            "seconds": self.seconds,
            "achieved_flops_per_s": self.achieved_flops_per_s,
            "achieved_bytes_per_s": self.achieved_bytes_per_s,
            "intensity_flop_per_byte": self.intensity_flop_per_byte,
            "attainable_flops_per_s": self.attainable_flops_per_s,
            "bound": self.bound,
            "fraction_of_roof": self.fraction_of_roof,
            "verdict": self.verdict,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RooflinePoint:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


def point_from_json(data: dict[str, Any] | None) -> RooflinePoint | None:
    return None if data is None else RooflinePoint.from_json(data)


def ceilings_from_json(data: dict[str, Any] | None) -> Ceilings | None:
    if data is None:
        return None
    return Ceilings(data["peak_flops"], data["bandwidth"], data["peak_source"], data["bandwidth_source"])


@dataclass(frozen=True)
class RooflineCeilings:
    """What the GPU said of itself, and the two roofs from it (or why there are none)."""

    gpu_facts: GpuFacts
    ceilings: Ceilings | None
    problem: str | None  # why there are no ceilings, where there are none


# --- the Range pass ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RangeShape:
    label: str
    rows: int | None = None
    prefix: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "rows": self.rows, "prefix": self.prefix}


@dataclass(frozen=True)
class RangeKernel:
    """One profiled launch: ncu's counters (base units), the lab's FLOPs for it, and its roofline point."""

    metrics: KernelMetrics
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

    def to_json(self) -> dict[str, Any]:
        return {
            **self.metrics.to_json(),
            "flops": self.flops,
            "point": None if self.point is None else self.point.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RangeKernel:
        named = ("index", "kernel", "block", "grid", "dram_bytes", "flops", "point")
        metrics = KernelMetrics(
            data.get("index", 0),
            data["kernel"],
            data.get("block", ""),
            data.get("grid", ""),
            {k: v for k, v in data.items() if k not in named},
        )
        return cls(metrics, data.get("flops"), point_from_json(data.get("point")))


@dataclass(frozen=True)
class RangeContender:
    """One file's call under ncu: each kernel's row, and the whole call's duration, DRAM bytes and point."""

    label: str
    role: str  # "student" or "starter"
    kernels: list[RangeKernel]
    duration_ms: float | None
    dram_bytes: float | None
    flops: float | None
    point: RooflinePoint | None

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "role": self.role,
            "kernels": [k.to_json() for k in self.kernels],
            "duration_ms": self.duration_ms,
            "dram_bytes": self.dram_bytes,
            "flops": self.flops,
            "point": None if self.point is None else self.point.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RangeContender:
        return cls(
            label=data["label"],
            role=data.get("role", ""),
            kernels=[RangeKernel.from_json(k) for k in data["kernels"]],
            duration_ms=data.get("duration_ms"),
            dram_bytes=data.get("dram_bytes"),
            flops=data.get("flops"),
            point=point_from_json(data.get("point")),
        )


_UNSET: Any = object()  # a field the report never reached, so its key is absent (not null) in the JSON


@dataclass(frozen=True)
class RangeReport:
    """Nsight Compute's Range pass over one call of each contender, or why there is none (`message`).

    Its JSON holds what the pass reached: only `available` and `message` where it was not asked for; the
    shape and the warm-up calls where ncu could not run; the GPU's facts (null where unreadable) once the
    target ran; every figure once ncu's launches matched the ones made."""

    available: bool
    message: str | None
    shape: RangeShape | None = None
    warmup_calls: int | None = None
    gpu_facts: GpuFacts | None = _UNSET
    seconds: float | None = None
    command: list[str] | None = None
    dropped_metrics: list[str] = field(default_factory=list)
    contenders: list[RangeContender] = field(default_factory=list)

    @property
    def facts_read(self) -> bool:
        return self.gpu_facts is not _UNSET

    @property
    def facts(self) -> GpuFacts | None:
        return self.gpu_facts if self.facts_read else None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.shape is not None:
            data.update(shape=self.shape.to_json(), warmup_calls=self.warmup_calls)
        if self.facts_read:
            data["gpu_facts"] = self.gpu_facts
        data.update(available=self.available, message=self.message)
        if self.available:
            data.update(
                seconds=self.seconds,
                command=self.command,
                dropped_metrics=self.dropped_metrics,
                contenders=[c.to_json() for c in self.contenders],
            )
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RangeReport:
        shape = data.get("shape")
        return cls(
            available=data["available"],
            message=data.get("message"),
            shape=None if shape is None else RangeShape(shape["label"], shape.get("rows"), shape.get("prefix")),
            warmup_calls=data.get("warmup_calls"),
            gpu_facts=data["gpu_facts"] if "gpu_facts" in data else _UNSET,
            seconds=data.get("seconds"),
            command=data.get("command"),
            dropped_metrics=data.get("dropped_metrics") or [],
            contenders=[RangeContender.from_json(c) for c in data.get("contenders") or []],
        )


@dataclass(frozen=True)
class TraceVsNcu:
    """A student's kernel at the Range pass's shape: the trace's median beside ncu's one duration."""

    kernel: str
    trace_median_ms: float
    ncu_ms: float

    @property
    def difference(self) -> float:
        """The trace's median over ncu's duration, less one (0.05: the trace is 5% longer)."""
        return self.trace_median_ms / self.ncu_ms - 1

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "trace_median_ms": self.trace_median_ms,
            "ncu_ms": self.ncu_ms,
            "difference": self.difference,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TraceVsNcu:
        return cls(data["kernel"], data["trace_median_ms"], data["ncu_ms"])


# --- the model beside what ncu counted ------------------------------------------------------------


@dataclass(frozen=True)
class MustMove:
    """A lab's own model of the least bytes one call must move at the profiled shape (`Lab.bytes_to_move`)."""

    label: str
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "bytes": self.bytes}


@dataclass(frozen=True)
class DramBesideModel:
    """The DRAM bytes ncu counted for one contender's call, as multiples of the model's figures: of the
    lesson's flash and naive traffic (a prefill), or of the bytes the lab says must move (a decode batch)."""

    label: str
    dram_bytes: float
    times_flash: float | None = None
    times_naive: float | None = None
    times_must_move: float | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"label": self.label, "dram_bytes": self.dram_bytes}
        if self.times_must_move is None:
            data.update(times_flash=self.times_flash, times_naive=self.times_naive)
        else:
            data["times_must_move"] = self.times_must_move
        return data


def traffic_from_json(data: dict[str, Any]) -> Traffic:
    shape_fields = TrafficShape.__dataclass_fields__
    shape = TrafficShape(**{k: v for k, v in data.items() if k in shape_fields})
    return Traffic(
        shape,
        data["q_bytes"],
        data["kv_bytes"],
        data["out_bytes"],
        data["matrix_bytes"],
        data["naive_bytes"],
        data["flash_bytes"],
    )


# --- the whole profile ---------------------------------------------------------------------------


@dataclass
class Profile:
    """Everything `attnlab profile` found, or `--profile`'s Range pass alone.

    Mutable because it fills step by step as the command goes on, and its JSON holds what was reached:
    only the schema where the kernel failed its check (nothing more is profiled), then the trace with the
    GPU's facts and ceilings, the model, the Range pass (after which the ceilings may come from ncu's own
    facts), the trace beside ncu, and the plot where one was drawn."""

    trace: Trace | None = None
    roofline: RooflineCeilings | None = None
    no_starter_row: str | None = None  # why a lab without a starter has no row to compare with
    traffic: Traffic | None = None  # the lesson's prefill model
    must_move: MustMove | None = None  # or the lab's own bytes that must move (a decode batch)
    range: RangeReport | None = None
    trace_vs_ncu: list[TraceVsNcu] | None = None  # only where the Range pass was asked for
    plot: str | None = None

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

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"schema": SCHEMA}
        if self.trace is not None:
            data["trace"] = self.trace.to_json()
        if self.roofline is not None:
            data["gpu_facts"] = self.roofline.gpu_facts
            data["ceilings_problem"] = self.roofline.problem
            data["ceilings"] = None if self.roofline.ceilings is None else self.roofline.ceilings.to_json()
        if self.no_starter_row is not None:
            data["no_starter_row"] = self.no_starter_row
        if self.traffic is not None:
            data["traffic"] = self.traffic.to_json()
        if self.must_move is not None:
            data["must_move"] = self.must_move.to_json()
        if self.range is not None:
            data["range"] = self.range.to_json()
        if self.trace_vs_ncu is not None:
            data["trace_vs_ncu"] = [row.to_json() for row in self.trace_vs_ncu]
        if self.dram_beside_model:
            data["dram_beside_model"] = [row.to_json() for row in self.dram_beside_model]
        if self.plot is not None:
            data["plot"] = self.plot
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Profile:
        roofline = None
        if {"gpu_facts", "ceilings", "ceilings_problem"} & set(data):
            roofline = RooflineCeilings(
                data.get("gpu_facts") or GpuFacts(),
                ceilings_from_json(data.get("ceilings")),
                data.get("ceilings_problem"),
            )
        must_move = data.get("must_move")
        return cls(
            trace=Trace.from_json(data["trace"]) if data.get("trace") else None,
            roofline=roofline,
            no_starter_row=data.get("no_starter_row"),
            traffic=traffic_from_json(data["traffic"]) if data.get("traffic") else None,
            must_move=MustMove(must_move["label"], must_move["bytes"]) if must_move else None,
            range=RangeReport.from_json(data["range"]) if data.get("range") else None,
            trace_vs_ncu=(
                [TraceVsNcu.from_json(row) for row in data["trace_vs_ncu"]] if "trace_vs_ncu" in data else None
            ),
            plot=data.get("plot"),
        )
