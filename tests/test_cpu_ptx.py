"""Inline PTX on the CPU backend: the tf32 and f16x2 conversions, the m16n8k8 (tf32) and m16n8k16
(f16) tensor-core multiplies and cp.async (asynchronous global -> shared copies, their groups and
waits) run as the PTX ISA defines them, every other asm statement is refused before g++ sees it, and
NVRTC agrees on which register classes each instruction takes.

The probe kernels (`cpu_kernels/ptx.cu`) write the helpers exactly as a GPU kernel does; every
expected value is worked out in `ptx_model.py` from the PTX ISA's rules (fragment layouts, truncation
of tf32 operands, round-to-nearest-away for tf32, to-nearest-even for f16), never read back from the
backend.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ptx_model import (
    BOUND_3XF16,
    CA,
    CG,
    CP_ASYNC_PROBES,
    CVT16_CASES,
    CVT_CASES,
    ENTRY_POINTS,
    MMA,
    MMA16,
    PRELUDE,
    PROBES,
    PROBES_SOURCE,
    as_tf32_operand,
    bits,
    launch_mma_f16,
    normal_range,
    random_halves,
)

from labrunner.compile.gate import compile_gate
from labrunner.compile.nvrtc import NVRTC_INCLUDE_OPTIONS, compile_module, compose_source
from labrunner.exit_codes import AttnlabError
from labrunner.run.cpu import module as cpu_module
from labrunner.run.cpu.module import CpuCompileError, CpuKernelError, CpuModule
from labrunner.run.cpu.ptx_asm import CP_ASYNC_FORMS, INSTRUCTIONS, SUPPORTED

REPO = Path(__file__).resolve().parent.parent
RUNTIME = Path(cpu_module.__file__).parent


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> CpuModule:
    return CpuModule.build(
        PRELUDE + PROBES_SOURCE.read_text(), "ptx.cu", ENTRY_POINTS, cache_dir=tmp_path_factory.mktemp("cpu-cache")
    )


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.__name__)
def test_the_backend_answers_every_probe_exactly(probes, probe):
    """Each probe asserts its exact answers (see the `check_` functions in ptx_model.py)."""
    probe(probes)


# --- wrong rules planted one at a time into ptx.h -------------------------------------------------

# (name, the real code, the wrong rule): each a bug a plausible edit could introduce.
MUTANTS = [
    (
        "cvt rounds ties to even",
        "r[d] = (x + 0x1000u) & 0xFFFFE000u;",
        "r[d] = (x + 0x0FFFu + ((x >> 13) & 1u)) & 0xFFFFE000u;",
    ),
    ("cvt truncates", "r[d] = (x + 0x1000u) & 0xFFFFE000u;", "r[d] = x & 0xFFFFE000u;"),
    (
        "cvt rounds a NaN like a number",
        "if ((x & 0x7F800000u) == 0x7F800000u)\n        r[d] = x;",
        "if ((x & 0x7FFFFFFFu) == 0x7F800000u)\n        r[d] = x;",
    ),
    (
        "cvt clears a NaN's low bits",
        "if ((x & 0x7F800000u) == 0x7F800000u)\n        r[d] = x;",
        "if ((x & 0x7F800000u) == 0x7F800000u)\n        r[d] = x & 0xFFFFE000u;",
    ),
    (
        "mma rounds its operands",
        "as_float(is_nan(bits) ? bits : bits & 0xFFFFE000u)",
        "as_float(is_nan(bits) ? bits : (bits + 0x1000u) & 0xFFFFE000u)",
    ),
    ("mma masks a NaN operand", "as_float(is_nan(bits) ? bits : bits & 0xFFFFE000u)", "as_float(bits & 0xFFFFE000u)"),
    (
        "mma swaps a1 and a2",
        "A[g + 8][t] = tf32_value(l.a[1]);\n        A[g][t + 4] = tf32_value(l.a[2]);",
        "A[g + 8][t] = tf32_value(l.a[2]);\n        A[g][t + 4] = tf32_value(l.a[1]);",
    ),
    ("mma reads b0 as B[g][t]", "B[t][g] = tf32_value(l.b[0]);", "B[g % 8][t] = tf32_value(l.b[0]);"),
    (
        "mma swaps c0 and c1",
        "C[g][2 * t] = as_float(l.c[0]);\n        C[g][2 * t + 1] = as_float(l.c[1]);",
        "C[g][2 * t] = as_float(l.c[1]);\n        C[g][2 * t + 1] = as_float(l.c[0]);",
    ),
    (
        "mma adds C last (both shapes share the sum)",
        "float acc = C[m][n];\n            for (int k = 0; k < K; ++k) "
        "acc += A[m][k] * B[k][n];\n            D[m][n] = acc;",
        "float acc = 0.0f;\n            for (int k = 0; k < K; ++k) acc += A[m][k] * B[k][n];\n"
        "            D[m][n] = acc + C[m][n];",
    ),
    ("two mma statements meet", "if (!same_site(f.site, first.site)) {", "if (false) {"),
    (
        "cvt f16 rounds ties away from zero",
        "if (dropped > half || (dropped == half && (h & 1u))) ++h;",
        "if (dropped >= half) ++h;",
    ),
    (
        "cvt f16 rounds ties down",
        "if (dropped > half || (dropped == half && (h & 1u))) ++h;",
        "if (dropped > half) ++h;",
    ),
    (
        "cvt f16 puts a in the lower half",
        "r[d] = (f16_rn(r[a]) << 16) | f16_rn(r[b]);",
        "r[d] = (f16_rn(r[b]) << 16) | f16_rn(r[a]);",
    ),
    (
        "cvt f16 saturates at 65504",
        "if (mag >= 0x47800000u) return sign | 0x7C00u;",
        "if (mag >= 0x477FF000u) return sign | 0x7BFFu;",
    ),
    ("cvt f16 flushes subnormal results", "if (e < 102) return sign;", "if (e < 113) return sign;"),
    (
        "cvt f16 turns a NaN into Inf",
        "if (mag > 0x7F800000u) return x >> 16;",
        "if (mag > 0x7F800000u) return (x >> 16) & 0xFC00u;",
    ),
    (
        "mma f16 swaps a register's halves",
        "A[rows[i]][cols[i]] = f16_value(l.a[i] & 0xFFFFu);\n"
        "            A[rows[i]][cols[i] + 1] = f16_value(l.a[i] >> 16);",
        "A[rows[i]][cols[i]] = f16_value(l.a[i] >> 16);\n"
        "            A[rows[i]][cols[i] + 1] = f16_value(l.a[i] & 0xFFFFu);",
    ),
    (
        "mma f16 swaps a1 and a2",
        "rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};",
        "rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 8, 2 * t, 2 * t + 8};",
    ),
    (
        "mma f16 reads b1 at k + 4",
        "B[2 * t + 8 * i][g] = f16_value(l.b[i] & 0xFFFFu);\n"
        "            B[2 * t + 8 * i + 1][g] = f16_value(l.b[i] >> 16);",
        "B[2 * t + 4 * i][g] = f16_value(l.b[i] & 0xFFFFu);\n"
        "            B[2 * t + 4 * i + 1][g] = f16_value(l.b[i] >> 16);",
    ),
    (
        "mma f16 flushes subnormal operands",
        "return as_float(sign | f_input((float)mantissa * 0x1p-24f));",
        "return as_float(sign);",
    ),
    ("mma f16 loses the poison", "if (h == (kPoison32 >> 16)) return as_float(kPoison32);", ""),
    (
        "mma f16 multiplies by the tf32 rule",
        f'constexpr MmaShape kMmaF16 = {{"{MMA16}", multiply_f16}};',
        f'constexpr MmaShape kMmaF16 = {{"{MMA16}", multiply_tf32}};',
    ),
    ("cp.async copies at issue, not at the wait", "push_copy(me, CpCopy{", "land(CpCopy{"),
    ("cp.async does not zero-fill past src-size", "    memset(c.dst + c.src_size, 0, c.cp_size - c.src_size);\n", ""),
    (
        "wait_group completes the newest groups too",
        "complete_groups(me, me->cp_committed > (unsigned long long)n ? me->cp_committed - (uint32_t)n : 0u);",
        "complete_groups(me, me->cp_committed);",
    ),
    (
        "wait_group completes the open group",
        "complete_groups(me, me->cp_committed > (unsigned long long)n ? me->cp_committed - (uint32_t)n : 0u);",
        "complete_groups(me, 0xFFFFFFFFu);",
    ),
    (
        "an exiting thread's copies land",
        "rt.cp_pending -= f->cp_count - f->cp_head;\n    f->cp_head = f->cp_count = 0;",
        "ptx::complete_groups(f, 0xFFFFFFFFu);",
    ),
    (
        "the window ignores the region",
        "window_region((uint32_t)dst >> kWindowOffsetBits)",
        "window_region(kWindowDynamic)",
    ),
    # (Letting a partial warp through is not planted: its missing lanes' operands would be read from
    # memory no fiber owns, in the test's own process.)
]


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A copy of the backend's runtime with one rule of ptx.h replaced, compiled in place of the real one."""

    def plant(real: str, wrong: str) -> CpuModule:
        copy = tmp_path / "runtime"
        copy.mkdir()
        for path in RUNTIME.glob("*.h"):
            text = path.read_text()
            if path.name == "ptx.h":
                assert text.count(real) == 1, f"ptx.h no longer holds `{real}` exactly once: update MUTANTS"
                text = text.replace(real, wrong)
            (copy / path.name).write_text(text)
        monkeypatch.setattr(cpu_module, "_SHIM", copy / "shim.h")
        monkeypatch.setattr(cpu_module, "_RUNTIME_FILES", tuple(copy / p.name for p in cpu_module._RUNTIME_FILES))
        return CpuModule.build(PRELUDE + PROBES_SOURCE.read_text(), "ptx.cu", ENTRY_POINTS, cache_dir=tmp_path / "c")

    return plant


