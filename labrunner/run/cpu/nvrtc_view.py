"""The preprocessor's view NVRTC had, rebuilt for g++: so the CPU build compiles the code the GPU gate saw.

A kernel file can choose code with the preprocessor: `#ifdef __CUDA_ARCH__` shows one kernel to
the GPU and another to anything else. g++ predefines hundreds of macros NVRTC does not
(`__GNUC__`, `__x86_64__`, `__linux__`) and none of NVRTC's (`__CUDA_ARCH__`, `__CUDACC__`,
`__CUDACC_RTC__`), so without care the CPU backend grades a different program from the one the
gate compiled. NVRTC cannot list its macros (it has no `-dM`), so we ask it: one probe file that,
for every candidate name, keeps a string of the macro's expansion in the PTX under `#ifdef`.
The candidates are every macro g++ predefines plus NVRTC's own, so the answer covers both sides.

The CPU build preprocesses the student's file on its own, apart from the runtime (module.py), with
`STUDENT_PREPROCESS_FLAGS`: `-undef` leaves only the few macros the C++ standard requires, and
no system header is searched. The header written here is read first, and makes that set NVRTC's:

* every macro NVRTC predefines, with NVRTC's value (`__CUDA_ARCH__ 900` for sm_90, the CUDA version,
  the `__cpp_*` feature macros);
* `#undef` for every macro g++ still predefines under `-undef` that NVRTC does not (`_GNU_SOURCE`).

So the file sees NVRTC's predefined macros and nothing of g++'s, not even the limit macros
(`__INT_MAX__`) that g++'s own headers expand into: the headers a kernel may include are NVRTC's
own there (`FLT_MAX` is a literal in labrunner/include/nvrtc_std/float.h).

What this does not cover: a file can still tell the compilers apart by other means (`__has_builtin`,
a type's size, a CUDA built-in that is a macro on one side and a function on the other, such as
`threadIdx`). The CPU build is a convenience for students and CI; the GPU is the authority for a course.

`__NVCC__` is not on either list on purpose: NVRTC does not define it, so neither do we.
"""

from __future__ import annotations

import functools
import re
import subprocess

from labrunner.compile.nvrtc import run_nvrtc

# NVRTC's own names, beyond the ones g++ shares. Found by probing NVRTC 13 with these and more
# candidates; a name NVRTC does not define is simply not defined on the CPU either.
NVRTC_CANDIDATES = (
    "CUDART_VERSION",
    "__CUDACC__",
    "__CUDACC_RTC__",
    "__CUDACC_VER_MAJOR__",
    "__CUDACC_VER_MINOR__",
    "__CUDACC_VER_BUILD__",
    "__CUDACC_DEVICE_ATOMIC_BUILTINS__",
    "__CUDACC_RDC__",
    "__CUDACC_EWP__",
    "__CUDACC_DEBUG__",
    "__CUDACC_RELAXED_CONSTEXPR__",
    "__CUDACC_EXTENDED_LAMBDA__",
    "__CUDACC_RTC_INT128__",
    "__CUDACC_RTC_FLOAT128__",
    "__CUDACC_RTC_MINIMAL__",
    "__CUDACC_PER_THREAD_DEFAULT_STREAM__",
    "__CUDA_ARCH__",
    "__CUDA_ARCH_LIST__",
    "__CUDA_ARCH_SPECIFIC__",
    "__CUDA_ARCH_FAMILY_SPECIFIC__",
    "__CUDA_FTZ",
    "__CUDA_PREC_DIV",
    "__CUDA_PREC_SQRT",
    "__CUDA_RUNTIME_H__",
    "__CUDA_NO_HALF__",
    "__EDG__",
    "__EDG_VERSION__",
    "__EDG_IA64_ABI",
    "__EDG_TYPE_TRAITS_ENABLED",
    "__NVCC__",
    "__NVCC_DIAG_PRAGMA_SUPPORT__",
    "__NV_BUILTIN_MOVE_FORWARD",
    "__NVCOMPILER",
    "_NVHPC_CUDA",
    "__clang__",
    "_MSC_VER",
    "_WIN32",
    "_WIN64",
    "__CHAR_UNSIGNED__",
)

# How module.py preprocesses the student's file: none of g++'s own predefined macros (the standard's
# few stay) and no system header directories; the header below is read before the file.
STUDENT_PREPROCESS_FLAGS = ("-undef", "-nostdinc", "-nostdinc++")

