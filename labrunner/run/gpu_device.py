"""The GPU backend: the student's module through CuPy's RawModule (NVRTC), launches, buffers.

It runs only inside the worker process (see `worker.py`): no student code ever runs in the
driver's CUDA context, so a kernel that poisons its own context takes nothing of the driver's
with it. (The driver's context holds only its own oracle for timed calls, `gpu_oracle.py`.)
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from labrunner.compile.backend import Backend
from labrunner.compile.nvrtc import NVRTC_INCLUDE_OPTIONS
from labrunner.labs.definition import Launch
from labrunner.truth.poison import CANARY_BITS, GUARD_ELEMENTS, POISON_BITS

if TYPE_CHECKING:
    from labrunner.measure.device import DeviceArray, Kernels

DEFAULT_SHARED_LIMIT = 48 * 1024  # a launch above this needs the kernel's opt-in attribute raised
# Triton 3.6's kernels take two pointers past their own parameters, to global and profile scratch
# memory; the gate refused every kernel that uses either, so both are passed as null.
TRITON_SCRATCH_POINTERS = 2
TRITON_ALIGNMENT = 16  # the compile told Triton every buffer starts on this boundary (`triton_child.py`)


class TritonLoadError(Exception):
    """A Triton file's kernels cannot be loaded here (built for another GPU): a compile error, in words."""


class TritonFunction:
    """A Triton kernel's cubin function with the launch facts its compile fixed: the block is 32 x its
    warps and its dynamic shared memory what Triton allotted, whatever the lab's plan says of them."""

    def __init__(self, function: Any, threads: int, shared_bytes: int) -> None:  # CuPy's RawKernel
        self.function = function
        self.threads = threads
        self.shared_bytes = shared_bytes
        if shared_bytes > DEFAULT_SHARED_LIMIT:
            function.max_dynamic_shared_size_bytes = shared_bytes


def _cupy() -> ModuleType:
    import cupy

    module: ModuleType = cupy  # CuPy ships no type information
    return module


