"""The float64 oracle: attention as its definition, made literal and vectorized.

Score every visible key, subtract the row maximum, exponentiate, normalize, take the weighted
sum of the values. Double precision throughout, so float32 kernels are judged against a
reference whose own error is far below the pass rule. No Python loop runs over rows or heads:
the grouped-query structure becomes one extra axis, and keys are processed in blocks so the
lab-2 timing shape (2048 rows against 4096 keys) never materializes a 2 GiB score tensor.

`xp` is the array module the arithmetic runs in: numpy, or CuPy where the driver checks timed
calls on its own GPU (`labrunner.run.gpu_oracle`), so there is one definition, not two.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from labrunner.truth.contract import GROUP, HEAD_DIM, KV_HEADS, QUERY_HEADS, SCALE

# Rows per block: bounds the float64 score block to rows * 32 heads * keys * 8 bytes.
_ROW_BLOCK = 256


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, prefix: int = 0, xp: ModuleType = np) -> np.ndarray:
    """Causal grouped-query attention in float64.

    q: `[rows][32][64]`; k, v: `[prefix + rows][8][64]`; row i sees keys j <= prefix + i.
    Returns float64 `[rows][32][64]`.
    """
    rows = q.shape[0]
    keys = prefix + rows
    if q.shape[1:] != (QUERY_HEADS, HEAD_DIM):
        raise ValueError(f"q must be [rows][{QUERY_HEADS}][{HEAD_DIM}], got {list(q.shape)}")
    for name, t in (("k", k), ("v", v)):
        if t.shape != (keys, KV_HEADS, HEAD_DIM):
            raise ValueError(f"{name} must be [{keys}][{KV_HEADS}][{HEAD_DIM}], got {list(t.shape)}")

    # [kv][group][rows][dim]: query head h = kv * GROUP + group, so head h reads KV head h // GROUP.
    q64 = q.astype(np.float64).reshape(rows, KV_HEADS, GROUP, HEAD_DIM).transpose(1, 2, 0, 3)
    k64 = k.astype(np.float64).transpose(1, 0, 2)  # [kv][keys][dim]
    v64 = v.astype(np.float64).transpose(1, 0, 2)
    out = xp.empty((KV_HEADS, GROUP, rows, HEAD_DIM))
    for start in range(0, rows, _ROW_BLOCK):
        stop = min(rows, start + _ROW_BLOCK)
        block = stop - start
        visible_keys = prefix + stop  # no row of this block sees past its last row's position
        # A KV head's GROUP query heads and the block's rows are one matrix of GROUP * block rows against
        # that head's keys: one product per KV head, with no copy of K or V broadcast over the group.
        queries = q64[:, :, start:stop, :].reshape(KV_HEADS, GROUP * block, HEAD_DIM)
        scores = xp.matmul(queries, k64[:, :visible_keys, :].transpose(0, 2, 1))
        scores = scores.reshape(KV_HEADS, GROUP, block, visible_keys)
        scores *= SCALE
        positions = prefix + xp.arange(start, stop)
        hidden = xp.arange(visible_keys)[None, :] > positions[:, None]
        xp.copyto(scores, -np.inf, where=hidden)
        scores -= scores.max(axis=-1, keepdims=True)
        weights = xp.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        weighted = xp.matmul(weights.reshape(KV_HEADS, GROUP * block, visible_keys), v64[:, :visible_keys, :])
        out[:, :, start:stop, :] = weighted.reshape(KV_HEADS, GROUP, block, HEAD_DIM)
    result: np.ndarray = out.transpose(2, 0, 1, 3).reshape(rows, QUERY_HEADS, HEAD_DIM)
    return result


def decode_attention(
    q: np.ndarray,
    k_pages: np.ndarray,
    v_pages: np.ndarray,
    block_table: np.ndarray,
    seq_lens: np.ndarray,
    page_tokens: int = 16,
    xp: ModuleType = np,
) -> np.ndarray:
    """Decode through a block table, in float64: each sequence's one new row against its own keys.

    q: `[B][32][64]`; k_pages, v_pages: `[numPages * page_tokens][8][64]` (or `[numPages][page_tokens][8][64]`);
    block_table: `[B][maxPages]` page numbers, unused entries -1; seq_lens: `[B]`, each at least 1.
    Sequence b's key j is row j % page_tokens of page block_table[b][j // page_tokens]. Its new token
    sits at position seq_lens[b] - 1 and sees every key before it and its own: that is `attention`
    for one row at prefix seq_lens[b] - 1, over exactly the rows the table names (the rows of a page
    past the sequence's end, and pages no table names, are never touched: they may hold anything).
    Returns float64 `[B][32][64]`. The table and the lengths are host (numpy) arrays whatever `xp` is.
    """
    k_rows = k_pages.reshape(-1, KV_HEADS, HEAD_DIM)
    v_rows = v_pages.reshape(-1, KV_HEADS, HEAD_DIM)
    out = xp.empty((q.shape[0], QUERY_HEADS, HEAD_DIM))
    for b, length in enumerate(int(n) for n in seq_lens):
        if length < 1:
            raise ValueError(f"sequence {b} has {length} keys; every sequence has at least 1")
        keys = np.arange(length)
        rows = block_table[b, keys // page_tokens].astype(np.int64) * page_tokens + keys % page_tokens
        if (block_table[b, keys // page_tokens] < 0).any():
            raise ValueError(f"sequence {b}: its {length} keys reach a block-table entry of -1")
        rows = xp.asarray(rows)
        out[b] = attention(q[b : b + 1], k_rows[rows], v_rows[rows], prefix=length - 1, xp=xp)[0]
    result: np.ndarray = out
    return result
