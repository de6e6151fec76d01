"""The prefill variants the hints compare a wrong output with: attention with one known mistake made.

Each variant is the oracle with one thing changed (the scale, the causal edge, the KV head, a
rescale of the online softmax left out), in float64; an output that one of them reproduces within
the pass rule is that mistake's evidence (`truth/hints.py` turns it into words).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from labrunner.truth.cases import Case, Inputs
from labrunner.truth.contract import GROUP, KV_HEADS, QUERY_HEADS, SCALE, within_tolerance
from labrunner.truth.hints_records import AttentionChange, Evidence

# Score elements (rows * keys) above which the variant oracles are not recomputed.
EVIDENCE_LIMIT = 40_000
RESCALE_TILES = (1, 16, 32, 64, 128)


def prefill_evidence(evidence: Evidence, case: Case, inputs: Inputs, out: np.ndarray) -> None:
    """Which prefill variants reproduce a wrong output (`matches`), and which KV head each wrong query
    head's output is attention over where another one explains it (`kv_heads_read`)."""
    evidence["compared"] = True
    q, k, v = inputs.q, inputs.k, inputs.v
    variants = {
        "scale-missing": AttentionChange(scale=1.0),
        "scale-doubled": AttentionChange(scale=2 * SCALE),
        "scale-twice": AttentionChange(scale=SCALE * SCALE),
        "causal-plus-one": AttentionChange(shift=1),
        "causal-minus-one": AttentionChange(shift=-1),
        # no causal mask at all: every row sees every key
        "causal-none": AttentionChange(shift=case.keys),
    }
    if case.prefix:
        variants["prefix-ignored"] = AttentionChange(shift=-case.prefix)
    for name, change in variants.items():
        if explains(out, variant_attention(q, k, v, case.prefix, **change)):
            evidence["matches"].append(name)
    # The online softmax with one rescale left out, at the tile sizes kernels use (1: a key at a time):
    # the first that reproduces the output says which tile and which of the two was left out.
    for tile in RESCALE_TILES:
        for rescaled, left_out in (("acc", "l"), ("l", "acc")):
            if explains(out, online_without_rescale(q, k, v, case.prefix, tile, rescaled)):
                evidence["matches"].append("rescale-missing")
                evidence["rescale_missing"] = {"tile": tile, "left_out": left_out}
                break
        if "rescale_missing" in evidence:
            break
    per_kv = [variant_attention(q, k, v, case.prefix, kv_head=g) for g in range(KV_HEADS)]
    record_kv_heads_read(evidence["kv_heads_read"], out, evidence["heads_wrong"], per_kv)
    # another KV head in K only, or in V only: the scores against one head, the values from the other
    unexplained = [h for h in evidence["heads_wrong"] if h not in evidence["kv_heads_read"]]
    if unexplained:
        evidence["k_heads_read"], evidence["v_heads_read"] = {}, {}
        k_only = [variant_attention(q, k, v, case.prefix, k_head=g) for g in range(KV_HEADS)]
        record_kv_heads_read(evidence["k_heads_read"], out, unexplained, k_only)
        v_only = [variant_attention(q, k, v, case.prefix, v_head=g) for g in range(KV_HEADS)]
        record_kv_heads_read(evidence["v_heads_read"], out, unexplained, v_only)


def record_kv_heads_read(
    read: dict[int, int], out: np.ndarray, heads_wrong: list[int], per_kv: list[np.ndarray], head_axis: int = 1
) -> None:
    """Which KV head each wrong query head's result is over, where another one than h / 4 explains it:
    `per_kv[g]` is the result with every query head reading KV head g; the query heads lie on `head_axis`."""
    for h in heads_wrong:
        got = np.take(out, h, axis=head_axis)
        for g in range(KV_HEADS):
            if g != h // GROUP and explains(got, np.take(per_kv[g], h, axis=head_axis)):
                read[h] = g
                break


# The matrices one explanation has made (`scores_kept`), by what they were made of.
_KEPT = threading.local()


@contextmanager
def scores_kept() -> Iterator[None]:
    """Within it, `head_scores` and `head_values` make each matrix once: one failed case's variants,
    zero-key rows and stage checks read the same few (each query head's own KV head, or one KV head for
    all), and made anew each time they were most of an explanation's time. Dropped on leaving."""
    _KEPT.made = {}
    try:
        yield
    finally:
        _KEPT.made = None


