"""A timing's record: the `timing` of the JSON, as the pipeline's timing builds it and the report reads it.

Two kinds, as a lab is timed (`labs.timing_strategy`):

- `SpeedupTiming`: the student's kernel against a baseline (a kernel file or a PyTorch peer), interleaved
  on the same fresh input sets, pooled over rounds (labs 2 and 3); a lab graded on bandwidth (lab 3)
  carries its `Bandwidth` too.
- `PipelineTiming`: lab 1's cost table, the whole call at every size with each kernel timed inside it
  (`PipelineRow`), and the sizes projected past what was measured.

Every figure the report shows is computed here once, from the medians and the byte counts, and written in
the JSON: TFLOP/s and TB/s per contender, GB/s per kernel, a kernel's fraction of the same run's device copy,
the whole call against the floor.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from labrunner.truth.contract import HEAD_DIM, KV_HEADS, QUERY_HEADS

MIB = 1024 * 1024


@dataclass(frozen=True)
class Series:
    """One timed series' summary as the worker reported it (`measure.timing.Stats.to_json`: median, spread,
    samples, noise, and each stage's own where a call has several), kept whole as written; the properties
    are the figures the reports read."""

    figures: dict[str, Any]

    @property
    def median_ms(self) -> float:
        median: float = self.figures["median_ms"]
        return median

    @property
    def min_ms(self) -> float | None:
        return self.figures.get("min_ms")

    @property
    def max_ms(self) -> float | None:
        return self.figures.get("max_ms")

    @property
    def count(self) -> int | None:
        return self.figures.get("count")

    @property
    def rse(self) -> float | None:
        """The median's relative standard error; None where it could not be measured."""
        return self.figures.get("rse")

    @property
    def warning(self) -> str | None:
        """Why the figure is less certain than asked for (the noise target missed), with numbers."""
        return self.figures.get("warning")

    def to_json(self) -> dict[str, Any]:
        return dict(self.figures)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Series:
        return cls(dict(data))


# --- the comparison (labs 2 and 3) -------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """Student against baseline, pooled over every round: SPEEDUP (the baseline's median over the student's)
    and its 95% interval (`measure.timing.pool_rounds`)."""

    student: Series
    baseline: Series
    speedup: float
    ci_low: float
    ci_high: float
    level: float | None = 0.95

    def to_json(self) -> dict[str, Any]:
        return {
            "student": self.student.to_json(),
            "baseline": self.baseline.to_json(),
            "speedup": self.speedup,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "level": self.level,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Comparison:
        return cls(
            Series.from_json(data["student"]),
            Series.from_json(data["baseline"]),
            data["speedup"],
            data["ci_low"],
            data["ci_high"],
            data.get("level"),
        )


@dataclass(frozen=True)
class Round:
    """One round: a fresh worker process on fresh buffers, its own SPEEDUP and medians, and each contender's
    median in every input slot (a slot whose buffers landed somewhere slower shows there)."""

    speedup: float
    ci_low: float | None = None
    ci_high: float | None = None
    student_median_ms: float | None = None
    baseline_median_ms: float | None = None
    student_per_input_set_ms: list[float] = field(default_factory=list)
    baseline_per_input_set_ms: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "speedup": self.speedup,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "student_median_ms": self.student_median_ms,
            "baseline_median_ms": self.baseline_median_ms,
            "student_per_input_set_ms": self.student_per_input_set_ms,
            "baseline_per_input_set_ms": self.baseline_per_input_set_ms,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Round:
        return cls(
            data["speedup"],
            data.get("ci_low"),
            data.get("ci_high"),
            data.get("student_median_ms"),
            data.get("baseline_median_ms"),
            list(data.get("student_per_input_set_ms") or []),
            list(data.get("baseline_per_input_set_ms") or []),
        )


@dataclass(frozen=True)
class Peer:
    """A PyTorch peer asked for with `--vs` (`measure.peers`): "checked" before timing, "timed", or why not
    ("missing", "wrong", "failed", with `message`). Where it stood in the baseline's place (lab 2) and was
    timed, its median and the SPEEDUP over it, with the host's time to queue a call (`enqueue`)."""

    name: str
    label: str
    includes: str  # what the peer's time includes
    status: str
    message: str | None = None
    median_ms: float | None = None
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    enqueue: dict[str, Any] | None = None

    @property
    def timed(self) -> bool:
        return self.status == "timed"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "label": self.label, "includes": self.includes}
        data["status"] = self.status
        if self.message is not None:
            data["message"] = self.message
        timed = {
            "median_ms": self.median_ms,
            "speedup": self.speedup,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "enqueue": self.enqueue,
        }
        data.update({key: value for key, value in timed.items() if value is not None})
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Peer:
        return cls(
            data["name"],
            data["label"],
            data["includes"],
            data["status"],
            data.get("message"),
            data.get("median_ms"),
            data.get("speedup"),
            data.get("ci_low"),
            data.get("ci_high"),
            data.get("enqueue"),
        )


