"""Inline PTX on the CPU backend: the tf32 conversion and the m16n8k8 tensor-core multiply run as the
PTX ISA defines them, every other asm statement is refused before g++ sees it, and NVRTC agrees on
which register classes each instruction takes.

The probe kernels (`cpu_kernels/ptx.cu`) write the helpers exactly as a GPU kernel does; every
expected value is worked out here from the PTX ISA's rules (fragment layouts, truncation of tf32
operands, round-to-nearest-away), never read back from the backend.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from labrunner.build.nvrtc import compile_module
from labrunner.exit_codes import AttnlabError
from labrunner.run.cpu.module import CpuCompileError, CpuKernelError, CpuModule
from labrunner.run.cpu.ptx_asm import INSTRUCTIONS, SUPPORTED

REPO = Path(__file__).resolve().parent.parent
PROBES = REPO / "tests" / "cpu_kernels" / "ptx.cu"
PRELUDE = '#include <attnlab/prelude.cuh>\n#line 1 "ptx.cu"\n'
ENTRY_POINTS = {"mma_raw": ["float*", "float*", "float*", "float*", "int"], "mma_3xtf32": ["float*"] * 3,
                "cvt_each": ["float*", "unsigned*", "int"], "mma_half_warp": ["float*"],
                "mma_two_sites": ["float*"], "mma_against_barrier": ["float*"]}
MMA = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
SHARED_POISON = 0x7FF00BAD  # what unwritten shared memory holds on the CPU backend


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> CpuModule:
    return CpuModule.build(PRELUDE + PROBES.read_text(), "ptx.cu", ENTRY_POINTS,
                           cache_dir=tmp_path_factory.mktemp("cpu-cache"))


def line_of(needle: str) -> int:
    return next(i + 1 for i, line in enumerate(PROBES.read_text().splitlines()) if needle in line)


MMA_LINE = line_of('asm volatile("mma')  # the helper with D in place
MMA_CD_LINE = line_of("asm __volatile__(")  # the helper with C and D apart


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, np.float32).view(np.uint32)


def as_tf32_operand(x: np.ndarray) -> np.ndarray:
    """What the tensor core reads from a register holding x: its top 19 bits."""
    return (bits(x) & np.uint32(0xFFFFE000)).view(np.float32)


def mma_reference(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = A*B + C from the truncated operands: each tf32 product is exact in float32; the sums are
    float32 additions, C first, then k = 0..7."""
    a, b = as_tf32_operand(a), as_tf32_operand(b)
    d = c.astype(np.float32).copy()
    for k in range(8):
        d = d + a[:, k:k + 1] * b[k:k + 1, :]
    return d


# --- mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 -------------------------------------------

