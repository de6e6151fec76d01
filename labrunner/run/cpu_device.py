"""The CPU backend's device, seen through the same small interface as the GPU's.

Buffers are host numpy arrays and launches go through `labrunner.run.cpu` (the student's file
compiled as C++ with a shim that runs each block's threads as fibers). Everything around the
launches (poison, guard bands, inputs read back, the checks) is the same code as on the GPU.
"""

from __future__ import annotations

import numpy as np

from labrunner.labs.definition import Launch
from labrunner.truth.poison import CANARY_BITS, GUARD_ELEMENTS, POISON_BITS, filled


class HostGuardedBuffer:
    def __init__(self, count: int, fill_bits: int):
        self.count = count
        self.full = filled(GUARD_ELEMENTS + count + GUARD_ELEMENTS, CANARY_BITS)
        self.inner = self.full[GUARD_ELEMENTS:GUARD_ELEMENTS + count]
        self.inner.view(np.uint32)[:] = fill_bits

    def bands(self, to_host) -> tuple[np.ndarray, np.ndarray]:
        return self.full[:GUARD_ELEMENTS].copy(), self.full[GUARD_ELEMENTS + self.count:].copy()


class CpuDevice:
    name = "cpu"

    def compile(self, composed_source: str, filename: str, entry_types: dict[str, list[str]]):
        from labrunner.run.cpu.module import CpuModule

        return CpuModule.build(composed_source, filename, entry_types)

    def upload(self, array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array).copy()

    def to_host(self, buffer: np.ndarray) -> np.ndarray:
        return np.array(buffer, copy=True)

    def guarded(self, count: int, fill_bits: int = POISON_BITS) -> HostGuardedBuffer:
        return HostGuardedBuffer(count, fill_bits)

    def launch(self, module, launch: Launch, buffers: dict, reverse_threads: bool = False) -> None:
        args = [buffers[a] if isinstance(a, str) else int(a) for a in launch.args]
        module.launch(launch.kernel, launch.grid, launch.block, launch.shared_bytes, args,
                      reverse_threads=reverse_threads)

    def synchronize(self) -> None:
        """Launches on the CPU return when the grid is done."""

    def describe_error(self, exc: BaseException) -> str | None:
        """No CPU failure poisons the process the way a sticky CUDA error does."""
        return None

    def describe_fault(self, exc: BaseException) -> str | None:
        """A barrier or shuffle that can never complete, a bad launch: the kernel's fault, named."""
        from labrunner.run.cpu.module import CpuKernelError

        return str(exc) if isinstance(exc, CpuKernelError) else None


def cpu_backend_status() -> tuple[bool, str]:
    """Whether `--device cpu` can work here, in one line."""
    try:
        from labrunner.run.cpu.module import cpu_compiler_available
    except ImportError as exc:
        return False, f"the CPU backend is not importable ({exc})"
    reason = cpu_compiler_available()
    return (reason is None), (reason or "g++ found: --device cpu works (correctness only)")
