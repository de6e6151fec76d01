"""What the compile gate found in a file: `attnlab check`'s report and the `compile` of its JSON."""

from __future__ import annotations

from dataclasses import dataclass, field

from labrunner.compile.nvrtc import KernelResources
from labrunner.records.serialize import JsonRecord, key

TRITON_ONLY = key(only_if="triton")  # a CUDA file's JSON has no Triton keys


@dataclass(frozen=True)
class CompileSummary(JsonRecord):
    """One successful compile: the target, the compiler, and what each kernel and constant came out as.

    `constants` is the launch geometry the run uses (the file's exported `attnlab_*` constants, the lab's
    defaults for the rest); `exported` is what the file itself exported. `resources` is NVRTC's report
    per kernel (registers, shared and stack bytes, spills), a field None where NVRTC said nothing."""

    arch: str
    nvrtc: str
    entry_points: dict[str, list[str]]  # kernel name -> its PTX parameter types
    constants: dict[str, int]
    exported: dict[str, int]
    resources: dict[str, KernelResources]
    warnings: list[str]
    # A Triton file's compile: Triton's version, and per kernel its num_warps, num_stages and shared bytes;
    # the constants those set (`Lab.triton_blocks`) are the compile's, not the file's.
    triton: str = field(default="", metadata=TRITON_ONLY)
    triton_kernels: dict[str, dict[str, int]] = field(default_factory=dict, metadata=TRITON_ONLY)
    compiled: tuple[str, ...] = field(default=(), metadata=TRITON_ONLY)

    @property
    def compiler(self) -> str:
        return f"Triton {self.triton}" if self.triton else f"NVRTC {self.nvrtc}"

    def constant_source(self, name: str) -> str:
        """Where a launch constant's value came from: "compile" (a Triton kernel's block), "file" (exported
        by it), else "default" (the lab's)."""
        return "compile" if name in self.compiled else "file" if name in self.exported else "default"
