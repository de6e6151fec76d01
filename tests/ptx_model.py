"""The PTX ISA's rules for the probe kernels in `cpu_kernels/ptx.cu`: what each probe must answer.

The CPU backend runs a kernel's inline PTX (cvt.rna.tf32.f32, cvt.rn.f16x2.f32, the m16n8k8 tf32 and
m16n8k16 f16 mma.sync, cp.async and its groups) by emulating it. To check that emulation, every
expected value here is worked out independently from the PTX ISA: the fragment layouts, the tf32
operand truncation, round-to-nearest-away for tf32 and to-nearest-even for f16, the zero-fill and
group rules of cp.async, and the exact messages for a warp that cannot run an mma together. Nothing
is read back from the backend.

Each `check_` function takes anything launched like a `CpuModule` (numpy arrays in, written back
after) and asserts its probe's exact answers; `PROBES` lists them all. They live in a module of their
own because three tests use them in different ways (tests/test_cpu_ptx.py): the backend must pass
every one, a wrong rule planted into the runtime must fail at least one, and the GPU agreement test
runs the cp.async ones on real hardware.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from labrunner.run.cpu.module import CpuKernelError, CpuModule

PROBES_SOURCE = Path(__file__).resolve().parent / "cpu_kernels" / "ptx.cu"
PRELUDE = '#include <attnlab/prelude.cuh>\n#line 1 "ptx.cu"\n'
ENTRY_POINTS = {
    "mma_raw": ["float*", "float*", "float*", "float*", "int"],
    "mma_3xtf32": ["float*"] * 3,
    "cvt_each": ["float*", "unsigned*", "int"],
    "mma_half_warp": ["float*"],
    "mma_two_sites": ["float*"],
    "mma_against_barrier": ["float*"],
    "mma_f16_raw": ["unsigned*", "unsigned*", "float*", "float*", "int"],
    "mma_3xf16": ["float*"] * 3,
    "cvt_f16x2_each": ["unsigned*", "unsigned*", "unsigned*", "int"],
    "mma_f16_against_tf32": ["float*"],
    "mma_shapes_on_one_line": ["float*"],
    "cp_async_copies": ["float*", "float*"],
    "cp_async_sizes": ["unsigned char*", "unsigned char*"],
    "cp_async_groups": ["float*", "float*"],
    "cp_async_threads": ["float*", "float*", "int"],
    "cp_async_fault": ["float*", "float*", "int"],
    "cp_async_source_late": ["float*", "float*"],
}
MMA = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
MMA16 = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
SHARED_POISON = 0x7FF00BAD  # what unwritten shared memory holds on the CPU backend


def line_of(needle: str) -> int:
    return next(i + 1 for i, line in enumerate(PROBES_SOURCE.read_text().splitlines()) if needle in line)


MMA_LINE = line_of('asm volatile("mma')  # the helper with D in place
MMA_CD_LINE = line_of("asm __volatile__(")  # the helper with C and D apart
MMA16_LINE = line_of(f'asm volatile("{MMA16} {{')  # the f16 helper with D in place
ONE_LINE = line_of("MMA_F16_OR_TF32(d, a, b);")  # both instructions from one macro call
CP16_LINE = line_of('"r"(valid ? 16 : 0)')  # the cp_async16 helper's cp.async
CP4_LINE = line_of('"r"(valid ? 4 : 0)')  # the cp_async4 helper's
CG, CA = "cp.async.cg.shared.global", "cp.async.ca.shared.global"


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
        d = d + a[:, k : k + 1] * b[k : k + 1, :]
    return d


# --- what each probe must answer ----------------------------------------------------------------


def check_mma_tile(module: CpuModule) -> None:
    """Random tiles through both mma statements (D in place, C apart), under every kind of schedule:
    every element equals the reference, and the operands' dropped bits matter (rounding them
    instead would change D)."""
    for separate in (0, 1):
        for schedule in (0, 1, 7):
            rng = np.random.default_rng(16 + separate + 10 * schedule)
            a = rng.standard_normal((16, 8)).astype(np.float32)
            b = rng.standard_normal((8, 8)).astype(np.float32)
            c = rng.standard_normal((16, 8)).astype(np.float32)
            d = np.zeros((16, 8), np.float32)
            module.launch("mma_raw", (1, 1, 1), (32, 1, 1), 0, [a, b, c, d, separate], reverse_threads=schedule)
            np.testing.assert_array_equal(d, mma_reference(a, b, c))
            rounded = [((bits(x) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32) for x in (a, b)]
            assert not np.array_equal(d, mma_reference(*rounded, c))


def check_3xtf32(module: CpuModule) -> None:
    """big = tf32(x), small = tf32(x - big); small*big + big*small + big*big is within the error bound
    of an 8-term float32 dot product (8 units of 2^-24 times |A|@|B|); one tf32 product is not."""
    for seed in range(5):
        rng = np.random.default_rng(seed)
        a = rng.standard_normal((16, 8)).astype(np.float32)
        b = rng.standard_normal((8, 8)).astype(np.float32)
        d = np.zeros((16, 8), np.float32)
        module.launch("mma_3xtf32", (1, 1, 1), (32, 1, 1), 0, [a, b, d])
        exact = a.astype(np.float64) @ b.astype(np.float64)
        bound = 8 * 2.0**-24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
        assert (np.abs(d - exact) <= bound).all()
        one_product = as_tf32_operand(a).astype(np.float64) @ as_tf32_operand(b)
        assert not (np.abs(one_product - exact) <= bound).all()


def check_poison_through_mma(module: CpuModule) -> None:
    """A NaN operand is used whole (the GPU gives some NaN), so the shim's poison reaches D unchanged
    and the driver can still name a race behind an mma."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    c = np.zeros((16, 8), np.float32)
    a.view(np.uint32)[11, 5] = SHARED_POISON
    d = np.zeros((16, 8), np.float32)
    module.launch("mma_raw", (1, 1, 1), (32, 1, 1), 0, [a, b, c, d, 0])
    assert (d.view(np.uint32)[11] == SHARED_POISON).all()
    assert np.isfinite(np.delete(d, 11, axis=0)).all()