@pytest.mark.parametrize(("real", "wrong"), [m[1:] for m in MUTANTS], ids=[m[0] for m in MUTANTS])
@pytest.mark.slow
def test_every_planted_wrong_rule_fails_a_probe(planted, real, wrong):
    module = planted(real, wrong)
    caught = []
    for probe in PROBES:
        try:
            probe(module)
        except (AssertionError, CpuKernelError):
            caught.append(probe.__name__)
    assert caught, "no probe noticed the planted rule"


# --- the ways an asm statement may be written ----------------------------------------------------

SPELLINGS = r"""
__device__ unsigned plain(float x) { unsigned r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return r; }
__device__ unsigned spread(float x) {
    unsigned r;
    asm volatile (  // a comment, a template in pieces, spaces before the parentheses
        "cvt.rna.tf32.f32" " %0,"
        /* another */ "%1;\n"
        : "=r" (r)
        : "f" (x)
        : "memory" );
    return r;
}
__device__ unsigned gnu(float x) {
    unsigned r; __asm__ __volatile__(R"x(cvt.rna.tf32.f32 %0, %1;)x" : "=r"(r) : "f"(x)); return r;
}
__device__ unsigned in_out(float x) {
    unsigned r = 7; __asm inline("cvt.rna.tf32.f32 %0, %1;" : "+r"(r) : "f"(x)); return r;
}
__device__ unsigned from_bits(float x) {
    unsigned r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "r"(__float_as_uint(x))); return r;
}
__device__ unsigned into_int(float x) { int r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return (unsigned)r; }
__device__ unsigned chained(float x) {
    unsigned r, s;  // the second instruction reads what the first wrote to an output
    asm("cvt.rna.tf32.f32 %0, %2;\n\tcvt.rna.tf32.f32 %1, %0;" : "=r"(r), "=r"(s) : "f"(x));
    return r == s ? s : 0u;
}
#define CVT(out, x)                                  \
    asm volatile("cvt.rna.tf32.f32 %0, %1;"          \
                 : "=r"(out)                         \
                 : "f"(x))
__device__ unsigned by_macro(float x) { unsigned r; CVT(r, x); return r; }
__device__ unsigned with_barrier(float x) { asm volatile("" ::: "memory"); return plain(x); }
extern "C" __global__ void spellings(const float* x, unsigned* out) {
    const int i = threadIdx.x;
    if (i > 0) CVT(out[9 * i], x[i]); else out[0] = plain(x[0]);  // a macro call as the body of an if
    out[9 * i + 1] = spread(x[i]);
    out[9 * i + 2] = gnu(x[i]);
    out[9 * i + 3] = in_out(x[i]);
    out[9 * i + 4] = from_bits(x[i]);
    out[9 * i + 5] = into_int(x[i]);
    out[9 * i + 6] = chained(x[i]);
    out[9 * i + 7] = by_macro(x[i]);
    out[9 * i + 8] = with_barrier(x[i]);
}
"""


@pytest.mark.slow
def test_every_way_of_writing_the_statement_runs_the_same_instruction(tmp_path):
    module = CpuModule.build(PRELUDE + SPELLINGS, "ptx.cu", {"spellings": ["float*", "unsigned*"]}, cache_dir=tmp_path)
    x = np.array([1.0 + 2.0**-11, -(1.0 + 2.0**-11), 0.1, np.inf], np.float32)  # ties, 0.1f, Inf
    out = np.zeros((4, 9), np.uint32)
    module.launch("spellings", (1, 1, 1), (4, 1, 1), 0, [x, out])
    assert [hex(v) for v in out[:, 0]] == ["0x3f802000", "0xbf802000", "0x3dccc000", "0x7f800000"]
    assert (out == out[:, :1]).all()