def _kept(kind: str, sources: tuple[np.ndarray, ...], heads: np.ndarray, make: Callable[[], np.ndarray]) -> np.ndarray:
    """`make()`, or the read-only matrix made of these very arrays and heads before, inside `scores_kept`."""
    made = getattr(_KEPT, "made", None)
    if made is None:
        return make()
    key = (kind, *map(id, sources), np.asarray(heads).tobytes())
    entry = made.get(key)
    # the arrays are kept beside the matrix: their ids cannot be reused while it is, and are checked
    if entry is None or any(kept is not given for kept, given in zip(entry[0], sources)):
        entry = made[key] = (sources, make())
        entry[1].setflags(write=False)
    kept: np.ndarray = entry[1]
    return kept


def variant_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    prefix: int,
    scale: float = SCALE,
    shift: int = 0,
    kv_head: int | None = None,
    k_head: int | None = None,
    v_head: int | None = None,
) -> np.ndarray:
    """Attention with one thing changed: the scale, the causal edge (row i sees keys j <= prefix + i +
    shift), or one KV head read by every query head: for K and V (`kv_head`), for K alone (`k_head`) or
    for V alone (`v_head`). A row that sees no key is NaN. float64."""
    rows, keys = q.shape[0], k.shape[0]
    own = np.arange(QUERY_HEADS) // GROUP
    heads = own if kv_head is None else np.full(QUERY_HEADS, kv_head)
    key_heads = heads if k_head is None else np.full(QUERY_HEADS, k_head)
    scores = head_scores(q, k, key_heads) * (scale / SCALE)
    hidden = np.arange(keys)[None, :] > (prefix + shift + np.arange(rows))[:, None]
    scores[:, hidden] = -np.inf
    with np.errstate(invalid="ignore"):
        scores -= scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
    vh = head_values(v, heads if v_head is None else np.full(QUERY_HEADS, v_head))
    attended: np.ndarray = np.matmul(weights, vh).transpose(1, 0, 2)
    return attended


def head_scores(q: np.ndarray, k: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """[32][rows][keys] float64 q.k / 8, query head h against KV head heads[h]. Read-only inside
    `scores_kept`: a caller that changes it works on a copy."""

    def made() -> np.ndarray:
        kh = np.ascontiguousarray(k.astype(np.float64)[:, heads, :].transpose(1, 2, 0))  # [32][64][keys]
        scores: np.ndarray = np.matmul(np.ascontiguousarray(q.astype(np.float64).transpose(1, 0, 2)), kh) * SCALE
        return scores

    return _kept("scores", (q, k), heads, made)


def head_values(v: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """[32][keys][64] float64: the values query head h reads, those of KV head heads[h]. Read-only inside
    `scores_kept`."""
    return _kept(
        "values", (v,), heads, lambda: np.ascontiguousarray(v.astype(np.float64)[:, heads, :].transpose(1, 0, 2))
    )


def online_without_rescale(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, prefix: int, tile: int, rescaled: str
) -> np.ndarray:
    """The online softmax over key tiles of `tile`, rescaling only `rescaled` ("l", "acc"; "both" is the correct
    softmax) by exp(m_old - m_new) when a tile raises the max: what a kernel that forgot the other computes."""
    rows, keys = q.shape[0], k.shape[0]
    heads = np.arange(QUERY_HEADS) // GROUP
    vh = head_values(v, heads)  # [32][keys][64]
    scores = head_scores(q, k, heads).copy()
    scores[:, np.arange(keys)[None, :] > (prefix + np.arange(rows))[:, None]] = -np.inf
    m = np.full(scores.shape[:2], -np.inf)
    row_sum = np.zeros(scores.shape[:2])  # the softmax's running denominator, l
    acc = np.zeros((*scores.shape[:2], vh.shape[2]))
    with np.errstate(invalid="ignore"):
        for start in range(0, keys, tile):
            s = scores[:, :, start : start + tile]
            m_new = np.maximum(m, s.max(axis=-1))
            alpha = np.where(np.isneginf(m_new), 1.0, np.exp(m - m_new))
            p = np.where(np.isneginf(s), 0.0, np.exp(s - m_new[..., None]))
            row_sum = (alpha * row_sum if rescaled in ("l", "both") else row_sum) + p.sum(axis=-1)
            values = vh[:, start : start + tile]
            # one key: its product is the one multiply the matmul would make, without a BLAS call per key
            products = p * values if tile == 1 else np.matmul(p, values)
            acc = (alpha[..., None] * acc if rescaled in ("acc", "both") else acc) + products
            m = m_new
    return (acc / row_sum[..., None]).transpose(1, 0, 2)


def explains(out: np.ndarray, variant: np.ndarray) -> bool:
    """The variant reproduces the output wherever it is defined (and is defined somewhere)."""
    defined = np.isfinite(variant)
    return bool(defined.any()) and bool(within_tolerance(out[defined], variant[defined]).all())