def launch_failure(module: CpuModule, kernel: str, threads: int = 32, args: list | None = None) -> str:
    try:
        module.launch(kernel, (1, 1, 1), (threads, 1, 1), 0, args or [np.zeros(threads, np.float32)])
    except CpuKernelError as failure:
        return str(failure)
    return "no error"


def check_half_warp(module: CpuModule) -> None:
    assert launch_failure(module, "mma_half_warp") == (
        f"shuffle cannot complete in kernel mma_half_warp, block (0,0,0): thread 0 (warp 0, lane 0) waits at {MMA} "
        f"(ptx.cu:{MMA_LINE}) with mask 0xffffffff, but lane 16 (thread 16) has exited"
    )


def check_two_sites(module: CpuModule) -> None:
    assert launch_failure(module, "mma_two_sites") == (
        f"mma divergence in kernel mma_two_sites, block (0,0,0): lane 0 (thread 0) runs {MMA} (ptx.cu:{MMA_LINE}) "
        f"while lane 16 (thread 16) runs {MMA} (ptx.cu:{MMA_CD_LINE}); all 32 lanes of a warp must run the same "
        "mma.sync together"
    )


def check_against_barrier(module: CpuModule) -> None:
    assert launch_failure(module, "mma_against_barrier") == (
        f"barrier divergence in kernel mma_against_barrier, block (0,0,0): thread 16 waits at __syncthreads "
        f"(ptx.cu:{line_of('__syncthreads();')}) while thread 0 waits at {MMA} (ptx.cu:{MMA_LINE})"
    )


