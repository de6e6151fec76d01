"""Dots on TF32 operands: the error signatures of a tensor-core dot that keeps 10 of a float's 23 mantissa bits.

Triton's `tl.dot` of float32 operands runs at TF32 unless told otherwise: the tensor cores read each
operand with its low 13 mantissa bits dropped (truncated; a `.cu` file's `cvt.rna.tf32.f32` rounds to
nearest instead). The error that leaves is about 1e-3 of each value, in nearly every element: at the
edge of the labs' tolerance, so some elements fail and most do not. Two signatures, each from a
simulation of the mistake computed from the case's inputs:

- a case that must be exact (one key, probability 1: out is V's row bit for bit) gives V's row as the
  dot leaves it, which is computed exactly: truncated to TF32 (plain TF32), rounded to it (cvt.rna),
  or, under `input_precision="tf32x3"`, rounded to TF32 plus the remainder truncated to TF32 (tf32x3
  drops the remainder's last bits: exact for scores, not for a one-key p @ v);
- any other case: a small error everywhere (no element past ten times the tolerance, nearly every
  element off by more than float32's roundings, no one factor) that attention computed on TF32 operands
  explains in good part: the output lies much closer to that simulation than to the exact answer. The simulation
  cannot follow a kernel's tiles and running maxima (they decide how p rounds), so it is compared as a
  whole, not element by element.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from labrunner.truth.cases import Case, Inputs
from labrunner.truth.contract import ABS_TOLERANCE, GROUP, HEAD_DIM, KV_HEADS, QUERY_HEADS, REL_TOLERANCE, SCALE
from labrunner.truth.hints_records import Evidence
from labrunner.truth.paged_cache import PAGE_TOKENS

_TF32_KEPT = np.uint32(0xFFFFE000)  # sign, exponent and the top 10 mantissa bits
_TF32_HALF = np.uint32(0x1000)  # half of the last kept bit: to nearest, ties away from zero

# No element of a TF32 output is off by more than this many times the pass rule's allowance (plain TF32
# flash attention measured 2.85 on an H200, lab 3's loop with TF32 scores up to 9 in float32 simulations);
# a logic mistake is off by far more somewhere, and the simulation below must explain the rest.
MOST_ALLOWANCES = 30.0
# Most elements are off by more than float32's own arithmetic leaves (a few 2^-24 of the value): TF32
# moves each by about 2^-11, but a one-key row comes out exact where only the scores' dot is TF32.
TOUCHED_SHARE = 0.5
FLOAT32_NOISE = 2.0**-19
# The output lies at most this fraction of its error's size (root mean square) from the simulation.
EXPLAINED_RESIDUAL = 0.6


def tf32_truncated(x: np.ndarray) -> np.ndarray:
    """float32 values as a tensor core reads them at TF32: the low 13 mantissa bits dropped."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    truncated: np.ndarray = (bits & _TF32_KEPT).view(np.float32)
    return truncated


def tf32_rounded(x: np.ndarray) -> np.ndarray:
    """`cvt.rna.tf32.f32`: float32 values to the nearest TF32 value, ties away from zero."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded: np.ndarray = ((bits + _TF32_HALF) & _TF32_KEPT).view(np.float32)
    return rounded


def tf32x3_one(v: np.ndarray) -> np.ndarray:
    """1 * v under tf32x3 (Triton's F32DotTC): v rounded to TF32 (big), plus its remainder v - big read as
    TF32 (truncated) in the small products; 1's own remainder is 0. The sum is exact in float32."""
    big = tf32_rounded(v)
    small = np.asarray(v, dtype=np.float32) - big
    whole: np.ndarray = (big + tf32_truncated(small)).astype(np.float32)
    return whole


EXACT_SIGNATURES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tf32": tf32_truncated,
    "tf32-rounded": tf32_rounded,
    "tf32x3": tf32x3_one,
}
# What q is scaled by before the scores' dot, which decides how it rounds: the contract's 1 / 8 (a power of
# two: rounding q / 8 is rounding q), or log2(e) / 8 where a kernel takes its exponentials in base 2 (exp2,
# as Triton's tutorials and FlashAttention's kernels do).
QUERY_SCALES = (SCALE, SCALE * 1.4426950408889634)
OPERAND_ROUNDINGS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tf32": tf32_truncated,
    "tf32-rounded": tf32_rounded,
}


