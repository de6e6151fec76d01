"""The device a run used: the `device` of its JSON, and the name the reports and the gates go by."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from labrunner.measure.device_state import DeviceState

CPU_NAME = "CPU (attnlab's fiber backend)"


@dataclass(frozen=True)
class DeviceFacts:
    """The GPU's snapshot (`measure.device_state`: name, driver, clock, temperature...) where the GPU ran,
    or, on the CPU backend, only a name: there is no driver or clock to report."""

    name: str | None
    gpu: DeviceState | None = None  # None on the CPU backend

    @classmethod
    def cpu(cls) -> DeviceFacts:
        return cls(CPU_NAME)

    @classmethod
    def of_gpu(cls, state: DeviceState) -> DeviceFacts:
        return cls(state.name, state)

    def to_json(self) -> dict[str, Any]:
        return self.gpu.to_json() if self.gpu is not None else {"name": self.name}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeviceFacts:
        """A name alone is the CPU's form; anything more is a GPU's snapshot."""
        if set(data) <= {"name"}:
            return cls(data.get("name"))
        known = {f.name for f in fields(DeviceState)}
        return cls.of_gpu(DeviceState(**{k: v for k, v in data.items() if k in known}))
