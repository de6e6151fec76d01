"""The speed gate's decision (`measure.gates`), or calibration's record of the gate it wrote: the `gate` of the JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labrunner.records.serialize import JsonRecord, key

OMIT_NONE = key(omit_none=True)


@dataclass(frozen=True)
class Gate(JsonRecord):
    """`status` is "none" (no gate for this GPU), "met", "missed" or "calibrated"; `passed` is False only
    for a missed gate, which makes the verdict speed-gate. A gate on SPEEDUP carries the SPEEDUP required
    and reached; a gate on bandwidth (lab 3) the fractions of the device copy required and reached;
    calibration's record the file it wrote and that file's new entry, as written there."""

    status: str
    passed: bool
    message: str
    required_speedup: float | None = field(default=None, metadata=OMIT_NONE)
    speedup: float | None = field(default=None, metadata=OMIT_NONE)
    required_fraction: float | None = field(default=None, metadata=OMIT_NONE)
    copy_fraction: float | None = field(default=None, metadata=OMIT_NONE)
    file: str | None = field(default=None, metadata=key(only_if="calibration"))
    # the gates file's entry (`measure.gates.write_gate`), its keys written among the gate's own; read back,
    # it holds every key no other field names
    calibration: dict[str, Any] | None = field(default=None, metadata=key(inline=True, omit_none=True))

    # the message last, where a reader's eye ends
    json_layout = ("status", "passed", "required_speedup", "speedup", "required_fraction", "copy_fraction", "file",
                   "calibration", "message")  # fmt: skip
