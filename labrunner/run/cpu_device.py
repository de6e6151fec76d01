"""The CPU backend's device, seen through the same small interface as the GPU's.

Buffers are host numpy arrays, each in a mapping of its own between inaccessible guards
(`cpu/device_memory.py`), so that a wild access faults the same way on every run and is named
against the buffer it missed; launches go through `labrunner.run.cpu` (the student's file
compiled as C++ with a shim that runs each block's threads as fibers). Everything around the
launches (poison, guard bands, inputs read back, the checks) is the same code as on the GPU.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from labrunner.compile.backend import Backend
from labrunner.compile.nvrtc import DEFAULT_ARCH
from labrunner.labs.definition import Launch
from labrunner.run.cpu.device_memory import guarded_array, out_of_bounds_message
from labrunner.truth.poison import CANARY_BITS, GUARD_ELEMENTS, POISON_BITS

if TYPE_CHECKING:
    from labrunner.measure.device import Kernels

# What a built module may need (object_check.ALLOWED_LIBRARIES), loaded before the filter goes on.
RUNTIME_LIBRARIES = ("libstdc++.so.6", "libm.so.6", "libgcc_s.so.1")


class HostGuardedBuffer:
    def __init__(self, count: int, fill_bits: int) -> None:
        self.count = count
        # canary bands inside the mapping (a write just past the end changes them, as on the GPU), and
        # the mapping's inaccessible guards beyond them (a write farther away faults)
        self.full = guarded_array(GUARD_ELEMENTS + count + GUARD_ELEMENTS, np.float32)
        self.full.view(np.uint32)[:] = CANARY_BITS
        self.inner = self.full[GUARD_ELEMENTS : GUARD_ELEMENTS + count]
        self.inner.view(np.uint32)[:] = fill_bits

    def bands(self, to_host: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        return self.full[:GUARD_ELEMENTS].copy(), self.full[GUARD_ELEMENTS + self.count :].copy()


class CpuDevice:
    """The CPU backend inside the worker process.

    `compile` is the one place a student's native code enters the process, and it seals the
    process on the way (see `labrunner/syscall_filter.py`): g++ runs in a child under a wall-clock and
    memory limit; the object check reads what it built and refuses anything that would run at
    load time or imports a foreign symbol; the libraries the module needs are loaded; then the
    seccomp filter goes on, the module is loaded, and a second filter takes away the loader's
    last permissions (its open and its fstat of the module, the only calls with a path the first
    filter allows). From then on the process cannot fork, exec, open or stat files, make sockets,
    or signal anything but itself, so one CPU worker loads exactly one module (a second `compile` is refused:
    the compiler could not even start). Everything the worker runs afterwards must be imported
    before this call. `sandboxed=False` (`--unsafe-cpu`: a student grading their own file) skips
    the filter, never the object check.
    """

    name = Backend.CPU

    def __init__(self) -> None:
        self.sealed = False

    def compile(
        self,
        composed_source: str,
        filename: str,
        entry_types: dict[str, list[str]],
        arch: str = DEFAULT_ARCH,
        sandboxed: bool = True,
        timeout_s: float | None = None,
        triton: dict[str, dict[str, Any]] | None = None,
    ) -> Kernels:
        from labrunner import syscall_filter
        from labrunner.run.cpu.module import (
            BUILD_TIMEOUT_S,
            CpuKernelError,
            CpuModule,
            build_object,
            check_built_object,
        )

        if self.sealed:
            raise CpuKernelError(
                "this CPU worker already loaded a module and sealed itself; each module needs a fresh worker"
            )
        if triton:  # a Triton file: its Python, run by Triton's interpreter once this process is sealed
            from labrunner.run.cpu.triton_module import TritonInterpretedModule

            constexprs = {name: kernel["constexprs"] for name, kernel in triton.items()}
            self.sealed = sandboxed
            return TritonInterpretedModule.load(composed_source, filename, entry_types, constexprs, sandboxed)
        timeout_s = timeout_s or BUILD_TIMEOUT_S
        so_path = build_object(composed_source, filename, entry_types, arch=arch, timeout_s=timeout_s)
        check_built_object(so_path, filename, timeout_s=timeout_s)
        if not sandboxed:
            return CpuModule.load(so_path, filename, entry_types)
        for library in RUNTIME_LIBRARIES:  # loaded now, so that loading the module opens only its own file
            ctypes.CDLL(library)
        syscall_filter.prepare_stdout()  # its buffer sized by fstat() now: sealed, fstat() is refused
        self.sealed = True
        syscall_filter.install("load")
        module = CpuModule.load(so_path, filename, entry_types)
        syscall_filter.install("run")
        return module

    def upload(self, array: np.ndarray) -> np.ndarray:
        array = np.ascontiguousarray(array)
        buffer = guarded_array(array.shape, array.dtype)
        buffer[...] = array
        return buffer

    def to_host(self, buffer: np.ndarray) -> np.ndarray:
        return np.array(buffer, copy=True)

    def guarded(self, count: int, fill_bits: int = POISON_BITS) -> HostGuardedBuffer:
        return HostGuardedBuffer(count, fill_bits)

    def launch(
        self, module: Kernels, launch: Launch, buffers: dict[str, np.ndarray], reverse_threads: int = False
    ) -> None:
        """One launch; a fault in a guard of one of its buffers is raised as the out-of-bounds access it
        is, naming the buffer (a fault anywhere else stays the illegal memory access it was)."""
        from labrunner.run.cpu.module import CpuFault, CpuOutOfBounds

        args = [buffers[a] if isinstance(a, str) else int(a) for a in launch.args]
        if getattr(module, "interpreted", False):  # a Triton file's: it checks its own accesses, by buffer
            names = {i: a for i, a in enumerate(launch.args) if isinstance(a, str)}
            flat = [a.reshape(-1) if isinstance(a, np.ndarray) else a for a in args]  # views: the same bytes
            module.launch(launch.kernel, launch.grid, flat, names)
            return
        try:
            module.launch(
                launch.kernel, launch.grid, launch.block, launch.shared_bytes, args, reverse_threads=reverse_threads
            )
        except CpuFault as fault:
            named = {a: buffers[a] for a in launch.args if isinstance(a, str)}
            message = out_of_bounds_message(fault.address, fault.write, fault.where, named)
            if message is None:
                raise
            raise CpuOutOfBounds(message) from None

    def synchronize(self) -> None:
        """Launches on the CPU return when the grid is done."""

    def describe_error(self, exc: BaseException) -> str | None:
        """No CPU failure poisons the process the way a sticky CUDA error does."""
        return None

    def describe_fault(self, exc: BaseException) -> str | None:
        """A barrier or shuffle that can never complete, a bad launch: the kernel's fault, named."""
        from labrunner.run.cpu.module import CpuCompileError, CpuKernelError

        return str(exc) if isinstance(exc, CpuKernelError) and not isinstance(exc, CpuCompileError) else None


def cpu_backend_status() -> tuple[bool, str]:
    """Whether `--device cpu` can work here, in one line."""
    try:
        from labrunner.run.cpu.module import cpu_compiler_available
    except ImportError as exc:
        return False, f"the CPU backend is not importable ({exc})"
    reason = cpu_compiler_available()
    if reason is not None:
        return False, reason
    unsafe = cpu_sandbox_status()
    if unsafe is not None:
        return False, f"g++ found, but {unsafe}: --device cpu grades only with --unsafe-cpu"
    return True, "g++ and seccomp found: --device cpu works (correctness only)"


def cpu_sandbox_status() -> str | None:
    """None where the CPU worker can seal itself with seccomp, else a one-line reason it cannot."""
    from labrunner.syscall_filter import availability

    return availability()