# --- what the CPU backend refuses -----------------------------------------------------------------

KERNEL = 'extern "C" __global__ void k(float* o) { o[threadIdx.x] = 1.0f; }\n'
RUNS_ONLY = f"which the CPU backend cannot run: it runs only the PTX instructions {SUPPORTED}"
CANNOT = (
    f"is inline assembly the CPU backend cannot run: it runs only the PTX instructions {SUPPORTED}; "
    "write the rest in CUDA C++"
)
# A cp.async statement `code` (template and operands) in a function with a shared address s, a global
# pointer g and a float x at hand, on line 3.
CP_ASYNC = (
    "__device__ void f(const float* g, unsigned s, float x) {{\n  (void)g, (void)s, (void)x;\n"
    "  asm volatile({code});\n}}\n"
)
MMA_D_IN_PLACE = (
    '"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"'
)
REFUSED = {
    "x86-syscall": (
        '__device__ void f() {\n  asm volatile("syscall" ::: "memory");\n}\n',
        f"attention.cu(2): error: `syscall` {CANNOT}",
    ),
    "x86-basic-asm": (
        '__device__ void f() {\n  __asm__("movq $60, %rax\\n\\tsyscall");\n}\n',
        f"attention.cu(2): error: `movq $60, %rax syscall` is inline assembly without operands, {RUNS_ONLY}",
    ),
    "unknown-ptx": (
        '__device__ unsigned rev(unsigned x) {\n  unsigned r;\n  asm("brev.b32 %0, %1;" : "=r"(r) : "r"(x));\n'
        "  return r;\n}\n",
        f"attention.cu(3): error: `brev.b32 %0, %1` {CANNOT}",
    ),
    "special-register": (
        '__device__ unsigned lane() {\n  unsigned r;\n  asm("mov.u32 %0, %%laneid;" : "=r"(r));\n  return r;\n}\n',
        "attention.cu(3): error: `%%laneid` is a special register, which the CPU backend does not read in inline "
        "PTX: pass its value in as an operand from CUDA C++ (threadIdx.x % 32 for %laneid)",
    ),
    "second-instruction-unknown": (
        "__device__ unsigned f(float x) {\n  unsigned r;\n"
        '  asm("cvt.rna.tf32.f32 %0, %1;\\n\\tbar.sync 0;" : "=r"(r) : "f"(x));\n'
        "  return r;\n}\n",
        f"attention.cu(3): error: `bar.sync 0` {CANNOT}",
    ),
    "operand-count": (
        '__device__ void f(float (&d)[4], unsigned a) {\n  asm volatile(\n    "'
        + MMA
        + ' {%0,%1,%2,%3}, {%4,%4,%4,%4}, {%4,%4};"\n'
        '    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a));\n}\n',
        f"attention.cu(2): error: `{MMA}` takes 4 operands (D, A, B, C), this one has 3",
    ),
    "vector-size": (
        '__device__ void f(float (&d)[4], unsigned a) {\n  asm volatile("'
        + MMA
        + ' {%0,%1,%2,%3}, {%4,%4,%4}, {%4,%4}, {%0,%1,%2,%3};"\n'
        '    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a));\n}\n',
        f"attention.cu(2): error: `{MMA}`'s A is a vector of 4 registers, got {{%4, %4, %4}}",
    ),
    "no-such-operand": (
        "__device__ unsigned f(float x) {\n  unsigned r;\n"
        '  asm("cvt.rna.tf32.f32 %0, %2;" : "=r"(r) : "f"(x));\n  return r;\n}\n',
        "attention.cu(3): error: `%2` in `cvt.rna.tf32.f32` names no operand: the statement has 2 (%0 to %1)",
    ),
    "float-destination": (
        "__device__ float f(float x) {\n  float r;\n"
        '  asm("cvt.rna.tf32.f32 %0, %1;" : "=f"(r) : "f"(x));\n  return r;\n}\n',
        'attention.cu(3): error: `cvt.rna.tf32.f32` takes d in "r" registers, but %0 is "f"',
    ),
    "write-only-accumulator": (
        "__device__ void f(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {\n"
        f"  asm volatile({MMA_D_IN_PLACE}\n"
        '    : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])\n'
        '    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));\n}\n',
        f'attention.cu(2): error: `{MMA}` reads its C from %0, which is write-only ("=f"), so '
        'its value is undefined; make it "+f"',
    ),
    "64-bit-operand": (
        "__device__ unsigned f(double x) {\n  unsigned r;\n"
        '  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "l"(x));\n  return r;\n}\n',
        'attention.cu(3): error: `cvt.rna.tf32.f32` takes a in "f" or "r" registers, but %1 is "l"',
    ),
    "16-bit-operand": (
        "__device__ unsigned f(unsigned short x) {\n  unsigned r;\n"
        '  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "h"(x));\n  return r;\n}\n',
        'attention.cu(3): error: the input constraint "h" is not one the CPU backend runs: use "r", "f", '
        '"l" or "n" (r: a 32-bit integer, f: a float, l: a 64-bit integer or a pointer, n: an integer '
        "constant)",
    ),
    "64-bit-output": (
        "__device__ unsigned long long f(const float* g) {\n  unsigned long long r;\n"
        '  asm("cvt.rna.tf32.f32 %0, %1;" : "=l"(r) : "l"(g));\n  return r;\n}\n',
        'attention.cu(3): error: the output constraint "=l" is not one the CPU backend runs: use "=r", '
        '"=f", "+r" or "+f" (r: a 32-bit integer, f: a float)',
    ),
    "f16x2-cvt-missing-b": (
        "__device__ unsigned f(float x) {\n  unsigned r;\n"
        '  asm("cvt.rn.f16x2.f32 %0, %1;" : "=r"(r) : "f"(x));\n  return r;\n}\n',
        "attention.cu(3): error: `cvt.rn.f16x2.f32` takes 3 operands (d, a, b), this one has 2",
    ),
    "f16-mma-float-a": (
        '__device__ void f(float (&d)[4], float a, unsigned b) {\n  asm volatile("'
        + MMA16
        + ' {%0,%1,%2,%3}, {%4,%4,%4,%4}, {%5,%5}, {%0,%1,%2,%3};"\n'
        '    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "f"(a), "r"(b));\n}\n',
        f'attention.cu(2): error: `{MMA16}` takes A in "r" registers, but %4 is "f"',
    ),
    "asm-label": (
        'int renamed asm("memcpy");\n',
        f"attention.cu(1): error: `memcpy` is inline assembly without operands, {RUNS_ONLY}",
    ),
    "in-a-branch-the-preprocessor-drops": (
        '#if 0\n__device__ void f() { asm volatile("exit;" ::: "memory"); }\n#endif\n',
        f"attention.cu(2): error: `exit` {CANNOT}",
    ),
    "ptx-block-with-a-64-bit-register": (
        "__device__ unsigned f(const float* g) {\n  unsigned r;\n"
        '  asm("{ .reg .b64 t; mov.b64 t, %1; mov.b32 %0, 0; }" : "=r"(r) : "l"(g));\n'
        "  return r;\n}\n",
        "attention.cu(3): error: `.reg .b64 t`: a .reg .b64 register is not kept by the CPU backend, which "
        'keeps declared registers of .pred, .b32, .u32, .s32, .f32 only; pass a 64-bit value in as an "l" '
        "operand, and compute the rest in CUDA C++",
    ),
    "ptx-label": (
        "__device__ unsigned f(unsigned x) {\n  unsigned r = x;\n"
        '  asm("{ .reg .pred p; setp.eq.u32 p, %0, 0; @p bra DONE; mov.b32 %0, 1; DONE: }" : "+r"(r));\n'
        "  return r;\n}\n",
        f"attention.cu(3): error: `bra DONE` {CANNOT}",
    ),
    "guard-that-is-no-predicate": (
        "__device__ unsigned f(unsigned x) {\n  unsigned r = x;\n"
        '  asm("{ .reg .b32 t; mov.b32 t, 1; @t mov.b32 %0, 2; }" : "+r"(r));\n'
        "  return r;\n}\n",
        "attention.cu(3): error: `@t` guards with a register that is no predicate (declare `.reg .pred`)",
    ),
    "predicate-from-an-operand": (
        "__device__ unsigned f(unsigned x) {\n  unsigned r = x;\n"
        '  asm("setp.eq.u32 %0, %0, 0;" : "+r"(r));\n'
        "  return r;\n}\n",
        'attention.cu(3): error: `setp.eq.u32`\'s p is a predicate, but %0 is "r": declare one in the statement '
        "(`.reg .pred p;`) and name it",
    ),
    "register-used-outside-its-block": (
        "__device__ unsigned f(unsigned x) {\n  unsigned r = x;\n"
        '  asm("{ .reg .b32 t; mov.b32 t, %0; } mov.b32 %0, t;" : "+r"(r));\n'
        "  return r;\n}\n",
        "attention.cu(3): error: `t` is no register declared in the statement (declare it: `.reg .b32 t;`)",
    ),
    "block-never-closed": (
        "__device__ unsigned f(unsigned x) {\n  unsigned r = x;\n"
        '  asm("{ .reg .b32 t; mov.b32 t, %0;" : "+r"(r));\n'
        "  return r;\n}\n",
        "attention.cu(3): error: `{ .reg .b32 t; mov.b32 t, %0;`: a `{` block that never closes",
    ),
    "ex2-of-an-integer": (
        '__device__ float f(unsigned x) {\n  float r;\n  asm("ex2.approx.f32 %0, 1;" : "=f"(r));\n  return r + x;\n}\n',
        "attention.cu(3): error: `ex2.approx.f32`'s a is one register or a float literal (0f3F800000, 1.5), got 1",
    ),
    "ex2-of-a-64-bit-operand": (
        "__device__ float f(unsigned long long x) {\n  float r;\n"
        '  asm("ex2.approx.f32 %0, %1;" : "=f"(r) : "l"(x));\n'
        "  return r;\n}\n",
        'attention.cu(3): error: `ex2.approx.f32` takes a in "r" or "f" registers, but %1 is "l"',
    ),
    "rcp-f64": (
        "__device__ double f(double x) {\n  double r;\n"
        '  asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(x));\n'
        "  return r;\n}\n",
        "attention.cu(3): error: `rcp.approx.ftz.f64` is inline assembly the CPU backend cannot run: the PTX ISA "
        "documents its result only roughly, so no emulation gives the GPU's bits; write 1.0 / x (or "
        "__drcp_rn(x)) in CUDA C++",
    ),
    "shfl-predicate-into-an-operand": (
        "__device__ float f(float x) {\n  float r; unsigned ok;\n"
        '  asm volatile("shfl.sync.up.b32 %0|%1, %2, 1, 0, -1;" : "=f"(r), "=r"(ok) : "f"(x));\n'
        "  return r + ok;\n}\n",
        'attention.cu(3): error: `shfl.sync.up.b32`\'s p is a predicate, but %1 is "r": declare one in the '
        "statement (`.reg .pred p;`) and name it",
    ),
    "named-operand": (
        "__device__ unsigned f(float x) {\n  unsigned r;\n"
        '  asm("cvt.rna.tf32.f32 %[r], %[x];" : [r] "=r"(r) : [x] "f"(x));\n  return r;\n}\n',
        'attention.cu(3): error: named operands (`[name] "r"(x)`) are not read by the CPU backend; '
        "number them (%0, %1, ...) instead",
    ),
    "asm-inside-an-operand": (
        "__device__ unsigned f(float x) {\n  unsigned r;\n"
        '  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(({ asm("syscall"); x; })));\n'
        "  return r;\n}\n",
        "attention.cu(3): error: `asm` inside an operand of another asm statement",
    ),
    "template-from-a-macro": (
        '#define TEMPLATE "syscall"\n__device__ void f() {\n  asm volatile(TEMPLATE ::: "memory");\n}\n',
        "attention.cu(3): error: the template of `asm` must be plain string literals, got TEMPLATE",
    ),
    "undef-the-keyword": (
        "#undef asm\n",
        "attention.cu(1): error: `#undef asm` is refused: the CPU backend reads inline assembly "
        "itself and needs the keyword kept as it is; give the macro another name",
    ),
    "redefine-the-keyword": (
        "#define __asm__(...)\n",
        "attention.cu(1): error: `#define __asm__` is refused: the CPU backend reads inline "
        "assembly itself and needs the keyword kept as it is; give the macro another name",
    ),
    # cp.async: each form ptxas refuses, and each it takes that the emulation does not run.
    "cp-async-missing-operand": (
        CP_ASYNC.format(code='"cp.async.cg.shared.global [%0], [%1];" :: "r"(s), "l"(g)'),
        f"attention.cu(3): error: `{CG}` takes 3 or 4 operands (dst, src, cp-size, src-size), this one has 2",
    ),
    "cp-async-float-address": (
        CP_ASYNC.format(code='"cp.async.ca.shared.global [%0], [%1], 4;" :: "f"(x), "l"(g)'),
        f'attention.cu(3): error: `{CA}` takes dst in "r" or "l" registers, but %0 is "f"',
    ),
    "cp-async-global-address-in-32-bits": (
        CP_ASYNC.format(code='"cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(s), "r"(s)'),
        f'attention.cu(3): error: `{CA}` takes src in "l" registers, but %1 is "r"',
    ),
    "cp-async-size-12": (
        CP_ASYNC.format(code='"cp.async.ca.shared.global [%0], [%1], 12;" :: "r"(s), "l"(g)'),
        f"attention.cu(3): error: `{CA}`'s cp-size is 4, 8 or 16, got 12",
    ),
    "cp-async-cg-size-4": (
        CP_ASYNC.format(code='"cp.async.cg.shared.global [%0], [%1], 4;" :: "r"(s), "l"(g)'),
        f"attention.cu(3): error: `{CG}`'s cp-size is 16, got 4",
    ),
    "cp-async-size-from-a-register": (
        CP_ASYNC.format(code='"cp.async.cg.shared.global [%0], [%1], %0;" :: "r"(s), "l"(g)'),
        f'attention.cu(3): error: `{CG}` takes cp-size in "n" operands (an integer constant), but %0 is "r"',
    ),
    "cp-async-src-size-past-cp-size": (
        CP_ASYNC.format(code='"cp.async.cg.shared.global [%0], [%1], 16, 20;" :: "r"(s), "l"(g)'),
        f"attention.cu(3): error: `{CG}`'s src-size is at most its cp-size, 16, got 20",
    ),
    "cp-async-prefetch-size-ptxas-does-not-know": (
        CP_ASYNC.format(code='"cp.async.cg.shared.global.L2::512B [%0], [%1], 16;" :: "r"(s), "l"(g)'),
        f"attention.cu(3): error: `{CG}.L2::512B` is a form of cp.async the CPU backend cannot run: it runs only "
        f"{CP_ASYNC_FORMS}, without cache hints or other qualifiers",
    ),
    "cp-async-cache-hint": (
        CP_ASYNC.format(
            code='"cp.async.ca.shared.global.L2::cache_hint [%0], [%1], 4, 4, %2;" :: "r"(s), "l"(g), "l"(0ull)'
        ),
        f"attention.cu(3): error: `{CA}.L2::cache_hint` is a form of cp.async the CPU backend cannot run: it runs "
        f"only {CP_ASYNC_FORMS}, without cache hints or other qualifiers",
    ),
    "cp-async-address-not-in-brackets": (
        CP_ASYNC.format(code='"cp.async.ca.shared.global %0, [%1], 4;" :: "r"(s), "l"(g)'),
        f"attention.cu(3): error: `{CA}`'s dst is an address, [%N], got %0",
    ),
    "cp-async-address-with-an-offset": (
        CP_ASYNC.format(code='"cp.async.ca.shared.global [%0+4], [%1], 4;" :: "r"(s), "l"(g)'),
        f"attention.cu(3): error: `{CA} [%0+4], [%1], 4`: the CPU backend reads operands only as %N, {{%N, ...}}, "
        "[%N], an integer, a float literal or a register the statement declares (no offsets, negations or labels)",
    ),
    "wait-group-from-a-register": (
        CP_ASYNC.format(code='"cp.async.wait_group %0;" :: "r"(s)'),
        'attention.cu(3): error: `cp.async.wait_group` takes N in "n" operands (an integer constant), but %0 is "r"',
    ),
    "commit-group-with-an-operand": (
        CP_ASYNC.format(code='"cp.async.commit_group %0;" :: "r"(s)'),
        "attention.cu(3): error: `cp.async.commit_group` takes 0 operands, this one has 1",
    ),
}


