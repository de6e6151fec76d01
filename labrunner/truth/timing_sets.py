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

* The bits are Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"), a
  counter-based generator: element i of set n is word i % 4 of the block with counter
  (i // 4 as two 32-bit words, n as two 32-bit words) under the 64-bit key, so any element can be
  made without the ones before it. The tests hold it to Random123's known answers.
* A word becomes a uniform u in (0, 1) exactly (its top 23 bits plus one half, times 2^-23), then
  a normal through the inverse of the normal CDF (Wichura's AS241 PPND7, accurate to about 1e-7,
  float32's own precision), in float32. Only +, -, *, /, sqrt and frexp are used, and a logarithm
  built from them: IEEE 754 rounds each of those the same everywhere, whereas `log` in libm and in
  CUDA may differ in the last bit. The CUDA twin spells every operation with its round-to-nearest
  intrinsic so the compiler cannot fuse a multiply and an add into one FMA (which rounds once
  instead of twice), and every constant is written in hexadecimal, bit for bit the float32 the
  numpy side uses.

Why 32-bit words and float32: the GPU fills a set before every timed call, and lab 3's timing set
is 4.3 GB. With Philox4x64 (64-bit multiplies, which a GPU builds from 32-bit ones) and a float64
inverse CDF, a fill was compute-bound at about 12 ms, twice a round, beside the starter's 10.5 ms;
in 32 bits it is a few milliseconds. The values are standard normal float32 either way.

The distribution is the one the cases use (standard normal float32), so a timed call costs what
any other input of that shape costs. A key is drawn from the operating system's entropy for
every round of timing; the sets of one key are numbered from 0 and no two are the same.
"""

from __future__ import annotations

import numpy as np

from labrunner.truth.contract import HEAD_DIM, KV_HEADS, QUERY_HEADS
from labrunner.truth.paged_cache import PAGE_TOKENS

KEY_BITS = 32  # each of the key's two words: Philox4x32's key is two 32-bit words

# Philox4x32-10's multipliers and key increments (Random123's PHILOX_M4x32_* and PHILOX_W32_*)
_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_ROUNDS = 10
_WORD = np.uint64(0xFFFFFFFF)

# Wichura, "Algorithm AS 241: The percentage points of the normal distribution" (1988), PPND7:
# a rational function of r = 0.180625 - q^2 in the centre (|u - 1/2| <= 0.425), and of
# r = sqrt(-log(min(u, 1 - u))) - 1.6 in the tails. The smallest u here is 2^-24, where r is 4.08,
# so PPND7's far tail (r > 5) is never reached and is left out. Lowest degree first.
_F32 = np.float32
_CENTRE = _F32(0.425)
_CENTRE_R = _F32(0.180625)
_A = tuple(map(_F32, (3.3871327179e0, 5.0434271938e1, 1.5929113202e2, 5.9109374720e1)))
_B = tuple(map(_F32, (1.0, 1.7895169469e1, 7.8757757664e1, 6.7187563600e1)))
_C = tuple(map(_F32, (1.4234372777e0, 2.7568153900e0, 1.3067284816e0, 1.7023821103e-1)))
_D = tuple(map(_F32, (1.0, 7.3700164250e-1, 1.2021132975e-1)))
_SPLIT = _F32(1.6)
_HALF = _F32(0.5)
_ONE = _F32(1.0)
_TWO = _F32(2.0)
_ULP = _F32(2.0**-23)

# log(x) = e*ln2 + 2*atanh(s), s = f / (2 + f), f = m - 1, m in [sqrt(1/2), sqrt(2)): |s| < 0.172,
# so the series 2s(1 + s^2/3 + s^4/5 + ...) is exact to float32 by its 6th term (s^12/11 < 3e-9).
_LN2 = _F32(0.6931471805599453)
_SQRT_HALF = _F32(0.7071067811865476)
_ATANH = tuple(_F32(1.0 / (2 * k + 1)) for k in range(6))


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
    """Elements start .. start + count - 1 of set `number`: 32 random bits each (Philox4x32-10), as uint32."""
    check_key(key)
    first, skip = divmod(start, 4)
    block = np.arange(first, first + -(-(skip + count) // 4), dtype=np.uint64)
    words = philox4x32(block & _WORD, block >> np.uint64(32), number & 0xFFFFFFFF, number >> 32, key)
    return np.stack(words, axis=1).ravel()[skip : skip + count].astype(np.uint32)


def philox4x32(
    c0: np.ndarray | int, c1: np.ndarray | int, c2: np.ndarray | int, c3: np.ndarray | int, key: tuple[int, int]
) -> tuple[np.ndarray, ...]:
    """Philox4x32-10 of the counter words (arrays or integers below 2^32) under the key, as Random123
    defines it: four uint64 arrays, each word below 2^32."""
    v = [np.asarray(c, dtype=np.uint64) for c in (c0, c1, c2, c3)]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    m0, m1 = np.uint64(_M0), np.uint64(_M1)
    for round_ in range(_ROUNDS):
        if round_:
            k0, k1 = (k0 + np.uint64(_W0)) & _WORD, (k1 + np.uint64(_W1)) & _WORD
        p0, p1 = m0 * v[0], m1 * v[2]  # 32 x 32 bits: exact in 64
        v = [(p1 >> np.uint64(32)) ^ v[1] ^ k0, p1 & _WORD, (p0 >> np.uint64(32)) ^ v[3] ^ k1, p0 & _WORD]
    return tuple(v)


def check_key(key: tuple[int, int]) -> None:
    if len(key) != 2 or not all(isinstance(word, int) and 0 <= word < 1 << KEY_BITS for word in key):
        raise ValueError(f"a timing-set key is two integers in [0, 2^{KEY_BITS}), got {key!r}")


def normals(bits: np.ndarray) -> np.ndarray:
    """32 random bits each -> standard normal float32, by the inverse CDF (no sampling loop), in float32."""
    u = ((bits >> np.uint32(9)).astype(np.float32) + _HALF) * _ULP  # exact: 24 significant bits
    q = u - _HALF
    out = np.empty_like(u)
    centre = np.abs(q) <= _CENTRE
    qc = q[centre]
    r = _CENTRE_R - qc * qc
    out[centre] = (qc * _horner(_A, r)) / _horner(_B, r)
    qt, ut = q[~centre], u[~centre]
    r = np.sqrt(-_log(np.where(qt < 0, ut, _ONE - ut))) - _SPLIT
    tail = _horner(_C, r) / _horner(_D, r)
    out[~centre] = np.where(qt < 0, -tail, tail)
    return out


def _horner(coefficients: tuple[np.float32, ...], x: np.ndarray) -> np.ndarray:
    value = np.full_like(x, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        value = value * x + c
    return value


def _log(x: np.ndarray) -> np.ndarray:
    """Natural log of positive finite float32 x from exactly rounded float32 operations only (see the module doc)."""
    m, e = np.frexp(x)
    low = m < _SQRT_HALF
    m = np.where(low, m * _TWO, m)
    e = np.where(low, e - 1, e).astype(np.float32)  # |e| <= 25: exact
    f = m - _ONE
    s = f / (f + _TWO)
    z = s * s
    log: np.ndarray = e * _LN2 + (s + s) * _horner(_ATANH, z)
    return log


def _hex_list(values: tuple[np.float32, ...]) -> str:
    return ", ".join(_hex(v) for v in values)


def _hex(value: np.float32) -> str:
    """A float32 as a C hexadecimal float literal, bit for bit."""
    return float(value).hex() + "f"


# The twin. Without __CUDA_ARCH__ it is plain C++ (compiled with -ffp-contract=off), which is how
# the CPU tests hold it to the numpy definition; with it, every float operation is an intrinsic.
CUDA_SOURCE = rf"""
#ifdef __CUDA_ARCH__
#define ADD(a, b) __fadd_rn((a), (b))
#define SUB(a, b) __fsub_rn((a), (b))
#define MUL(a, b) __fmul_rn((a), (b))
#define DIV(a, b) __fdiv_rn((a), (b))
#define SQRT(a) __fsqrt_rn(a)
#define MULHI(a, b) __umulhi((a), (b))
#define DEVICE __device__
#else
#include <cmath>
#define ADD(a, b) ((a) + (b))
#define SUB(a, b) ((a) - (b))
#define MUL(a, b) ((a) * (b))
#define DIV(a, b) ((a) / (b))
#define SQRT(a) std::sqrt(a)
#define MULHI(a, b) ((u32)(((u64)(a) * (b)) >> 32))
#define DEVICE static
#endif
typedef unsigned long long u64;
typedef unsigned int u32;

DEVICE const float A[4] = {{{_hex_list(_A)}}};
DEVICE const float B[4] = {{{_hex_list(_B)}}};
DEVICE const float C[4] = {{{_hex_list(_C)}}};
DEVICE const float D[3] = {{{_hex_list(_D)}}};
DEVICE const float ATANH[6] = {{{_hex_list(_ATANH)}}};

DEVICE float horner(const float* c, int n, float x) {{
    float value = c[n - 1];
    for (int i = n - 2; i >= 0; --i) value = ADD(MUL(value, x), c[i]);
    return value;
}}

DEVICE float exact_log(float x) {{
    int e;
    float m = frexpf(x, &e);
    if (m < {_hex(_SQRT_HALF)}) {{ m = MUL(m, 2.0f); e -= 1; }}
    const float f = SUB(m, 1.0f);
    const float s = DIV(f, ADD(f, 2.0f));
    const float z = MUL(s, s);
    return ADD(MUL((float)e, {_hex(_LN2)}), MUL(ADD(s, s), horner(ATANH, 6, z)));
}}

DEVICE float normal(u32 bits) {{
    const float u = MUL(ADD((float)(bits >> 9), 0.5f), {_hex(_ULP)});
    const float q = SUB(u, 0.5f);
    if (fabsf(q) <= {_hex(_CENTRE)}) {{
        const float r = SUB({_hex(_CENTRE_R)}, MUL(q, q));
        return DIV(MUL(q, horner(A, 4, r)), horner(B, 4, r));
    }}
    const float r = SUB(SQRT(-exact_log(q < 0 ? u : SUB(1.0f, u))), {_hex(_SPLIT)});
    const float value = DIV(horner(C, 4, r), horner(D, 3, r));
    return q < 0 ? -value : value;
}}

// Philox4x32-10 on counter (c0, c1, c2, c3), as Random123 defines it.
DEVICE void philox(u32 c0, u32 c1, u32 c2, u32 c3, u32 k0, u32 k1, u32* out) {{
    u32 v0 = c0, v1 = c1, v2 = c2, v3 = c3;
    for (int round = 0; round < 10; ++round) {{
        if (round > 0) {{ k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }}
        const u32 hi0 = MULHI(0xD2511F53u, v0), lo0 = 0xD2511F53u * v0;
        const u32 hi1 = MULHI(0xCD9E8D57u, v2), lo1 = 0xCD9E8D57u * v2;
        v0 = hi1 ^ v1 ^ k0;
        v1 = lo1;
        v2 = hi0 ^ v3 ^ k1;
        v3 = lo0;
    }}
    out[0] = v0; out[1] = v1; out[2] = v2; out[3] = v3;
}}

// One thread per Philox block: elements 4*block .. 4*block + 3 of the set, Q's then K's then V's
// (each tensor's length is a multiple of 4, so a block never straddles two).
DEVICE void fill_block(u64 block, float* q, float* k, float* v, u64 q_count, u64 kv_count,
                       u64 key0, u64 key1, u64 number) {{
    u32 bits[4];
    philox((u32)block, (u32)(block >> 32), (u32)number, (u32)(number >> 32), (u32)key0, (u32)key1, bits);
    u64 at = 4 * block;
    float* target = q;
    if (at >= q_count + kv_count) {{ target = v; at -= q_count + kv_count; }}
    else if (at >= q_count) {{ target = k; at -= q_count; }}
    float values[4];
    for (int w = 0; w < 4; ++w) values[w] = normal(bits[w]);
    for (int w = 0; w < 4; ++w) target[at + w] = values[w];
}}

#ifdef __CUDA_ARCH__
extern "C" __global__ void attnlab_timing_set(float* q, float* k, float* v, u64 q_count, u64 kv_count,
                                              u64 key0, u64 key1, u64 number) {{
    const u64 blocks = (q_count + 2 * kv_count) / 4;
    for (u64 b = (u64)blockIdx.x * blockDim.x + threadIdx.x; b < blocks; b += (u64)gridDim.x * blockDim.x)
        fill_block(b, q, k, v, q_count, kv_count, key0, key1, number);
}}
#else
extern "C" void attnlab_timing_set(float* q, float* k, float* v, u64 q_count, u64 kv_count,
                                   u64 key0, u64 key1, u64 number) {{
    for (u64 b = 0; b < (q_count + 2 * kv_count) / 4; ++b)
        fill_block(b, q, k, v, q_count, kv_count, key0, key1, number);
}}
#endif
"""
CUDA_KERNEL = "attnlab_timing_set"
