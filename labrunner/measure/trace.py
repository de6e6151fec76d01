"""The Trace timeline: every kernel launch of a few calls, with its GPU start and end.

The worker runs K calls of the lab at each timing shape (the L2 flushed before each call, as for
timing) and records every launch. Two ways to know when a kernel ran on the GPU:

* CUPTI's activity records, through NVIDIA's `cupti-python` (the `profile` extra). The driver
  writes one record per kernel with its start and end in GPU nanoseconds, its stream, its
  registers per thread and its static and dynamic shared memory. Nothing is added to the stream.
* CUDA events recorded just before and just after each launch, where CUPTI is missing or fails.
  The times are as good (about half a microsecond), but the registers and static shared memory
  then come from the compile gate's report instead of the driver, and the output says so.

Records are matched to launches by order: one stream runs its kernels one after another, so the
i-th record of a lab kernel is the i-th launch. A mismatch (a record missing, a name out of
place) abandons CUPTI for events rather than guess. CuPy's own kernels (fills, copies) are left
out by name: only the lab's entry points are traced.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any, Protocol

from labrunner.labs.definition import Launch
from labrunner.measure.device import Device, Kernels
from labrunner.records.kernel_slice import KernelSlice

CUPTI_BUFFER_BYTES = 8 * 1024 * 1024
CUPTI_MISSING = "cupti-python is not installed (pip install 'attnlab[profile]')"
# One launch as a collector saw it: {"kernel", "start_ns", "end_ns", "static_shared_bytes", "registers",
# "stream"}, the times from the first traced launch (a CUPTI record keeps its raw "start" and "end" too).
Record = dict[str, Any]


class TraceMismatch(Exception):
    """The collector's records do not line up with the launches made."""


class Collector(Protocol):
    """Records when each launch ran: `launch` for a traced one, `untraced` for a warm-up."""

    def launch(self, kernel: str, run: Callable[[], None]) -> None: ...

    def untraced(self, kernel: str, run: Callable[[], None]) -> None: ...

    def finish(self) -> list[Record]: ...


class EventCollector:
    """CUDA events around every launch, on the launching stream."""

    source = "events"

    def __init__(self, xp: ModuleType) -> None:
        self.xp = xp
        self.marks: list[tuple[str, Any, Any]] = []  # (kernel, start event, end event): CuPy's, untyped

    def launch(self, kernel: str, run: Callable[[], None]) -> None:
        start, end = self.xp.cuda.Event(), self.xp.cuda.Event()
        start.record()
        run()
        end.record()
        self.marks.append((kernel, start, end))

    def untraced(self, kernel: str, run: Callable[[], None]) -> None:
        run()

    def finish(self) -> list[Record]:
        if not self.marks:
            return []
        self.marks[-1][2].synchronize()
        base = self.marks[0][1]
        elapsed = self.xp.cuda.get_elapsed_time
        return [
            {
                "kernel": kernel,
                "start_ns": elapsed(base, start) * 1e6,
                "end_ns": elapsed(base, end) * 1e6,
                "static_shared_bytes": None,
                "registers": None,
                "stream": 0,
            }
            for kernel, start, end in self.marks
        ]


class CuptiCollector:
    """CUPTI concurrent-kernel activity records, through cupti-python."""

    source = "cupti"

    def __init__(self, kernel_names: set[str], synchronize: Callable[[], None]) -> None:
        from cupti import cupti  # ImportError: the caller falls back to events

        self.cupti = cupti
        self.kernel_names = kernel_names
        self.synchronize = synchronize
        self.expected: list[tuple[str, bool]] = []  # (kernel, traced) of every lab launch, in order
        self.records: list[Record] = []  # CUPTI's, with its raw "start" and "end"
        cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
        cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)

    @staticmethod
    def _buffer_requested() -> tuple[int, int]:
        return CUPTI_BUFFER_BYTES, 0  # bytes, and no limit on records per buffer

    def _buffer_completed(self, activities: list[Any]) -> None:
        for activity in activities:
            if activity.kind != self.cupti.ActivityKind.CONCURRENT_KERNEL:
                continue
            name = activity.name
            name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
            if name not in self.kernel_names:
                continue
            self.records.append(
                {
                    "kernel": name,
                    "start": int(activity.start),
                    "end": int(activity.end),
                    "static_shared_bytes": int(getattr(activity, "static_shared_memory", -1)),
                    "registers": int(getattr(activity, "registers_per_thread", -1)),
                    "stream": int(getattr(activity, "stream_id", 0)),
                }
            )

    def launch(self, kernel: str, run: Callable[[], None]) -> None:
        run()
        self.expected.append((kernel, True))

    def untraced(self, kernel: str, run: Callable[[], None]) -> None:
        """A warm-up launch: CUPTI records it too, so it is counted, then left out."""
        run()
        self.expected.append((kernel, False))

    def finish(self) -> list[Record]:
        self.synchronize()
        self.cupti.activity_flush_all(1)
        self.cupti.activity_disable(self.cupti.ActivityKind.CONCURRENT_KERNEL)
        records = sorted(self.records, key=lambda r: r["start"])
        if [r["kernel"] for r in records] != [kernel for kernel, _ in self.expected]:
            raise TraceMismatch(f"CUPTI returned {len(records)} kernel records for {len(self.expected)} launches")
        records = [r for r, (_, traced) in zip(records, self.expected) if traced]
        if any(r["start"] == 0 and r["end"] == 0 for r in records):
            raise TraceMismatch("CUPTI could not collect the timestamps of some kernels")
        base = records[0]["start"] if records else 0
        return [
            {
                **r,
                "start_ns": float(r["start"] - base),
                "end_ns": float(r["end"] - base),
                "static_shared_bytes": r["static_shared_bytes"] if r["static_shared_bytes"] >= 0 else None,
                "registers": r["registers"] if r["registers"] >= 0 else None,
            }
            for r in records
        ]


