"""The inline PTX that kernels ported from serving engines write, on the CPU backend: cp.async with its size
as an "n" operand and with an L2 prefetch size, `{ .reg .pred p; setp ...; @p ... }` blocks, setp, mov and
selp, ex2, lg2 and rcp .approx (with and without .ftz) and shfl.sync in its four modes. Each test builds a
small kernel, runs it and checks its numbers against the PTX ISA's rules worked out here in numpy; NVRTC
compiles every kernel too (the same file must build for the GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from labrunner.compile.nvrtc import compile_module
from labrunner.run.cpu.module import CpuCompileError, CpuKernelError, CpuModule

PRELUDE = '#include <attnlab/prelude.cuh>\n#line 1 "forms.cu"\n'


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cpu-cache")


def build(source: str, entry_points: dict[str, list[str]], cache) -> CpuModule:
    compile_module(source, "forms.cu", "sm_90")  # NVRTC takes it as written
    return CpuModule.build(PRELUDE + source, "forms.cu", entry_points, cache_dir=cache)


def f32_bits(values) -> np.ndarray:
    return np.asarray(values, np.float32).view(np.uint32)


# --- cp.async ------------------------------------------------------------------------------------

CP_ASYNC = r"""
extern "C" __global__ void copies(const float* g, float* o, int limit) {
    __shared__ __align__(16) float s[4][32 * 4];
    const unsigned t = threadIdx.x;
    for (int k = 0; k < 4; ++k)
        for (int i = 0; i < 4; ++i) s[k][4 * t + i] = -1.0f;
    __syncthreads();
    const float* from = g + 4 * t;
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(&s[0][4 * t]));
    const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(&s[1][4 * t]));
    const unsigned c = static_cast<unsigned>(__cvta_generic_to_shared(&s[2][4 * t]));
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(&s[3][4 * t]));
    asm volatile("cp.async.cg.shared.global [%0], [%1], %2;\n" :: "r"(a), "l"(from), "n"(16));
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" :: "r"(b), "l"(from));
    asm volatile("cp.async.ca.shared::cta.global.L2::256B [%0], [%1], %2, %3;\n" :: "r"(c), "l"(from), "n"(16),
                 "n"(8));
    asm volatile("{\n"
                 "  .reg .pred p;\n"
                 "  setp.ne.b32 p, %0, 0;\n"
                 "  @p cp.async.cg.shared.global.L2::128B [%1], [%2], %3;\n"
                 "}\n" :: "r"((int)((int)t < limit)), "r"(d), "l"(from), "n"(16));
    asm volatile("cp.async.wait_all;\n" ::);
    __syncthreads();
    for (int k = 0; k < 4; ++k)
        for (int i = 0; i < 4; ++i) o[k * 128 + 4 * t + i] = s[k][4 * t + i];
}
"""


def test_cp_async_with_an_n_size_a_prefetch_size_and_a_predicate_copies_exactly(cache):
    module = build(CP_ASYNC, {"copies": ["float*", "float*", "int"]}, cache)
    g = np.arange(1, 129, dtype=np.float32)
    out = np.zeros((4, 128), np.float32)
    module.launch("copies", (1, 1, 1), (32, 1, 1), 0, [g, out, 20])
    np.testing.assert_array_equal(out[0], g)  # the "n" cp-size
    np.testing.assert_array_equal(out[1], g)  # .L2::128B changes where bytes are cached, not which land
    zero_filled = g.reshape(32, 4).copy()
    zero_filled[:, 2:] = 0  # src-size 8 of 16: the last 8 bytes of each copy are zeros
    np.testing.assert_array_equal(out[2], zero_filled.reshape(-1))
    guarded = np.where(np.arange(128) // 4 < 20, g, -1.0)  # threads 20 to 31: p false, nothing copied
    np.testing.assert_array_equal(out[3], guarded)


def test_an_n_cp_size_the_instruction_does_not_take_is_a_compile_error_at_its_line(cache):
    source = (
        "__device__ void f(float* s, const float* g) {\n  const unsigned a = (unsigned)__cvta_generic_to_shared(s);\n"
        '  asm volatile("cp.async.cg.shared.global [%0], [%1], %2;" :: "r"(a), "l"(g), "n"(8));\n}\n'
        'extern "C" __global__ void k(float* o) { o[0] = 1.0f; }\n'
    )
    with pytest.raises(CpuCompileError) as refused:
        CpuModule.build(PRELUDE + source, "forms.cu", {"k": ["float*"]}, cache_dir=cache)
    assert str(refused.value) == (
        "C++ compile failed:\n"
        "forms.cu(3): error: static assertion failed: `cp.async.cg.shared.global`'s cp-size is 16\n"
        "forms.cu(3): note: the comparison reduces to ‘(8 == 16)’"
    )


# --- blocks, registers, setp, mov, selp ----------------------------------------------------------


def setp_kernel(comparison: str, kind: str) -> str:
    """A kernel: o[i] = 1 where setp.CMP.KIND finds a[i] CMP b[i] (p, through selp), 2 where not (q, the
    `p|q` form's negation, guarding a mov)."""
    load = "__uint_as_float(a[i])" if kind.endswith("f32") else "a[i]"
    loadb = load.replace("a[i]", "b[i]")
    cls = "f" if kind.endswith("f32") else "r"
    name = f"setp_{comparison}_{kind.replace('.', '_')}"
    return (
        f'extern "C" __global__ void {name}(const unsigned* a, const unsigned* b, unsigned* o) {{\n'
        "    const int i = threadIdx.x;\n    unsigned r;\n"
        f'    asm("{{\\n .reg .pred p, q;\\n setp.{comparison}.{kind} p|q, %1, %2;\\n selp.b32 %0, 1, 0, p;\\n'
        f' @q mov.b32 %0, 2;\\n }}" : "=r"(r) : "{cls}"({load}), "{cls}"({loadb}));\n'
        "    o[i] = r;\n}\n"
    )


INTS = np.array([0, 1, 2, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 5, 5], np.uint32)
INTS_B = np.array([0, 2, 1, 1, 0x7FFFFFFF, 0x80000000, 5, 0xFFFFFFFB], np.uint32)
FLOATS = f32_bits([0.0, -0.0, 1.0, np.nan, 1.0, -np.inf, 2.0**-140, np.nan])
FLOATS_B = f32_bits([-0.0, 0.0, 2.0, 1.0, np.nan, np.inf, 0.0, np.nan])


def expected_setp(comparison: str, kind: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The PTX ISA's comparisons, independently: signed .s32, unsigned .u32 and .b32, IEEE .f32 (ordered
    ones false at a NaN, u ones true there), .ftz reading a subnormal as zero."""
    if kind.endswith("f32"):
        x, y = a.view(np.float32).astype(np.float64), b.view(np.float32).astype(np.float64)
        if kind == "ftz.f32":
            x = np.where(np.abs(x) < 2.0**-126, 0.0 * np.sign(x), x)
            y = np.where(np.abs(y) < 2.0**-126, 0.0 * np.sign(y), y)
        nan = np.isnan(x) | np.isnan(y)
        with np.errstate(invalid="ignore"):
            ordered = {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}
        if comparison in ordered:
            return ordered[comparison] & ~nan
        if comparison in ("num", "nan"):
            return ~nan if comparison == "num" else nan
        return ordered[comparison[:-1]] | nan
    x, y = (a.astype(np.int64), b.astype(np.int64)) if kind != "s32" else (a.view(np.int32), b.view(np.int32))
    name = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}.get(comparison, comparison)
    return {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[name]


SETP_CASES = [
    ("ne", "b32"),
    ("eq", "b32"),
    ("lt", "u32"),
    ("hs", "u32"),
    ("lt", "s32"),
    ("ge", "s32"),
    ("lt", "f32"),
    ("ne", "f32"),
    ("neu", "f32"),
    ("geu", "f32"),
    ("nan", "f32"),
    ("num", "f32"),
    ("eq", "ftz.f32"),
]


def test_setp_and_selp_in_a_block_compare_as_the_ptx_isa_says(cache):
    """Each comparison on pairs chosen to tell the types apart (signed or not, a NaN, a subnormal under
    .ftz, -0 against +0); p selects 1 or 0, its negation q guards an add of 2."""
    source = "".join(setp_kernel(c, k) for c, k in SETP_CASES)
    module = build(source, {f"setp_{c}_{k.replace('.', '_')}": ["unsigned*"] * 3 for c, k in SETP_CASES}, cache)
    for comparison, kind in SETP_CASES:
        a, b = (FLOATS, FLOATS_B) if kind.endswith("f32") else (INTS, INTS_B)
        out = np.zeros(8, np.uint32)
        module.launch(f"setp_{comparison}_{kind.replace('.', '_')}", (1, 1, 1), (8, 1, 1), 0, [a, b, out])
        truth = expected_setp(comparison, kind, a, b)
        np.testing.assert_array_equal(out, np.where(truth, 1, 2), err_msg=f"setp.{comparison}.{kind}")


SCOPES = r"""
extern "C" __global__ void scopes(const unsigned* x, unsigned* o) {
    const int i = threadIdx.x;
    unsigned r, s;
    asm("{\n"
        "  .reg .b32 t<2>;            // two registers, t0 and t1\n"
        "  .reg .pred %%p;\n"
        "  mov.b32 t0, %2;\n"
        "  {\n"
        "    .reg .b32 t0;              /* shadows the outer t0 in this block only */\n"
        "    mov.b32 t0, 100;\n"
        "    mov.b32 t1, t0;\n"
        "  }\n"
        "  setp.lt.s32 %%p, t0, -1;\n"
        "  @%%p mov.b32 t1, 0x2a;\n"
        "  @!%%p mov.u32 %1, t0;\n"
        "  @%%p mov.u32 %1, 7;\n"
        "  mov.b32 %0, t1;\n"
        "}" : "=r"(r), "=r"(s) : "r"(x[i]));
    o[2 * i] = r;
    o[2 * i + 1] = s;
}
"""


def test_blocks_scope_their_registers_and_guards_choose_the_instructions(cache):
    module = build(SCOPES, {"scopes": ["unsigned*", "unsigned*"]}, cache)
    x = np.array([5, 0xFFFFFFFE, 0xFFFFFFFF, 0x80000000], np.uint32)  # 5, -2, -1, INT_MIN
    out = np.zeros(8, np.uint32)
    module.launch("scopes", (1, 1, 1), (4, 1, 1), 0, [x, out])
    # t1 is 100 (the inner t0), unless x < -1 (signed) sets it to 42; s is x, or 7 where x < -1.
    assert out.reshape(4, 2).tolist() == [[100, 5], [42, 7], [100, 0xFFFFFFFF], [42, 7]]


def test_a_block_with_its_own_registers_runs_the_tensor_core_conversion(cache):
    """What was refused before blocks ran: cvt into a declared register, then mov it out."""
    source = (
        'extern "C" __global__ void k(const float* x, unsigned* o) {\n  unsigned r;\n'
        '  asm("{ .reg .b32 t; cvt.rna.tf32.f32 t, %1; mov.b32 %0, t; }" : "=r"(r) : "f"(x[threadIdx.x]));\n'
        "  o[threadIdx.x] = r;\n}\n"
    )
    module = build(source, {"k": ["float*", "unsigned*"]}, cache)
    x = np.array([1.0 + 2.0**-11, -(1.0 + 2.0**-11), 0.1, np.inf], np.float32)
    out = np.zeros(4, np.uint32)
    module.launch("k", (1, 1, 1), (4, 1, 1), 0, [x, out])
    assert [hex(v) for v in out] == ["0x3f802000", "0xbf802000", "0x3dccc000", "0x7f800000"]


# --- ex2, lg2, rcp -----------------------------------------------------------------------------------

APPROX = "".join(
    f'extern "C" __global__ void {op}{ftz.replace(".", "_")}(const float* x, float* o, int n) {{\n'
    "    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n    float r;\n"
    f'    asm("{op}.approx{ftz}.f32 %0, %1;" : "=f"(r) : "f"(x[i]));\n    o[i] = r;\n}}\n'
    for op in ("ex2", "lg2", "rcp")
    for ftz in ("", ".ftz")
)
SMALLEST_NORMAL = np.float32(2.0**-126)


def ulps_apart(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many representable floats lie between a and b (same-signed finite values)."""
    return np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))