def check_partial_warp(module: CpuModule) -> None:
    args = [np.zeros(n, np.float32) for n in (128, 64, 128, 128)] + [0]
    assert launch_failure(module, "mma_raw", 48, args) == (
        f"{MMA} needs a whole warp in kernel mma_raw, block (0,0,0): thread 32 (ptx.cu:{MMA_LINE}) is in warp 1, "
        "which has only 16 lanes (the block has 48 threads; make it a multiple of 32)"
    )


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
    (0x7F800000, 0x7F800000, "+Inf stays +Inf"),
    (0xFF800000, 0xFF800000, "-Inf stays -Inf"),
    (0x7FC00000, 0x7FC00000, "a NaN stays that NaN"),
    (0x7FFFFFFF, 0x7FFFFFFF, "the GPU's own NaN: the bias would carry into the sign bit and make -0"),
    (0x7F800001, 0x7F800001, "a NaN whose payload is all in the dropped bits stays a NaN, never Inf"),
    (SHARED_POISON, SHARED_POISON, "the shim's poison keeps its payload"),
    (0x00001000, 0x00002000, "the subnormal tie: away from zero"),
    (0x00000FFF, 0x00000000, "under the smallest tf32 subnormal's half: zero"),
    (0x80000000, 0x80000000, "-0 stays -0"),
]


def check_cvt_cases(module: CpuModule) -> None:
    x = np.array([case[0] for case in CVT_CASES], np.uint32)
    out = np.zeros(len(x), np.uint32)
    module.launch("cvt_each", (1, 1, 1), (64, 1, 1), 0, [x.view(np.float32), out, len(x)])
    got = {why: hex(g) for (_, _, why), g in zip(CVT_CASES, out)}
    assert got == {why: hex(want) for _, want, why in CVT_CASES}


def check_cvt_random(module: CpuModule) -> None:
    """Worked out in float64 arithmetic, not with the bit trick: the nearest multiple of the value's
    tf32 step (2^(exponent - 10)), halves rounded away from zero."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(4096) * np.exp2(rng.integers(-60, 60, 4096))).astype(np.float32)
    x[:64] = (np.round(x[:64].astype(np.float64) * 1024) + 0.5) / 1024  # ties for those in [1, 2)
    magnitude = np.abs(x.astype(np.float64))
    step = np.exp2(np.floor(np.log2(magnitude)) - 10)
    expected = (np.sign(x) * np.floor(magnitude / step + 0.5) * step).astype(np.float32)
    out = np.zeros(len(x), np.uint32)
    module.launch("cvt_each", (32, 1, 1), (128, 1, 1), 0, [x, out, len(x)])
    np.testing.assert_array_equal(out, bits(expected))


# --- f16: cvt.rn.f16x2.f32 and mma.m16n8k16 --------------------------------------------------------


def half_bits(x: np.ndarray) -> np.ndarray:
    """Each element's IEEE half pattern, as uint32 (numpy's float32 -> float16 rounds to nearest, ties to even,
    and gives +-Inf past the range, which is the rule being checked, not a mishap to warn of)."""
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float32).astype(np.float16).view(np.uint16).astype(np.uint32)


def f16_words(h: np.ndarray) -> np.ndarray:
    """Halves [m][2j], [m][2j+1] packed as the PTX ISA packs .f16x2: the lower index in the lower 16 bits."""
    u = np.ascontiguousarray(h, np.float16).view(np.uint16).astype(np.uint32)
    return np.ascontiguousarray(u[:, 0::2] | (u[:, 1::2] << np.uint32(16)))


def mma_f16_reference(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = A*B + C from halves: each half widens to float32 exactly and each product of two halves is
    exact in float32; the sums are float32 additions, C first, then k = 0..15."""
    a, b = a.astype(np.float32), b.astype(np.float32)
    d = c.astype(np.float32).copy()
    for k in range(16):
        d = d + a[:, k : k + 1] * b[k : k + 1, :]
    return d


def random_halves(rng, shape) -> np.ndarray:
    """Random halves with the unusual ones planted: subnormals, the largest half, -0."""
    h = rng.standard_normal(shape).astype(np.float16)
    h.flat[[1, 7, 30, 50]] = np.array([2.0**-24, -1023 * 2.0**-24, 65504.0, -0.0], np.float16)
    h.flat[70] = np.float16(3 * 2.0**-20)  # a subnormal with more than one bit
    return h


def launch_mma_f16(
    module: CpuModule, a: np.ndarray, b: np.ndarray, c: np.ndarray, separate: int, schedule: int = 0
) -> np.ndarray:
    d = np.zeros((16, 8), np.float32)
    module.launch(
        "mma_f16_raw",
        (1, 1, 1),
        (32, 1, 1),
        0,
        [f16_words(a), f16_words(b.T), c, d, separate],
        reverse_threads=schedule,
    )
    return d


