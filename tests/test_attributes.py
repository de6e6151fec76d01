"""The gate refuses what a kernel file may not ask of the linker, the assembler or the loader, before
any compiler runs: the attributes, asm labels, file-scope asm and pragmas of labrunner/compile/attributes.py,
read as the compiler reads the file, each refusal naming its line; and what stays allowed."""

from __future__ import annotations

import pytest

from labrunner.compile import gate
from labrunner.compile.attributes import refuse_linker_requests
from labrunner.exit_codes import AttnlabError, ExitCode

SECTION = "__attribute__((section)) is not allowed in a kernel file (it places code or data where the loader runs it)"
AT_LOAD = "(it runs code when the module loads or unloads, outside any kernel)"
RENAMES = "(it binds a symbol's name to another definition, which the loader resolves)"
SEEN = "(it changes which symbols the loader sees)"
KEPT = "(it keeps code or data that no kernel uses in the module, where the loader can reach it)"
RESOLVER = "(it makes a resolver function, which runs when the module loads)"
MACRO = (
    "comes from a macro; write attribute names out in a kernel file (the grader reads them before any compiler runs)"
)
LABEL = "is not allowed in a kernel file (it gives a symbol a name of its choosing, which the loader resolves)"
OUTSIDE = (
    "outside a function is not allowed in a kernel file (its text goes to the assembler as it is); inline PTX "
    'belongs inside a function, as asm volatile("..." : outputs : inputs)'
)

