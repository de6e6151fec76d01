"""The speed gate's decision (`measure.gates`), or calibration's record of the gate it wrote: the `gate` of the JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Gate:
    """`status` is "none" (no gate for this GPU), "met", "missed" or "calibrated"; `passed` is False only
    for a missed gate, which makes the verdict speed-gate. A gate on SPEEDUP carries the SPEEDUP required
    and reached; a gate on bandwidth (lab 3) the fractions of the device copy required and reached;
    calibration's record the file it wrote and that file's new entry, as written there."""

    status: str
    passed: bool
    message: str
    required_speedup: float | None = None
    speedup: float | None = None
    required_fraction: float | None = None
    copy_fraction: float | None = None
    file: str | None = None
    calibration: dict[str, Any] | None = None  # the gates file's entry (`measure.gates.write_gate`)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"status": self.status, "passed": self.passed}
        if self.required_speedup is not None:
            data.update(required_speedup=self.required_speedup, speedup=self.speedup)
        if self.required_fraction is not None:
            data.update(required_fraction=self.required_fraction, copy_fraction=self.copy_fraction)
        if self.calibration is not None:
            data.update(file=self.file, **self.calibration)
        data["message"] = self.message
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Gate:
        """A gate as `measure.gates` decides it, or as a result file holds it."""
        base = {"status", "passed", "message", "required_speedup", "speedup", "required_fraction", "copy_fraction"}
        calibrated = data["status"] == "calibrated"
        return cls(
            status=data["status"],
            passed=data["passed"],
            message=data["message"],
            required_speedup=data.get("required_speedup"),
            speedup=data.get("speedup"),
            required_fraction=data.get("required_fraction"),
            copy_fraction=data.get("copy_fraction"),
            file=data.get("file") if calibrated else None,
            calibration={k: v for k, v in data.items() if k not in base | {"file"}} if calibrated else None,
        )
