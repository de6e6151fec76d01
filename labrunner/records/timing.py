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

from labrunner.records.serialize import JsonRecord, key
from labrunner.truth.contract import HEAD_DIM, KV_HEADS, QUERY_HEADS

MIB = 1024 * 1024
OMIT_NONE = key(omit_none=True)


# --- one timed series ------------------------------------------------------------------------------


@dataclass
class Stats(JsonRecord):
    """The summary of one timed series, in milliseconds, as the sampling loop measures it
    (`measure.sampling.summarize`).

    `noise_met` is true when this series reached the noise target with at least `min_samples` samples;
    otherwise `warning` explains, with numbers, why the figure is less certain than asked for.
    `stopped_by` names the rule that ended the loop: "noise", "max_samples" or "budget". The raw samples
    travel in a worker's reply (its rounds are pooled from them), never in a result. Not frozen: the
    pooling's checks are tried on series whose samples a test takes away or changes in place.
    """

    median_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float
    count: int
    rse: float = field(metadata=key(null_is_infinity=True))  # infinite: too few samples to tell
    noise_met: bool
    warning: str | None
    samples_ms: list[float] = field(repr=False, metadata=key(samples=True))
    verified_count: int = 0
    stopped_by: str = ""
    # A call of several stages: each stage's own summary, from the same calls (the whole call's
    # time is their sum). Empty for a call timed as one.
    stages: dict[str, Stats] = field(default_factory=dict, repr=False, metadata=key(omit_empty=True))


@dataclass(frozen=True)
class Series(JsonRecord):
    """One timed series' summary as a JSON object holds it (a result file, or a worker's figures without
    their samples): kept whole as written; the properties are the figures the reports read."""

    figures: dict[str, Any] = field(metadata=key(inline=True))

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


# A series as measured here (`Stats`, its samples kept), or as read from JSON that has no samples (`Series`);
# read back, a series is the first of the two that its JSON is.
Summary = Stats | Series


# --- the comparison (labs 2 and 3) -------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison(JsonRecord):
    """Student against baseline, timed pairwise, or pooled over every round (`measure.sampling.pool_rounds`):
    SPEEDUP (the baseline's median over the student's, > 1 where the student is faster) and its interval
    at `level`."""

    student: Summary
    baseline: Summary
    speedup: float
    ci_low: float
    ci_high: float
    level: float | None = 0.95

    @property
    def student_stats(self) -> Stats:
        return with_samples(self.student)

    @property
    def baseline_stats(self) -> Stats:
        return with_samples(self.baseline)


def with_samples(series: Summary) -> Stats:
    """A series with its samples: only a comparison measured here (not one read from a result) can be pooled."""
    if not isinstance(series, Stats):
        raise TypeError("a series read from a result has no samples; only measured series can be pooled")
    return series


@dataclass(frozen=True)
class Round(JsonRecord):
    """One round: a fresh worker process on fresh buffers, its own SPEEDUP and medians, and each contender's
    median in every input slot (a slot whose buffers landed somewhere slower shows there)."""

    speedup: float
    ci_low: float | None = None
    ci_high: float | None = None
    student_median_ms: float | None = None
    baseline_median_ms: float | None = None
    student_per_input_set_ms: list[float] = field(default_factory=list)
    baseline_per_input_set_ms: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Peer(JsonRecord):
    """A PyTorch peer asked for with `--vs` (`measure.peers`): "checked" before timing, "timed", or why not
    ("missing", "wrong", "failed", with `message`). Where it stood in the baseline's place (lab 2) and was
    timed, its median and the SPEEDUP over it, with the host's time to queue a call (`enqueue`)."""

    name: str
    label: str
    includes: str  # what the peer's time includes
    status: str
    message: str | None = field(default=None, metadata=OMIT_NONE)
    # where it was timed
    median_ms: float | None = field(default=None, metadata=OMIT_NONE)
    speedup: float | None = field(default=None, metadata=OMIT_NONE)
    ci_low: float | None = field(default=None, metadata=OMIT_NONE)
    ci_high: float | None = field(default=None, metadata=OMIT_NONE)
    enqueue: dict[str, Any] | None = field(default=None, metadata=OMIT_NONE)

    @property
    def timed(self) -> bool:
        return self.status == "timed"


@dataclass(frozen=True)
class CopyTimed(JsonRecord):
    """The device-to-device copy timed in one round: its size (read once, written once) and median."""

    bytes: int
    median_ms: float

    @property
    def bytes_per_s(self) -> float:
        """Each byte read and each written counted: a copy of N bytes moves 2N."""
        return 2 * self.bytes / (self.median_ms * 1e-3)


@dataclass(frozen=True)
class Bandwidth(JsonRecord):
    """A lab graded on bandwidth (lab 3): the bytes a call must move, each contender's TB/s at its median,
    the same run's device copy (its best round's TB/s) and the fraction of it the student reached, which
    its gate holds to `required_fraction` (the catalogue's, set once the lab's gate is known)."""

    bytes: int
    student_tb_s: float
    baseline_tb_s: float
    copy_tb_s: float
    copy: list[CopyTimed]
    required_fraction: float | None = field(default=None, metadata=OMIT_NONE)

    json_layout = ("bytes", "student_tb_s", "baseline_tb_s", "copy_tb_s", "copy_fraction", "copy", "required_fraction")

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


