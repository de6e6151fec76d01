"""The CPU build reads the student's preprocessed text for what it may not ask of the linker, the
assembler or the loader (labrunner/compile/attributes.py) before g++ compiles it: what macros build,
which the gate cannot see, is plain there. These build straight through the CPU backend, without
the gate in front."""

from __future__ import annotations

import pytest

import labrunner.run.cpu.module as cpu_module
from labrunner.run.cpu.module import CpuCompileError, CpuModule, build_object, check_built_object

PRELUDE = '#include <attnlab/prelude.cuh>\n#line 1 "attention.cu"\n'
KERNEL = 'extern "C" __global__ void k(float* o) { o[threadIdx.x] = 1.0f; }\n'
ENTRY = {"k": ["float*"]}
SECTION = "__attribute__((section)) is not allowed in a kernel file (it places code or data where the loader runs it)"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cpu-cache")


def refusal(cache, code: str) -> str:
    with pytest.raises(CpuCompileError) as refused:
        CpuModule.build(PRELUDE + code + KERNEL, "attention.cu", ENTRY, cache_dir=cache)
    return str(refused.value)


PASTED = {
    "attribute-name-pasted": (
        '#define CAT(a, b) a##b\n__attribute__((CAT(sec, tion)(".x"))) int v;\n',
        f"attention.cu(2): error: {SECTION}",
    ),
    "keyword-and-name-pasted": (
        '#define CAT(a, b) a##b\n\nCAT(__attri, bute__)((CAT(sec, tion)(".x"))) int v;\n',
        f"attention.cu(3): error: {SECTION}",
    ),
    "standard-form-pasted": (
        "#define CAT(a, b) a##b\n[[gnu::CAT(constr, uctor)]] void f() {}\n",
        "attention.cu(2): error: [[gnu::constructor]] is not allowed in a kernel file (it runs code "
        "when the module loads or unloads, outside any kernel)",
    ),
    "pragma-built-by-a-macro": (
        "#define PRAGMA(x) _Pragma(#x)\nint attnlab_x;\nPRAGMA(weak attnlab_x)\n",
        "attention.cu(3): error: #pragma weak is not allowed in a kernel file (it binds a "
        "symbol's name to another definition, which the loader resolves)",
    ),
    "pch-pragma-built-by-a-macro": (
        '#define PRAGMA(x) _Pragma(#x)\nPRAGMA(GCC pch_preprocess "/etc/passwd")\n',
        "attention.cu(2): error: #pragma GCC pch_preprocess is not allowed in a kernel file "
        "(it makes the compiler read another file)",
    ),
    "asm-label-pasted": (
        '#define CAT(a, b) a##b\nint attnlab_v CAT(__as, m__)("attnlab_w");\n',
        "attention.cu(2): error: inline assembly built by a macro: the CPU backend runs only asm "
        "statements written out in the file (see the CPU backend's README)",
    ),
}


@pytest.mark.parametrize("code, message", PASTED.values(), ids=PASTED.keys())
def test_what_macros_build_is_refused_in_the_preprocessed_text(cache, code, message):
    assert refusal(cache, code) == message


def incbin(secret) -> str:
    """A byte whose section's text copies `secret` in after it, and a function that keeps the byte
    (the compiler drops a constant nobody uses, section and all)."""
    return (
        f'__attribute__((section(".rodata\\n.incbin \\"{secret}\\"\\n#"))) const char attnlab_before = 1;\n'
        "__device__ const char* attnlab_where() { return &attnlab_before; }\n"
    )


def test_incbin_in_a_section_never_reaches_the_assembler(tmp_path):
    """`.incbin` in a section's text would copy a file into the module as it is built; the file's
    own reading refuses it before g++ compiles anything, so nothing is built and nothing of the
    file appears in the message."""
    secret = tmp_path / "secret.txt"
    secret.write_text("attnlab-secret-7d3f\n")
    cache = tmp_path / "cache"
    assert refusal(cache, incbin(secret)) == f"attention.cu(1): error: {SECTION}"
    assert list(cache.glob("attnlab_cpu_*.so")) == []


def test_incbin_is_real_and_past_the_object_check_without_that_reading(tmp_path, monkeypatch):
    """The control for the test above, and why the reading is needed: without it the assembler copies
    the file into the module's read-only data, and the object check has nothing to refuse (the bytes
    sit in .rodata, which every kernel has)."""
    monkeypatch.setattr(cpu_module, "refuse_in_preprocessed", lambda text, filename: None)
    secret = tmp_path / "secret.txt"
    secret.write_text("attnlab-secret-7d3f\n")
    so_path = build_object(PRELUDE + incbin(secret) + KERNEL, "attention.cu", ENTRY, cache_dir=tmp_path / "cache")
    assert b"attnlab-secret-7d3f" in so_path.read_bytes()
    assert check_built_object(so_path, "attention.cu", tmp_path / "cache") is None
