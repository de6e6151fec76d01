"""The standard headers a kernel may include give the same values under NVRTC and under the CPU build.

NVRTC ships none of them, so labrunner/include holds small versions; g++ uses the system's (and
the driver's math_constants.h). One probe kernel writes each constant to memory: NVRTC's values
are read from the PTX it wrote (the constants are folded into immediate stores), the CPU's by
running the same kernel through the CPU backend, and the two must agree bit for bit.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from labrunner.compile.gate import compile_gate
from labrunner.compile.nvrtc import compose_source
from labrunner.run.cpu.module import CpuModule, cpu_compiler_available

FLOATS = [
    "FLT_MAX",
    "FLT_MIN",
    "FLT_EPSILON",
    "FLT_TRUE_MIN",
    "CUDART_INF_F",
    "-CUDART_INF_F",
    "CUDART_NAN_F",
    "CUDART_PI_F",
    "CUDART_L2E_F",
    "CUDART_LN2_F",
    "CUDART_SQRT_HALF_F",
    "INFINITY",
    "NAN",
    "HUGE_VALF",
    "std::max(2.5f, -1.0f)",
    "std::min(2.5f, -1.0f)",
    "(float)INT32_MAX",
    "(float)UINT8_MAX",
    "(float)sizeof(int64_t)",
    "(float)sizeof(std::uint32_t)",
    "(float)FLT_MANT_DIG",
]
DOUBLES = [
    "DBL_MAX",
    "DBL_MIN",
    "DBL_EPSILON",
    "CUDART_INF",
    "CUDART_PI",
    "CUDART_LN2",
    "M_PI",
    "M_LN2",
    "M_SQRT1_2",
    "HUGE_VAL",
    "(double)INT64_MAX",
    "(double)UINT32_MAX",
]
HEADERS = ("cuda_runtime.h", "cfloat", "float.h", "cmath", "math.h", "cstdint", "stdint.h", "math_constants.h")
PROBE = "".join(f"#include <{h}>\n" for h in HEADERS) + (
    'extern "C" __global__ void floats(float* out) {\n'
    + "".join(f"    out[{i}] = {value};\n" for i, value in enumerate(FLOATS))
    + "}\n"
    'extern "C" __global__ void doubles(double* out) {\n'
    + "".join(f"    out[{i}] = {value};\n" for i, value in enumerate(DOUBLES))
    + "}\n"
    'extern "C" __global__ void functions(float* out) {\n'
    "    out[0] = std::exp(out[0]); out[1] = std::max(out[1], out[2]); out[2] = std::sqrt(out[3]);\n}\n"
)


def nvrtc_stores(ptx: str, kernel: str, width: int) -> dict[int, int]:
    """Offset -> bits of each immediate the kernel stores: `mov.u32 %r1, N; st.global.u32 [%rd4+8], %r1;`."""
    body = re.search(r"\.entry " + kernel + r"\b(.*?)\n}", ptx, re.DOTALL).group(1)
    registers = {
        name: int(value) % (1 << width)  # PTX writes some as signed: -8388608 is 0xFF800000
        for name, value in re.findall(r"mov\.[ubsf]" + str(width) + r"\s+(%\w+), (-?\d+);", body)
    }
    return {
        int(offset or 0): registers[register]
        for offset, register in re.findall(
            r"st\.global\.[ubf]" + str(width) + r"\s+\[%\w+(?:\+(\d+))?\], (%\w+);", body
        )
    }


@pytest.fixture(scope="module")
def nvrtc_module():
    return compile_gate(PROBE, "headers.cu")


@pytest.fixture(scope="module")
def cpu_module(tmp_path_factory):
    if (reason := cpu_compiler_available()) is not None:
        pytest.skip(reason)
    return CpuModule.build(
        compose_source(PROBE, "headers.cu"),
        "headers.cu",
        {"floats": ["float*"], "doubles": ["double*"], "functions": ["float*"]},
        cache_dir=tmp_path_factory.mktemp("cpu-cache"),
    )


def cpu_values(module, kernel: str, dtype, count: int) -> np.ndarray:
    out = np.zeros(count, dtype=dtype)
    module.launch(kernel, (1, 1, 1), (1, 1, 1), 0, [out])
    return out


@pytest.mark.slow
def test_float_constants_are_the_same_bits_on_both_backends(nvrtc_module, cpu_module):
    stores = nvrtc_stores(nvrtc_module.ptx, "floats", 32)
    nvrtc_bits = [stores[4 * i] for i in range(len(FLOATS))]
    cpu_bits = cpu_values(cpu_module, "floats", np.float32, len(FLOATS)).view(np.uint32).tolist()
    assert dict(zip(FLOATS, nvrtc_bits)) == dict(zip(FLOATS, cpu_bits))
    named = dict(zip(FLOATS, cpu_bits))
    assert (named["FLT_MAX"], named["CUDART_INF_F"], named["-CUDART_INF_F"], named["CUDART_NAN_F"], named["NAN"]) == (
        0x7F7FFFFF,
        0x7F800000,
        0xFF800000,
        0x7FFFFFFF,
        0x7FC00000,
    )
    assert np.array(cpu_bits[14:21], dtype=np.uint32).view(np.float32).tolist() == [
        2.5,
        -1.0,
        2147483648.0,
        255.0,
        8.0,
        4.0,
        24.0,
    ]


def test_double_constants_are_the_same_bits_on_both_backends(nvrtc_module, cpu_module):
    stores = nvrtc_stores(nvrtc_module.ptx, "doubles", 64)
    nvrtc_bits = [stores[8 * i] for i in range(len(DOUBLES))]
    cpu_bits = cpu_values(cpu_module, "doubles", np.float64, len(DOUBLES)).view(np.uint64).tolist()
    assert dict(zip(DOUBLES, nvrtc_bits)) == dict(zip(DOUBLES, cpu_bits))
    named = dict(zip(DOUBLES, np.array(cpu_bits, dtype=np.uint64).view(np.float64).tolist()))
    assert (named["DBL_MAX"], named["CUDART_PI"], named["M_PI"]) == (np.finfo(np.float64).max, np.pi, np.pi)


def test_std_functions_run_on_the_cpu_backend(cpu_module):
    out = np.array([1.0, -3.0, 2.0, 16.0], dtype=np.float32)
    cpu_module.launch("functions", (1, 1, 1), (1, 1, 1), 0, [out])
    assert out[1:3].tolist() == [2.0, 4.0]
    assert abs(out[0] - np.float32(np.e)) <= np.spacing(np.float32(np.e))
