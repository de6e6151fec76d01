"""One kernel launch on the Trace timeline: what the trace records and the profile's report carries.

A record, below the measuring stage: the trace's collectors (`measure.trace`) make it, and the profile's
record holds it, without the reports (which never import CuPy) reaching the collectors.
"""

from __future__ import annotations

from dataclasses import dataclass

from labrunner.records.serialize import JsonRecord


@dataclass(frozen=True)
class KernelSlice(JsonRecord):
    """One kernel launch on the timeline. Times are nanoseconds from the trace's first launch."""

    shape: str  # "T = 512", "C = 2048, P = 2048"
    call: int  # 0 .. K-1 at that shape
    kernel: str
    start_ns: float
    end_ns: float
    grid: tuple[int, ...]  # (x, y, z)
    block: tuple[int, ...]
    dynamic_shared_bytes: int
    static_shared_bytes: int | None
    registers: int | None
    stream: int

    json_layout = ("shape", "call", "kernel", "start_ns", "end_ns", "duration_ms", "grid", "block",
                   "dynamic_shared_bytes", "static_shared_bytes", "registers", "stream")  # fmt: skip

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6
