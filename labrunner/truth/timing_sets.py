"""The input sets of timed calls: a pool of distinct random sets, addressed by a secret key and a number.

Every timed call gets a set of its own (Q, K and V, standard normal float32, the shapes of the
case), so a kernel can keep nothing from one call that helps with the next. Shipping a fresh
32 MB set down the pipe for every call would cost more than timing it, so the sets are made where
they are used: the worker fills its buffers on the GPU from (key, set number), and only the key
crosses the pipe. The driver, which must check a call against the reference of that very set,
makes the same set from the same two numbers.

That works only if both sides produce the same bits, so the generator is defined here twice, in
numpy (the definition) and in CUDA C (its twin, `CUDA_SOURCE`), with nothing that could round
differently between them:

* The bits are Philox4x64-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"), a
  counter-based generator: element i of set n is word i % 4 of the block with counter
  (i // 4 + 1, 0, 0, n) under the 128-bit key. It is numpy's own `np.random.Philox`, so the
  definition is a library call, and any element can be made without the ones before it.
* Bits become a uniform u in (0, 1) exactly (52 bits plus one half), then a normal through the
  inverse of the normal CDF (Wichura's AS241, accurate to about 1e-16), in float64, then rounded
  once to float32. Only +, -, *, /, sqrt and frexp are used, and a logarithm built from them: IEEE
  754 rounds each of those the same everywhere, whereas `log` in libm and in CUDA may differ in
  the last bit. The CUDA twin spells every operation with its round-to-nearest intrinsic so the
  compiler cannot fuse a multiply and an add into one FMA (which rounds once instead of twice),
  and every constant is written in hexadecimal, bit for bit the float64 the numpy side uses.

The distribution is the one the cases use (standard normal float32), so a timed call costs what
any other input of that shape costs. A key is drawn from the operating system's entropy for
every round of timing; the sets of one key are numbered from 0 and no two are the same.
"""

from __future__ import annotations

import numpy as np

from labrunner.truth.contract import HEAD_DIM, KV_HEADS, QUERY_HEADS
from labrunner.truth.paged_cache import PAGE_TOKENS

KEY_BITS = 63  # each of the key's two words: a JSON integer any reader keeps exactly

# Wichura, "Algorithm AS 241: The percentage points of the normal distribution" (1988), PPND16:
# a rational function of r = 0.180625 - q^2 in the centre (|u - 1/2| <= 0.425), and of
# r = sqrt(-log(min(u, 1 - u))) in the tails (below and above r = 5). Lowest degree first.
_CENTRE = 0.425
_CENTRE_R = 0.180625
_A = (
    3.3871328727963666080e0,
    1.3314166789178437745e2,
    1.9715909503065514427e3,
    1.3731693765509461125e4,
    4.5921953931549871457e4,
    6.7265770927008700853e4,
    3.3430575583588128105e4,
    2.5090809287301226727e3,
)
_B = (
    1.0,
    4.2313330701600911252e1,
    6.8718700749205790830e2,
    5.3941960214247511077e3,
    2.1213794301586595867e4,
    3.9307895800092710610e4,
    2.8729085735721942674e4,
    5.2264952788528545610e3,
)
_C = (
    1.42343711074968357734e0,
    4.63033784615654529590e0,
    5.76949722146069140550e0,
    3.64784832476320460504e0,
    1.27045825245236838258e0,
    2.41780725177450611770e-1,
    2.27238449892691845833e-2,
    7.74545014278341407640e-4,
)
_D = (
    1.0,
    2.05319162663775882187e0,
    1.67638483018380384940e0,
    6.89767334985100004550e-1,
    1.48103976427480074590e-1,
    1.51986665636164571966e-2,
    5.47593808499534494600e-4,
    1.05075007164441684324e-9,
)
_E = (
    6.65790464350110377720e0,
    5.46378491116411436990e0,
    1.78482653991729133580e0,
    2.96560571828504891230e-1,
    2.65321895265761230930e-2,
    1.24266094738807843860e-3,
    2.71155556874348757815e-5,
    2.01033439929228813265e-7,
)
_F = (
    1.0,
    5.99832206555887937690e-1,
    1.36929880922735805310e-1,
    1.48753612908506148525e-2,
    7.86869131145613259100e-4,
    1.84631831751005468180e-5,
    1.42151175831644588870e-7,
    2.04426310338993978564e-15,
)
_SPLIT = 1.6
_FAR = 5.0

# log(x) = e*ln2 + 2*atanh(s), s = f / (2 + f), f = m - 1, m in [sqrt(1/2), sqrt(2)): |s| < 0.172,
# so the series 2s(1 + s^2/3 + s^4/5 + ...) is exact to float64 by its 13th term.
_LN2 = 0.6931471805599453
_SQRT_HALF = 0.7071067811865476
_ATANH = tuple(1.0 / (2 * k + 1) for k in range(13))


