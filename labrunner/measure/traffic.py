"""The lesson's HBM traffic model: the bytes each way of computing attention must move through HBM.

Naive attention (three kernels, lab 1) reads Q, K and V once, writes the score matrix and reads it
back for the softmax, writes the probabilities and reads them back for the weighted sum, and
writes the output. FlashAttention (lab 2) reads Q, K and V once and writes the output once: the
score matrix lives on chip, tile by tile, and never reaches HBM.

The lesson counts one head with Q, K and V the same size. The attention-v1 contract has 32 query
heads sharing 8 KV heads (grouped-query attention), so K and V are a quarter of Q's size, and the
score matrix has one copy per query head. GQA therefore shrinks only the K and V terms: the
naive figure is still dominated by the 32 score matrices, and the flash figure drops from
4 * rows * 32 * 64 elements (the lesson's 4 N d, per head) to 2 * rows * 32 * 64 + 2 * keys * 8 * 64,
provided a kernel reads each KV head from HBM once for its whole group of 4 query heads. One that
serves each query head separately asks for K and V four times; whether HBM sees that depends on
L2, which is what the measured DRAM bytes beside this model show.

A chunk of `rows` queries against `keys` keys (lab 2: rows = C, keys = P + C) generalises the
lesson's square case (rows = keys = N). MB here is 10^6 bytes, as in the lesson.
"""

from __future__ import annotations

from labrunner.records.traffic import Traffic, TrafficShape


def traffic(shape: TrafficShape) -> Traffic:
    """The lesson's `bytes_moved`, for any number of query and KV heads and a chunk against longer keys."""
    b = shape.dtype_bytes
    q = shape.rows * shape.query_heads * shape.d_head * b
    kv = 2 * shape.keys * shape.kv_heads * shape.d_head * b
    out = shape.rows * shape.query_heads * shape.d_head * b
    matrix = shape.query_heads * shape.rows * shape.keys * b
    # naive: the scores written and read back, the probabilities written and read back
    naive = q + kv + 2 * matrix + 2 * matrix + out
    flash = q + kv + out
    return Traffic(shape, q, kv, out, matrix, naive, flash)


def lesson_line(seq_len: int, t: Traffic) -> str:
    """One row of the lesson's table, in the lesson's own format."""
    return (
        f"N={seq_len:>6}: naive={t.naive_bytes / 1e6:8.2f} MB  flash={t.flash_bytes / 1e6:6.2f} MB  "
        f"naive/flash={t.ratio:5.1f}x"
    )


def default_kv_heads(query_heads: int) -> int:
    """The contract's grouping, one KV head per 4 query heads, and at least one (the lesson's single head)."""
    return max(1, query_heads // 4)


def check_heads(query_heads: int, kv_heads: int) -> str | None:
    """Why a head count cannot be modelled, or None: every KV head serves the same number of query heads."""
    if kv_heads > query_heads or query_heads % kv_heads:
        return (
            f"--kv-heads {kv_heads} must divide --heads {query_heads} "
            "(each KV head serves the same number of query heads)"
        )
    return None
