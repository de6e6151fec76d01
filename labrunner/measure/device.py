"""What the worker's measuring code asks of a device, described by what it uses.

The devices themselves live a stage above (`labrunner.run.gpu_device`, and the tests' stand-in whose
buffers are numpy arrays), and a lower stage never imports a higher one. So the timed runs, the
input pool and the trace name the device by these `Protocol`s: any class with these members is one,
and mypy checks that the GPU backend's is.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Protocol

import numpy as np

from labrunner.compile.backend import Backend
from labrunner.labs.definition import Launch

# A buffer on the device: a CuPy array on the GPU (CuPy ships no type information), a numpy array on
# the tests' stand-in.
DeviceArray = Any
# A compiled module as the device's `compile` made it: CuPy's RawModule on the GPU.
Kernels = Any


class GuardedBuffer(Protocol):
    """A device buffer framed by canary bands (`run.gpu_device.GuardedBuffer`)."""

    inner: DeviceArray  # what the kernel is given

    def repoison(self) -> None: ...


class Device(Protocol):
    name: Backend
    xp: ModuleType  # the array module its buffers belong to: cupy, or numpy

    def upload(self, array: np.ndarray) -> DeviceArray: ...

    def to_host(self, buffer: DeviceArray) -> np.ndarray: ...

    def guarded(self, count: int, fill_bits: int = ...) -> GuardedBuffer: ...

    def launch(self, kernels: Kernels, launch: Launch, buffers: dict[str, DeviceArray]) -> None: ...

    def synchronize(self) -> None: ...


def device_zeros(device: Device, shape: int | tuple[int, ...], dtype: type = np.float32) -> DeviceArray:
    """Zeros made where the buffer lives: on a GPU a memset, never a host array uploaded. A timing slot
    or the device copy's buffers are hundreds of MiB, and uploading zeros for them took seconds of a
    grade. A device whose array module makes no arrays (the tests' stand-ins) gets its own upload."""
    xp = getattr(device, "xp", None)
    if xp is not None and hasattr(xp, "zeros"):
        return xp.zeros(shape, dtype=dtype)
    return device.upload(np.zeros(shape, dtype=dtype))