def set_shapes(rows: int, prefix: int, pages: int | None = None) -> dict[str, tuple[int, int, int]]:
    """The tensors of one set, in the order the generator fills them. `pages`: a decode batch's K and V
    are that many pages of 16 key rows (`paged_cache`), not the prefix and the chunk's keys."""
    keys = prefix + rows if pages is None else pages * PAGE_TOKENS
    return {"q": (rows, QUERY_HEADS, HEAD_DIM), "k": (keys, KV_HEADS, HEAD_DIM), "v": (keys, KV_HEADS, HEAD_DIM)}


def make_set(
    key: tuple[int, int], number: int, rows: int, prefix: int, pages: int | None = None
) -> dict[str, np.ndarray]:
    """Set `number` of the pool under `key`, in numpy: what the CUDA twin writes, bit for bit."""
    shapes = set_shapes(rows, prefix, pages)
    counts = [int(np.prod(s)) for s in shapes.values()]
    values = normals(raw_bits(key, number, 0, sum(counts)))
    ends = np.cumsum(counts)
    return {
        name: values[end - count : end].reshape(shape)
        for (name, shape), count, end in zip(shapes.items(), counts, ends)
    }


def raw_bits(key: tuple[int, int], number: int, start: int, count: int) -> np.ndarray:
    """Elements start .. start + count - 1 of set `number`: 64 random bits each (Philox4x64-10)."""
    check_key(key)
    block, skip = divmod(start, 4)
    # numpy's Philox adds one to its counter before each block, so block b runs on counter b + 1.
    generator = np.random.Philox(key=list(key), counter=(number << 192) + block)
    return generator.random_raw(skip + count)[skip:]


def check_key(key: tuple[int, int]) -> None:
    if len(key) != 2 or not all(isinstance(word, int) and 0 <= word < 1 << KEY_BITS for word in key):
        raise ValueError(f"a timing-set key is two integers in [0, 2^{KEY_BITS}), got {key!r}")


def normals(bits: np.ndarray) -> np.ndarray:
    """64 random bits each -> standard normal float32, by the inverse CDF (no sampling loop)."""
    u = ((bits >> np.uint64(12)).astype(np.float64) + 0.5) * 2.0**-52  # exact: 53 significant bits
    q = u - 0.5
    out = np.empty_like(u)
    centre = np.abs(q) <= _CENTRE
    qc = q[centre]
    r = _CENTRE_R - qc * qc
    out[centre] = qc * _horner(_A, r) / _horner(_B, r)
    qt, ut = q[~centre], u[~centre]
    r = np.sqrt(-_log(np.where(qt < 0, ut, 1.0 - ut)))
    near = r <= _FAR
    tail = np.empty_like(r)
    rn = r[near] - _SPLIT
    tail[near] = _horner(_C, rn) / _horner(_D, rn)
    rf = r[~near] - _FAR
    tail[~near] = _horner(_E, rf) / _horner(_F, rf)
    out[~centre] = np.where(qt < 0, -tail, tail)
    return out.astype(np.float32)