def precision_evidence(evidence: Evidence, case: Case, inputs: Inputs, out: np.ndarray, reference: np.ndarray) -> None:
    """Record in `evidence["precision"]` which TF32 signature a wrong, finite output shows ("" where none does:
    a case too large to compare has no such key, and says nothing either way)."""
    evidence["precision"] = ""
    if not np.isfinite(out).all():
        return
    if case.exact:  # exact to the bit: more than a factor within float32's rounding of 1 can say
        exact = reference.astype(np.float32)
        for name, leaves in EXACT_SIGNATURES.items():
            expected = leaves(exact)
            if (expected != exact).any() and (out == expected).all():
                evidence["precision"] = f"exact-{name}"
                return
        return
    if "factor" in evidence or "row_factors" in evidence:
        return
    error = out.astype(np.float64) - reference
    allowance = ABS_TOLERANCE + REL_TOLERANCE * np.abs(reference)
    if (np.abs(error) > MOST_ALLOWANCES * allowance).any():
        return
    touched = np.abs(error) > FLOAT32_NOISE * np.abs(reference)
    if touched.mean() < TOUCHED_SHARE:
        return
    size = float(np.sqrt(np.mean(error * error)))
    for name, rounding in OPERAND_ROUNDINGS.items():
        for query_scale in QUERY_SCALES:
            for weighted in (True, False):
                simulated = tf32_attention(case, inputs, rounding, query_scale, weighted)
                residual = out.astype(np.float64) - simulated
                if float(np.sqrt(np.mean(residual * residual))) <= EXPLAINED_RESIDUAL * size:
                    evidence["precision"] = name
                    return


def tf32_attention(
    case: Case,
    inputs: Inputs,
    rounding: Callable[[np.ndarray], np.ndarray],
    query_scale: float = SCALE,
    weighted: bool = True,
) -> np.ndarray:
    """The case's attention with its dots on operands passed through `rounding`: q * `query_scale` and K for
    the scores, and where `weighted`, the probabilities exp(s - max) and V for the weighted sum too (whose
    denominator, the sum of the probabilities, is no dot and stays exact). float64 `[rows][32][64]`."""
    q, k, v = (np.asarray(a, dtype=np.float32) for a in (inputs.q, inputs.k, inputs.v))
    table = inputs.block_table
    if table is None:
        keys = np.arange(k.shape[0])
        visible = keys[None, :] <= (case.prefix + np.arange(q.shape[0]))[:, None]
        return _rounded_attention(q, k, v, visible, rounding, query_scale, weighted)
    out = np.empty(q.shape)
    for b, n in enumerate(inputs.lengths):
        j = np.arange(n)
        rows = table[b, j // PAGE_TOKENS].astype(np.int64) * PAGE_TOKENS + j % PAGE_TOKENS
        visible = np.ones((1, n), dtype=bool)
        out[b : b + 1] = _rounded_attention(q[b : b + 1], k[rows], v[rows], visible, rounding, query_scale, weighted)
    return out


def _rounded_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    visible: np.ndarray,
    rounding: Callable[[np.ndarray], np.ndarray],
    query_scale: float,
    weighted: bool,
) -> np.ndarray:
    """Attention of q `[rows][32][64]` over k, v `[keys][8][64]` where `visible` `[rows][keys]` allows, the
    scores' operands rounded (q scaled by `query_scale` before it is), and the weighted sum's where `weighted`.
    Each KV head's four query heads are one matrix of 4 * rows rows (K and V are never copied per query
    head: a 32,768-key sequence would copy half a gigabyte). float64."""
    rows = q.shape[0]
    scaled = rounding(q * np.float32(query_scale)).astype(np.float64) * (SCALE / query_scale)
    qg = scaled.reshape(rows, KV_HEADS, GROUP, HEAD_DIM).transpose(1, 0, 2, 3).reshape(KV_HEADS, rows * GROUP, -1)
    kg = rounding(k).astype(np.float64).transpose(1, 2, 0)  # [8][64][keys]
    vg = (rounding(v) if weighted else v).astype(np.float64).transpose(1, 0, 2)  # [8][keys][64]
    seen = np.repeat(visible, GROUP, axis=0)[None]  # [1][rows * 4][keys], row-major as qg's rows
    scores = np.where(seen, np.matmul(qg, kg), -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    total = weights.sum(axis=-1, keepdims=True)
    p = rounding(weights.astype(np.float32)).astype(np.float64) if weighted else weights
    attended = (np.matmul(p, vg) / total).reshape(KV_HEADS, rows, GROUP, HEAD_DIM)
    out: np.ndarray = attended.transpose(1, 0, 2, 3).reshape(rows, QUERY_HEADS, HEAD_DIM)
    return out