def check_mma_f16_tile(module: CpuModule) -> None:
    """Random f16 tiles (subnormal, largest and -0 operands among them) through both statements (D in
    place, C apart) under every kind of schedule: every element equals the reference."""
    for separate in (0, 1):
        for schedule in (0, 1, 7):
            rng = np.random.default_rng(160 + separate + 10 * schedule)
            a, b = random_halves(rng, (16, 16)), random_halves(rng, (16, 8))
            c = rng.standard_normal((16, 8)).astype(np.float32)
            np.testing.assert_array_equal(
                launch_mma_f16(module, a, b, c, separate, schedule), mma_f16_reference(a, b, c)
            )


def split_3xf16(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """big = x with its low 13 mantissa bits cleared, as a half (exact); small = x - big, rounded to a half."""
    big = (bits(x) & np.uint32(0xFFFFE000)).view(np.float32)
    return big.astype(np.float16), (x - big).astype(np.float16)


# 3xFP16 on operands of normal range (|x| in [0.5, 16)): dropping small*small and rounding each small
# part to a half leave at most 2^-19 of |a||b| per term (2^-20 + 2^-21 + 2^-21, a subnormal small part
# at most 2^-25 more), and the 48 float32 additions of the three products at most 48 * 2^-24 of
# |A|@|B|: under 2^-17 * |A|@|B| in all.
BOUND_3XF16 = 2.0**-17


def normal_range(rng, shape) -> np.ndarray:
    return (rng.choice([-1.0, 1.0], shape) * np.exp2(rng.uniform(-1, 4, shape))).astype(np.float32)


def check_3xf16(module: CpuModule) -> None:
    """small*big + big*small + big*big, each an mma on the split halves, equals the reference bit for bit
    and is within BOUND_3XF16 of the exact product; one f16 product is not (it is off by about 2^-12 of
    |A|@|B|)."""
    for seed in range(5):
        rng = np.random.default_rng(seed)
        a, b = normal_range(rng, (16, 16)), normal_range(rng, (16, 8))
        d = np.zeros((16, 8), np.float32)
        module.launch("mma_3xf16", (1, 1, 1), (32, 1, 1), 0, [a, b, d])
        (a_big, a_small), (b_big, b_small) = split_3xf16(a), split_3xf16(b)
        expected = mma_f16_reference(a_small, b_big, np.zeros((16, 8), np.float32))
        expected = mma_f16_reference(a_big, b_big, mma_f16_reference(a_big, b_small, expected))
        np.testing.assert_array_equal(d, expected)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        bound = BOUND_3XF16 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
        assert (np.abs(d - exact) <= bound).all()
        one_product = a.astype(np.float16).astype(np.float64) @ b.astype(np.float16).astype(np.float64)
        assert not (np.abs(one_product - exact) <= bound).all()


def check_poison_through_f16_mma(module: CpuModule) -> None:
    """A poisoned word read as two halves (0x7FF0, a NaN, above 0x0BAD) turns its row of D into the
    poison bit for bit, and so does a poisoned float through cvt.rn.f16x2.f32 in the 3xFP16 kernel:
    the driver can still name the race."""
    rng = np.random.default_rng(4)
    a, b = random_halves(rng, (16, 16)), random_halves(rng, (16, 8))
    words = f16_words(a)
    words[11, 2] = SHARED_POISON  # A[11][4] = 0x0BAD, A[11][5] = 0x7FF0
    d = np.zeros((16, 8), np.float32)
    module.launch("mma_f16_raw", (1, 1, 1), (32, 1, 1), 0, [words, f16_words(b.T), np.zeros((16, 8), np.float32), d, 0])
    assert [hex(v) for v in d.view(np.uint32)[11]] == [hex(SHARED_POISON)] * 8
    assert np.isfinite(np.delete(d, 11, axis=0)).all()
    a32, b32 = normal_range(rng, (16, 16)), normal_range(rng, (16, 8))
    a32.view(np.uint32)[5, 9] = SHARED_POISON
    module.launch("mma_3xf16", (1, 1, 1), (32, 1, 1), 0, [a32, b32, d])
    assert [hex(v) for v in d.view(np.uint32)[5]] == [hex(SHARED_POISON)] * 8
    assert np.isfinite(np.delete(d, 5, axis=0)).all()


def check_f16_against_tf32(module: CpuModule) -> None:
    assert launch_failure(module, "mma_f16_against_tf32") == (
        f"mma divergence in kernel mma_f16_against_tf32, block (0,0,0): lane 0 (thread 0) runs {MMA16} "
        f"(ptx.cu:{MMA16_LINE}) while lane 16 (thread 16) runs {MMA} (ptx.cu:{MMA_LINE}); all 32 lanes of a warp "
        "must run the same mma.sync together"
    )


def check_shapes_on_one_line(module: CpuModule) -> None:
    """Same file, same line: the instruction alone tells the two apart."""
    assert launch_failure(module, "mma_shapes_on_one_line") == (
        f"mma divergence in kernel mma_shapes_on_one_line, block (0,0,0): lane 0 (thread 0) runs {MMA16} "
        f"(ptx.cu:{ONE_LINE}) while lane 16 (thread 16) runs {MMA} (ptx.cu:{ONE_LINE}); all 32 lanes of a warp "
        "must run the same mma.sync together"
    )


def check_f16_partial_warp(module: CpuModule) -> None:
    args = [np.zeros(n, np.uint32) for n in (256, 128)] + [np.zeros(256, np.float32)] * 2 + [0]
    assert launch_failure(module, "mma_f16_raw", 48, args) == (
        f"{MMA16} needs a whole warp in kernel mma_f16_raw, block (0,0,0): thread 32 (ptx.cu:{MMA16_LINE}) is in "
        "warp 1, which has only 16 lanes (the block has 48 threads; make it a multiple of 32)"
    )


CVT16_CASES = [
    # (input bits, expected half bits, why)
    (0x3F800000, 0x3C00, "1.0"),
    (0x3F801000, 0x3C00, "1 + 2^-11, a tie: to the even 1.0 (away from zero would give 0x3C01)"),
    (0x3F803000, 0x3C02, "1 + 3 * 2^-11, a tie between odd 0x3C01 and even 0x3C02: up"),
    (0xBF801000, 0xBC00, "-(1 + 2^-11), a tie: to the even -1.0"),
    (0xBF803000, 0xBC02, "-(1 + 3 * 2^-11), a tie: to the even, more negative"),
    (0x3F800FFF, 0x3C00, "just below the tie: down"),
    (0x3F801001, 0x3C01, "just above the tie: up"),
    (0x3FFFF000, 0x4000, "the last mantissa step rounds up into the exponent: 2.0"),
    (0x3DCCCCCD, 0x2E66, "0.1f: the dropped bits 0x0CCD are under half"),
    (0x477FE000, 0x7BFF, "65504, the largest half"),
    (0x477FEFFF, 0x7BFF, "just under 65520, the tie above 65504: stays finite"),
    (0x477FF000, 0x7C00, "65520, the tie between 65504 (odd) and 2^16 (even, past the range): Inf"),
    (0xC77FF000, 0xFC00, "-65520: -Inf"),
    (0x47800000, 0x7C00, "2^16: Inf"),
    (0x7F7FFFFF, 0x7C00, "FLT_MAX: Inf (no .satfinite)"),
    (0x7F800000, 0x7C00, "+Inf"),
    (0xFF800000, 0xFC00, "-Inf"),
    (0x38800000, 0x0400, "2^-14, the smallest normal half"),
    (0x387FC000, 0x03FF, "1023 * 2^-24, the largest subnormal half"),
    (0x387FE000, 0x0400, "2^-14 - 2^-25, a tie between 0x03FF (odd) and 0x0400: up into the normals"),
    (0x33800000, 0x0001, "2^-24, the smallest subnormal half"),
    (0x33000000, 0x0000, "2^-25, a tie between 0 (even) and 2^-24: zero"),
    (0x33000001, 0x0001, "just above 2^-25: up to 2^-24"),
    (0xB3000000, 0x8000, "-2^-25: -0"),
    (0x33C00000, 0x0002, "3 * 2^-25, a tie between 1 and 2 units of 2^-24: the even 2"),
    (0x34200000, 0x0002, "5 * 2^-25, a tie between 2 and 3 units: the even 2"),
    (0x34300000, 0x0003, "5.5 * 2^-25: nearest is 3 units"),
    (0x0DA24260, 0x0000, "1e-30: zero"),
    (0x00000001, 0x0000, "the smallest float subnormal: zero"),
    (0x80000001, 0x8000, "the smallest negative float subnormal: -0"),
    (0x00000000, 0x0000, "+0"),
    (0x80000000, 0x8000, "-0 stays -0"),
    (0x7FC00000, 0x7FC0, "a NaN stays a NaN: its top 16 bits (the GPU gives 0x7FFF)"),
    (0xFFC00000, 0xFFC0, "a negative NaN keeps its sign"),
    (0x7FFFFFFF, 0x7FFF, "the GPU's own float NaN gives the canonical half NaN"),
    (0x7F800001, 0x7F80, "a NaN whose payload is all in the dropped bits stays a NaN, never Inf"),
    (SHARED_POISON, 0x7FF0, "the shim's poison gives its top half, which the f16 mma widens back to the poison"),
]


def check_cvt_f16_cases(module: CpuModule) -> None:
    """Each case in the upper half (as a) and, reversed, in the lower half (as b)."""
    x = np.array([case[0] for case in CVT16_CASES], np.uint32)
    out = np.zeros(len(x), np.uint32)
    module.launch("cvt_f16x2_each", (1, 1, 1), (64, 1, 1), 0, [x, x[::-1].copy(), out, len(x)])
    upper = {why: hex(v >> 16) for (_, _, why), v in zip(CVT16_CASES, out)}
    lower = {why: hex(v & 0xFFFF) for (_, _, why), v in zip(CVT16_CASES, out[::-1])}
    expected = {why: hex(want) for _, want, why in CVT16_CASES}
    assert (upper, lower) == (expected, expected)


def check_cvt_f16_random(module: CpuModule) -> None:
    """Checked against numpy's float32 -> float16 conversion (round to nearest, ties to even, Inf past
    the range, subnormals kept), over the half's whole range and past it both ways, ties planted."""
    rng = np.random.default_rng(6)
    x = (rng.standard_normal(8192) * np.exp2(rng.integers(-30, 20, 8192))).astype(np.float32)
    x[:64] = (np.round(x[:64].astype(np.float64) * 1024) + 0.5) / 1024  # ties for those in [1, 2)
    x[64:128] = (rng.integers(0, 1024, 64) + 0.5) * 2.0**-24  # subnormal ties
    x[128:192] = -x[64:128]
    permuted = rng.permutation(len(x))
    lo = x[permuted]
    out = np.zeros(len(x), np.uint32)
    module.launch("cvt_f16x2_each", (64, 1, 1), (128, 1, 1), 0, [bits(x), bits(lo), out, len(x)])
    np.testing.assert_array_equal(out, (half_bits(x) << np.uint32(16)) | half_bits(lo))


# --- cp.async -------------------------------------------------------------------------------------
# Each check runs on the CPU backend and, in the agreement test, on the GPU: what the PTX ISA defines
# (bytes landed after a wait, zero-fill) is asserted on both; what it leaves undefined (a read before the
# wait, or without the issuer's wait and a barrier; copies pending at exit) only on the CPU backend,
# where the emulation makes it the shared poison, bit for bit, so that the bug is named as a race.


def on_cpu(module) -> bool:
    return isinstance(module, CpuModule)


def aligned(values: np.ndarray) -> np.ndarray:
    """A copy of values at a 64-byte aligned address (cp.async's source must be aligned to cp-size)."""
    values = np.ascontiguousarray(values)
    buffer = np.zeros(values.nbytes + 64, np.uint8)
    start = -buffer.ctypes.data % 64
    out = buffer[start : start + values.nbytes].view(values.dtype).reshape(values.shape)
    out[...] = values
    return out


def poison_words(x: np.ndarray) -> list[str]:
    """The distinct words of x, as hex: [hex(SHARED_POISON)] when every one is the poison."""
    return sorted({hex(v) for v in np.ascontiguousarray(x).view(np.uint32).ravel()})


def check_cp_async_copies(module) -> None:
    """16-byte (.cg) copies into a static array and into the dynamic shared memory and 4-byte (.ca)
    copies into a second static array land after commit + wait_group 0, under every schedule; read
    before the wait, every destination still holds the poison."""
    for schedule in (0, 1, 7):
        src = aligned(np.random.default_rng(30 + schedule).standard_normal(288).astype(np.float32))
        out = np.zeros(576, np.float32)
        module.launch("cp_async_copies", (1, 1, 1), (32, 1, 1), 512, [src, out], reverse_threads=schedule)
        t = np.arange(32)[:, None]
        expected = np.concatenate([src[4 * t + np.arange(4)], src[128 + t], src[160 + 4 * t + np.arange(4)]], axis=1)
        np.testing.assert_array_equal(out[288:].reshape(32, 9), expected)
        if on_cpu(module):
            assert poison_words(out[:288]) == [hex(SHARED_POISON)]


def sizes_expected(src: np.ndarray) -> np.ndarray:
    """What cp_async_sizes leaves in each thread's 16-byte slot (0xEE where no copy writes): src-size
    bytes from the source, zeros for the rest of cp-size."""
    out = np.full((32, 16), 0xEE, np.uint8)
    for t in range(17):
        out[t] = np.concatenate([src[t, :t], np.zeros(16 - t, np.uint8)])  # src-size t of 16
    out[17] = 0  # the helper with valid = false: src-size 0
    out[18, :8] = np.concatenate([src[18, :5], np.zeros(3, np.uint8)])  # an 8-byte copy, src-size 5 (literal)
    out[19, :4] = np.concatenate([src[19, :3], np.zeros(1, np.uint8)])  # a 4-byte copy, src-size 3 ("n")
    out[20] = src[20]  # no src-size: all 16 bytes
    out[21, 8:] = src[21, :8]  # 8 bytes through a 64-bit ("l") destination
    for t in range(22, 32):
        out[t, 4 * (t % 4) : 4 * (t % 4) + 4] = src[t, :4] if t & 1 else 0
    return out


def check_cp_async_sizes(module) -> None:
    """Zero-fill: src-size 0 to 16 of a 16-byte copy, partial 8- and 4-byte copies, the helper's
    valid = false, src-size left out; one wait_all with no commit before it lands them all."""
    src = aligned(np.random.default_rng(31).integers(1, 0xEE, (32, 16)).astype(np.uint8))  # no 0, no 0xEE
    out = np.zeros((32, 16), np.uint8)
    module.launch("cp_async_sizes", (1, 1, 1), (32, 1, 1), 0, [src, out])
    np.testing.assert_array_equal(out, sizes_expected(src))


def check_cp_async_groups(module) -> None:
    """wait_group 1 completes the older of two committed groups and leaves exactly the newest pending;
    wait_group 0 completes it; neither completes the open group, which wait_all does."""
    src = aligned(np.random.default_rng(32).standard_normal(384).astype(np.float32))
    out = np.zeros(32 * 36, np.float32)
    module.launch("cp_async_groups", (1, 1, 1), (32, 1, 1), 0, [src, out])
    reads = out.reshape(32, 3, 3, 4)  # [thread][read][stage][4 floats]
    stages = src.reshape(3, 32, 4).transpose(1, 0, 2)  # [thread][stage][4 floats]
    landed = [(0,), (0, 1), (0, 1, 2)]  # the stages each read must see landed
    for r in range(3):
        for k in range(3):
            if k in landed[r]:
                np.testing.assert_array_equal(reads[:, r, k], stages[:, k])
            elif on_cpu(module):
                assert poison_words(reads[:, r, k]) == [hex(SHARED_POISON)], (r, k)


def check_cp_async_threads(module) -> None:
    """Another thread sees the bytes after the issuer's wait and a barrier; without the issuer's wait
    before the barrier, or when the issuer exits without waiting, it reads the poison."""
    src = aligned(np.random.default_rng(33).standard_normal(128).astype(np.float32))
    for schedule in (0, 1, 7):
        for mode in (0, 1, 2) if on_cpu(module) else (0,):
            out = np.zeros(128, np.float32)
            module.launch("cp_async_threads", (1, 1, 1), (64, 1, 1), 0, [src, out, mode], reverse_threads=schedule)
            if mode == 0:
                np.testing.assert_array_equal(out, src)
            else:
                assert poison_words(out) == [hex(SHARED_POISON)], (mode, schedule)


def check_cp_async_source_late(module: CpuModule) -> None:
    """The source is read when the copy lands (at its wait), not when it is issued."""
    g, out = aligned(np.array([1.0], np.float32)), np.zeros(1, np.float32)
    module.launch("cp_async_source_late", (1, 1, 1), (1, 1, 1), 0, [g, out])
    assert (g[0], out[0]) == (2.0, 2.0)


def fault(module: CpuModule, mode: int, g: np.ndarray) -> str:
    try:
        module.launch("cp_async_fault", (1, 1, 1), (1, 1, 1), 64, [g, np.zeros(2, np.float32), mode])
    except CpuKernelError as failure:
        return str(failure)
    return "no error"


def check_cp_async_faults(module: CpuModule) -> None:
    """Each mistake the GPU would fault on, or leave undefined, is a loud error naming the line."""
    g = aligned(np.zeros(8, np.float32))
    where = "in kernel cp_async_fault, block (0,0,0), thread 0"
    aligned_note = "its cp-size (cp.async needs both addresses aligned to cp-size)"
    outside = "to an address outside shared memory " + where
    zero_line, size_line = line_of('"r"(0u)'), line_of('"r"(17)')
    expected = {
        0: f"misaligned {CG} {where} (ptx.cu:{CP16_LINE}): the destination, shared address 0x00040004, is 4 bytes "
        f"past a multiple of 16, {aligned_note}",
        1: f"{CG} {outside} (ptx.cu:{CP16_LINE}): the 16 bytes at shared address 0x00040040 run past the end of "
        "the block's 64 bytes of dynamic shared memory",
        2: f"{CA} {outside} (ptx.cu:{zero_line}): 0x00000000 is no shared address (take one from "
        "__cvta_generic_to_shared)",
        3: f"__cvta_generic_to_shared of a pointer outside shared memory {where} (ptx.cu:"
        f"{line_of('(float)__cvta_generic_to_shared(g)')}): {hex(g.ctypes.data)} is in no __shared__ array "
        "declared in a function, nor in the block's 64 bytes of dynamic shared memory",
        4: f"{CG} {where} (ptx.cu:{size_line}): src-size 17 is not in 0 to 16, its cp-size (undefined on the GPU)",
        5: f"misaligned {CG} {where} (ptx.cu:{CP16_LINE}): the source, global address {hex(g.ctypes.data + 4)}, is "
        f"4 bytes past a multiple of 16, {aligned_note}",
        6: f"{CA} from shared memory {where} (ptx.cu:{CP4_LINE}): the source is shared address 0x00040010; "
        "cp.async copies from global memory",
        7: f"too many cp.async copies in flight {where} (ptx.cu:{CP4_LINE}): the block has 1048576 copies that no "
        "cp.async.wait_group or cp.async.wait_all has completed; wait for them",
    }
    assert {mode: fault(module, mode, g) for mode in expected} == expected


CP_ASYNC_PROBES = [check_cp_async_copies, check_cp_async_sizes, check_cp_async_groups, check_cp_async_threads]

PROBES = [
    check_mma_tile,
    check_3xtf32,
    check_poison_through_mma,
    check_half_warp,
    check_two_sites,
    check_against_barrier,
    check_partial_warp,
    check_cvt_cases,
    check_cvt_random,
    check_mma_f16_tile,
    check_3xf16,
    check_poison_through_f16_mma,
    check_f16_against_tf32,
    check_shapes_on_one_line,
    check_f16_partial_warp,
    check_cvt_f16_cases,
    check_cvt_f16_random,
    *CP_ASYNC_PROBES,
    check_cp_async_source_late,
    check_cp_async_faults,
]
