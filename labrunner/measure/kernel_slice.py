"""One kernel launch on the Trace timeline: what the trace records and the profile's report carries.

Its own module, with nothing but the record, so the reports (which never import CuPy) can hold the
trace's launches without reaching the trace's collectors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KernelSlice:
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

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    def to_json(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "call": self.call,
            "kernel": self.kernel,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "duration_ms": self.duration_ms,
            "grid": list(self.grid),
            "block": list(self.block),
            "dynamic_shared_bytes": self.dynamic_shared_bytes,
            "static_shared_bytes": self.static_shared_bytes,
            "registers": self.registers,
            "stream": self.stream,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelSlice:
        return cls(
            str(data["shape"]),
            int(data["call"]),
            data["kernel"],
            float(data["start_ns"]),
            float(data["end_ns"]),
            tuple(int(x) for x in data["grid"]),
            tuple(int(x) for x in data["block"]),
            int(data["dynamic_shared_bytes"]),
            None if data.get("static_shared_bytes") is None else int(data["static_shared_bytes"]),
            None if data.get("registers") is None else int(data["registers"]),
            int(data["stream"]),
        )