class GuardedBuffer:
    """A device buffer framed by canary bands; `inner` is what the kernel is given."""

    def __init__(self, xp: ModuleType, count: int, fill_bits: int) -> None:
        self.count = count
        self.fill_bits = fill_bits
        self.full = xp.empty(GUARD_ELEMENTS + count + GUARD_ELEMENTS, dtype=np.float32)
        self.full.view(np.uint32).fill(CANARY_BITS)
        self.inner = self.full[GUARD_ELEMENTS : GUARD_ELEMENTS + count]
        self.repoison()

    def repoison(self) -> None:
        """Back to the buffer's own poison pattern, as if no kernel had ever written it."""
        self.inner.view(np.uint32).fill(self.fill_bits)

    def bands(self, to_host: Callable[[DeviceArray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        return to_host(self.full[:GUARD_ELEMENTS]), to_host(self.full[GUARD_ELEMENTS + self.count :])


class GpuDevice:
    name = Backend.GPU

    def __init__(self) -> None:
        self.xp = _cupy()
        self.xp.cuda.runtime.getDeviceCount()  # fails early, with the driver's words, where no GPU is

    def compile(
        self,
        composed_source: str,
        filename: str,
        entry_types: dict[str, list[str]],
        binary: tuple[str, bytes] | None = None,
        triton: dict[str, dict[str, Any]] | None = None,
        **cpu_options: object,
    ) -> Kernels:
        """CuPy's RawModule for this GPU; `cpu_options` (arch, sandboxed) are the CPU backend's and unused here.

        `binary`: (architecture, machine code) the compile gate built from the same source in its own
        box; where it is this GPU's architecture it is loaded as it is (no second compile of the
        student's text, and no compiler cache to share between boxes), else the source is compiled.
        `triton`: a Triton file's kernels (name -> arch, entry, cubin, threads, shared), each loaded from its
        cubin, which must be this GPU's architecture (nothing here compiles a Triton file)."""
        if triton:
            return {name: self._triton_function(name, kernel) for name, kernel in triton.items()}
        if binary is not None and binary[1] and binary[0] == self.architecture():
            path = Path(tempfile.mkdtemp(prefix="module-")) / "module.cubin"
            path.write_bytes(binary[1])
            module = self.xp.RawModule(path=str(path))
        else:
            module = self.xp.RawModule(
                code=composed_source,
                options=("--std=c++17", *NVRTC_INCLUDE_OPTIONS, "--no-source-include", "-lineinfo"),
            )
        return {name: module.get_function(name) for name in entry_types}

    def _triton_function(self, name: str, kernel: dict[str, Any]) -> TritonFunction:
        mine = self.architecture()
        if kernel["arch"] != mine:
            raise TritonLoadError(
                f"{name} was compiled for {kernel['arch']}, and this GPU is {mine}: grade with --arch {mine}"
            )
        path = Path(tempfile.mkdtemp(prefix="triton-")) / f"{name}.cubin"
        path.write_bytes(kernel["cubin"])
        function = self.xp.RawModule(path=str(path)).get_function(kernel["entry"])
        return TritonFunction(function, kernel["threads"], kernel["shared"])

    def architecture(self) -> str:
        """This GPU's real architecture as NVRTC names it (sm_90 for an H100 or H200)."""
        return f"sm_{self.xp.cuda.Device().compute_capability}"  # CuPy says "90"

    def upload(self, array: np.ndarray) -> DeviceArray:
        return self.xp.asarray(array)

    def to_host(self, buffer: DeviceArray) -> np.ndarray:
        host: np.ndarray = self.xp.asnumpy(buffer)
        return host

    def guarded(self, count: int, fill_bits: int = POISON_BITS) -> GuardedBuffer:
        return GuardedBuffer(self.xp, count, fill_bits)

    def launch(
        self, kernels: Kernels, launch: Launch, buffers: dict[str, DeviceArray], reverse_threads: int = False
    ) -> None:
        kernel = kernels[launch.kernel]
        if isinstance(kernel, TritonFunction):
            self._launch_triton(kernel, launch, buffers)
            return
        if launch.shared_bytes > DEFAULT_SHARED_LIMIT and kernel.max_dynamic_shared_size_bytes < launch.shared_bytes:
            kernel.max_dynamic_shared_size_bytes = launch.shared_bytes
        args = tuple(buffers[a] if isinstance(a, str) else np.int32(a) for a in launch.args)
        kernel(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)

    def _launch_triton(self, kernel: TritonFunction, launch: Launch, buffers: dict[str, DeviceArray]) -> None:
        args: list[DeviceArray] = []
        for a in launch.args:
            if isinstance(a, str):
                if buffers[a].data.ptr % TRITON_ALIGNMENT:  # never so for the driver's buffers: checked, not assumed
                    raise ValueError(f"buffer {a} does not start on a {TRITON_ALIGNMENT}-byte boundary")
                args.append(buffers[a])
            else:
                args.append(np.int32(a))
        args += [np.uint64(0)] * TRITON_SCRATCH_POINTERS
        kernel.function(launch.grid, (kernel.threads, 1, 1), tuple(args), shared_mem=kernel.shared_bytes)

    def synchronize(self) -> None:
        self.xp.cuda.runtime.deviceSynchronize()

    def describe_fault(self, exc: BaseException) -> str | None:
        """A launch the driver refused (too many threads, too much shared memory) is the kernel's fault."""
        if isinstance(exc, self.xp.cuda.driver.CUDADriverError) and "INVALID" in str(exc):
            return str(exc)
        return None

    def describe_error(self, exc: BaseException) -> str | None:
        """The CUDA error's name for a sticky fault (cudaErrorIllegalAddress, ...), else None."""
        if self.describe_fault(exc):
            return None
        runtime_error = self.xp.cuda.runtime.CUDARuntimeError
        driver_error = self.xp.cuda.driver.CUDADriverError
        if isinstance(exc, (runtime_error, driver_error)):
            return str(exc).split(":")[0].strip()
        return None
