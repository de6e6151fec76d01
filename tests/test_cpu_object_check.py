"""The CPU build's object check: a module whose loading would run code, or that imports a symbol
outside the shim's list, is refused before anything loads it; and the compiler's own limits.

These build C++ straight through the CPU backend, without the gate in front, and with the CPU
build's own reading of the preprocessed text turned off (`object_check_alone`), so that the check is
proven on its own: the gate and that reading refuse most of these files first (their attributes,
tests/test_attributes.py), and the check must not rely on them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

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
SLOW_TO_PREPROCESS = (
    "#define E0\n" + "".join(f"#define E{n} " + f"E{n - 1} " * 10 + "\n" for n in range(1, 10)) + "E9\n"
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cpu-cache")


@pytest.fixture(autouse=True)
def object_check_alone(monkeypatch):
    """The wall in front of the check (the preprocessed text read for attributes) taken away."""
    import labrunner.run.cpu.module as cpu_module

    monkeypatch.setattr(cpu_module, "refuse_in_preprocessed", lambda text, filename: None)


def refusal(cache, code: str) -> str:
    with pytest.raises(CpuCompileError) as refused:
        CpuModule.build(PRELUDE + code + KERNEL, "attention.cu", ENTRY, cache_dir=cache)
    return str(refused.value)


PREFIX = "attention.cu: the CPU build refuses this file: "
AT_LOAD = (
    " would run when the module loads, outside any kernel (a constructor or a global's initialiser); "
    "kernels run only when launched, so remove it"
)


@pytest.mark.slow
def test_a_global_with_a_dynamic_initialiser_is_refused(cache):
    assert refusal(cache, "__device__ int f() { return 3; }\nint attnlab_x = f();\n") == (
        PREFIX + "the dynamic initialiser of a namespace-scope variable (like `int x = f();`)" + AT_LOAD
    )


def test_a_constructor_function_is_refused_by_name(cache):
    assert refusal(cache, "__device__ __attribute__((constructor)) void evil() {}\n") == PREFIX + "`evil()`" + AT_LOAD


@pytest.mark.slow
def test_a_static_constructor_is_refused_by_name(cache):
    code = "volatile int attnlab_hits;\nstatic __attribute__((constructor)) void quiet() { attnlab_hits = 1; }\n"
    assert refusal(cache, code) == PREFIX + "`quiet()`" + AT_LOAD


@pytest.mark.slow
def test_a_destructor_function_is_refused(cache):
    assert refusal(cache, "__attribute__((destructor)) void bye() {}\n") == (
        PREFIX + "`bye()` would run when the module unloads, outside any kernel (a destructor); remove it"
    )


@pytest.mark.slow
def test_an_entry_placed_in_init_array_by_hand_is_refused(cache):
    code = (
        'extern "C" void planted() {}\n'
        '__attribute__((section(".init_array"), used)) static void (*planted_entry)() = planted;\n'
    )
    assert refusal(cache, code) == PREFIX + "`planted`" + AT_LOAD


def test_an_entry_placed_in_init_array_by_the_assembler_never_reaches_it(cache):
    """NVRTC passes file-scope asm() through to PTX untouched; the CPU build reads every asm statement
    before g++ does (ptx_asm.py) and refuses this one, so x86 assembly never gets to plant anything."""
    code = (
        'extern "C" void planted_by_asm() {}\n'
        'asm(".pushsection .init_array,\\"aw\\",@init_array\\n.quad planted_by_asm\\n.popsection");\n'
    )
    assert refusal(cache, code) == (
        'attention.cu(2): error: `.pushsection .init_array,"aw",@init_array .quad planted_b...` is inline assembly '
        "without operands, which the CPU backend cannot run: it runs only the PTX instructions " + SUPPORTED
    )


@pytest.mark.slow
def test_code_added_to_the_init_section_is_refused(cache):
    code = '__attribute__((section(".init"), used)) static void extra_init() {}\n'
    assert refusal(cache, code) == (
        PREFIX + "its .init section differs from the runtime's own, so code would run "
        "when the module loads; remove what places code there"
    )


@pytest.mark.slow
def test_an_indirect_function_is_refused(cache):
    code = (
        'extern "C" int impl() { return 1; }\n'
        'extern "C" void* pick() { return (void*)impl; }\n'
        'extern "C" int chosen() __attribute__((ifunc("pick")));\n'
    )
    assert refusal(cache, code) == (
        PREFIX + "`chosen` is a GNU indirect function (ifunc), whose resolver runs when "
        "the module loads; remove the ifunc attribute"
    )


@pytest.mark.slow
def test_a_call_into_the_c_library_outside_the_list_is_refused(cache):
    code = (
        'extern "C" __device__ int system(const char*);\n'
        'extern "C" __global__ void shell(float* o) { o[0] = system("true"); }\n'
    )
    assert refusal(cache, code) == (
        PREFIX + "it uses `system`, which kernels on the CPU backend may not call (allowed: math functions, "
        "memcpy/memset, printf, malloc/free and the shim's CUDA built-ins)"
    )


@pytest.mark.slow
def test_a_static_with_a_destructor_is_refused_for_registering_exit_code(cache):
    code = (
        'struct Noisy { ~Noisy() { printf("bye\\n"); } };\n'
        'extern "C" __global__ void keep(float* o) { static Noisy n; o[0] = 1; }\n'
    )
    assert refusal(cache, code).startswith(PREFIX + "it uses `__cxa_atexit`, which kernels")


@pytest.mark.slow
def test_file_scope_shared_memory_adds_no_load_time_code(cache):
    code = (
        "extern __shared__ float dynamic_tile[];\n__shared__ float static_tile[32];\n"
        'extern "C" __global__ void copy(float* o) { static_tile[threadIdx.x] = threadIdx.x;'
        " dynamic_tile[threadIdx.x] = static_tile[threadIdx.x]; o[threadIdx.x] = dynamic_tile[threadIdx.x]; }\n"
    )
    module = CpuModule.build(PRELUDE + code, "attention.cu", {"copy": ["float*"]}, cache_dir=cache)
    out = np.zeros(32, np.float32)
    module.launch("copy", (1, 1, 1), (32, 1, 1), 128, [out])
    assert out.tolist() == list(range(32))
    assert len(read_elf(module.so_path).init_entries) == 1  # the C runtime's frame_dummy only


@pytest.mark.slow
def test_a_cached_module_is_checked_again_before_loading(cache):
    """A module found in the cache (planted there, or built before the check existed) is read again."""
    code = (
        PRELUDE
        + "volatile int attnlab_hits;\n__attribute__((constructor)) static void later() { attnlab_hits = 1; }\n"
        + KERNEL
    )
    so_path = build_object(code, "attention.cu", ENTRY, cache_dir=cache)
    assert build_object(code, "attention.cu", ENTRY, cache_dir=cache) == so_path  # reused, not rebuilt
    with pytest.raises(
        CpuCompileError, match=r"^attention\.cu: the CPU build refuses this file: `later\(\)` would run"
    ):
        check_built_object(so_path, "attention.cu", cache)


# ----------------------------------------------------------------- against the empty file's build

# g++'s start-up code (frame_dummy, in every shared object's .init_array) calls
# _ITM_registerTMCloneTable with the object's .tm_clone_table when the table has entries and the
# name is defined: code that runs inside dlopen, through an .init_array entry the baseline has too.
TM_HOOK = (
    'extern "C" void _ITM_registerTMCloneTable(void* table, unsigned long pairs) { puts("attnlab-tm-hook-ran"); }\n'
)
TM_ENTRY = '__attribute__((section(".tm_clone_table"), used)) static void* attnlab_pair[2] = {0, 0};\n'


@pytest.mark.slow
def test_a_definition_the_start_up_code_calls_is_refused(cache):
    assert refusal(cache, TM_HOOK + TM_ENTRY) == (
        "attention.cu: error: the CPU build defines _ITM_registerTMCloneTable, which runs at load time; kernels may "
        "not define it"
    )


def test_the_start_up_code_really_calls_it_when_nothing_checks(cache, tmp_path):
    """The control for the test above: the same module, loaded without the check in a process of its
    own, runs the function inside dlopen, before any kernel is launched."""
    so_path = build_object(PRELUDE + TM_HOOK + TM_ENTRY + KERNEL, "attention.cu", ENTRY, cache_dir=cache)
    loaded = subprocess.run(
        [sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(so_path)!r})"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (loaded.returncode, loaded.stdout) == (0, "attnlab-tm-hook-ran\n")


@pytest.mark.slow
def test_a_hidden_definition_of_the_hook_is_refused_too(cache):
    """A hidden symbol is local in the built object (and absent from its dynamic symbols), yet it is
    what the start-up code's reference binds to when the module is linked."""
    code = (
        'extern "C" __attribute__((visibility("hidden"))) void _ITM_registerTMCloneTable(void*, unsigned long) {}\n'
        + TM_ENTRY
    )
    assert refusal(cache, code) == (
        "attention.cu: error: the CPU build defines _ITM_registerTMCloneTable, which runs at load time; kernels may "
        "not define it"
    )