@pytest.mark.parametrize("separate", [0, 1], ids=["d-in-place", "c-apart"])
@pytest.mark.parametrize("schedule", [0, 1, 7], ids=["in-order", "reversed", "random"])
def test_mma_multiplies_one_tile_per_warp_with_the_fragments_the_ptx_isa_lays_out(probes, separate, schedule):
    rng = np.random.default_rng(16 + separate + 10 * schedule)
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    d = np.zeros((16, 8), np.float32)
    probes.launch("mma_raw", (1, 1, 1), (32, 1, 1), 0, [a, b, c, d, separate], reverse_threads=schedule)
    np.testing.assert_array_equal(d, mma_reference(a, b, c))
    # The operands' low bits matter here: rounding them instead of dropping them changes D.
    rounded = [((bits(x) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32) for x in (a, b)]
    assert not np.array_equal(d, mma_reference(*rounded, c))


def test_3xtf32_gives_float32_accuracy_from_the_tf32_tensor_core(probes):
    """big = tf32(x), small = tf32(x - big); small*big + big*small + big*big is within the error bound
    of an 8-term float32 dot product (8 units of 2^-24 times |A|@|B|); one tf32 product is not."""
    for seed in range(5):
        rng = np.random.default_rng(seed)
        a = rng.standard_normal((16, 8)).astype(np.float32)
        b = rng.standard_normal((8, 8)).astype(np.float32)
        d = np.zeros((16, 8), np.float32)
        probes.launch("mma_3xtf32", (1, 1, 1), (32, 1, 1), 0, [a, b, d])
        exact = a.astype(np.float64) @ b.astype(np.float64)
        bound = 8 * 2.0**-24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
        assert (np.abs(d - exact) <= bound).all()
        one_product = as_tf32_operand(a).astype(np.float64) @ as_tf32_operand(b)
        assert not (np.abs(one_product - exact) <= bound).all()


def test_unwritten_shared_memory_still_shows_through_the_tensor_core(probes):
    """A NaN operand is used whole (the GPU gives some NaN), so the shim's poison reaches D unchanged
    and the driver can still name a race behind an mma."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    c = np.zeros((16, 8), np.float32)
    a.view(np.uint32)[11, 5] = SHARED_POISON
    d = np.zeros((16, 8), np.float32)
    probes.launch("mma_raw", (1, 1, 1), (32, 1, 1), 0, [a, b, c, d, 0])
    assert (d.view(np.uint32)[11] == SHARED_POISON).all()
    assert np.isfinite(np.delete(d, 11, axis=0)).all()


def test_an_mma_half_the_warp_never_reaches_is_reported(probes):
    with pytest.raises(CpuKernelError) as failure:
        probes.launch("mma_half_warp", (1, 1, 1), (32, 1, 1), 0, [np.zeros(32, np.float32)])
    assert str(failure.value) == (
        f"shuffle cannot complete in kernel mma_half_warp, block (0,0,0): thread 0 (warp 0, lane 0) waits at {MMA} "
        f"(ptx.cu:{MMA_LINE}) with mask 0xffffffff, but lane 16 (thread 16) has exited")


def test_two_halves_of_a_warp_at_two_mma_statements_are_reported(probes):
    with pytest.raises(CpuKernelError) as failure:
        probes.launch("mma_two_sites", (1, 1, 1), (32, 1, 1), 0, [np.zeros(32, np.float32)])
    assert str(failure.value) == (
        f"mma divergence in kernel mma_two_sites, block (0,0,0): lane 0 (thread 0) runs {MMA} "
        f"(ptx.cu:{MMA_LINE}) while lane 16 (thread 16) runs {MMA} "
        f"(ptx.cu:{MMA_CD_LINE}); all 32 lanes of a warp must run the same mma.sync together")


def test_an_mma_against_a_barrier_is_reported(probes):
    with pytest.raises(CpuKernelError) as failure:
        probes.launch("mma_against_barrier", (1, 1, 1), (32, 1, 1), 0, [np.zeros(32, np.float32)])
    assert str(failure.value) == (
        f"barrier divergence in kernel mma_against_barrier, block (0,0,0): thread 16 waits at __syncthreads "
        f"(ptx.cu:{line_of('__syncthreads();')}) while thread 0 waits at {MMA} "
        f"(ptx.cu:{MMA_LINE})")


def test_an_mma_in_a_warp_of_fewer_than_32_threads_is_reported(probes):
    a, b, c, d = (np.zeros(n, np.float32) for n in (128, 64, 128, 128))
    with pytest.raises(CpuKernelError) as failure:
        probes.launch("mma_raw", (1, 1, 1), (48, 1, 1), 0, [a, b, c, d, 0])
    assert str(failure.value) == (
        f"{MMA} needs a whole warp in kernel mma_raw, block (0,0,0): thread 32 "
        f"(ptx.cu:{MMA_LINE}) is in warp 1, which has only 16 lanes (the block has 48 "
        "threads; make it a multiple of 32)")


# --- cvt.rna.tf32.f32 ---------------------------------------------------------------------------

CVT_CASES = [
    # (input bits, expected bits, why)
    (0x3F801000, 0x3F802000, "1 + 2^-11, a tie: away from zero (ties-to-even would keep 1.0)"),
    (0xBF801000, 0xBF802000, "-(1 + 2^-11), a tie: away from zero, so more negative"),
    (0x3F800FFF, 0x3F800000, "just below the tie: down"),
    (0x3F801001, 0x3F802000, "just above the tie: up"),
    (0x3F803000, 0x3F804000, "1 + 3 * 2^-11, a tie between odd and even: away"),
    (0x3FFFF000, 0x40000000, "the last mantissa step rounds up into the exponent: 2.0"),
    (0x3DCCCCCD, 0x3DCCC000, "0.1f: the dropped bits 0x0CCD are under half"),
    (0x7F7FEFFF, 0x7F7FE000, "just under the tie above the largest tf32: stays finite"),
    (0x7F7FFFFF, 0x7F800000, "FLT_MAX rounds away, past the largest tf32: Inf"),
    (0x7F800000, 0x7F800000, "+Inf stays +Inf (the bias would have made it a NaN)"),
    (0xFF800000, 0xFF800000, "-Inf stays -Inf"),
    (0x7FC00000, 0x7FC00000, "a NaN stays that NaN"),
    (0x7F800001, 0x7F800001, "a NaN whose payload is all in the dropped bits stays a NaN, never Inf"),
    (SHARED_POISON, SHARED_POISON, "the shim's poison keeps its payload"),
    (0x00001000, 0x00002000, "the subnormal tie: away from zero"),
    (0x00000FFF, 0x00000000, "under the smallest tf32 subnormal's half: zero"),
    (0x80000000, 0x80000000, "-0 stays -0"),
]


def test_cvt_rounds_to_nearest_with_ties_away_and_keeps_inf_and_nan(probes):
    x = np.array([case[0] for case in CVT_CASES], np.uint32)
    out = np.zeros(len(x), np.uint32)
    probes.launch("cvt_each", (1, 1, 1), (64, 1, 1), 0, [x.view(np.float32), out, len(x)])
    got = {why: hex(g) for (_, _, why), g in zip(CVT_CASES, out)}
    assert got == {why: hex(want) for _, want, why in CVT_CASES}


def test_cvt_of_random_floats_is_the_nearest_tf32_with_ties_away(probes):
    """Worked out in float64 arithmetic, not with the bit trick: the nearest multiple of the value's
    tf32 step (2^(exponent - 10)), halves rounded away from zero."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(4096) * np.exp2(rng.integers(-60, 60, 4096))).astype(np.float32)
    x[:64] = (np.round(x[:64].astype(np.float64) * 1024) + 0.5) / 1024  # exact ties in [-4, 4]
    magnitude = np.abs(x.astype(np.float64))
    step = np.exp2(np.floor(np.log2(magnitude)) - 10)
    expected = (np.sign(x) * np.floor(magnitude / step + 0.5) * step).astype(np.float32)
    out = np.zeros(len(x), np.uint32)
    probes.launch("cvt_each", (32, 1, 1), (128, 1, 1), 0, [x, out, len(x)])
    np.testing.assert_array_equal(out, bits(expected))


# --- what the CPU backend refuses -----------------------------------------------------------------

KERNEL = 'extern "C" __global__ void k(float* o) { o[threadIdx.x] = 1.0f; }\n'
RUNS_ONLY = f"which the CPU backend cannot run: it runs only the PTX instructions {SUPPORTED}"
CANNOT = f"is inline assembly the CPU backend cannot run: it runs only the PTX instructions {SUPPORTED}; " \
         "write the rest in CUDA C++"
MMA_D_IN_PLACE = ('"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, '
                  '{%0,%1,%2,%3};"')
REFUSED = {
    "x86-syscall": ('__device__ void f() {\n  asm volatile("syscall" ::: "memory");\n}\n',
                    f"attention.cu(2): error: `syscall` {CANNOT}"),
    "x86-basic-asm": ('__device__ void f() {\n  __asm__("movq $60, %rax\\n\\tsyscall");\n}\n',
                      f"attention.cu(2): error: `movq $60, %rax syscall` is inline assembly without operands, "
                      f"{RUNS_ONLY}"),
    "unknown-ptx": ('__device__ unsigned lane() {\n  unsigned r;\n  asm("mov.u32 %0, %%laneid;" : "=r"(r));\n'
                    "  return r;\n}\n", f"attention.cu(3): error: `mov.u32 %0, %%laneid` {CANNOT}"),
    "second-instruction-unknown": ('__device__ unsigned f(float x) {\n  unsigned r;\n'
                                   '  asm("cvt.rna.tf32.f32 %0, %1;\\n\\tbar.sync 0;" : "=r"(r) : "f"(x));\n'
                                   "  return r;\n}\n", f"attention.cu(3): error: `bar.sync 0` {CANNOT}"),
    "operand-count": ('__device__ void f(float (&d)[4], unsigned a) {\n  asm volatile(\n    "' + MMA +
                      ' {%0,%1,%2,%3}, {%4,%4,%4,%4}, {%4,%4};"\n'
                      '    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a));\n}\n',
                      f"attention.cu(2): error: `{MMA}` takes 4 operands (D, A, B, C), this one has 3"),
    "vector-size": ('__device__ void f(float (&d)[4], unsigned a) {\n  asm volatile("' + MMA +
                    ' {%0,%1,%2,%3}, {%4,%4,%4}, {%4,%4}, {%0,%1,%2,%3};"\n'
                    '    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a));\n}\n',
                    f"attention.cu(2): error: `{MMA}`'s A is a vector of 4 registers, got {{%4, %4, %4}}"),
    "no-such-operand": ('__device__ unsigned f(float x) {\n  unsigned r;\n'
                        '  asm("cvt.rna.tf32.f32 %0, %2;" : "=r"(r) : "f"(x));\n  return r;\n}\n',
                        "attention.cu(3): error: `%2` in `cvt.rna.tf32.f32` names no operand: the statement has 2 "
                        "(%0 to %1)"),
    "float-destination": ('__device__ float f(float x) {\n  float r;\n'
                          '  asm("cvt.rna.tf32.f32 %0, %1;" : "=f"(r) : "f"(x));\n  return r;\n}\n',
                          'attention.cu(3): error: `cvt.rna.tf32.f32` takes d in "r" registers, but %0 is "f"'),
    "write-only-accumulator": ('__device__ void f(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {\n'
                               f'  asm volatile({MMA_D_IN_PLACE}\n'
                               '    : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])\n'
                               '    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));\n}\n',
                               f'attention.cu(2): error: `{MMA}` reads its C from %0, which is write-only ("=f"), so '
                               'its value is undefined; make it "+f"'),
    "64-bit-operand": ('__device__ unsigned f(double x) {\n  unsigned r;\n'
                       '  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "l"(x));\n  return r;\n}\n',
                       'attention.cu(3): error: the input constraint "l" is not one the CPU backend runs: use "r" or '
                       '"f" (r: a 32-bit integer, f: a float)'),
    "asm-label": ('int renamed asm("memcpy");\n',
                  f"attention.cu(1): error: `memcpy` is inline assembly without operands, {RUNS_ONLY}"),
    "undef-the-keyword": ("#undef asm\n",
                          "attention.cu(1): error: `#undef asm` is refused: the CPU backend reads inline assembly "
                          "itself and needs the keyword kept as it is; give the macro another name"),
    "redefine-the-keyword": ("#define __asm__(...)\n",
                             "attention.cu(1): error: `#define __asm__` is refused: the CPU backend reads inline "
                             "assembly itself and needs the keyword kept as it is; give the macro another name"),
}


@pytest.mark.parametrize("code, message", REFUSED.values(), ids=REFUSED.keys())
def test_inline_assembly_it_cannot_run_is_refused_before_g_plus_plus_sees_it(tmp_path, code, message):
    with pytest.raises(CpuCompileError) as refused:
        CpuModule.build('#include <attnlab/prelude.cuh>\n#line 1 "attention.cu"\n' + code + KERNEL,
                        "attention.cu", {"k": ["float*"]}, cache_dir=tmp_path)
    assert str(refused.value) == message
    assert not list(tmp_path.glob("*.so"))  # nothing was built


# What the rewrite cannot see or judge, g++ stops at the student's line.
COMPILER_REFUSED = {
    "keyword-pasted-by-a-macro": ('#define CAT(a, b) a##b\n__device__ void f() {\n  CAT(as, m)("syscall");\n}\n',
                                  "attention.cu(3): error: inline assembly built by a macro: the CPU backend runs "
                                  "only asm statements written out in the file (see the CPU backend's README)"),
    "f-operand-from-a-double": ('__device__ unsigned f(double x) {\n  unsigned r;\n'
                                '  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));\n  return r;\n}\n',
                                "attention.cu(3): error: use of deleted function ‘uint32_t "
                                "attnlab::{anonymous}::ptx::f_input(T) [with T = double; uint32_t = unsigned int]’"),
}


@pytest.mark.parametrize("code, message", COMPILER_REFUSED.values(), ids=COMPILER_REFUSED.keys())
def test_what_the_rewrite_leaves_to_g_plus_plus_fails_at_the_students_line(tmp_path, code, message):
    with pytest.raises(CpuCompileError) as refused:
        CpuModule.build('#include <attnlab/prelude.cuh>\n#line 1 "attention.cu"\n' + code + KERNEL,
                        "attention.cu", {"k": ["float*"]}, cache_dir=tmp_path)
    assert str(refused.value).splitlines()[:2] == ["C++ compile failed:", message]


def test_a_rewritten_statement_keeps_every_later_line_number(tmp_path):
    code = ('__device__ unsigned f(float x) {\n  unsigned r;\n  asm("cvt.rna.tf32.f32 %0, %1;"\n'
            '      : "=r"(r)\n      : "f"(x));\n  return undeclared_name;\n}\n')
    with pytest.raises(CpuCompileError) as refused:
        CpuModule.build('#include <attnlab/prelude.cuh>\n#line 1 "attention.cu"\n' + code + KERNEL,
                        "attention.cu", {"k": ["float*"]}, cache_dir=tmp_path)
    assert str(refused.value) == ("C++ compile failed:\n"
                                  "attention.cu(6): error: ‘undeclared_name’ was not declared in this scope")


def test_grade_refuses_ptx_the_cpu_backend_cannot_run_with_a_compile_error(tmp_path):
    """Through the command line: NVRTC accepts `trap`, the CPU build refuses it (exit 3, the line named)."""
    fixture = "tests/fixtures/lab2/hostile/cpu_build_error.cu"
    report = tmp_path / "result.json"
    completed = subprocess.run([sys.executable, "-m", "labrunner", "grade", "lab2", fixture, "--device", "cpu",
                                "--no-timing", "--json", str(report)], cwd=REPO, capture_output=True, text=True,
                               timeout=300)
    result = json.loads(report.read_text())
    line = next(i + 1 for i, text in enumerate((REPO / fixture).read_text().splitlines()) if "trap" in text
                and "asm" in text)
    assert (completed.returncode, result["verdict"], result["exit_code"]) == (3, "compile-error", 3)
    assert result["error"] == f"{fixture}({line}): error: `trap;` is inline assembly without operands, {RUNS_ONLY}"


# --- NVRTC: the same helpers compile for sm_90, and the register classes are the ones it accepts ---

def test_nvrtc_compiles_the_probe_kernels_for_sm_90():
    module = compile_module(PROBES.read_text(), "ptx.cu", "sm_90")
    # The helpers are inlined at every call: mma in mma_raw 2, mma_3xtf32 3, and 1, 2 and 1 in the three
    # divergence probes; cvt 12 times in mma_3xtf32 (8 through the helper, 4 through the macro), once in cvt_each.
    assert (module.ptx.count(f"\t{MMA} "), module.ptx.count("\tcvt.rna.tf32.f32 ")) == (9, 13)
    assert set(module.entry_points) == set(ENTRY_POINTS)


CVT_TEMPLATE = '''__device__ unsigned to_tf32(float x) {{
    {dtype} r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "={d}"(r) : "{a}"({x}));
    return {ret};
}}
extern "C" __global__ void k(float* o) {{ o[threadIdx.x] = __uint_as_float(to_tf32(o[threadIdx.x])); }}
'''
MMA_TEMPLATE = '''__device__ void mma(float* o, {D} (&d)[4], const {A} (&a)[4], const {B} (&b)[2], const {C} (&c)[4]) {{
    asm volatile("''' + MMA + ''' {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%10,%11,%12,%13}};"
        : "={Dc}"(d[0]), "={Dc}"(d[1]), "={Dc}"(d[2]), "={Dc}"(d[3])
        : "{Ac}"(a[0]), "{Ac}"(a[1]), "{Ac}"(a[2]), "{Ac}"(a[3]), "{Bc}"(b[0]), "{Bc}"(b[1]),
          "{Cc}"(c[0]), "{Cc}"(c[1]), "{Cc}"(c[2]), "{Cc}"(c[3]));
}}
extern "C" __global__ void k(float* o) {{
    {D} d[4]; {A} a[4] = {{1, 2, 3, 4}}; {B} b[2] = {{5, 6}}; {C} c[4] = {{7, 8, 9, 10}};
    mma(o, d, a, b, c);
    o[threadIdx.x] = (float)d[0];
}}
'''
TYPES = {"r": "unsigned", "f": "float"}


def nvrtc_accepts(source: str) -> bool:
    try:
        compile_module(source, "classes.cu", "sm_90")
    except AttnlabError:
        return False
    return True


def test_the_register_classes_allowed_are_exactly_those_nvrtc_accepts_for_sm_90():
    """For each operand of each instruction, every class letter: the CPU backend allows it exactly when
    NVRTC (and ptxas behind it) compiles it, with the operand declared in that class's C++ type."""
    cvt = INSTRUCTIONS["cvt.rna.tf32.f32"]
    allowed = {("d", c): c in cvt.operands[0].classes for c in "rf"} | \
              {("a", c): c in cvt.operands[1].classes for c in "rf"}
    accepted = {}
    for c in "rf":
        accepted[("d", c)] = nvrtc_accepts(CVT_TEMPLATE.format(
            dtype=TYPES[c], d=c, a="f", x="x", ret="r" if c == "r" else "__float_as_uint(r)"))
        accepted[("a", c)] = nvrtc_accepts(CVT_TEMPLATE.format(
            dtype="unsigned", d="r", a=c, x="x" if c == "f" else "__float_as_uint(x)", ret="r"))
    mma = INSTRUCTIONS[MMA]
    base = {"Dc": "f", "Ac": "r", "Bc": "r", "Cc": "f"}
    for operand in mma.operands:
        for c in "rf":
            classes = base | {f"{operand.name}c": c}
            allowed[(operand.name, c)] = c in operand.classes
            accepted[(operand.name, c)] = nvrtc_accepts(MMA_TEMPLATE.format(
                **classes, **{name[0]: TYPES[letter] for name, letter in classes.items()}))
    assert accepted == allowed
