"""The CPU build's object check: a module whose loading would run code, or that imports a symbol
outside the shim's list, is refused before anything loads it; and the compiler's own limits.

These build C++ straight through the CPU backend, without the NVRTC gate in front, so that the
check is proven on its own (the gate happens to reject some of these; the check must not rely on it).
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from labrunner.run.cpu.module import CpuCompileError, CpuModule, build_object, check_built_object
from labrunner.run.cpu.object_check import read_elf
from labrunner.run.cpu.ptx_asm import SUPPORTED

PRELUDE = '#include <attnlab/prelude.cuh>\n#line 1 "attention.cu"\n'
KERNEL = 'extern "C" __global__ void k(float* o) { o[threadIdx.x] = 1.0f; }\n'
ENTRY = {"k": ["float*"]}
# Nested empty macros: 10^9 expansions keep any preprocessor busy for minutes, so the clock, not the
# machine's speed, decides how the build ends.
SLOW_TO_PREPROCESS = "#define E0\n" + "".join(f"#define E{n} " + f"E{n - 1} " * 10 + "\n" for n in range(1, 10)) + "E9\n"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cpu-cache")


def refusal(cache, code: str) -> str:
    with pytest.raises(CpuCompileError) as refused:
        CpuModule.build(PRELUDE + code + KERNEL, "attention.cu", ENTRY, cache_dir=cache)
    return str(refused.value)


PREFIX = "attention.cu: the CPU build refuses this file: "
AT_LOAD = (" would run when the module loads, outside any kernel (a constructor or a global's initialiser); "
           "kernels run only when launched, so remove it")


def test_a_global_with_a_dynamic_initialiser_is_refused(cache):
    assert refusal(cache, "__device__ int f() { return 3; }\nint attnlab_x = f();\n") == (
        PREFIX + "the dynamic initialiser of a namespace-scope variable (like `int x = f();`)" + AT_LOAD)


def test_a_constructor_function_is_refused_by_name(cache):
    assert refusal(cache, "__device__ __attribute__((constructor)) void evil() {}\n") == PREFIX + "`evil()`" + AT_LOAD


def test_a_static_constructor_is_refused_by_name(cache):
    code = "volatile int attnlab_hits;\nstatic __attribute__((constructor)) void quiet() { attnlab_hits = 1; }\n"
    assert refusal(cache, code) == PREFIX + "`quiet()`" + AT_LOAD


def test_a_destructor_function_is_refused(cache):
    assert refusal(cache, "__attribute__((destructor)) void bye() {}\n") == (
        PREFIX + "`bye()` would run when the module unloads, outside any kernel (a destructor); remove it")


def test_an_entry_placed_in_init_array_by_hand_is_refused(cache):
    code = ('extern "C" void planted() {}\n'
            '__attribute__((section(".init_array"), used)) static void (*planted_entry)() = planted;\n')
    assert refusal(cache, code) == PREFIX + "`planted`" + AT_LOAD


def test_an_entry_placed_in_init_array_by_the_assembler_never_reaches_it(cache):
    """NVRTC passes file-scope asm() through to PTX untouched; the CPU build reads every asm statement
    before g++ does (ptx_asm.py) and refuses this one, so x86 assembly never gets to plant anything."""
    code = ('extern "C" void planted_by_asm() {}\n'
            'asm(".pushsection .init_array,\\"aw\\",@init_array\\n.quad planted_by_asm\\n.popsection");\n')
    assert refusal(cache, code) == (
        'attention.cu(2): error: `.pushsection .init_array,"aw",@init_array .quad planted_b...` is inline assembly '
        "without operands, which the CPU backend cannot run: it runs only the PTX instructions " + SUPPORTED)


def test_code_added_to_the_init_section_is_refused(cache):
    code = '__attribute__((section(".init"), used)) static void extra_init() {}\n'
    assert refusal(cache, code) == (PREFIX + "its .init section differs from the runtime's own, so code would run "
                                    "when the module loads; remove what places code there")


def test_an_indirect_function_is_refused(cache):
    code = ('extern "C" int impl() { return 1; }\n'
            'extern "C" void* pick() { return (void*)impl; }\n'
            'extern "C" int chosen() __attribute__((ifunc("pick")));\n')
    assert refusal(cache, code) == (PREFIX + "`chosen` is a GNU indirect function (ifunc), whose resolver runs when "
                                    "the module loads; remove the ifunc attribute")


def test_a_call_into_the_c_library_outside_the_list_is_refused(cache):
    code = ('extern "C" __device__ int system(const char*);\n'
            'extern "C" __global__ void shell(float* o) { o[0] = system("true"); }\n')
    assert refusal(cache, code) == (
        PREFIX + "it uses `system`, which kernels on the CPU backend may not call (allowed: math functions, "
        "memcpy/memset, printf, malloc/free and the shim's CUDA built-ins)")


def test_a_static_with_a_destructor_is_refused_for_registering_exit_code(cache):
    code = ('struct Noisy { ~Noisy() { printf("bye\\n"); } };\n'
            'extern "C" __global__ void keep(float* o) { static Noisy n; o[0] = 1; }\n')
    assert refusal(cache, code).startswith(PREFIX + "it uses `__cxa_atexit`, which kernels")


def test_file_scope_shared_memory_adds_no_load_time_code(cache):
    code = ("extern __shared__ float dynamic_tile[];\n__shared__ float static_tile[32];\n"
            'extern "C" __global__ void copy(float* o) { static_tile[threadIdx.x] = threadIdx.x;'
            " dynamic_tile[threadIdx.x] = static_tile[threadIdx.x]; o[threadIdx.x] = dynamic_tile[threadIdx.x]; }\n")
    module = CpuModule.build(PRELUDE + code, "attention.cu", {"copy": ["float*"]}, cache_dir=cache)
    out = np.zeros(32, np.float32)
    module.launch("copy", (1, 1, 1), (32, 1, 1), 128, [out])
    assert out.tolist() == list(range(32))
    assert len(read_elf(module.so_path).init_entries) == 1  # the C runtime's frame_dummy only


def test_a_cached_module_is_checked_again_before_loading(cache):
    """A module found in the cache (planted there, or built before the check existed) is read again."""
    code = PRELUDE + "volatile int attnlab_hits;\n__attribute__((constructor)) static void later() { attnlab_hits = 1; }\n" + KERNEL
    so_path = build_object(code, "attention.cu", ENTRY, cache_dir=cache)
    assert build_object(code, "attention.cu", ENTRY, cache_dir=cache) == so_path  # reused, not rebuilt
    with pytest.raises(CpuCompileError, match=r"^attention\.cu: the CPU build refuses this file: `later\(\)` would run"):
        check_built_object(so_path, "attention.cu", cache)


# ----------------------------------------------------------------- the compiler's limits

def test_a_compiler_past_its_time_limit_is_stopped_with_its_children(cache, tmp_path, monkeypatch):
    import labrunner.run.cpu.module as module

    started_groups = []

    class Recording(module.subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if module._LIMITED_EXEC in args[0]:  # the compiler's child, not g++ -dM or c++filt
                started_groups.append(self.pid)

    monkeypatch.setattr(module.subprocess, "Popen", Recording)
    started = time.monotonic()
    with pytest.raises(CpuCompileError, match=r"^attention\.cu: error: the compiler did not finish in 0\.5 s \(the CPU build\)$"):
        build_object(PRELUDE + SLOW_TO_PREPROCESS + KERNEL, "attention.cu", ENTRY, cache_dir=tmp_path, timeout_s=0.5)
    assert time.monotonic() - started < 5
    assert len(started_groups) == 1
    assert _live_members(started_groups[0]) == []  # nothing of its process group is left: g++, cc1plus, as


def _live_members(group: int) -> list[int]:
    """Processes of a process group that still run (a killed one may linger as a zombie, unreaped)."""
    live = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            live.append(int(entry))
    return live


def test_a_compiler_past_its_memory_limit_is_a_compile_error(cache, tmp_path):
    with pytest.raises(CpuCompileError, match=r"^attention\.cu: error: the compiler needed more than 64 MiB \(the CPU build\)$"):
        build_object(PRELUDE + "// another fresh file\n" + KERNEL, "attention.cu", ENTRY, cache_dir=tmp_path,
                     memory_bytes=64 * 1024**2)