@dataclass(frozen=True)
class CopyTimed:
    """The device-to-device copy timed in one round: its size (read once, written once) and median."""

    bytes: int
    median_ms: float

    @property
    def bytes_per_s(self) -> float:
        """Each byte read and each written counted: a copy of N bytes moves 2N."""
        return 2 * self.bytes / (self.median_ms * 1e-3)

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "median_ms": self.median_ms}


@dataclass(frozen=True)
class Bandwidth:
    """A lab graded on bandwidth (lab 3): the bytes a call must move, each contender's TB/s at its median,
    the same run's device copy (its best round's TB/s) and the fraction of it the student reached, which
    its gate holds to `required_fraction` (the catalogue's, set once the lab's gate is known)."""

    bytes: int
    student_tb_s: float
    baseline_tb_s: float
    copy_tb_s: float
    copy: list[CopyTimed]
    required_fraction: float | None = None

    @classmethod
    def measured(cls, moved: int, comparison: Comparison, copies: list[CopyTimed]) -> Bandwidth:
        return cls(
            bytes=moved,
            student_tb_s=moved / (comparison.student.median_ms * 1e-3) / 1e12,
            baseline_tb_s=moved / (comparison.baseline.median_ms * 1e-3) / 1e12,
            copy_tb_s=max(c.bytes_per_s for c in copies) / 1e12,
            copy=copies,
        )

    @property
    def copy_fraction(self) -> float:
        return self.student_tb_s / self.copy_tb_s

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "bytes": self.bytes,
            "student_tb_s": self.student_tb_s,
            "baseline_tb_s": self.baseline_tb_s,
            "copy_tb_s": self.copy_tb_s,
            "copy_fraction": self.copy_fraction,
            "copy": [c.to_json() for c in self.copy],
        }
        if self.required_fraction is not None:
            data["required_fraction"] = self.required_fraction
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Bandwidth:
        return cls(
            data["bytes"],
            data["student_tb_s"],
            data["baseline_tb_s"],
            data["copy_tb_s"],
            [CopyTimed(c["bytes"], c["median_ms"]) for c in data["copy"]],
            data.get("required_fraction"),
        )


@dataclass(frozen=True)
class Conditions:
    """What every timing reports about how it was taken: the empty kernel's time on the same path, the
    device before the first round and after the last, the bytes each L2 flush wrote, and every warning."""

    overhead_ms: float | None = None
    device_before: dict[str, Any] | None = None
    device_after: dict[str, Any] | None = None
    l2_flush_bytes: int | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "overhead_ms": self.overhead_ms,
            "device_before": self.device_before,
            "device_after": self.device_after,
            "l2_flush_bytes": self.l2_flush_bytes,
            "warnings": self.warnings,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Conditions:
        return cls(
            data.get("overhead_ms"),
            data.get("device_before"),
            data.get("device_after"),
            data.get("l2_flush_bytes"),
            list(data.get("warnings") or []),
        )


