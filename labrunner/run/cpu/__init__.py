"""CPU backend: compile a CUDA kernel file with g++ and run it on cooperative fibers."""

from .module import CpuKernelError, CpuModule, cpu_compiler_available

__all__ = ["CpuKernelError", "CpuModule", "cpu_compiler_available"]
