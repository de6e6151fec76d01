"""The causal edge one key late behind a zero-filled load: each row's extra key is the next real key or a
zero key, depending on where the kernel's tiles end.

A tiled kernel loads K and V with the keys past its range masked and filled with zeros (Triton's
`tl.load(..., mask=n < end, other=0.0)`, a `.cu` tile padded with 0.0f). With the causal test one key
late (`n <= prefixLen + i + 1`), a row whose next key lies inside the loaded range counts that key,
while a row whose next key lies past it (the last row of a program's rows, the chunk's last row)
counts a zero key: score 0, value 0, weight exp(0 - max) in the denominator and nothing in the sum.
And where a tile ends exactly at the row's last key, nothing extra is loaded and the row is right. No
one variant of the whole output reproduces that (`causal-plus-one` has the real key everywhere), so
each row is compared with the three.
"""

from __future__ import annotations

import numpy as np

from labrunner.truth.cases import Case, Inputs
from labrunner.truth.contract import GROUP, QUERY_HEADS, within_tolerance
from labrunner.truth.hints_prefill import head_scores, head_values, variant_attention
from labrunner.truth.hints_records import Evidence


def zero_key_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, prefix: int) -> np.ndarray:
    """Attention where each row i sees its keys j <= prefix + i and one more key that scores 0 and
    carries a zero value. float64 `[rows][32][64]`."""
    rows, keys = q.shape[0], k.shape[0]
    heads = np.arange(QUERY_HEADS) // GROUP
    scores = head_scores(q, k, heads).copy()  # [32][rows][keys]
    scores[:, np.arange(keys)[None, :] > (prefix + np.arange(rows))[:, None]] = -np.inf
    top = np.maximum(scores.max(axis=-1, keepdims=True), 0.0)  # the zero key's score takes part in the max
    weights = np.exp(scores - top)
    total = weights.sum(axis=-1) + np.exp(-top[..., 0])
    vh = head_values(v, heads)  # [32][keys][64]
    attended: np.ndarray = (np.matmul(weights, vh) / total[..., None]).transpose(1, 0, 2)
    return attended


def zero_key_evidence(evidence: Evidence, case: Case, inputs: Inputs, out: np.ndarray, reference: np.ndarray) -> None:
    """`causal-zero-key` in `matches` where every row of the output is the right row, the row with the
    next key counted, or the row with a zero key counted, and some wrong row is one of the latter two."""
    late = variant_attention(inputs.q, inputs.k, inputs.v, case.prefix, shift=1)
    zero = zero_key_attention(inputs.q, inputs.k, inputs.v, case.prefix)
    right, next_key, zero_key = (_rows_within(out, ref) for ref in (reference, late, zero))
    if (right | next_key | zero_key).all() and ((next_key | zero_key) & ~right).any():
        evidence["matches"].append("causal-zero-key")


def _rows_within(out: np.ndarray, variant: np.ndarray) -> np.ndarray:
    """Per row: every head and column within the pass rule of the variant's."""
    return np.asarray(within_tolerance(out, variant).all(axis=(1, 2)))