def refusal(code: str, cache_dir) -> str:
    """What the CPU build says of `code` as a student's attention.cu with a kernel after it."""
    with pytest.raises(CpuCompileError) as refused:
        CpuModule.build(
            '#include <attnlab/prelude.cuh>\n#line 1 "attention.cu"\n' + code + KERNEL,
            "attention.cu",
            {"k": ["float*"]},
            cache_dir=cache_dir,
        )
    return str(refused.value)


@pytest.mark.parametrize("code, message", REFUSED.values(), ids=REFUSED.keys())
def test_inline_assembly_it_cannot_run_is_refused_before_g_plus_plus_sees_it(tmp_path, code, message):
    assert refusal(code, tmp_path) == message
    assert not list(tmp_path.glob("*.so"))  # nothing was built


def test_a_keyword_pasted_by_a_macro_is_refused_in_the_preprocessed_text(tmp_path):
    """The rewrite reads the file as written; an asm keyword a macro pastes together is plain in the
    preprocessed text, which the CPU build reads before g++ compiles it."""
    code = '#define CAT(a, b) a##b\n__device__ void f() {\n  CAT(as, m)("syscall");\n}\n'
    assert refusal(code, tmp_path) == (
        "attention.cu(3): error: inline assembly built by a macro: the CPU backend "
        "runs only asm statements written out in the file (see the CPU backend's "
        "README)"
    )
    assert not list(tmp_path.glob("*.so"))  # nothing was built


