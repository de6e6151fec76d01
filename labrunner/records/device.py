"""The device a run used: the `device` of its JSON, and the name the reports and the gates go by."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from labrunner.records.serialize import JsonRecord, key

CPU_NAME = "CPU (attnlab's fiber backend)"


class DeviceSnapshot(Protocol):
    """`measure.device_state.DeviceState`, named by what is read of it: that module reads CuPy, which the
    reports never import (they run without a GPU)."""

    def to_json(self) -> dict[str, Any]: ...


def more_than_a_name(data: Mapping[str, Any]) -> bool:
    """A name alone is the CPU's form; anything more is a GPU's snapshot."""
    return not set(data) <= {"name"}


GPU_ONLY = key(only_if="gpu")  # the CPU backend's JSON is its name alone


@dataclass(frozen=True)
class DeviceFacts(JsonRecord):
    """Where the GPU ran, its snapshot as `measure.device_state` took it (every field None where it could
    not be read); on the CPU backend only a name: there is no driver or clock to report."""

    name: str | None
    driver: str | None = field(default=None, metadata=GPU_ONLY)  # the CUDA version the driver supports, "13.0"
    cuda_runtime: str | None = field(default=None, metadata=GPU_ONLY)
    cupy_version: str | None = field(default=None, metadata=GPU_ONLY)
    sm_clock_mhz: int | None = field(default=None, metadata=GPU_ONLY)
    temperature_c: int | None = field(default=None, metadata=GPU_ONLY)
    driver_release: str | None = field(default=None, metadata=GPU_ONLY)  # the driver package, "580.65.06"
    pci_bus_id: str | None = field(default=None, metadata=GPU_ONLY)
    # a GPU's snapshot, not the CPU backend's name alone: not written (left out of the layout), told by
    # what the JSON holds
    gpu: bool = field(default=False, metadata=key(read_as=more_than_a_name))

    json_layout = ("name", "driver", "cuda_runtime", "cupy_version", "sm_clock_mhz", "temperature_c",
                   "driver_release", "pci_bus_id")  # fmt: skip

    @classmethod
    def cpu(cls) -> DeviceFacts:
        return cls(CPU_NAME)

    @classmethod
    def of_gpu(cls, state: DeviceSnapshot) -> DeviceFacts:
        return cls(**state.to_json(), gpu=True)