@dataclass(frozen=True)
class SpeedupTiming:
    """Student against baseline at one shape (C rows against P cached keys, or a decode batch).

    `gflop` is the lab's FLOP count for one call; each contender's TFLOP/s follows from it and its median.
    `verified_calls` counts the timed calls checked against the oracle, `input_sets` the fresh sets drawn,
    `physics` what every figure was held to (`measure.physics`)."""

    rows: int
    prefix: int
    gflop: float | None
    student_label: str
    baseline_label: str
    comparison: Comparison
    rounds: list[Round] = field(default_factory=list)
    verified_calls: dict[str, int] | None = None
    input_sets: int | None = None
    oracle_proof: dict[str, Any] | None = None
    physics: dict[str, Any] | None = None
    conditions: Conditions = field(default_factory=Conditions)
    peer: Peer | None = None
    bandwidth: Bandwidth | None = None

    kind = "speedup"

    @property
    def speedup(self) -> float:
        return self.comparison.speedup

    @property
    def student_tflop_s(self) -> float | None:
        return None if self.gflop is None else self.gflop / self.comparison.student.median_ms

    @property
    def baseline_tflop_s(self) -> float | None:
        return None if self.gflop is None else self.gflop / self.comparison.baseline.median_ms

    def with_peer(self, peer: Peer) -> SpeedupTiming:
        return replace(self, peer=peer)

    def with_required_fraction(self, fraction: float) -> SpeedupTiming:
        """The bandwidth gate's fraction of the device copy, once the lab's catalogue has said it."""
        if self.bandwidth is None:
            return self
        return replace(self, bandwidth=replace(self.bandwidth, required_fraction=fraction))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": self.kind,
            "rows": self.rows,
            "prefix": self.prefix,
            "gflop": self.gflop,
            "student_label": self.student_label,
            "baseline_label": self.baseline_label,
            "comparison": self.comparison.to_json(),
            "speedup": self.speedup,
            "rounds": [r.to_json() for r in self.rounds],
            "verified_calls": self.verified_calls,
            "input_sets": self.input_sets,
            "oracle_proof": self.oracle_proof,
            "physics": self.physics,
            **self.conditions.to_json(),
        }
        if self.peer is not None:
            data["peer"] = self.peer.to_json()
        if self.bandwidth is not None:
            data["bandwidth"] = self.bandwidth.to_json()
        data["student_tflop_s"] = self.student_tflop_s
        data["baseline_tflop_s"] = self.baseline_tflop_s
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SpeedupTiming:
        return cls(
            rows=data["rows"],
            prefix=data["prefix"],
            gflop=data.get("gflop"),
            student_label=data.get("student_label", ""),
            baseline_label=data.get("baseline_label", ""),
            comparison=Comparison.from_json(data["comparison"]),
            rounds=[Round.from_json(r) for r in data.get("rounds") or []],
            verified_calls=data.get("verified_calls"),
            input_sets=data.get("input_sets"),
            oracle_proof=data.get("oracle_proof"),
            physics=data.get("physics"),
            conditions=Conditions.from_json(data),
            peer=Peer.from_json(data["peer"]) if data.get("peer") else None,
            bandwidth=Bandwidth.from_json(data["bandwidth"]) if data.get("bandwidth") else None,
        )


# --- lab 1's cost table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelBytes:
    """The bytes lab 1's contract makes one kernel move at T, its GB/s at its median, and that GB/s as a
    fraction of the same run's device copy (where a copy was timed)."""

    bytes: int
    gb_s: float
    copy_fraction: float | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"bytes": self.bytes, "gb_s": self.gb_s}
        if self.copy_fraction is not None:
            data["copy_fraction"] = self.copy_fraction
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelBytes:
        return cls(data["bytes"], data["gb_s"], data.get("copy_fraction"))