# What the rewrite cannot see or judge, g++ stops at the student's line.
COMPILER_REFUSED = {
    "n-operand-not-a-constant": (
        '__device__ void f(int n) {\n  asm volatile("cp.async.wait_group %0;" :: "n"(n));\n}\n',
        "attention.cu(2): error: ‘n’ is not a constant expression",
    ),
    "f-operand-from-a-double": (
        "__device__ unsigned f(double x) {\n  unsigned r;\n"
        '  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));\n  return r;\n}\n',
        "attention.cu(3): error: use of deleted function ‘uint32_t "
        "attnlab::{anonymous}::ptx::f_input(T) [with T = double; uint32_t = unsigned int]’",
    ),
}


@pytest.mark.parametrize("code, message", COMPILER_REFUSED.values(), ids=COMPILER_REFUSED.keys())
def test_what_the_rewrite_leaves_to_g_plus_plus_fails_at_the_students_line(tmp_path, code, message):
    assert refusal(code, tmp_path).splitlines()[:2] == ["C++ compile failed:", message]


def test_a_rewritten_statement_keeps_every_later_line_number(tmp_path):
    code = (
        '__device__ unsigned f(float x) {\n  unsigned r;\n  asm("cvt.rna.tf32.f32 %0, %1;"\n'
        '      : "=r"(r)\n      : "f"(x));\n  return undeclared_name;\n}\n'
    )
    with pytest.raises(CpuCompileError) as refused:
        CpuModule.build(
            '#include <attnlab/prelude.cuh>\n#line 1 "attention.cu"\n' + code + KERNEL,
            "attention.cu",
            {"k": ["float*"]},
            cache_dir=tmp_path,
        )
    assert str(refused.value) == (
        "C++ compile failed:\nattention.cu(6): error: ‘undeclared_name’ was not declared in this scope"
    )