def cupti_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("cupti-python")
    except Exception:
        return None


def run_trace(
    device: Device,
    modules: dict[str, Kernels],
    request: dict[str, Any],
    flush: Callable[[], None] | None = None,
    make_cupti: Callable[[], Collector] | None = None,
) -> dict[str, Any]:
    """The worker's side: CUPTI where it works, else CUDA events; the reply says which, and why.

    `flush` clears the L2 before each call (a CupyTimer's by default); `make_cupti` builds the CUPTI
    collector (tests pass a stand-in).
    """
    if flush is None:
        from labrunner.measure.gpu_timer import CupyTimer

        flush = CupyTimer().flush_caches
    from labrunner.measure.gpu_facts import read_gpu_facts

    facts = read_gpu_facts()
    names = {launch.kernel for shape in request["shapes"] for launch in shape["launches"]}
    if make_cupti is None:
        make_cupti = lambda: CuptiCollector(names, device.synchronize)  # noqa: E731
    why_not_cupti = None
    collector: Collector | None
    if request.get("use_cupti", True):
        try:
            collector = make_cupti()
        except ImportError:
            collector, why_not_cupti = None, CUPTI_MISSING
        except Exception as exc:  # a CUPTI that cannot start (no libcupti, a driver mismatch)
            collector, why_not_cupti = None, f"CUPTI did not start ({type(exc).__name__}: {exc})"
        if collector is not None:
            try:
                return trace_with(collector, device, modules, request, flush) | {
                    "source": "cupti",
                    "why_not_cupti": None,
                    "cupti_version": cupti_version(),
                    "gpu_facts": facts,
                }
            except TraceMismatch as exc:
                why_not_cupti = f"{exc}; the trace was taken again with events"
    else:
        why_not_cupti = "CUPTI was not asked for"
    return trace_with(EventCollector(device.xp), device, modules, request, flush) | {
        "source": "events",
        "why_not_cupti": why_not_cupti,
        "cupti_version": None,
        "gpu_facts": facts,
    }


def trace_with(
    collector: Collector,
    device: Device,
    modules: dict[str, Kernels],
    request: dict[str, Any],
    flush: Callable[[], None],
) -> dict[str, Any]:
    """Warm up once per shape (untraced), then K traced calls per shape, each after an L2 flush."""
    kernels = modules["student"]
    placed: list[tuple[str, int, Launch]] = []  # (shape label, call, launch) in launch order
    for shape in request["shapes"]:
        buffers = shape_buffers(device, shape)
        buffers["out"] = device.guarded(shape["out_count"]).inner
        buffers.update({name: device.guarded(count).inner for name, count in shape["workspace"].items()})
        for launch in shape["launches"]:  # warm-up: module loading and clocks, never traced
            collector.untraced(launch.kernel, partial(device.launch, kernels, launch, buffers))
        device.synchronize()
        for call in range(request["calls"]):
            flush()
            for launch in shape["launches"]:
                collector.launch(launch.kernel, partial(device.launch, kernels, launch, buffers))
                placed.append((shape["label"], call, launch))
        device.synchronize()
        del buffers  # a paged cache's gigabytes go before the next shape's arrive
    records = collector.finish()
    slices = []
    for (label, call, launch), record in zip(placed, records):
        slices.append(
            KernelSlice(
                label,
                call,
                launch.kernel,
                record["start_ns"],
                record["end_ns"],
                tuple(launch.grid),
                tuple(launch.block),
                launch.shared_bytes,
                record["static_shared_bytes"],
                record["registers"],
                record["stream"],
            ).to_json()
        )
    return {"slices": slices}


def shape_buffers(device: Device, shape: dict[str, Any]) -> dict[str, Any]:
    """A shape's inputs on the device: the arrays the request carries (`inputs`), or a timing-set
    request (`sets`: a paged cache's key, pages and fixed block table and lengths) made here on the
    GPU, as `bench` makes its timed inputs: gigabytes of K and V never cross the pipe. The fill runs
    before the warm-up; it is not a lab kernel, so neither collector counts it."""
    if "sets" not in shape:
        return {name: device.upload(array) for name, array in shape["inputs"].items()}
    from labrunner.measure.input_pool import first_set

    return first_set(device, shape["sets"])


def slices_from_reply(reply: dict[str, Any], entry_points: set[str]) -> list[KernelSlice]:
    """The worker's slices, checked: known kernel names, finite times that end after they start."""
    slices = []
    for data in reply.get("slices", []):
        if data["kernel"] not in entry_points:
            raise ValueError(f"the trace names a kernel the lab never launched: {data['kernel']!r}")
        start, end = float(data["start_ns"]), float(data["end_ns"])
        if not (math.isfinite(start) and math.isfinite(end)) or end < start:
            raise ValueError(f"the trace gives {data['kernel']} an impossible time ({start} to {end} ns)")
        slices.append(
            KernelSlice(
                str(data["shape"]),
                int(data["call"]),
                data["kernel"],
                start,
                end,
                tuple(int(x) for x in data["grid"]),
                tuple(int(x) for x in data["block"]),
                int(data["dynamic_shared_bytes"]),
                None if data["static_shared_bytes"] is None else int(data["static_shared_bytes"]),
                None if data["registers"] is None else int(data["registers"]),
                int(data["stream"]),
            )
        )
    return slices