def _horner(coefficients: tuple[float, ...], x: np.ndarray) -> np.ndarray:
    value = np.full_like(x, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        value = value * x + c
    return value


def _log(x: np.ndarray) -> np.ndarray:
    """Natural log of positive finite x from exactly rounded operations only (see the module doc)."""
    m, e = np.frexp(x)
    low = m < _SQRT_HALF
    m = np.where(low, m * 2.0, m)
    e = np.where(low, e - 1, e).astype(np.float64)
    f = m - 1.0
    s = f / (f + 2.0)
    z = s * s
    log: np.ndarray = e * _LN2 + (s + s) * _horner(_ATANH, z)
    return log


def _hex_list(values: tuple[float, ...]) -> str:
    return ", ".join(float(v).hex() for v in values)


# The twin. Without __CUDA_ARCH__ it is plain C++ (compiled with -ffp-contract=off), which is how
# the CPU tests hold it to the numpy definition; with it, every double operation is an intrinsic.
CUDA_SOURCE = r"""
#ifdef __CUDA_ARCH__
#define ADD(a, b) __dadd_rn((a), (b))
#define SUB(a, b) __dadd_rn((a), -(b))
#define MUL(a, b) __dmul_rn((a), (b))
#define DIV(a, b) __ddiv_rn((a), (b))
#define SQRT(a) __dsqrt_rn(a)
#define TO_FLOAT(a) __double2float_rn(a)
#define MULHI(a, b) __umul64hi((a), (b))
#define DEVICE __device__
#else
#include <cmath>
#define ADD(a, b) ((a) + (b))
#define SUB(a, b) ((a) - (b))
#define MUL(a, b) ((a) * (b))
#define DIV(a, b) ((a) / (b))
#define SQRT(a) std::sqrt(a)
#define TO_FLOAT(a) ((float)(a))
#define MULHI(a, b) ((unsigned long long)(((unsigned __int128)(a) * (b)) >> 64))
#define DEVICE static
#endif
typedef unsigned long long u64;

DEVICE const double A[8] = {%(A)s};
DEVICE const double B[8] = {%(B)s};
DEVICE const double C[8] = {%(C)s};
DEVICE const double D[8] = {%(D)s};
DEVICE const double E[8] = {%(E)s};
DEVICE const double F[8] = {%(F)s};
DEVICE const double ATANH[13] = {%(ATANH)s};

DEVICE double horner(const double* c, int n, double x) {
    double value = c[n - 1];
    for (int i = n - 2; i >= 0; --i) value = ADD(MUL(value, x), c[i]);
    return value;
}

DEVICE double exact_log(double x) {
    int e;
    double m = frexp(x, &e);
    if (m < %(SQRT_HALF)s) { m = MUL(m, 2.0); e -= 1; }
    const double f = SUB(m, 1.0);
    const double s = DIV(f, ADD(f, 2.0));
    const double z = MUL(s, s);
    return ADD(MUL((double)e, %(LN2)s), MUL(ADD(s, s), horner(ATANH, 13, z)));
}

DEVICE float normal(u64 bits) {
    const double u = MUL(ADD((double)(bits >> 12), 0.5), %(ULP)s);
    const double q = SUB(u, 0.5);
    if (fabs(q) <= %(CENTRE)s) {
        const double r = SUB(%(CENTRE_R)s, MUL(q, q));
        return TO_FLOAT(DIV(MUL(q, horner(A, 8, r)), horner(B, 8, r)));
    }
    double r = SQRT(-exact_log(q < 0 ? u : SUB(1.0, u)));
    double value;
    if (r <= %(FAR)s) {
        r = SUB(r, %(SPLIT)s);
        value = DIV(horner(C, 8, r), horner(D, 8, r));
    } else {
        r = SUB(r, %(FAR)s);
        value = DIV(horner(E, 8, r), horner(F, 8, r));
    }
    return TO_FLOAT(q < 0 ? -value : value);
}

// Philox4x64-10 on counter (c0, 0, 0, c3), as Random123 and numpy define it.
DEVICE void philox(u64 c0, u64 c3, u64 k0, u64 k1, u64* out) {
    u64 v0 = c0, v1 = 0, v2 = 0, v3 = c3;
    for (int round = 0; round < 10; ++round) {
        if (round > 0) { k0 += 0x9E3779B97F4A7C15ULL; k1 += 0xBB67AE8584CAA73BULL; }
        const u64 hi0 = MULHI(0xD2E7470EE14C6C93ULL, v0), lo0 = 0xD2E7470EE14C6C93ULL * v0;
        const u64 hi1 = MULHI(0xCA5A826395121157ULL, v2), lo1 = 0xCA5A826395121157ULL * v2;
        v0 = hi1 ^ v1 ^ k0;
        v1 = lo1;
        v2 = hi0 ^ v3 ^ k1;
        v3 = lo0;
    }
    out[0] = v0; out[1] = v1; out[2] = v2; out[3] = v3;
}

// One thread per Philox block: elements 4*block .. 4*block + 3 of the set, Q's then K's then V's
// (each tensor's length is a multiple of 4, so a block never straddles two).
DEVICE void fill_block(u64 block, float* q, float* k, float* v, u64 q_count, u64 kv_count,
                       u64 key0, u64 key1, u64 number) {
    u64 bits[4];
    philox(block + 1, number, key0, key1, bits);
    u64 at = 4 * block;
    float* target = q;
    if (at >= q_count + kv_count) { target = v; at -= q_count + kv_count; }
    else if (at >= q_count) { target = k; at -= q_count; }
    for (int w = 0; w < 4; ++w) target[at + w] = normal(bits[w]);
}

#ifdef __CUDA_ARCH__
extern "C" __global__ void attnlab_timing_set(float* q, float* k, float* v, u64 q_count, u64 kv_count,
                                              u64 key0, u64 key1, u64 number) {
    const u64 blocks = (q_count + 2 * kv_count) / 4;
    for (u64 b = (u64)blockIdx.x * blockDim.x + threadIdx.x; b < blocks; b += (u64)gridDim.x * blockDim.x)
        fill_block(b, q, k, v, q_count, kv_count, key0, key1, number);
}
#else
extern "C" void attnlab_timing_set(float* q, float* k, float* v, u64 q_count, u64 kv_count,
                                   u64 key0, u64 key1, u64 number) {
    for (u64 b = 0; b < (q_count + 2 * kv_count) / 4; ++b)
        fill_block(b, q, k, v, q_count, kv_count, key0, key1, number);
}
#endif
""" % {
    "A": _hex_list(_A),
    "B": _hex_list(_B),
    "C": _hex_list(_C),
    "D": _hex_list(_D),
    "E": _hex_list(_E),
    "F": _hex_list(_F),
    "ATANH": _hex_list(_ATANH),
    "SQRT_HALF": _SQRT_HALF.hex(),
    "LN2": _LN2.hex(),
    "ULP": (2.0**-52).hex(),
    "CENTRE": _CENTRE.hex(),
    "CENTRE_R": _CENTRE_R.hex(),
    "FAR": _FAR.hex(),
    "SPLIT": _SPLIT.hex(),
}
CUDA_KERNEL = "attnlab_timing_set"