@pytest.mark.slow
def test_grade_refuses_ptx_the_cpu_backend_cannot_run_with_a_compile_error(tmp_path):
    """Through the command line: NVRTC accepts `ret;`, the CPU build refuses it (exit 3, the line named)."""
    fixture = "tests/fixtures/lab2/hostile/ptx_also_x86.cu"
    report = tmp_path / "result.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "labrunner",
            "grade",
            "lab2",
            fixture,
            "--device",
            "cpu",
            "--no-timing",
            "--json",
            str(report),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    result = json.loads(report.read_text())
    line = next(i + 1 for i, text in enumerate((REPO / fixture).read_text().splitlines()) if "asm volatile" in text)
    assert (completed.returncode, result["verdict"], result["exit_code"]) == (3, "compile-error", 3)
    assert result["error"] == f"{fixture}({line}): error: `ret;` is inline assembly without operands, {RUNS_ONLY}"


# --- NVRTC: the same helpers compile for sm_90, and the register classes are the ones it accepts ---


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_compile_gate_passes_the_probe_kernels(arch):
    """The include policy and NVRTC (ptxas behind it), as grading runs them, for the first tensor-core
    architecture with tf32 and for the H200's."""
    module = compile_gate(PROBES_SOURCE.read_text(), "ptx.cu", arch)
    # The helpers are inlined at every call: the tf32 mma in mma_raw 2, mma_3xtf32 3, 1, 2 and 1 in the
    # three divergence probes and 1 in each of the two f16 divergence probes; the tf32 cvt 12 times in
    # mma_3xtf32 (8 through the helper, 4 through the macro), once in cvt_each. The f16 mma in mma_f16_raw 2,
    # mma_3xf16 3 and 1 in each f16 divergence probe; the f16 cvt 12 times in mma_3xf16 (2 per split, 6
    # splits), once in cvt_f16x2_each.
    counts = [
        module.ptx.count(f"\t{instruction} ") for instruction in (MMA, "cvt.rna.tf32.f32", MMA16, "cvt.rn.f16x2.f32")
    ]
    assert counts == [11, 13, 7, 13]
    # Every way the probes write a cp.async reaches the PTX as written (register numbers aside; how
    # often each appears is the optimiser's business: it unrolls some loops).
    forms = {re.sub(r"%(r|rd)\d+", r"%\1", line.strip()) for line in module.ptx.splitlines() if "cp.async" in line}
    assert forms == {
        f"{CG} [%r], [%rd], 16, %r;",
        f"{CA} [%r], [%rd], 4, %r;",
        f"{CA} [%r], [%rd], 8, 5;",
        f"{CA} [%r], [%rd], 4, 3;",
        f"{CG} [%r], [%rd], 16;",
        f"{CA} [%rd], [%rd], 8, 8;",
        f"{CA} [%r], [%rd], 4;",
        "cp.async.commit_group;",
        "cp.async.wait_group 0;",
        "cp.async.wait_group 1;",
        "cp.async.wait_all;",
    }
    assert set(module.entry_points) == set(ENTRY_POINTS)


CVT_TEMPLATE = """__device__ unsigned to_tf32(float x) {{
    {dtype} r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "={d}"(r) : "{a}"({x}));
    return {ret};
}}
extern "C" __global__ void k(float* o) {{ o[threadIdx.x] = __uint_as_float(to_tf32(o[threadIdx.x])); }}
"""
CVT16_TEMPLATE = """__device__ unsigned to_f16x2(float x, float y) {{
    {dtype} r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "={d}"(r) : "{a}"({x}), "{b}"({y}));
    return {ret};
}}
extern "C" __global__ void k(float* o) {{ o[threadIdx.x] = __uint_as_float(to_f16x2(o[threadIdx.x], o[0])); }}
"""
MMA_TEMPLATE = """__device__ void mma(float* o, {D} (&d)[4], const {A} (&a)[4], const {B} (&b)[2], const {C} (&c)[4]) {{
    asm volatile("{name} {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%10,%11,%12,%13}};"
        : "={Dc}"(d[0]), "={Dc}"(d[1]), "={Dc}"(d[2]), "={Dc}"(d[3])
        : "{Ac}"(a[0]), "{Ac}"(a[1]), "{Ac}"(a[2]), "{Ac}"(a[3]), "{Bc}"(b[0]), "{Bc}"(b[1]),
          "{Cc}"(c[0]), "{Cc}"(c[1]), "{Cc}"(c[2]), "{Cc}"(c[3]));
}}
extern "C" __global__ void k(float* o) {{
    {D} d[4]; {A} a[4] = {{1, 2, 3, 4}}; {B} b[2] = {{5, 6}}; {C} c[4] = {{7, 8, 9, 10}};
    mma(o, d, a, b, c);
    o[threadIdx.x] = (float)d[0];
}}
"""
TYPES = {"r": "unsigned", "f": "float"}
# cp.async with each operand given in one class, the others in a class ptxas takes: the value each
# class carries (a shared address, a global address, a src-size of 16, a wait for 0 groups).
CP_ASYNC_CLASS_TEMPLATE = """extern "C" __global__ void k(const float* g, float* o) {{
    __shared__ __align__(16) float s[64];
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "{dst}"({dst_value}), "{src}"({src_value}),
                 "{size}"({size_value}));
    asm volatile("cp.async.wait_group %0;" :: "{N}"({N_value}));
    o[threadIdx.x] = s[threadIdx.x];
}}
"""
CP_ASYNC_VALUES = {
    "dst": {
        "r": "(unsigned)__cvta_generic_to_shared(s)",
        "f": "__uint_as_float((unsigned)__cvta_generic_to_shared(s))",
        "l": "(unsigned long long)__cvta_generic_to_shared(s)",
    },
    "src": {"r": "(unsigned)(size_t)g", "f": "0.0f", "l": "g"},
    "size": {"r": "16u", "f": "16.0f", "l": "16ull", "n": "16"},
    "N": {"r": "0u", "n": "0"},
}


def nvrtc_accepts(source: str) -> bool:
    try:
        compile_module(source, "classes.cu", "sm_90")
    except AttnlabError:
        return False
    return True


