"""What the GPU was, and how it was doing, when a figure was measured.

A timing means little without its conditions: the same kernel is 10% slower
on a GPU that has dropped its clock to stay within power or temperature. We
record the device, the software stack, the SM clock and the temperature, and
compare the clock before and after timing to flag throttling.

Every field is optional. Without NVML (a container without the library, a
machine without a GPU) or without a working CuPy, the fields are None: a
missing thermometer must never stop a grading run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class DeviceState:
    """A snapshot of one GPU. `driver` and `cuda_runtime` are CUDA versions
    such as "13.0"; `driver_release` is the driver package version such as
    "580.65.06", which is what a bug report needs."""

    name: str | None = None
    driver: str | None = None
    cuda_runtime: str | None = None
    cupy_version: str | None = None
    sm_clock_mhz: int | None = None
    temperature_c: int | None = None
    driver_release: str | None = None
    pci_bus_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def cuda_version_text(encoded: int) -> str:
    """CUDA encodes versions as 1000 * major + 10 * minor: 12040 is "12.4"."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def as_text(value: object) -> str:
    """Older NVML bindings and CUDA properties hand back bytes."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def read_device_state(device_index: int = 0) -> DeviceState:
    """Read what can be read about CUDA device `device_index`; never raises."""
    state = DeviceState()
    read_cuda_facts(state, device_index)
    read_nvml_facts(state, device_index)
    return state


def read_cuda_facts(state: DeviceState, device_index: int) -> None:
    # Each fact is tried on its own: the CuPy version is known even when the
    # driver is too old to answer anything else.
    try:
        import cupy
    except Exception:
        return
    state.cupy_version = getattr(cupy, "__version__", None)
    try:
        properties = cupy.cuda.runtime.getDeviceProperties(device_index)
        state.name = as_text(properties["name"])
    except Exception:
        pass
    try:
        # The driver answers 0 when no CUDA driver is installed at all.
        driver_version = cupy.cuda.runtime.driverGetVersion()
        state.driver = cuda_version_text(driver_version) if driver_version > 0 else None
    except Exception:
        pass
    with contextlib.suppress(Exception):
        state.cuda_runtime = cuda_version_text(cupy.cuda.runtime.runtimeGetVersion())
    with contextlib.suppress(Exception):
        state.pci_bus_id = cupy.cuda.Device(device_index).pci_bus_id


def read_nvml_facts(state: DeviceState, device_index: int) -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return
    try:
        handle = nvml_handle(pynvml, state.pci_bus_id, device_index)
        if handle is None:
            return
        if state.name is None:
            state.name = nvml_read(lambda: as_text(pynvml.nvmlDeviceGetName(handle)))
        state.driver_release = nvml_read(lambda: as_text(pynvml.nvmlSystemGetDriverVersion()))
        state.sm_clock_mhz = nvml_read(lambda: int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)))
        state.temperature_c = nvml_read(
            lambda: int(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
        )
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def nvml_handle(pynvml: ModuleType, pci_bus_id: str | None, device_index: int) -> object:
    """The NVML handle of the GPU CUDA calls `device_index`.

    NVML and CUDA may number GPUs differently (CUDA_VISIBLE_DEVICES, or CUDA
    ordering by speed), so we find the GPU by its PCI address when we know it,
    and fall back to the index only when we do not.
    """
    if pci_bus_id is not None:
        handle = nvml_read(lambda: pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id))
        if handle is not None:
            return handle
    return nvml_read(lambda: pynvml.nvmlDeviceGetHandleByIndex(device_index))


def nvml_read(read: Callable[[], T]) -> T | None:
    """One NVML query, with None for "this GPU or driver does not say"."""
    try:
        return read()
    except Exception:
        return None


def clock_drop_warning(
    before: DeviceState | int | None, after: DeviceState | int | None, threshold: float = 0.05
) -> str | None:
    """A warning when the SM clock fell by more than `threshold` during timing.

    Takes two DeviceStates (or two clocks in MHz). Read `before` right after
    warm-up, when the clock has ramped up, and `after` right at the end: an
    idle GPU sits at a low clock, and a reading from then would hide a drop.
    """
    before_mhz = before.sm_clock_mhz if isinstance(before, DeviceState) else before
    after_mhz = after.sm_clock_mhz if isinstance(after, DeviceState) else after
    if not before_mhz or after_mhz is None:
        return None
    change = (after_mhz - before_mhz) / before_mhz
    if -change <= threshold:
        return None
    return (
        f"SM clock fell from {before_mhz} MHz to {after_mhz} MHz during timing ({change:.1%}):"
        " the GPU may be throttling; rerun for a trustworthy figure"
    )