def flushed(x: np.ndarray) -> np.ndarray:
    return np.where(np.abs(x) < SMALLEST_NORMAL, np.copysign(np.float32(0), x), x).astype(np.float32)


@pytest.mark.parametrize("op", ["ex2", "lg2", "rcp"])
def test_approx_instructions_meet_their_bounds_and_ftz_flushes_subnormals(cache, op):
    """Ordinary values within 1 ulp of the exact result (inside the PTX ISA's bounds for each), the special
    values exactly as the ISA lists them, and .ftz: a subnormal operand read as zero of its sign, a
    subnormal result written as one; without .ftz both are kept."""
    module = build(
        APPROX, {f"{o}{f}": ["float*", "float*", "int"] for o in ("ex2", "lg2", "rcp") for f in ("", "_ftz")}, cache
    )
    rng = np.random.default_rng(5)
    ordinary = {
        "ex2": rng.uniform(-126, 127, 2000),
        "lg2": np.exp2(rng.uniform(-126, 127, 2000)),
        "rcp": np.exp2(rng.uniform(-125, 125, 2000)) * rng.choice([-1, 1], 2000),
    }[op].astype(np.float32)
    special = {
        "ex2": [-np.inf, np.inf, 0.0, -0.0, -140.0, 2.0**-140],  # -140: a subnormal result
        "lg2": [0.0, -0.0, -1.0, np.inf, 1.0, 2.0**-140],  # 2^-140: a subnormal operand
        "rcp": [0.0, -0.0, np.inf, -np.inf, 2.0**-140, -(2.0**127)],  # 2^127: a subnormal result
    }[op]
    x = np.concatenate([ordinary, np.array(special, np.float32)])
    exact = {"ex2": np.exp2, "lg2": np.log2, "rcp": lambda v: 1.0 / v}[op]
    for ftz in ("", "_ftz"):
        out = np.zeros_like(x)
        module.launch(f"{op}{ftz}", ((len(x) + 127) // 128, 1, 1), (128, 1, 1), 0, [x, out, len(x)])
        with np.errstate(divide="ignore", invalid="ignore"):
            operand = flushed(x) if ftz else x
            truth = exact(operand.astype(np.float64)).astype(np.float32)
            if ftz:
                truth = flushed(truth)
        n = len(ordinary)
        assert (ulps_apart(out[:n], truth[:n]) <= 1).all(), f"{op}{ftz}"
        # A NaN's bits are each implementation's own (the GPU gives 0x7FFFFFFF): only that it is one counts.
        nan = np.isnan(truth[n:])
        np.testing.assert_array_equal(np.isnan(out[n:]), nan, err_msg=f"{op}{ftz}")
        np.testing.assert_array_equal(f32_bits(out[n:])[~nan], f32_bits(truth[n:])[~nan], err_msg=f"{op}{ftz}")
    # The specials written out, so that a rule shared by the emulation and numpy cannot hide here.
    out = np.zeros_like(x)
    module.launch(f"{op}_ftz", ((len(x) + 127) // 128, 1, 1), (128, 1, 1), 0, [x, out, len(x)])
    tail = out[len(ordinary) :].tolist()
    assert {
        "ex2": [0.0, np.inf, 1.0, 1.0, 0.0, 1.0],
        "lg2": [-np.inf, -np.inf, "nan", np.inf, 0.0, -np.inf],
        "rcp": [np.inf, -np.inf, 0.0, -0.0, np.inf, -0.0],
    }[op] == ["nan" if v != v else v for v in tail]
    assert [bool(np.signbit(np.float32(v))) for v in tail if v == 0.0] == {
        "ex2": [False, False],  # 2^-Inf and 2^-140 flushed: +0
        "lg2": [False],
        "rcp": [False, True, True],  # 1/Inf = +0, 1/-Inf = -0, 1/-2^127 flushed: -0
    }[op]


# --- shfl.sync -------------------------------------------------------------------------------------

SHUFFLES = "".join(
    f'extern "C" __global__ void shfl_{mode}(const float* x, const unsigned* b, const unsigned* c, float* o, '
    "unsigned* in_range) {\n    const int i = threadIdx.x;\n    float r;\n    unsigned ok;\n"
    f'    asm volatile("{{ .reg .pred p; shfl.sync.{mode}.b32 %0|p, %2, %3, %4, 0xffffffff; selp.u32 %1, 1, 0, p; }}"\n'
    '                 : "=f"(r), "=r"(ok) : "f"(x[i]), "r"(b[0]), "r"(c[0]));\n'
    "    o[i] = r;\n    in_range[i] = ok;\n}\n"
    for mode in ("bfly", "up", "down", "idx")
)


def shfl_model(mode: str, b: int, c: int) -> tuple[list[int], list[bool]]:
    """The PTX ISA's pseudocode for shfl.sync, lane by lane: the source lane and whether it was in range."""
    sources, in_range = [], []
    for lane in range(32):
        bval, cval, segmask = b & 31, c & 31, (c >> 8) & 31
        max_lane = (lane & segmask) | (cval & ~segmask)
        min_lane = lane & segmask
        if mode == "up":
            j, ok = lane - bval, lane - bval >= max_lane
        elif mode == "down":
            j, ok = lane + bval, lane + bval <= max_lane
        elif mode == "bfly":
            j, ok = lane ^ bval, (lane ^ bval) <= max_lane
        else:
            j = min_lane | (bval & ~segmask)
            ok = j <= max_lane
        sources.append(j if ok else lane)
        in_range.append(ok)
    return sources, in_range


@pytest.mark.parametrize("mode", ["bfly", "up", "down", "idx"])
def test_shfl_sync_takes_each_lane_from_the_source_the_ptx_isa_names(cache, mode):
    """Whole-warp shuffles with and without a segment (c's bits 12..8) and clamp (bits 4..0), as CUDA's
    width argument sets them and otherwise; p says whether the source was in range."""
    module = build(
        SHUFFLES,
        {
            f"shfl_{m}": ["float*", "unsigned*", "unsigned*", "float*", "unsigned*"]
            for m in ("bfly", "up", "down", "idx")
        },
        cache,
    )
    x = (np.arange(32, dtype=np.float32) + 1) * 1.5
    for b, c in [(1, 0x1F), (5, 0x1F), (3, 0x181F), (2, 0x1800), (9, 0x0007), (0, 0x1F)]:
        out, ok = np.zeros(32, np.float32), np.zeros(32, np.uint32)
        module.launch(
            f"shfl_{mode}", (1, 1, 1), (32, 1, 1), 0, [x, np.array([b], np.uint32), np.array([c], np.uint32), out, ok]
        )
        sources, in_range = shfl_model(mode, b, c)
        np.testing.assert_array_equal(out, x[sources], err_msg=f"b={b} c={c:#x}")
        assert ok.tolist() == [int(v) for v in in_range], f"b={b} c={c:#x}"


DIVERGENT = r"""
extern "C" __global__ void divergent(float* o) {
    float r = threadIdx.x, v = threadIdx.x;
    asm volatile("{ .reg .pred p; setp.ne.u32 p, %2, 0;\n"
                 "  @p shfl.sync.bfly.b32 %0, %1, 1, 0x1f, 0xffffffff; }"
                 : "+f"(r) : "f"(v), "r"((unsigned)threadIdx.x));
    o[threadIdx.x] = r;
}
"""


def test_a_shuffle_that_a_lane_skips_is_found_by_the_runtimes_warp_shuffle(cache):
    """Lane 0's guard is false: it never reaches the shuffle its mask names, which can then never complete,
    as on the GPU (where it hangs or is undefined)."""
    module = build(DIVERGENT, {"divergent": ["float*"]}, cache)
    with pytest.raises(CpuKernelError) as failed:
        module.launch("divergent", (1, 1, 1), (32, 1, 1), 0, [np.zeros(32, np.float32)])
    assert str(failed.value) == (
        "shuffle cannot complete in kernel divergent, block (0,0,0): thread 1 (warp 0, lane 1) calls "
        "shfl.sync.bfly.b32 (forms.cu:4) with mask 0xffffffff naming lane 0, which has exited"
    )