@pytest.mark.slow
def test_the_register_classes_allowed_are_exactly_those_nvrtc_accepts_for_sm_90():
    """For each operand of each instruction, every class letter: the CPU backend allows it exactly when
    NVRTC (and ptxas behind it) compiles it, with the operand declared in that class's C++ type."""
    families = {
        "cvt.rna.tf32.f32",
        "cvt.rn.f16x2.f32",
        MMA,
        MMA16,
        CA,
        CG,
        "cp.async.commit_group",
        "cp.async.wait_group",
        "cp.async.wait_all",
    }  # each one with operands asked below; of the rest one of each family and register type
    assert {name for name in INSTRUCTIONS if not name.startswith(SCALAR_FAMILIES)} == families
    allowed, accepted = {}, {}
    cvt = INSTRUCTIONS["cvt.rna.tf32.f32"]
    for operand in cvt.operands:
        for c in "rf":
            allowed[("cvt.rna.tf32.f32", operand.name, c)] = c in operand.classes
    for c in "rf":
        accepted[("cvt.rna.tf32.f32", "d", c)] = nvrtc_accepts(
            CVT_TEMPLATE.format(dtype=TYPES[c], d=c, a="f", x="x", ret="r" if c == "r" else "__float_as_uint(r)")
        )
        accepted[("cvt.rna.tf32.f32", "a", c)] = nvrtc_accepts(
            CVT_TEMPLATE.format(dtype="unsigned", d="r", a=c, x="x" if c == "f" else "__float_as_uint(x)", ret="r")
        )
    cvt16 = INSTRUCTIONS["cvt.rn.f16x2.f32"]
    source = {"f": "{}", "r": "__float_as_uint({})"}  # a float source as its own type or as its bits
    for operand in cvt16.operands:
        for c in "rf":
            classes = {"d": "r", "a": "f", "b": "f"} | {operand.name: c}
            allowed[("cvt.rn.f16x2.f32", operand.name, c)] = c in operand.classes
            accepted[("cvt.rn.f16x2.f32", operand.name, c)] = nvrtc_accepts(
                CVT16_TEMPLATE.format(
                    dtype=TYPES[classes["d"]],
                    **classes,
                    x=source[classes["a"]].format("x"),
                    y=source[classes["b"]].format("y"),
                    ret="r" if classes["d"] == "r" else "__float_as_uint(r)",
                )
            )
    for name in (MMA, MMA16):
        base = {"Dc": "f", "Ac": "r", "Bc": "r", "Cc": "f"}
        for operand in INSTRUCTIONS[name].operands:
            for c in "rf":
                classes = base | {f"{operand.name}c": c}
                allowed[(name, operand.name, c)] = c in operand.classes
                accepted[(name, operand.name, c)] = nvrtc_accepts(
                    MMA_TEMPLATE.format(
                        name=name, **classes, **{key[0]: TYPES[letter] for key, letter in classes.items()}
                    )
                )
    # cp.async (.ca and .cg take the same classes: one instruction asked for both) and wait_group.
    specs = {
        "dst": INSTRUCTIONS[CG].operands[0],
        "src": INSTRUCTIONS[CG].operands[1],
        "size": INSTRUCTIONS[CG].operands[3],
        "N": INSTRUCTIONS["cp.async.wait_group"].operands[0],
    }
    assert INSTRUCTIONS[CA].operands[:2] + INSTRUCTIONS[CA].operands[3:] == (specs["dst"], specs["src"], specs["size"])
    for key, spec in specs.items():
        for c in CP_ASYNC_VALUES[key]:
            classes = {"dst": "r", "src": "l", "size": "r", "N": "n"} | {key: c}
            allowed[("cp.async", spec.name, c)] = c in spec.classes
            accepted[("cp.async", spec.name, c)] = nvrtc_accepts(
                CP_ASYNC_CLASS_TEMPLATE.format(
                    **classes, **{f"{k}_value": CP_ASYNC_VALUES[k][letter] for k, letter in classes.items()}
                )
            )
    for name, operand, c, code in scalar_forms():
        spec = next(o for o in INSTRUCTIONS[name].operands if o.name == operand)
        allowed[(name, operand, c)] = c in spec.classes or (c == "n" and spec.literal == "int")
        accepted[(name, operand, c)] = nvrtc_accepts(SCALAR_TEMPLATE.format(asm=code))
    assert accepted == allowed


SCALAR_FAMILIES = ("shfl.sync.", "ex2.", "lg2.", "rcp.", "setp.", "mov.", "selp.")
SCALAR_TEMPLATE = """extern "C" __global__ void k(float* o, const unsigned* u) {{
    float f = o[0], fo = 0.0f; unsigned r = u[0], ro = 0u;
    {asm}
    o[1] = fo + (float)ro;
}}
"""


def scalar_forms() -> list[tuple[str, str, str, str]]:
    """(instruction, operand, class letter, the asm statement): one instruction of each family and register
    type, each of its operands in every letter a 32-bit operand may have ("n" for one it reads), the others
    in the instruction's own type."""
    forms = []
    for opcode, written, read in (
        ("ex2.approx.f32", ("d",), ("a",)),
        ("rcp.approx.ftz.f32", ("d",), ("a",)),
        ("mov.u32", ("d",), ("a",)),
        ("mov.f32", ("d",), ("a",)),
        ("shfl.sync.bfly.b32", ("d",), ("a", "b")),
        ("setp.lt.s32", (), ("a",)),
        ("setp.lt.f32", (), ("a",)),
        ("setp.ne.b32", (), ("a",)),
    ):
        own = "f" if opcode.endswith("f32") else "r"
        for operand in written + read:
            for letter in "rfn" if operand in read else "rf":
                cls = dict.fromkeys(written + read, own) | {operand: letter}
                inputs = ", ".join(f'"{cls[o]}"({ {"r": "r", "f": "f", "n": "1"}[cls[o]] })' for o in read)
                if opcode.startswith("setp"):
                    other = "0f00000000" if own == "f" else "0"
                    code = f'asm volatile("{{ .reg .pred p; {opcode} p, %0, {other}; }}" :: {inputs});'
                else:
                    sources = ", ".join(f"%{k + 1}" for k in range(len(read)))
                    rest = ", 0x1f, 0xffffffff" if opcode.startswith("shfl") else ""
                    out = "fo" if cls["d"] == "f" else "ro"
                    code = f'asm volatile("{opcode} %0, {sources}{rest};" : "={cls["d"]}"({out}) : {inputs});'
                forms.append((opcode, operand, letter, code))
    return forms


# --- the emulation against the hardware -----------------------------------------------------------


class CupyProbes:
    """The probe kernels on the GPU, launched like a CpuModule: numpy arrays in, written back after."""

    def __init__(self):
        import cupy

        self.cupy = cupy
        self.module = cupy.RawModule(
            code=compose_source(PROBES_SOURCE.read_text(), "ptx.cu"),
            options=("--std=c++17", *NVRTC_INCLUDE_OPTIONS, "--no-source-include"),
        )

    def launch(self, name, grid, block, shared_bytes, args, reverse_threads=0):
        cp = self.cupy
        on_gpu = [cp.asarray(a) if isinstance(a, np.ndarray) else np.int32(a) for a in args]
        self.module.get_function(name)(tuple(grid), tuple(block), tuple(on_gpu), shared_mem=shared_bytes)
        cp.cuda.Device().synchronize()
        for host, device in zip(args, on_gpu):
            if isinstance(host, np.ndarray):
                host[...] = cp.asnumpy(device)