@pytest.mark.slow
def test_a_clone_table_with_entries_is_refused(cache):
    assert refusal(cache, TM_ENTRY) == (
        "attention.cu: error: the CPU build has 16 bytes in .tm_clone_table, which the C runtime's start-up code hands "
        "to _ITM_registerTMCloneTable when the module loads; an empty file's build has none"
    )


@pytest.mark.slow
def test_defining_gmon_start_is_refused(cache):
    """_init (crti.o) calls __gmon_start__ when it is defined."""
    assert refusal(cache, 'extern "C" void __gmon_start__() {}\n') == (
        "attention.cu: error: the CPU build defines __gmon_start__, which runs at load time; kernels may not define it"
    )


@pytest.mark.slow
def test_defining_the_shutdown_hook_is_refused(cache):
    assert refusal(cache, 'extern "C" void _ITM_deregisterTMCloneTable(void*) {}\n') == (
        "attention.cu: error: the CPU build defines _ITM_deregisterTMCloneTable, which runs at unload time; kernels "
        "may not define it"
    )


@pytest.mark.slow
def test_a_section_the_empty_build_lacks_is_refused(cache):
    code = '__attribute__((section("attnlab_planted"), used)) static int attnlab_planted_data = 1;\n'
    assert refusal(cache, code) == (
        "attention.cu: error: the CPU build has a section attnlab_planted that an empty file's build does not (a "
        "section attribute or assembly put it there); kernels may not add sections"
    )