REFUSED = {
    "section": ('__device__ __attribute__((section(".x"))) int v;\n', f"attention.cu(1): error: {SECTION}"),
    "section-second-of-two": (
        '__device__ __attribute__((aligned(16), section(".x"))) int v;\n',
        f"attention.cu(1): error: {SECTION}",
    ),
    "section-reserved-spelling": ('__attribute__((__section__(".x"))) int v;\n', f"attention.cu(1): error: {SECTION}"),
    "section-single-underscore-keyword": (
        '__attribute((section(".x"))) int v;\n',
        f"attention.cu(1): error: {SECTION}",
    ),
    "section-incbin": (
        'int a;\n__attribute__((section(".rodata\\n.incbin \\"/etc/passwd\\"\\n#"))) const char c = 1;\n',
        f"attention.cu(2): error: {SECTION}",
    ),
    # the line of the attribute's name, after the keyword's splice
    "section-after-a-line-splice": (
        '__attri\\\nbute__((section(".x"))) int v;\n',
        f"attention.cu(2): error: {SECTION}",
    ),
    "section-standard-form": (
        '[[gnu::section(".x")]] int v;\n',
        "attention.cu(1): error: [[gnu::section]] is not allowed in a kernel file (it places "
        "code or data where the loader runs it)",
    ),
    "section-standard-reserved-namespace": (
        '[[__gnu__::__section__(".x")]] int v;\n',
        "attention.cu(1): error: [[gnu::section]] is not allowed in a kernel file "
        "(it places code or data where the loader runs it)",
    ),
    "used-standard-using-form": (
        "[[using gnu: used]] static int v;\n",
        f"attention.cu(1): error: [[gnu::used]] is not allowed in a kernel file {KEPT}",
    ),
    "constructor": (
        "__device__ __attribute__((constructor)) void f() {}\n",
        f"attention.cu(1): error: __attribute__((constructor)) is not allowed in a kernel file {AT_LOAD}",
    ),
    "destructor": (
        "__attribute__((destructor)) void f() {}\n",
        f"attention.cu(1): error: __attribute__((destructor)) is not allowed in a kernel file {AT_LOAD}",
    ),
    "init-priority": (
        "struct S { S(); };\nS s __attribute__((init_priority(200)));\n",
        f"attention.cu(2): error: __attribute__((init_priority)) is not allowed in a kernel file {AT_LOAD}",
    ),
    "alias": (
        'extern "C" void g() __attribute__((alias("f")));\n',
        f"attention.cu(1): error: __attribute__((alias)) is not allowed in a kernel file {RENAMES}",
    ),
    "weak": (
        "__attribute__((weak)) int w;\n",
        f"attention.cu(1): error: __attribute__((weak)) is not allowed in a kernel file {RENAMES}",
    ),
    "weakref": (
        'static void g() __attribute__((weakref("f")));\n',
        f"attention.cu(1): error: __attribute__((weakref)) is not allowed in a kernel file {RENAMES}",
    ),
    "symver": (
        '__attribute__((symver("f@V1"))) void f() {}\n',
        f"attention.cu(1): error: __attribute__((symver)) is not allowed in a kernel file {RENAMES}",
    ),
    "ifunc": (
        'extern "C" int chosen() __attribute__((ifunc("pick")));\n',
        f"attention.cu(1): error: __attribute__((ifunc)) is not allowed in a kernel file {RESOLVER}",
    ),
    "target-clones": (
        '__attribute__((target_clones("avx2", "default"))) int f() { return 1; }\n',
        f"attention.cu(1): error: __attribute__((target_clones)) is not allowed in a kernel file {RESOLVER}",
    ),
    "visibility": (
        '__attribute__((visibility("hidden"))) void f() {}\n',
        f"attention.cu(1): error: __attribute__((visibility)) is not allowed in a kernel file {SEEN}",
    ),
    "used": (
        "__attribute__((used)) static int v;\n",
        f"attention.cu(1): error: __attribute__((used)) is not allowed in a kernel file {KEPT}",
    ),
    "retain": (
        "__attribute__((retain)) static int v;\n",
        f"attention.cu(1): error: __attribute__((retain)) is not allowed in a kernel file {KEPT}",
    ),
    "naked": (
        "__attribute__((naked)) void f() {}\n",
        "attention.cu(1): error: __attribute__((naked)) is not allowed in a kernel file (it makes a function of "
        "assembly alone, with no entry or exit the compiler writes)",
    ),
    "name-from-an-object-macro": (
        '#define S section\n__attribute__((S(".x"))) int v;\n',
        f"attention.cu(2): error: the attribute name `S` in __attribute__((...)) {MACRO}",
    ),
    "name-from-a-macro-parameter": (
        "#define ATTR(name) __attribute__((name))\nATTR(aligned(16)) int v;\n",
        f"attention.cu(1): error: the attribute name `name` in __attribute__((...)) {MACRO}",
    ),
    "name-from-a-pasting-macro": (
        '#define CAT(a, b) a##b\n__attribute__((CAT(sec, tion)(".x"))) int v;\n',
        f"attention.cu(2): error: the attribute name `CAT` in __attribute__((...)) {MACRO}",
    ),
    "standard-name-from-a-macro": (
        '#define S section\n[[gnu::S(".x")]] int v;\n',
        f"attention.cu(2): error: the attribute name `S` in [[gnu::...]] {MACRO}",
    ),
    "attribute-keyword-alone-in-a-macro": (
        '#define A __attribute__\nA((section(".x"))) int v;\n',
        "attention.cu(1): error: __attribute__ must be followed by its `((` and the "
        "attribute names, written out in a kernel file (the grader reads them before "
        "any compiler runs)",
    ),
    "reserved-spelling-anywhere": (
        "#define KEEP __used__\n",
        f"attention.cu(1): error: __used__ (the attribute used) is not allowed in a kernel file {KEPT}",
    ),
    "asm-label-on-a-function": (
        'extern "C" void f() asm("_ITM_registerTMCloneTable");\n',
        f'attention.cu(1): error: an asm label (`asm("name")` after a declaration) {LABEL}',
    ),
    "asm-label-on-a-variable": (
        '__device__ int x __asm__("y");\n',
        f'attention.cu(1): error: an asm label (`__asm__("name")` after a declaration) {LABEL}',
    ),
    "asm-label-in-a-function": (
        '__device__ void f() {\n  register int r asm("rax") = 0;\n}\n',
        f'attention.cu(2): error: an asm label (`asm("name")` after a declaration) {LABEL}',
    ),
    "file-scope-asm": ('int a;\nasm(".globl x");\n', f"attention.cu(2): error: asm(...) {OUTSIDE}"),
    "file-scope-asm-in-a-namespace": (
        'namespace n {\n__asm__("nop");\n}\n',
        f"attention.cu(2): error: __asm__(...) {OUTSIDE}",
    ),
    "file-scope-asm-in-extern-c": ('extern "C" {\nasm("nop");\n}\n', f"attention.cu(2): error: asm(...) {OUTSIDE}"),
    "asm-in-a-struct-body": ('struct S {\n  asm("nop");\n};\n', f"attention.cu(2): error: asm(...) {OUTSIDE}"),
    "pragma-weak": (
        "#pragma weak attnlab_f\n",
        f"attention.cu(1): error: #pragma weak is not allowed in a kernel file {RENAMES}",
    ),
    "pragma-redefine-extname": (
        "#pragma redefine_extname f g\n",
        f"attention.cu(1): error: #pragma redefine_extname is not allowed in a kernel file {RENAMES}",
    ),
    "pragma-visibility": (
        "int a;\n#pragma GCC visibility push(hidden)\n",
        f"attention.cu(2): error: #pragma GCC visibility is not allowed in a kernel file {SEEN}",
    ),
    "pragma-pch-preprocess": (
        '#pragma GCC pch_preprocess "/etc/passwd"\n',
        "attention.cu(1): error: #pragma GCC pch_preprocess is not allowed in a kernel file (it "
        "makes the compiler read another file)",
    ),
    "pragma-operator": (
        '_Pragma("weak attnlab_f")\n',
        f"attention.cu(1): error: #pragma weak is not allowed in a kernel file {RENAMES}",
    ),
    "pragma-operator-in-a-macro": (
        '#define HIDE _Pragma("GCC visibility push(hidden)")\n',
        f"attention.cu(1): error: #pragma GCC visibility is not allowed in a kernel file {SEEN}",
    ),
}