def check_agreement(device, cpu: CpuModule) -> None:
    """tf32: cvt bit for bit on every number and infinity (NaNs each to its own rule); mma within the
    float32 error bound of the exact product of the truncated operands on both (rounding the operands
    instead, or another fragment layout, is off by about 2^-11). Then the same for f16 (below)."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(8192) * np.exp2(rng.integers(-140, 127, 8192))).astype(np.float32)
    x = np.concatenate(
        [
            x,
            np.array([c[0] for c in CVT_CASES], np.uint32).view(np.float32),
            np.array([0x7FFFFFFF], np.uint32).view(np.float32),
        ]
    )
    outs = []
    for module in (device, cpu):
        out = np.zeros(len(x), np.uint32)
        module.launch("cvt_each", ((len(x) + 127) // 128, 1, 1), (128, 1, 1), 0, [x, out, len(x)])
        outs.append(out)
    number = ~np.isnan(x)
    np.testing.assert_array_equal(outs[0][number], outs[1][number])
    # A NaN is where the two part on purpose. The hardware clears a NaN's 13 low bits without rounding
    # (seen on an H200: 0x7FFFFFFF -> 0x7FFFE000, 0x7FF00BAD -> 0x7FF00000, and 0x7F800001 -> 0x7F800000,
    # which is +Inf). The emulation keeps every NaN whole, so the shim's shared-memory poison survives a
    # conversion and can still be named as a race. The backend given as `device` is held to its own rule.
    nan_bits = x[~number].view(np.uint32)
    gpu_rule = nan_bits & np.uint32(0xFFFFE000)
    for module, out in zip((device, cpu), outs):
        expected = nan_bits if isinstance(module, CpuModule) else gpu_rule
        np.testing.assert_array_equal(out[~number], expected)
    for seed in range(8):
        rng = np.random.default_rng(100 + seed)
        a, b, c = (rng.standard_normal(shape).astype(np.float32) for shape in ((16, 8), (8, 8), (16, 8)))
        at, bt = (as_tf32_operand(m).astype(np.float64) for m in (a, b))
        exact = at @ bt + c
        bound = 9 * 2.0**-24 * (np.abs(at) @ np.abs(bt) + np.abs(c))
        for module in (device, cpu):
            d = np.zeros((16, 8), np.float32)
            module.launch("mma_raw", (1, 1, 1), (32, 1, 1), 0, [a, b, c, d, seed % 2])
            assert (np.abs(d - exact) <= bound).all()
    check_f16_agreement(device, cpu)
    check_cp_async_agreement(device, cpu)


def check_cp_async_agreement(device, cpu: CpuModule) -> None:
    """cp.async: every result the PTX ISA defines (the bytes each copy lands after its wait, the zero-fill
    past src-size, what another thread reads after the issuer's wait and a barrier) bit for bit, the same
    expected values on both. The reads it leaves undefined (before the wait, without the issuer's wait,
    after the issuer exits) are checked on the CPU backend only, where they are the poison; the mistakes
    in check_cp_async_faults are faults on a GPU and are not run there."""
    for probe in CP_ASYNC_PROBES:
        for module in (device, cpu):
            probe(module)


def check_f16_agreement(device, cpu: CpuModule) -> None:
    """cvt.rn.f16x2.f32 bit for bit on every number and infinity, both halves, NaNs each to its own rule;
    the f16 mma within 17 float32 additions' error of the exact product, and 3xFP16 within BOUND_3XF16,
    on both."""
    rng = np.random.default_rng(12)
    x = (rng.standard_normal(8192) * np.exp2(rng.integers(-30, 20, 8192))).astype(np.float32)
    x = np.concatenate([x, np.array([c[0] for c in CVT16_CASES], np.uint32).view(np.float32)])
    lo = x[rng.permutation(len(x))]
    outs = []
    for module in (device, cpu):
        out = np.zeros(len(x), np.uint32)
        module.launch("cvt_f16x2_each", ((len(x) + 127) // 128, 1, 1), (128, 1, 1), 0, [bits(x), bits(lo), out, len(x)])
        outs.append(out)
    for half, source in ((16, x), (0, lo)):
        got = [(out >> np.uint32(half)) & np.uint32(0xFFFF) for out in outs]
        number = ~np.isnan(source)
        np.testing.assert_array_equal(got[0][number], got[1][number])
        # A NaN: the GPU gives the canonical half NaN 0x7FFF; the emulation the float's top 16 bits,
        # so that the shim's poison comes back whole out of the f16 mma (see check_poison_through_f16_mma).
        for module, g in zip((device, cpu), got):
            expected = (
                bits(source[~number]) >> np.uint32(16)
                if isinstance(module, CpuModule)
                else np.full((~number).sum(), 0x7FFF, np.uint32)
            )
            np.testing.assert_array_equal(g[~number], expected)
    for seed in range(8):
        rng = np.random.default_rng(200 + seed)
        a, b = random_halves(rng, (16, 16)), random_halves(rng, (16, 8))
        c = rng.standard_normal((16, 8)).astype(np.float32)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        # Each product is exact; the GPU's order of the 17 additions and whether its adder rounds or
        # truncates are not documented: one float32 unit (2^-23) per addition covers either.
        bound = 17 * 2.0**-23 * (np.abs(a64) @ np.abs(b64) + np.abs(c))
        for module in (device, cpu):
            assert (np.abs(launch_mma_f16(module, a, b, c, seed % 2) - (a64 @ b64 + c)) <= bound).all()
        a32, b32 = normal_range(rng, (16, 16)), normal_range(rng, (16, 8))
        exact = a32.astype(np.float64) @ b32.astype(np.float64)
        bound = BOUND_3XF16 * (np.abs(a32.astype(np.float64)) @ np.abs(b32.astype(np.float64)))
        for module in (device, cpu):
            d = np.zeros((16, 8), np.float32)
            module.launch("mma_3xf16", (1, 1, 1), (32, 1, 1), 0, [a32, b32, d])
            assert (np.abs(d - exact) <= bound).all()


@pytest.mark.gpu
def test_the_gpu_agrees_with_the_emulation(probes):
    check_agreement(CupyProbes(), probes)


def test_the_agreement_check_passes_the_emulation_against_itself(probes):
    """What the GPU test above runs, here with the CPU backend in the GPU's place, so that its
    arithmetic is exercised on every machine."""
    check_agreement(probes, probes)
