"""Derives the golden cases from closed forms, independently of the oracle's code.

Run `python cases/make_golden.py` to rewrite `cases/golden.npz` and `cases/golden_decode.npz`. The case is a chunk of 5 rows
at prefix 3 (8 keys). Every value is exact in float32, and every expected output follows from
arithmetic done here, not from attention code:

* Rows whose query is 0 score 0 against every key, so softmax is uniform and the output is the
  mean of the visible V rows: with v[j, g, d] = (j - 2d + 100g) / 8, row i (position 3 + i)
  averages j = 0 .. 3 + i, giving ((3 + i) / 2 - 2d + 100g) / 8.
* Row 4 (position 7) is planted in query head 0 (4.0 in all 64 dims), and key 6 in KV head 0.
  The other keys of KV head 0 alternate +x, -x over the 64 dims, so they score exactly 0 against
  the planted query, while key 6 scores 64 * 4 * 4 / 8 = 128. So head 0 of row 4 is
  (e^128 v_6 + sum of the other seven v_j) / (e^128 + 7).
* Row 0, head 4 (KV head 1) has query 8.0 in dim 0 and 0 elsewhere, so its score against key j
  is 8 * k[j, 1, 0] / 8 = k[j, 1, 0] exactly (values like -0.25 and 0.625): the output is the
  softmax of those four numbers, written out with math.exp, weighting v. A wrong scale, a wrong
  head mapping or a shifted causal edge changes it.
* Every other head of every row sees query 0, whatever K holds: the uniform mean above.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

ROWS, PREFIX = 5, 3
KEYS = PREFIX + ROWS
HEADS, KV_HEADS, DIM = 32, 8, 64
PLANTED_ROW, PLANTED_KEY = 4, 6
SCORED_ROW, SCORED_HEAD = 0, 4


def v_value(j: int, g: int, d: int) -> float:
    return (j - 2 * d + 100 * g) / 8


def derive() -> dict[str, np.ndarray]:
    q = np.zeros((ROWS, HEADS, DIM), np.float32)
    q[PLANTED_ROW, 0, :] = 4.0
    q[SCORED_ROW, SCORED_HEAD, 0] = 8.0
    signs = np.where(np.arange(DIM) % 2 == 0, 1.0, -1.0)
    k = np.zeros((KEYS, KV_HEADS, DIM), np.float32)
    for j in range(KEYS):
        k[j, 0, :] = signs * (j + 1) / 4  # sums to 0 over the 64 dims: score 0 against the planted query
        k[j, 1:, :] = ((j * 7 + np.arange(1, KV_HEADS)[:, None] * 3 + np.arange(DIM)) % 11 - 5) / 8
    k[PLANTED_KEY, 0, :] = 4.0
    v = np.array([[[v_value(j, g, d) for d in range(DIM)] for g in range(KV_HEADS)] for j in range(KEYS)], np.float32)

    expected = np.empty((ROWS, HEADS, DIM))
    for i in range(ROWS):
        position = PREFIX + i
        for h in range(HEADS):
            g = h // 4
            for d in range(DIM):
                expected[i, h, d] = (position / 2 - 2 * d + 100 * g) / 8
    g = SCORED_HEAD // 4
    scores = [float(k[j, g, 0]) for j in range(PREFIX + SCORED_ROW + 1)]  # 8 * k / 8, exactly
    weights = [math.exp(score) for score in scores]
    for d in range(DIM):
        expected[SCORED_ROW, SCORED_HEAD, d] = sum(w * v_value(j, g, d) for j, w in enumerate(weights)) / sum(weights)
    e128 = math.exp(128)
    for d in range(DIM):
        others = sum(v_value(j, 0, d) for j in range(KEYS) if j != PLANTED_KEY)
        expected[PLANTED_ROW, 0, d] = (e128 * v_value(PLANTED_KEY, 0, d) + others) / (e128 + KEYS - 1)
    return {"q": q, "k": k, "v": v, "prefix": np.array(PREFIX), "expected": expected}


# The decode golden case: three sequences in a paged cache of 6 pages of 16 rows, read through a
# block table with shuffled pages and -1 padding. The rows of a last page past its sequence's end,
# and page 1 (named by no table row), hold NaN: the closed forms below never touch them, and an
# oracle that did would fail the proof.
#
# * Sequence 0 has one key: its probability is exactly 1, so every head's output is V's row of it.
# * Sequence 1 (21 keys, pages 5 then 2) has query 0 in every head: the uniform mean of its V rows,
#   with v = (j - 2d + 100g) / 8 at logical key j: (10 - 2d + 100g) / 8.
# * Sequence 2 (19 keys, pages 0 then 3) has 4.0 in query head 0 and 0 elsewhere; its key 9 carries
#   4.0 in KV head 0 and every other key alternates +x, -x there, scoring exactly 0. Head 0 is
#   (e^128 v_9 + the other eighteen v_j) / (e^128 + 18): V's row of the planted key, to the last
#   bit of a float64. Heads 1 to 31 see query 0: the mean, (9 - 2d + 100g) / 8.
PAGE = 16
PAGES = 6
DECODE_TABLE = [[4, -1, -1], [5, 2, -1], [0, 3, -1]]
DECODE_LENGTHS = [1, 21, 19]
DECODE_PLANTED_SEQUENCE, DECODE_PLANTED_KEY = 2, 9


def derive_decode() -> dict[str, np.ndarray]:
    batch = len(DECODE_LENGTHS)
    q = np.zeros((batch, HEADS, DIM), np.float32)
    q[0] = ((np.arange(HEADS)[:, None] * 5 + np.arange(DIM)) % 7 - 3) / 4  # any finite query: one key is all there is
    q[DECODE_PLANTED_SEQUENCE, 0, :] = 4.0
    signs = np.where(np.arange(DIM) % 2 == 0, 1.0, -1.0)
    k = np.full((PAGES * PAGE, KV_HEADS, DIM), np.nan, np.float32)
    v = np.full((PAGES * PAGE, KV_HEADS, DIM), np.nan, np.float32)
    for b, length in enumerate(DECODE_LENGTHS):
        for j in range(length):
            row = DECODE_TABLE[b][j // PAGE] * PAGE + j % PAGE
            k[row, :, :] = signs * (j + 1) / 4
            v[row] = [[v_value(j, g, d) for d in range(DIM)] for g in range(KV_HEADS)]
    planted_row = DECODE_TABLE[DECODE_PLANTED_SEQUENCE][DECODE_PLANTED_KEY // PAGE] * PAGE + DECODE_PLANTED_KEY % PAGE
    k[planted_row, 0, :] = 4.0

    expected = np.empty((batch, HEADS, DIM))
    for h in range(HEADS):
        g = h // 4
        for d in range(DIM):
            expected[0, h, d] = v_value(0, g, d)
            for b in (1, 2):
                expected[b, h, d] = ((DECODE_LENGTHS[b] - 1) / 2 - 2 * d + 100 * g) / 8
    e128 = math.exp(128)
    length = DECODE_LENGTHS[DECODE_PLANTED_SEQUENCE]
    for d in range(DIM):
        others = sum(v_value(j, 0, d) for j in range(length) if j != DECODE_PLANTED_KEY)
        expected[DECODE_PLANTED_SEQUENCE, 0, d] = ((e128 * v_value(DECODE_PLANTED_KEY, 0, d) + others)
                                                   / (e128 + length - 1))
    return {"q": q, "k": k, "v": v, "block_table": np.array(DECODE_TABLE, np.int32),
            "seq_lens": np.array(DECODE_LENGTHS, np.int32), "expected": expected}


if __name__ == "__main__":
    for name, case in (("golden.npz", derive()), ("golden_decode.npz", derive_decode())):
        target = Path(__file__).with_name(name)
        np.savez(target, **case)
        print(f"wrote {target}")