@pytest.mark.slow
def test_an_old_style_constructor_table_entry_is_refused(cache):
    """The linker merges .ctors into .init_array: the entry is counted there and named."""
    code = (
        'extern "C" void attnlab_old_style() {}\n'
        '__attribute__((section(".ctors"), used)) static void (*attnlab_old_entry)() = attnlab_old_style;\n'
    )
    assert refusal(cache, code) == PREFIX + "`attnlab_old_style`" + AT_LOAD


@pytest.mark.slow
def test_every_shipped_kernel_builds_no_section_beyond_the_ordinary_ones(cache):
    """The rule above must not refuse real kernels: the sections the shipped references build beyond
    the empty file's are all on ORDINARY_SECTIONS (and they do build more than it: imports, constants)."""
    from labrunner.compile.nvrtc import compose_source
    from labrunner.labs import get_lab
    from labrunner.run.cpu.module import baseline_facts
    from labrunner.run.cpu.object_check import ORDINARY_SECTIONS

    repo = Path(__file__).resolve().parent.parent
    empty = set(baseline_facts(cache).sections)
    beyond = set()
    for path in sorted(repo.glob("kernels/lab*/*.cu")):
        lab = get_lab(path.parent.name)
        so_path = build_object(
            compose_source(path.read_text(), "attention.cu"), "attention.cu", lab.entry_point_types(), cache_dir=cache
        )
        check_built_object(so_path, "attention.cu", cache)
        beyond |= set(read_elf(so_path).sections) - empty
    # The runtime alone already imports from the C library and keeps constants (.rodata, .rela.plt and
    # .gnu.version_r are in the empty file's build too, since it guards shared memory itself); the kernels'
    # own tables of pointers still add one section, so the check is not vacuous.
    assert ".data.rel.ro" in beyond
    assert beyond <= ORDINARY_SECTIONS


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
    with pytest.raises(
        CpuCompileError, match=r"^attention\.cu: error: the compiler did not finish in 0\.5 s \(the CPU build\)$"
    ):
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
    with pytest.raises(
        CpuCompileError, match=r"^attention\.cu: error: the compiler needed more than 64 MiB \(the CPU build\)$"
    ):
        build_object(
            PRELUDE + "// another fresh file\n" + KERNEL,
            "attention.cu",
            ENTRY,
            cache_dir=tmp_path,
            memory_bytes=64 * 1024**2,
        )
