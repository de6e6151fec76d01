"""Derives the golden case from closed forms, independently of the oracle's code.

Run `python cases/make_golden.py` to rewrite `cases/golden.npz`. The case is a chunk of 5 rows
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


if __name__ == "__main__":
    target = Path(__file__).with_name("golden.npz")
    np.savez(target, **derive())
    print(f"wrote {target}")
