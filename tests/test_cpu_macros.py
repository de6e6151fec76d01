"""A kernel file on the CPU backend sees none of the runtime's macros: not the shim's own (ATTNLAB_FAIL,
the fiber runtime's switches), not those of the C and C++ headers the runtime includes (__GLIBC__,
MAP_ANONYMOUS, include guards), not g++'s. It sees NVRTC's predefined macros and the CUDA names of
labrunner/run/cpu/cuda_macros.h only, and nothing it defines reaches the runtime or the launch wrappers."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from labrunner.run.cpu.module import _MACROS, _SHIM, CXXFLAGS, CpuModule, _cxx
from labrunner.run.cpu.nvrtc_view import NVRTC_CANDIDATES, gxx_predefined, nvrtc_predefined

PRELUDE = '#include <attnlab/prelude.cuh>\n#line 1 "attention.cu"\n'


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cpu-cache")


def runtime_macros() -> set[str]:
    """Every macro defined once the runtime is preprocessed: the shim's, its headers', g++'s."""
    out = subprocess.run(
        [_cxx(), *CXXFLAGS, "-dM", "-E", "-include", str(_SHIM), "-x", "c++", "/dev/null"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return {m.group(1) for m in re.finditer(r"^#define (\w+)", out, re.M)}


def meant_to_be_seen() -> set[str]:
    """NVRTC's predefined macros, the CUDA names the shim gives as macros, and the prelude's INFINITY."""
    gxx = gxx_predefined(_cxx(), tuple(CXXFLAGS))
    nvrtc, _ = nvrtc_predefined("sm_90", tuple(sorted(set(gxx) | set(NVRTC_CANDIDATES))))
    cuda = set(re.findall(r"^#define (\w+)", _MACROS.read_text(), re.M))
    return set(nvrtc) | cuda | {"__CUDA_ARCH_HAS_FEATURE__", "INFINITY"}


@pytest.mark.slow
def test_no_macro_of_the_runtime_is_visible_to_a_kernel_file(cache):
    """Each of the ~3,000 macros of the runtime's preprocessing is tested with #ifdef inside a kernel
    built for the CPU; the ones defined there are exactly those the file is meant to see."""
    names = sorted(name for name in runtime_macros() if not name.startswith("__has_"))
    assert {
        "ATTNLAB_FAIL",
        "ATTNLAB_SITE_PARAMS",
        "ATTNLAB_HAVE_ASM_FIBERS",
        "__GLIBC__",
        "_GLIBCXX_RELEASE",
        "MAP_ANONYMOUS",
        "SIGSEGV",
        "EOF",
        "__GNUC__",
        "__OPTIMIZE__",
        "NULL",
        "__cplusplus",
    } <= set(names)
    body = "".join(f"#ifdef {name}\n  o[{i}] = 1;\n#endif\n" for i, name in enumerate(names))
    src = PRELUDE + f'extern "C" __global__ void probe(float* o) {{\n{body}}}\n'
    out = np.zeros(len(names), np.float32)
    CpuModule.build(src, "attention.cu", {"probe": ["float*"]}, cache_dir=cache).launch(
        "probe", (1, 1, 1), (1, 1, 1), 0, [out]
    )
    seen = {name for name, flag in zip(names, out) if flag == 1}
    assert seen == set(names) & meant_to_be_seen()
    assert {"NULL", "__cplusplus", "INFINITY"} <= seen  # names both sides define are seen, with NVRTC's meaning


def test_a_kernel_files_macros_reach_neither_the_runtime_nor_the_wrappers(cache):
    """Macros named like the identifiers of the runtime and of the launch wrappers change nothing but
    the file's own text: those are preprocessed apart from it."""
    src = PRELUDE + (
        "#define attnlab_gen broken\n#define AnyPtr broken\n#define launch broken\n"
        "#define attnlab_launch_0 broken\n#define register_shared broken\n#define memcpy broken\n"
        'extern "C" __global__ void k(float* o) { o[threadIdx.x] = 2.0f * threadIdx.x; }\n'
    )
    out = np.zeros(4, np.float32)
    CpuModule.build(src, "attention.cu", {"k": ["float*"]}, cache_dir=cache).launch("k", (1, 1, 1), (4, 1, 1), 0, [out])
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0]
