"""The attention-v1 contract: the shapes, mapping, scale, causal rule and pass rule every lab shares.

Llama-3.2-1B attention, one layer: 32 query heads, 8 KV heads, head size 64, float32, every
tensor C-contiguous as `[rows][heads][64]`. Query head `h` reads KV head `h // GROUP` by index;
nobody copies K or V. A chunk of rows at positions `prefix .. prefix + rows - 1` sees keys
`j <= prefix + i` (lab 1 is the chunk with prefix 0, so `j <= i`).
"""

from __future__ import annotations

import numpy as np

QUERY_HEADS = 32
KV_HEADS = 8
HEAD_DIM = 64
GROUP = QUERY_HEADS // KV_HEADS
SCALE = 0.125  # 1 / sqrt(64), exact in binary floating point
DTYPE = np.float32

ABS_TOLERANCE = 1e-4
REL_TOLERANCE = 1e-3
PASS_RULE = "|err| > 1e-4 + 1e-3*|ref|"
EXACT_RULE = "this case must reproduce the reference exactly"


def kv_head_of(query_head: int | np.ndarray) -> int | np.ndarray:
    """The KV head that query head `h` reads: grouped-query attention by index."""
    return query_head // GROUP


def visible_mask(rows: int, prefix: int) -> np.ndarray:
    """`[rows][prefix + rows]` booleans: row i sees key j exactly when j <= prefix + i."""
    keys = np.arange(prefix + rows)
    return keys[None, :] <= (prefix + np.arange(rows))[:, None]


def within_tolerance(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """The pass rule, per element: |out - ref| <= 1e-4 + 1e-3*|ref|; NaN or Inf never pass.

    This is the only place the rule is written; every verdict and message goes through it.
    """
    out64 = out.astype(np.float64, copy=False)
    ok: np.ndarray = (np.abs(out64 - ref) <= ABS_TOLERANCE + REL_TOLERANCE * np.abs(ref)) & np.isfinite(out64)
    return ok


def exactly_equal(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """The stricter rule of an exact case: a probability of exactly 1 leaves V's row untouched."""
    equal: np.ndarray = (out.astype(np.float64, copy=False) == ref) & np.isfinite(out)
    return equal
