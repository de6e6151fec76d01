"""The device a run used: the `device` of its JSON, and the name the reports and the gates go by."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

CPU_NAME = "CPU (attnlab's fiber backend)"


class DeviceSnapshot(Protocol):
    """`measure.device_state.DeviceState`, named by what is read of it: that module reads CuPy, which the
    reports never import (they run without a GPU)."""

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class DeviceFacts:
    """Where the GPU ran, its snapshot as `measure.device_state` took it (every field None where it could
    not be read); on the CPU backend only a name: there is no driver or clock to report."""

    name: str | None
    driver: str | None = None  # the CUDA version the driver supports, "13.0"
    cuda_runtime: str | None = None
    cupy_version: str | None = None
    sm_clock_mhz: int | None = None
    temperature_c: int | None = None
    driver_release: str | None = None  # the driver package, "580.65.06"
    pci_bus_id: str | None = None
    gpu: bool = False  # a GPU's snapshot, not the CPU backend's name alone

    @classmethod
    def cpu(cls) -> DeviceFacts:
        return cls(CPU_NAME)

    @classmethod
    def of_gpu(cls, state: DeviceSnapshot) -> DeviceFacts:
        return cls(**state.to_json(), gpu=True)

    def to_json(self) -> dict[str, Any]:
        if not self.gpu:
            return {"name": self.name}
        data = asdict(self)
        del data["gpu"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeviceFacts:
        """A name alone is the CPU's form; anything more is a GPU's snapshot."""
        if set(data) <= {"name"}:
            return cls(data.get("name"))
        return cls(**data, gpu=True)