@pytest.mark.parametrize("code, message", REFUSED.values(), ids=REFUSED.keys())
def test_what_reaches_the_linker_is_refused_with_its_line(code, message):
    with pytest.raises(AttnlabError) as refused:
        refuse_linker_requests(code, "attention.cu")
    assert (refused.value.message, refused.value.exit_code) == (message, ExitCode.COMPILE_ERROR)


ALLOWED = {
    "inline-ptx-in-a-function": (
        '__device__ unsigned f(float x) { unsigned r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return r; }\n'
    ),
    "inline-ptx-after-an-if": (
        '__global__ void k() { if (threadIdx.x) asm volatile("cp.async.commit_group;\\n" ::); }\n'
    ),
    "inline-ptx-after-a-label": ('__global__ void k() {\n  again:\n  asm volatile("");\n}\n'),
    "inline-ptx-in-a-lambda-at-file-scope": ('auto l = [] { asm volatile(""); };\n'),
    "inline-ptx-after-a-trailing-return-type": ('auto f() -> int { asm volatile(""); return 1; }\n'),
    "inline-ptx-in-a-constructor-with-brace-initialisers": (
        'struct S { int a, b; S() : a{1}, b{2} { asm volatile(""); } };\n'
    ),
    "inline-ptx-in-a-member-function": ('struct S { void f() const { asm volatile(""); } };\n'),
    "inline-ptx-in-a-macro": ('#define COMMIT() asm volatile("cp.async.commit_group;\\n" ::)\n'),
    "the-words-as-identifiers": (
        "__global__ void k(int* o) { int used = 3, section = 1, weak = 2, alias = 4;\n"
        "  o[0] = used + section + weak + alias; }\n"
    ),
    "ordinary-attributes": (
        "struct __align__(16) T { float x; };\n__device__ __forceinline__ int g() { return 1; }\n"
        "__attribute__((aligned(16), unused)) static float a[4];\n"
        "__device__ __attribute__((noinline)) int h() { return 2; }\n"
        "[[maybe_unused]] static int b; [[gnu::always_inline]] inline int i() { return 3; }\n"
        "#define ALIGNED(n) __attribute__((aligned(n)))\nALIGNED(8) static int c;\n"
    ),
    "in-comments-and-literals": (
        '// __attribute__((section(".x"))) and asm("x") and __used__\n'
        '/* #pragma weak f */\nconst char* s = "__attribute__((section(\\".x\\")))";\n'
        'const char* r = R"(asm(".globl x"); __section__)";\n'
    ),
    "ordinary-pragmas": (
        "__global__ void k() {\n#pragma unroll 4\n  for (int i = 0; i < 4; ++i) {}\n}\n"
        '_Pragma("unroll")\n#pragma once\n'
    ),
}


@pytest.mark.parametrize("code", ALLOWED.values(), ids=ALLOWED.keys())
def test_what_stays_inside_the_compiler_is_allowed(code):
    assert refuse_linker_requests(code, "attention.cu") is None


def test_token_pasting_is_past_the_gate_and_left_to_the_cpu_build():
    """What `##` builds no lexer sees: the gate lets this through (NVRTC may take it; it drops what
    no kernel calls), and the CPU build refuses it in its preprocessed text
    (tests/test_cpu_attributes.py)."""
    code = '#define CAT(a, b) a##b\nCAT(__attri, bute__)((CAT(sec, tion)(".x"))) int v;\n'
    assert refuse_linker_requests(code, "attention.cu") is None


def test_the_gate_refuses_before_nvrtc_runs(monkeypatch):
    def no_compiler(*args, **kwargs):
        raise AssertionError("NVRTC ran")

    monkeypatch.setattr(gate, "compile_module", no_compiler)
    with pytest.raises(AttnlabError) as refused:
        gate.compile_gate('int a;\n__device__ __attribute__((section(".x"))) int v;\n', "attention.cu")
    assert (refused.value.message, refused.value.exit_code) == (
        f"attention.cu(2): error: {SECTION}",
        ExitCode.COMPILE_ERROR,
    )