@dataclass(frozen=True)
class Floor:
    """The bytes the kernels must move at this run's device-copy bandwidth, and the whole call against them."""

    bytes: int
    copy_gb_s: float
    ms: float
    times_floor: float

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "copy_gb_s": self.copy_gb_s, "ms": self.ms, "times_floor": self.times_floor}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Floor:
        return cls(data["bytes"], data["copy_gb_s"], data["ms"], data["times_floor"])


@dataclass(frozen=True)
class PeerRow:
    """The peer interleaved with the whole call at one size: its series, and SPEEDUP vs it (its median over
    the whole call's) with the interval, and the host's time to queue a call."""

    series: Series
    speedup: float
    ci_low: float
    ci_high: float
    enqueue: dict[str, Any]

    @property
    def median_ms(self) -> float:
        return self.series.median_ms

    def to_json(self) -> dict[str, Any]:
        return {
            **self.series.to_json(),
            "speedup": self.speedup,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "enqueue": self.enqueue,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PeerRow:
        named = ("speedup", "ci_low", "ci_high", "enqueue")
        series = Series({k: v for k, v in data.items() if k not in named})
        return cls(series, data["speedup"], data["ci_low"], data["ci_high"], data["enqueue"])


@dataclass(frozen=True)
class PipelineRow:
    """What lab 1's score matrix costs at T tokens: its size beside Q, K, V and the output, and the traffic
    of its four passes (scores writes it, softmax reads and writes it, the weighted sum reads it); where the
    size was measured, each kernel's series and the whole call's, the GB/s that traffic implies, the bytes
    each kernel must move, and the floor where a device copy was timed. A projected row has sizes only."""

    t: int
    matrix_mib: float
    tensors_mib: float
    matrix_over_tensors: float
    matrix_traffic_mib: float
    kernels: dict[str, Series] | None = None  # None: projected, nothing was allocated
    total: Series | None = None
    implied_gb_s: float | None = None
    must_move: dict[str, KernelBytes] | None = None
    floor: Floor | None = None
    peer: PeerRow | None = None

    @classmethod
    def at(
        cls,
        t: int,
        stats: dict[str, Series] | None = None,
        must: dict[str, int] | None = None,
        copy_bytes_per_s: float | None = None,
    ) -> PipelineRow:
        """Sizes always; with `stats` (each kernel's and "total"), the times and figures; `must` is what the
        contract makes each kernel move at T; against the floor where `copy_bytes_per_s` was timed."""
        matrix_bytes = QUERY_HEADS * t * t * 4
        tensor_bytes = (2 * t * QUERY_HEADS * HEAD_DIM + 2 * t * KV_HEADS * HEAD_DIM) * 4  # q, out, k, v
        traffic = 4 * matrix_bytes
        sized = cls(t, matrix_bytes / MIB, tensor_bytes / MIB, matrix_bytes / tensor_bytes, traffic / MIB)
        if stats is None:
            return sized
        kernels = {k: v for k, v in stats.items() if k != "total"}
        total = stats["total"]
        measured = {name: (must or {})[name] for name in kernels if name in (must or {})}
        must_move = None
        floor = None
        if measured:
            copy_gb_s = copy_bytes_per_s / 1e9 if copy_bytes_per_s else None
            must_move = {}
            for name, count in measured.items():
                gb_s = count / (kernels[name].median_ms * 1e-3) / 1e9
                must_move[name] = KernelBytes(count, gb_s, None if copy_gb_s is None else gb_s / copy_gb_s)
            if copy_bytes_per_s:
                floor_ms = sum(measured.values()) / copy_bytes_per_s * 1e3
                floor = Floor(sum(measured.values()), copy_bytes_per_s / 1e9, floor_ms, total.median_ms / floor_ms)
        return replace(
            sized,
            kernels=kernels,
            total=total,
            implied_gb_s=traffic / (total.median_ms * 1e-3) / 1e9,
            must_move=must_move,
            floor=floor,
        )

    @property
    def projected(self) -> bool:
        return self.kernels is None

    def with_peer(self, peer: PeerRow) -> PipelineRow:
        return replace(self, peer=peer)

    def series(self) -> dict[str, Series]:
        """Every series timed at this size, by name: the kernels, the whole call ("total"), and the peer."""
        named = {**(self.kernels or {}), **({"total": self.total} if self.total else {})}
        return {**named, **({"peer": self.peer.series} if self.peer else {})}

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "T": self.t,
            "matrix_mib": self.matrix_mib,
            "tensors_mib": self.tensors_mib,
            "matrix_over_tensors": self.matrix_over_tensors,
            "matrix_traffic_mib": self.matrix_traffic_mib,
            "projected": self.projected,
        }
        if self.kernels is not None:
            data["kernels"] = {name: s.to_json() for name, s in self.kernels.items()}
            data["total"] = None if self.total is None else self.total.to_json()
            data["implied_gb_s"] = self.implied_gb_s
            if self.must_move:
                data["must_move"] = {name: m.to_json() for name, m in self.must_move.items()}
                if self.floor is not None:
                    data["floor"] = self.floor.to_json()
        if self.peer is not None:
            data["peer"] = self.peer.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PipelineRow:
        kernels = data.get("kernels")
        total = data.get("total")
        return cls(
            t=data["T"],
            matrix_mib=data["matrix_mib"],
            tensors_mib=data["tensors_mib"],
            matrix_over_tensors=data["matrix_over_tensors"],
            matrix_traffic_mib=data["matrix_traffic_mib"],
            kernels=None if kernels is None else {name: Series.from_json(s) for name, s in kernels.items()},
            total=None if total is None else Series.from_json(total),
            implied_gb_s=data.get("implied_gb_s"),
            must_move={n: KernelBytes.from_json(m) for n, m in data["must_move"].items()}
            if "must_move" in data
            else None,
            floor=Floor.from_json(data["floor"]) if "floor" in data else None,
            peer=PeerRow.from_json(data["peer"]) if "peer" in data else None,
        )