# `__CUDA_ARCH_HAS_FEATURE__(SM90_ALL)` is a built-in of NVRTC's preprocessor that expands to
# `__CUDA_ARCH_FEAT_SM90_ALL`, defined only for the arch-specific targets (sm_90a); we do the same.
_FEATURE = "__CUDA_ARCH_HAS_FEATURE__"


@functools.cache
def gxx_predefined(cxx: str, flags: tuple[str, ...]) -> dict[str, str]:
    """Every macro g++ predefines with these flags: name -> definition (after the name)."""
    out = subprocess.run(
        [cxx, *flags, "-dM", "-E", "-x", "c++", "/dev/null"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    macros = {}
    for line in out.splitlines():
        match = _DEFINE.match(line)
        if match:  # a function-like macro's parameters are not part of its name
            macros[match.group(1)] = match.group(2)
    return macros


_DEFINE = re.compile(r"#define (\w+)(?:\([^)]*\))? ?(.*)")


def _probe_source(names: list[str], feature: str) -> str:
    lines = ["#define ATTNLAB_PROBE_S2(...) #__VA_ARGS__", "#define ATTNLAB_PROBE_S(...) ATTNLAB_PROBE_S2(__VA_ARGS__)"]
    for i, name in enumerate(names):
        lines.append(
            f'#ifdef {name}\nextern "C" __device__ const char attnlab_probe_{i}[] = ATTNLAB_PROBE_S({name});\n#endif'
        )
    lines.append(f'#if {_FEATURE}({feature})\nextern "C" __device__ int attnlab_probe_feature = 1;\n#endif')
    return "\n".join(lines) + "\n"


_PTX_STRING = re.compile(r"\.global \.align 1 \.b8 attnlab_probe_(\d+)\[\d+\](?: = \{([^}]*)\})?;")


@functools.cache
def nvrtc_predefined(arch: str, candidates: tuple[str, ...]) -> tuple[dict[str, str], bool]:
    """Which candidates NVRTC predefines for `arch` and their expansions, and whether the arch's
    own feature set (`__CUDA_ARCH_HAS_FEATURE__(SM90_ALL)` for sm_90a) is on."""
    names = sorted(name for name in set(candidates) - {_FEATURE} if not name.startswith("__has_"))
    compiled, log, ptx = run_nvrtc(_probe_source(names, _feature_name(arch)), "attnlab-macro-probe.cu", arch, [])
    if not compiled:
        raise RuntimeError(f"NVRTC rejected the macro probe: {log.strip()[:300]}")
    found = {}
    for match in _PTX_STRING.finditer(ptx):
        data = bytes(int(b) for b in match.group(2).split(",")) if match.group(2) else b""
        found[names[int(match.group(1))]] = data.rstrip(b"\0").decode()
    return found, "attnlab_probe_feature" in ptx


def _feature_name(arch: str) -> str:
    digits = re.sub(r"\D", "", arch) or "0"
    return f"SM{digits}_ALL"


def nvrtc_view_header(arch: str, cxx: str, flags: tuple[str, ...]) -> str:
    """The header that turns what g++ predefines under STUDENT_PREPROCESS_FLAGS into NVRTC's macros."""
    candidates = gxx_predefined(cxx, flags)
    left = gxx_predefined(cxx, tuple(flags) + STUDENT_PREPROCESS_FLAGS)
    nvrtc, feature_on = nvrtc_predefined(arch, tuple(sorted(set(candidates) | set(NVRTC_CANDIDATES))))
    lines = ["// NVRTC's predefined macros for " + arch + ", and none of g++'s own (see nvrtc_view.py)."]
    for name in sorted(left):
        # __has_include and friends are operators of both preprocessors, not macros to remove
        if name not in nvrtc and not name.startswith("__has_"):
            lines.append(f"#undef {name}")
    for name, value in sorted(nvrtc.items()):
        if left.get(name) != value:
            lines.append((f"#undef {name}\n" if name in left else "") + f"#define {name} {value}".rstrip())
    feature = _feature_name(arch)
    lines.append(f"#define {_FEATURE}(name) __CUDA_ARCH_FEAT_##name")  # as NVRTC expands it
    if feature_on:
        lines.append(f"#define __CUDA_ARCH_FEAT_{feature} 1")
    return "\n".join(lines) + "\n"
