"""Compiler builtins and qualifiers NVRTC accepts, on the CPU backend: __builtin_assume (checked: a false
assumption is undefined behaviour on the GPU, so it ends the launch here, at its line), __builtin_expect,
__launch_bounds__ with one, two or three arguments and __restrict__ on parameters and locals; and a failed
compile of a file with launch constants shows the student's error alone, no warning about the constants."""

from __future__ import annotations

import numpy as np
import pytest

from labrunner.compile.nvrtc import compile_module
from labrunner.run.cpu.module import CpuCompileError, CpuKernelError, CpuModule

PRELUDE = '#include <attnlab/prelude.cuh>\n#line 1 "builtins.cu"\n'

BUILTINS = r"""
extern "C" __constant__ int attnlab_threads = 64;
__device__ __forceinline__ float twice(const float* __restrict__ p) { return 2.0f * *p; }
extern "C" __global__ void __launch_bounds__(64) one(const float* __restrict__ x, float* __restrict__ o, int n) {
    const int i = threadIdx.x;
    __builtin_assume(i < 64);
    __builtin_assume(n > 0);
    if (__builtin_expect(i < n, 1)) o[i] = twice(x + i);
}
extern "C" __global__ void __launch_bounds__(64, 2) two(const float* x, float* o, int n) {
    const float* __restrict__ from = x;
    float* __restrict__ to = o;
    const long hot = __builtin_expect((long)threadIdx.x, 0L);
    if (threadIdx.x < n) to[threadIdx.x] = from[threadIdx.x] + (float)hot;
}
extern "C" __global__ void __launch_bounds__(64, 2, 1) three(const float* x, float* o, int n) {
    const int i = threadIdx.x;
    __builtin_assume(i + 1 < n);  // false for the last thread when n is the block's size
    o[i] = x[i] * 3.0f;
}
"""
ASSUME_LINE = next(n for n, line in enumerate(BUILTINS.splitlines(), 1) if "__builtin_assume(i + 1 < n)" in line)
ENTRY_POINTS = {name: ["float*", "float*", "int"] for name in ("one", "two", "three")}


@pytest.fixture(scope="module")
def module(tmp_path_factory) -> CpuModule:
    compile_module(BUILTINS, "builtins.cu", "sm_90")  # NVRTC takes the same file
    return CpuModule.build(
        PRELUDE + BUILTINS, "builtins.cu", ENTRY_POINTS, cache_dir=tmp_path_factory.mktemp("cpu-cache")
    )


def test_assume_expect_launch_bounds_and_restrict_compile_and_compute(module):
    x = np.arange(64, dtype=np.float32) + 0.5
    for name, expected in (("one", 2.0 * x), ("two", x + np.arange(64)), ("three", 3.0 * x)):
        out = np.zeros(64, np.float32)
        module.launch(name, (1, 1, 1), (64, 1, 1), 0, [x, out, 64 + (name == "three")])
        np.testing.assert_array_equal(out, expected, err_msg=name)


def test_a_false_assumption_ends_the_launch_at_its_line(module):
    x = np.arange(64, dtype=np.float32)
    with pytest.raises(CpuKernelError) as failed:
        module.launch("three", (1, 1, 1), (64, 1, 1), 0, [x, np.zeros(64, np.float32), 64])
    assert str(failed.value) == (
        f"assumption false in kernel three, block (0,0,0), thread 63 (builtins.cu:{ASSUME_LINE}): "
        "__builtin_assume(i + 1 < n) "
        "does not hold; the GPU's compiler takes it as true, so what the kernel does past it is undefined there: "
        "make it hold, or remove it"
    )


def test_a_compile_error_shows_no_warning_about_the_launch_constants(tmp_path):
    """`extern "C" __constant__ int attnlab_x = N;` is how every starter declares its launch constants; g++
    would warn "initialized and declared 'extern'" about each on every failed compile."""
    source = (
        'extern "C" __constant__ int attnlab_threads = 256;\n'
        'extern "C" __constant__ int attnlab_rows_per_block = 64;\n'
        'extern "C" __constant__ int attnlab_heads_per_block = 1;\n'
        'extern "C" __constant__ int attnlab_smem_bytes = 0;\n'
        'extern "C" __constant__ int attnlab_extra = (3 + 4) * 2, attnlab_more = 1;\n'
        'extern "C" __global__ void k(float* o) { o[threadIdx.x] = undeclared; }\n'
    )
    with pytest.raises(CpuCompileError) as refused:
        CpuModule.build(PRELUDE + source, "builtins.cu", {"k": ["float*"]}, cache_dir=tmp_path)
    assert str(refused.value) == (
        "C++ compile failed:\nbuiltins.cu(6): error: \u2018undeclared\u2019 was not declared in this scope"
    )


def test_the_braced_launch_constants_are_still_exported(tmp_path):
    source = (
        'extern "C" __constant__ int attnlab_threads = 96;\n'
        'extern "C" __constant__ int attnlab_negative = -(2 + 3);\n'
        'extern "C" __global__ void k(float* o) { o[threadIdx.x] = attnlab_threads; }\n'
    )
    module = CpuModule.build(PRELUDE + source, "builtins.cu", {"k": ["float*"]}, cache_dir=tmp_path)
    assert (module.read_int_global("attnlab_threads"), module.read_int_global("attnlab_negative")) == (96, -5)
    out = np.zeros(2, np.float32)
    module.launch("k", (1, 1, 1), (2, 1, 1), 0, [out])
    assert out.tolist() == [96.0, 96.0]