@dataclass(frozen=True)
class PipelineTiming:
    """Lab 1: the whole call at every size (`rows`), each kernel timed inside it, every call on a fresh
    input set; the `projections` past them are arithmetic. A timed peer interleaved at every size."""

    rows: list[PipelineRow]
    projections: list[PipelineRow] = field(default_factory=list)
    input_sets: int | None = None
    oracle_proof: dict[str, Any] | None = None
    physics: dict[str, Any] | None = None
    conditions: Conditions = field(default_factory=Conditions)
    peer: Peer | None = None

    kind = "pipeline"

    def with_peer(self, peer: Peer) -> PipelineTiming:
        return replace(self, peer=peer)

    @property
    def largest_measured(self) -> PipelineRow | None:
        """The largest size whose kernels were set against the bytes they must move (the floor table's row)."""
        measured = [row for row in self.rows if row.must_move]
        return measured[-1] if measured else None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": self.kind,
            "rows": [row.to_json() for row in self.rows],
            "projections": [row.to_json() for row in self.projections],
            "input_sets": self.input_sets,
            "oracle_proof": self.oracle_proof,
            "physics": self.physics,
            **self.conditions.to_json(),
        }
        if self.peer is not None:
            data["peer"] = self.peer.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PipelineTiming:
        return cls(
            rows=[PipelineRow.from_json(row) for row in data["rows"]],
            projections=[PipelineRow.from_json(row) for row in data.get("projections") or []],
            input_sets=data.get("input_sets"),
            oracle_proof=data.get("oracle_proof"),
            physics=data.get("physics"),
            conditions=Conditions.from_json(data),
            peer=Peer.from_json(data["peer"]) if data.get("peer") else None,
        )


Timing = SpeedupTiming | PipelineTiming
