"""The CPU build sees the preprocessor NVRTC saw: NVRTC's predefined macros, none of g++'s own."""

from __future__ import annotations

import numpy as np
import pytest

from labrunner.run.cpu.module import CXXFLAGS, CpuModule, _cxx
from labrunner.run.cpu.nvrtc_view import NVRTC_CANDIDATES, gxx_predefined, nvrtc_predefined

PRELUDE = '#include <attnlab/prelude.cuh>\n#line 1 "attention.cu"\n'


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cpu-cache")


@pytest.mark.slow
def test_the_cpu_build_defines_exactly_the_macros_nvrtc_defines(cache):
    """Every name g++ or NVRTC predefines is tested with #ifdef inside a kernel built for the CPU;
    the answer must be NVRTC's, the limit macros g++'s headers expand into (`__INT_MAX__`) included."""
    gxx = gxx_predefined(_cxx(), tuple(CXXFLAGS))
    names = sorted(name for name in set(gxx) | set(NVRTC_CANDIDATES) if not name.startswith("__has_"))
    nvrtc, _ = nvrtc_predefined("sm_90", tuple(sorted(set(gxx) | set(NVRTC_CANDIDATES))))
    body = "".join(f"#ifdef {name}\n  o[{i}] = 1;\n#endif\n" for i, name in enumerate(names))
    src = PRELUDE + f'extern "C" __global__ void probe(float* o) {{\n{body}}}\n'
    out = np.zeros(len(names), np.float32)
    CpuModule.build(src, "attention.cu", {"probe": ["float*"]}, cache_dir=cache).launch(
        "probe", (1, 1, 1), (1, 1, 1), 0, [out]
    )
    cpu_defined = {name for name, flag in zip(names, out) if flag == 1}
    assert cpu_defined == set(nvrtc)
    assert {"__CUDA_ARCH__", "__CUDACC__", "__CUDACC_RTC__", "CUDART_VERSION"} <= set(nvrtc)
    assert not {"__GNUC__", "__x86_64__", "__linux__", "__NVCC__", "__OPTIMIZE__"} & cpu_defined


@pytest.mark.parametrize("arch, expected", [("sm_90", 900), ("sm_80", 800)])
@pytest.mark.slow
def test_cuda_arch_is_the_arch_the_gate_compiled_for(cache, arch, expected):
    src = (
        PRELUDE
        + """
extern "C" __global__ void probe(float* o) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    o[0] = __CUDA_ARCH__;
    __syncwarp();
#endif
    o[1] = __CUDACC__;
    o[2] = __CUDACC_RTC__;
    o[3] = __CUDACC_VER_MAJOR__ * 1000 + __CUDACC_VER_MINOR__ * 10;
    o[4] = CUDART_VERSION;
#if __CUDA_ARCH_HAS_FEATURE__(SM90_ALL)
    o[5] = 1;
#endif
}
"""
    )
    from labrunner.compile.nvrtc import nvrtc_version

    out = np.zeros(6, np.float32)
    CpuModule.build(src, "attention.cu", {"probe": ["float*"]}, cache_dir=cache, arch=arch).launch(
        "probe", (1, 1, 1), (32, 1, 1), 0, [out]
    )
    major, minor = map(int, nvrtc_version().split("."))
    assert out.tolist() == [expected, 1, 1, major * 1000 + minor * 10, major * 1000 + minor * 10, 0]


def test_the_headers_limit_macros_still_work_in_a_kernel(cache):
    """The standard headers a kernel may include (NVRTC's own, labrunner/include/nvrtc_std, and the
    CPU build's <cmath> and <climits>) still compile and give FLT_MAX, INT_MAX and INFINITY, though
    none of g++'s own macros is left for them to expand into."""
    src = (
        PRELUDE
        + """
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <float.h>
#include <math.h>
#include <stdint.h>
extern "C" __global__ void probe(float* o) {
    o[0] = FLT_MAX;
    o[1] = (float)INT_MAX;
    o[2] = -INFINITY;
}
"""
    )
    out = np.zeros(3, np.float32)
    CpuModule.build(src, "attention.cu", {"probe": ["float*"]}, cache_dir=cache).launch(
        "probe", (1, 1, 1), (1, 1, 1), 0, [out]
    )
    assert out.tolist() == [np.finfo(np.float32).max, 2.0**31, -np.inf]