@dataclass(frozen=True)
class Conditions(JsonRecord):
    """What every timing reports about how it was taken: the empty kernel's time on the same path, the
    device before the first round and after the last, the bytes each L2 flush wrote, and every warning."""

    overhead_ms: float | None = None
    device_before: dict[str, Any] | None = None
    device_after: dict[str, Any] | None = None
    l2_flush_bytes: int | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SpeedupTiming(JsonRecord):
    """Student against baseline at one shape (C rows against P cached keys, or a decode batch).

    `gflop` is the lab's FLOP count for one call; each contender's TFLOP/s follows from it and its median.
    `verified_calls` counts the timed calls checked against the oracle, `input_sets` the fresh sets drawn,
    `physics` what every figure was held to (`measure.physics`)."""

    rows: int
    prefix: int
    gflop: float | None
    student_label: str = field(metadata=key(absent=""))
    baseline_label: str = field(metadata=key(absent=""))
    comparison: Comparison
    rounds: list[Round] = field(default_factory=list)
    verified_calls: dict[str, int] | None = None
    input_sets: int | None = None
    oracle_proof: dict[str, Any] | None = None
    physics: dict[str, Any] | None = None
    conditions: Conditions = field(default_factory=Conditions, metadata=key(inline=True))
    peer: Peer | None = field(default=None, metadata=OMIT_NONE)
    bandwidth: Bandwidth | None = field(default=None, metadata=OMIT_NONE)
    kind: str = field(default="speedup", init=False)  # which of the two timings a result holds

    json_layout = ("kind", "rows", "prefix", "gflop", "student_label", "baseline_label", "comparison", "speedup",
                   "rounds", "verified_calls", "input_sets", "oracle_proof", "physics", "conditions", "peer",
                   "bandwidth", "student_tflop_s", "baseline_tflop_s")  # fmt: skip

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


# --- lab 1's cost table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelBytes(JsonRecord):
    """The bytes lab 1's contract makes one kernel move at T, its GB/s at its median, and that GB/s as a
    fraction of the same run's device copy (where a copy was timed)."""

    bytes: int
    gb_s: float
    copy_fraction: float | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Floor(JsonRecord):
    """The bytes the kernels must move at this run's device-copy bandwidth, and the whole call against them."""

    bytes: int
    copy_gb_s: float
    ms: float
    times_floor: float


@dataclass(frozen=True)
class PeerRow(JsonRecord):
    """The peer interleaved with the whole call at one size: its series, and SPEEDUP vs it (its median over
    the whole call's) with the interval, and the host's time to queue a call."""

    series: Series = field(metadata=key(inline=True))
    speedup: float
    ci_low: float
    ci_high: float
    enqueue: dict[str, Any]

    @property
    def median_ms(self) -> float:
        return self.series.median_ms


MEASURED_ONLY = key(only_if="measured")  # a projected row has sizes only


@dataclass(frozen=True)
class PipelineRow(JsonRecord):
    """What lab 1's score matrix costs at T tokens: its size beside Q, K, V and the output, and the traffic
    of its four passes (scores writes it, softmax reads and writes it, the weighted sum reads it); where the
    size was measured, each kernel's series and the whole call's, the GB/s that traffic implies, the bytes
    each kernel must move, and the floor where a device copy was timed. A projected row has sizes only."""

    t: int = field(metadata=key(name="T"))
    matrix_mib: float
    tensors_mib: float
    matrix_over_tensors: float
    matrix_traffic_mib: float
    kernels: dict[str, Series] | None = field(default=None, metadata=MEASURED_ONLY)  # None: projected
    total: Series | None = field(default=None, metadata=MEASURED_ONLY)
    implied_gb_s: float | None = field(default=None, metadata=MEASURED_ONLY)
    must_move: dict[str, KernelBytes] | None = field(default=None, metadata=key(omit_empty=True))
    floor: Floor | None = field(default=None, metadata=OMIT_NONE)  # only where the bytes to move are known
    peer: PeerRow | None = field(default=None, metadata=OMIT_NONE)

    json_layout = ("t", "matrix_mib", "tensors_mib", "matrix_over_tensors", "matrix_traffic_mib", "projected",
                   "kernels", "total", "implied_gb_s", "must_move", "floor", "peer")  # fmt: skip

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

    @property
    def measured(self) -> bool:
        return not self.projected

    def with_peer(self, peer: PeerRow) -> PipelineRow:
        return replace(self, peer=peer)

    def series(self) -> dict[str, Series]:
        """Every series timed at this size, by name: the kernels, the whole call ("total"), and the peer."""
        named = {**(self.kernels or {}), **({"total": self.total} if self.total else {})}
        return {**named, **({"peer": self.peer.series} if self.peer else {})}


@dataclass(frozen=True)
class PipelineTiming(JsonRecord):
    """Lab 1: the whole call at every size (`rows`), each kernel timed inside it, every call on a fresh
    input set; the `projections` past them are arithmetic. A timed peer interleaved at every size."""

    rows: list[PipelineRow]
    projections: list[PipelineRow] = field(default_factory=list)
    input_sets: int | None = None
    oracle_proof: dict[str, Any] | None = None
    physics: dict[str, Any] | None = None
    conditions: Conditions = field(default_factory=Conditions, metadata=key(inline=True))
    peer: Peer | None = field(default=None, metadata=OMIT_NONE)
    kind: str = field(default="pipeline", init=False)  # which of the two timings a result holds

    json_layout = ("kind", "rows", "projections", "input_sets", "oracle_proof", "physics", "conditions", "peer")

    def with_peer(self, peer: Peer) -> PipelineTiming:
        return replace(self, peer=peer)

    @property
    def largest_measured(self) -> PipelineRow | None:
        """The largest size whose kernels were set against the bytes they must move (the floor table's row)."""
        measured = [row for row in self.rows if row.must_move]
        return measured[-1] if measured else None


Timing = SpeedupTiming | PipelineTiming


def timing_from_json(data: dict[str, Any]) -> Timing:
    """A timing as a result file holds it, by its kind (a reader that holds only the file's JSON)."""
    return PipelineTiming.from_json(data) if data.get("kind") == "pipeline" else SpeedupTiming.from_json(data)
