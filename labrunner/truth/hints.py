"""Hints: the likely cause of a failing grade, read from the evidence in its failures, never guessed.

A verdict says where a kernel is wrong; a hint says why it probably is. Every hint names a hazard
from a fixed list (the JSON carries its id) and is given only when the failures show its
evidence: which cases fail and how (only planted ones, with inf or nan; only the last-key one),
which rows and heads, and whether the output is exactly attention with one known mistake made
(the scale left out, the causal edge moved by a key, the prefix ignored, another KV head read).
Decode adds its own: partitions combined without rescaling, an empty partition that turns into
NaN, a partition size assumed to divide the length, a masked key read into a sum, a block-table
index off by one. A grade gets at most two hints, the most specific first.

`gather_evidence` runs in the driver on each failing case (it recomputes small variants of the
oracle, so it is skipped for cases too large to redo cheaply); `derive_hints` reads the evidence of
every case of a grade.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NotRequired, TypedDict

import numpy as np

from labrunner.truth.cases import Case, Inputs
from labrunner.truth.contract import GROUP, KV_HEADS, QUERY_HEADS, SCALE, within_tolerance
from labrunner.truth.paged_cache import PAGE_TOKENS
from labrunner.truth.poison import WORKSPACE_POISON_BITS, carries
from labrunner.truth.verdict import Status

# The hazards, most specific first: the order hints are given in.
HAZARDS = (
    "race",
    "max-subtraction",
    "causal-mask",
    "prefix-offset",
    "scale",
    "gqa-mapping",
    "rescale",
    "combine-rescale",
    "empty-partition",
    "partition-tail",
    "masked-nan",
    "page-table",
    "bounds",
    "unwritten",
)
MAX_HINTS = 2
# Score elements (rows * keys) above which the variant oracles are not recomputed.
EVIDENCE_LIMIT = 40_000
RESCALE_TILES = (1, 16, 32, 64, 128)
# Keys of a decode case (summed over its sequences) above which its variants are not recomputed.
DECODE_EVIDENCE_LIMIT = 200_000
# Block-table indices a kernel may compute for key j instead of j // 16 (C's division truncates:
# (j - 1) / 16 is 0 for key 0).
PAGE_INDEX_SLIPS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "next-page": lambda j: j // PAGE_TOKENS + 1,
    "previous-page": lambda j: j // PAGE_TOKENS - 1,
    "key-minus-one": lambda j: np.maximum(j - 1, 0) // PAGE_TOKENS,
    "key-plus-one": lambda j: (j + 1) // PAGE_TOKENS,
}


class Evidence(TypedDict):
    """What one failing case shows (`gather_evidence`); the decode keys are there for decode cases only."""

    case: str
    status: str
    rows: int
    prefix: int
    planted: bool
    last_key: bool
    nonfinite: int
    workspace_poisoned: int
    failing_rows: list[int]
    heads_wrong: list[int]
    matches: list[str]  # the variants that reproduce the output
    kv_heads_read: dict[int, int]  # wrong query head -> the KV head its output is attention over
    compared: bool  # the variants were recomputed
    empty_partition_rows: NotRequired[list[int]]
    partial_page_rows: NotRequired[list[int]]
    nonfinite_rows: NotRequired[list[int]]


class Hint(TypedDict):
    hazard: str  # one of HAZARDS
    text: str


class AttentionChange(TypedDict, total=False):
    """The one thing a prefill variant changes (`variant_attention`'s keywords)."""

    scale: float
    shift: int
    kv_head: int


class DecodeChange(TypedDict, total=False):
    """The one thing a decode variant changes (`decode_variant`'s keywords)."""

    scale: float
    kv_head: int
    page_index: Callable[[np.ndarray], np.ndarray]
    keys: Callable[[int], int]
    unrescaled_partition: int


def gather_evidence(
    case: Case,
    inputs: Inputs,
    out: np.ndarray,
    reference: np.ndarray,
    status: str,
    failing_rows: list[int],
    compare: bool = True,
) -> Evidence:
    """What one failing case shows: plain data, so hints can be derived and tested without a kernel.

    `compare`: also recompute the variant oracles and say which reproduce the output (only a wrong
    value can be reproduced: a race or a never-written element is already its own explanation).
    """
    bad = ~within_tolerance(out, reference)
    heads_wrong = sorted(int(h) for h in np.flatnonzero(bad.any(axis=(0, 2))))
    evidence: Evidence = {
        "case": case.name,
        "status": status,
        "rows": case.rows,
        "prefix": case.prefix,
        "planted": bool(case.planted or case.plants),
        # only the last key of the sequence planted: the row max first appears in the final tile
        "last_key": case.planted == (case.keys - 1,),
        "nonfinite": int((~np.isfinite(out)).sum()),
        "workspace_poisoned": int(carries(out, WORKSPACE_POISON_BITS).sum()),
        "failing_rows": list(failing_rows),
        "heads_wrong": heads_wrong,
        "matches": [],
        "kv_heads_read": {},
        "compared": False,
    }
    if inputs.block_table is not None:
        return _decode_evidence(evidence, case, inputs, out, reference, compare)
    if not compare or status != Status.WRONG or case.rows * case.keys > EVIDENCE_LIMIT or not heads_wrong:
        return evidence
    evidence["compared"] = True
    q, k, v = inputs.q, inputs.k, inputs.v
    variants = {
        "scale-missing": AttentionChange(scale=1.0),
        "scale-doubled": AttentionChange(scale=2 * SCALE),
        "scale-twice": AttentionChange(scale=SCALE * SCALE),
        "causal-plus-one": AttentionChange(shift=1),
        "causal-minus-one": AttentionChange(shift=-1),
    }
    if case.prefix:
        variants["prefix-ignored"] = AttentionChange(shift=-case.prefix)
    for name, change in variants.items():
        if _explains(out, variant_attention(q, k, v, case.prefix, **change)):
            evidence["matches"].append(name)
    # The online softmax with one rescale left out, at the tile sizes kernels use (1: a key at a time).
    if any(
        _explains(out, online_without_rescale(q, k, v, case.prefix, tile, rescaled))
        for tile in RESCALE_TILES
        for rescaled in ("acc", "l")
    ):
        evidence["matches"].append("rescale-missing")
    # Which KV head each wrong query head's output is attention over, if any one of them.
    per_kv = [variant_attention(q, k, v, case.prefix, kv_head=g) for g in range(KV_HEADS)]
    _record_kv_heads_read(evidence, out, heads_wrong, per_kv)
    return evidence


def _record_kv_heads_read(
    evidence: Evidence, out: np.ndarray, heads_wrong: list[int], per_kv: list[np.ndarray]
) -> None:
    """Which KV head each wrong query head's output is attention over, where another one explains it."""
    for h in heads_wrong:
        for g in range(KV_HEADS):
            if g != h // GROUP and _explains(out[:, h], per_kv[g][:, h]):
                evidence["kv_heads_read"][h] = g
                break


def _decode_evidence(
    evidence: Evidence, case: Case, inputs: Inputs, out: np.ndarray, reference: np.ndarray, compare: bool
) -> Evidence:
    """What a failing decode case shows: which sequences have empty partitions or a partly used last
    page, and which decode variants (a combine without rescaling, a dropped last partition, a slipped
    block-table index, another scale or KV head) reproduce the output."""
    lengths = np.array(inputs.lengths)
    partition = case.partition
    parts = -(-lengths // partition) if partition else np.ones_like(lengths)
    evidence["empty_partition_rows"] = np.flatnonzero(parts < parts.max()).tolist()
    evidence["partial_page_rows"] = np.flatnonzero(lengths % PAGE_TOKENS).tolist()
    evidence["nonfinite_rows"] = np.flatnonzero((~np.isfinite(out)).any(axis=(1, 2))).tolist()
    heads_wrong = evidence["heads_wrong"]
    if not compare or evidence["status"] != Status.WRONG or lengths.sum() > DECODE_EVIDENCE_LIMIT or not heads_wrong:
        return evidence
    evidence["compared"] = True
    variants = {
        "scale-missing": DecodeChange(scale=1.0),
        "scale-doubled": DecodeChange(scale=2 * SCALE),
        "scale-twice": DecodeChange(scale=SCALE * SCALE),
    }
    if partition:
        variants["combine-no-rescale"] = DecodeChange(unrescaled_partition=partition)
        variants["partition-tail"] = DecodeChange(keys=lambda n: n // partition * partition)
    variants.update({f"page-{name}": DecodeChange(page_index=slip) for name, slip in PAGE_INDEX_SLIPS.items()})
    for name, change in variants.items():
        if _explains_rows(out, decode_variant(inputs, **change)):
            evidence["matches"].append(name)
    if any(name.startswith("page-") for name in evidence["matches"]):
        evidence["matches"].append("page-table")
    per_kv = [decode_variant(inputs, kv_head=g) for g in range(KV_HEADS)]
    _record_kv_heads_read(evidence, out, heads_wrong, per_kv)
    return evidence


def decode_variant(
    inputs: Inputs,
    scale: float = SCALE,
    kv_head: int | None = None,
    page_index: Callable[[np.ndarray], np.ndarray] = lambda j: j // PAGE_TOKENS,
    keys: Callable[[int], int] = lambda n: n,
    unrescaled_partition: int = 0,
) -> np.ndarray:
    """Decode through the block table with one thing changed: the scale, one KV head read by every
    query head, the table index of key j (`page_index`), how many keys a sequence of n keys reads
    (`keys`), or partitions of `unrescaled_partition` keys added up without rescaling each by its
    max. A sequence the change leaves without keys, or sends to a -1 entry, is NaN. float64 `[B][32][64]`."""
    table = inputs.block_table
    assert table is not None, "a decode variant needs a decode case's inputs"
    heads = np.arange(QUERY_HEADS) // GROUP if kv_head is None else np.full(QUERY_HEADS, kv_head)
    out = np.full(inputs.q.shape, np.nan)
    for b, n in enumerate(inputs.lengths):
        j = np.arange(keys(n))
        index = page_index(j)
        if j.size == 0 or index.min() < 0 or index.max() >= table.shape[1] or (table[b, index] < 0).any():
            continue
        rows = table[b, index].astype(np.int64) * PAGE_TOKENS + j % PAGE_TOKENS
        k = inputs.k.astype(np.float64)[rows][:, heads, :]  # [keys][32][64]
        v = inputs.v.astype(np.float64)[rows][:, heads, :]
        scores = np.einsum("hd,jhd->hj", inputs.q[b].astype(np.float64), k) * scale
        size = unrescaled_partition or j.size
        acc, total = np.zeros((QUERY_HEADS, inputs.q.shape[2])), np.zeros(QUERY_HEADS)
        with np.errstate(invalid="ignore", over="ignore"):
            for start in range(0, j.size, size):
                part = scores[:, start : start + size]
                weights = np.exp(part - part.max(axis=1, keepdims=True))
                total += weights.sum(axis=1)
                acc += np.einsum("hj,jhd->hd", weights, v[start : start + size])
            out[b] = acc / total[:, None]
    return out


def _explains_rows(out: np.ndarray, variant: np.ndarray) -> bool:
    """A decode variant reproduces the output: within the pass rule in every sequence it defines, and
    not finite in every sequence it leaves undefined (a kernel that divides 0 by 0 there)."""
    undefined = np.isnan(variant).any(axis=(1, 2))
    if not within_tolerance(out[~undefined], variant[~undefined]).all():
        return False
    return bool((~np.isfinite(out[undefined])).any(axis=(1, 2)).all())


def variant_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    prefix: int,
    scale: float = SCALE,
    shift: int = 0,
    kv_head: int | None = None,
) -> np.ndarray:
    """Attention with one thing changed: the scale, the causal edge (row i sees keys j <= prefix + i +
    shift), or one KV head read by every query head. A row that sees no key is NaN. float64."""
    rows, keys = q.shape[0], k.shape[0]
    heads = np.arange(QUERY_HEADS) // GROUP if kv_head is None else np.full(QUERY_HEADS, kv_head)
    scores = _head_scores(q, k, heads) * (scale / SCALE)
    hidden = np.arange(keys)[None, :] > (prefix + shift + np.arange(rows))[:, None]
    scores[:, hidden] = -np.inf
    with np.errstate(invalid="ignore"):
        scores -= scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
    vh = np.ascontiguousarray(v.astype(np.float64)[:, heads, :].transpose(1, 0, 2))  # [32][keys][64]
    attended: np.ndarray = np.matmul(weights, vh).transpose(1, 0, 2)
    return attended


def _head_scores(q: np.ndarray, k: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """[32][rows][keys] float64 q.k / 8, query head h against KV head heads[h]."""
    kh = np.ascontiguousarray(k.astype(np.float64)[:, heads, :].transpose(1, 2, 0))  # [32][64][keys]
    scores: np.ndarray = np.matmul(np.ascontiguousarray(q.astype(np.float64).transpose(1, 0, 2)), kh) * SCALE
    return scores


def online_without_rescale(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, prefix: int, tile: int, rescaled: str
) -> np.ndarray:
    """The online softmax over key tiles of `tile`, rescaling only `rescaled` ("l", "acc"; "both" is the correct
    softmax) by exp(m_old - m_new) when a tile raises the max: what a kernel that forgot the other computes."""
    rows, keys = q.shape[0], k.shape[0]
    heads = np.arange(QUERY_HEADS) // GROUP
    vh = np.ascontiguousarray(v.astype(np.float64)[:, heads, :].transpose(1, 0, 2))  # [32][keys][64]
    scores = _head_scores(q, k, heads)
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
            acc = (alpha[..., None] * acc if rescaled in ("acc", "both") else acc) + np.matmul(
                p, vh[:, start : start + tile]
            )
            m = m_new
    return (acc / row_sum[..., None]).transpose(1, 0, 2)


def _explains(out: np.ndarray, variant: np.ndarray) -> bool:
    """The variant reproduces the output wherever it is defined (and is defined somewhere)."""
    defined = np.isfinite(variant)
    return bool(defined.any()) and bool(within_tolerance(out[defined], variant[defined]).all())


def derive_hints(evidence: list[Evidence]) -> list[Hint]:
    """At most two hints for a grade, from the evidence of its failing cases (`gather_evidence`)."""
    failing = [e for e in evidence if e.get("status") in (Status.WRONG, Status.NEVER_WRITTEN, Status.RACE)]
    if not failing:
        return []
    found: dict[str, str] = {}

    if any(e["status"] == Status.RACE for e in failing):
        # A race makes every other pattern in the failures an accident of the thread order: it is the one hint.
        return [
            {
                "hazard": "race",
                "text": (
                    "the output depends on the order threads run in: every write to a shared buffer needs a "
                    "__syncthreads() before other threads read it, and another before it is overwritten"
                ),
            }
        ]
    if all(e["planted"] and e["nonfinite"] for e in failing):
        found["max-subtraction"] = (
            "only the planted cases fail, with inf or nan: subtract the row max before "
            "exponentiating (expf overflows near 88; exp(s - max) is at most 1)"
        )
    if _all_match(failing, "causal-plus-one"):
        found["causal-mask"] = (
            "the output is attention with one key past the diagonal counted: row i sees keys "
            "j <= prefix + i, and no further"
        )
    elif _all_match(failing, "causal-minus-one"):
        found["causal-mask"] = (
            "the output is attention with each row's own key dropped: row i sees keys "
            "j <= prefix + i, its own key included"
        )
    if _all_match(failing, "prefix-ignored"):
        found["prefix-offset"] = (
            "the output is attention with the cached prefix ignored: chunk row i is position "
            "prefixLen + i, so it sees keys j <= prefixLen + i"
        )
    for name, words in (
        ("scale-missing", "missing"),
        ("scale-doubled", "doubled (1/4)"),
        ("scale-twice", "applied twice (1/64)"),
    ):
        if _all_match(failing, name):
            found["scale"] = f"every value is attention with the scale {words}: scores are q.k / 8, exactly 0.125"
            break
    read = {int(h): g for e in failing for h, g in e["kv_heads_read"].items()}
    wrong_heads = sorted({h for e in failing for h in e["heads_wrong"]})
    if read and all(h in read for h in wrong_heads):
        h = min(read)
        found["gqa-mapping"] = (
            f"query head {h} reads KV head {read[h]}, where it must read KV head h / 4 = "
            f"{h // GROUP} (GROUP = 4: heads 0-3 share KV head 0)"
        )
    elif wrong_heads and wrong_heads == list(range(GROUP, QUERY_HEADS)):
        found["gqa-mapping"] = (
            "heads 0 to 3 are right and every other head is wrong: query head h reads KV head h / 4 (GROUP = 4)"
        )
    if all(e["last_key"] for e in failing) or _all_match(failing, "rescale-missing"):
        found["rescale"] = (
            "only cases where a row's max arrives in a later key tile fail: when the max moves, "
            "rescale both l and the accumulator by exp(m_old - m_new)"
        )
    if _all_match(failing, "combine-no-rescale"):
        found["combine-rescale"] = (
            "the output is every partition's softmax added up as it stands: partitions have "
            "different maxima, so scale each partition's sum and accumulator by "
            "exp(partMax - globalMax) before adding them, and divide once"
        )
    decode = [e for e in failing if "partial_page_rows" in e]
    if decode and len(decode) == len(failing):
        if all(
            e["failing_rows"] == e["empty_partition_rows"] and set(e["failing_rows"]) <= set(e["nonfinite_rows"])
            for e in decode
        ):
            found["empty-partition"] = (
                "exactly the sequences with empty partitions fail, with nan: a partition "
                "with no keys has max -inf and sum 0 and must add nothing (0 / 0 and "
                "exp(-inf - -inf) are nan): skip it, or stop at the sequence's own "
                "partition count"
            )
        if all(
            e["failing_rows"] and set(e["failing_rows"]) <= set(e["partial_page_rows"]) & set(e["nonfinite_rows"])
            for e in decode
        ):
            found["masked-nan"] = (
                "only sequences whose last page is partly used fail, with nan: the rows past a "
                "sequence's end hold garbage, and a masked key must never be loaded into a sum "
                "(0 * NaN is NaN): skip it, do not weight it by 0"
            )
    if _all_match(failing, "partition-tail"):
        found["partition-tail"] = (
            "the output is attention without the keys of each sequence's last, partial "
            "partition: a length need not be a multiple of attnlab_partition_tokens, so a "
            "sequence has ceil(seqLens[b] / p) partitions and the last ends at seqLens[b]"
        )
    if _all_match(failing, "page-table"):
        found["page-table"] = (
            "the output is attention over keys read through a block-table index off by one: key "
            "j of sequence b is row j % 16 of page blockTable[b][j / 16]"
        )
    suffix_from = _failing_suffix(failing)
    if suffix_from is not None:
        found["bounds"] = (
            f"only the last rows fail (from row {suffix_from} on in case "
            f"{next(e['case'] for e in failing if e['failing_rows'] and e['failing_rows'][0] == suffix_from)}): "
            "check the bounds of your row loops and how each block finds its first row"
        )
    if any(e["status"] == Status.NEVER_WRITTEN or e["workspace_poisoned"] for e in failing):
        found["unwritten"] = (
            "some outputs were never written, or were computed from a value never written: "
            "write every row, head and dim, and read no buffer before it is set"
        )
    return [Hint(hazard=hazard, text=found[hazard]) for hazard in HAZARDS if hazard in found][:MAX_HINTS]


def _all_match(failing: list[Evidence], variant: str) -> bool:
    """The variant reproduces every failing case it was compared with, and no failure is of another kind."""
    checked = [e for e in failing if e["compared"]]
    return (
        bool(checked)
        and all(variant in e["matches"] for e in checked)
        and all(e["status"] == Status.WRONG for e in failing)
    )


def _failing_suffix(failing: list[Evidence]) -> int | None:
    """The first failing row, when every failing case fails exactly on its last row, or on every row
    from a multiple of 8 (where the tiles kernels use begin) to its end, and in at least one case
    that run starts past row 0 (the largest such start); else None."""
    starts = []
    for e in failing:
        rows = e["failing_rows"]
        if not rows or rows != list(range(rows[0], e["rows"])):
            return None
        if rows[0] % 8 and len(rows) > 1:
            return None
        starts.append(rows[0])
    return max(starts) if max(starts) > 0 else None
