"""The decode variants the hints compare a wrong lab-3 output with, and what a decode case shows.

Decode has mistakes of its own: partitions combined without rescaling, or rescaled by one partition's
maximum where a later one's lies far above it (expf overflows), an empty partition that turns into
NaN, a partition size assumed to divide the length, a masked key read into a sum, a block-table index
off by one. Each variant is decode through the block table with one of them made.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from labrunner.truth.cases import Case, Inputs
from labrunner.truth.contract import GROUP, KV_HEADS, QUERY_HEADS, SCALE, within_tolerance
from labrunner.truth.hints_prefill import record_kv_heads_read
from labrunner.truth.hints_records import DecodeChange, Evidence
from labrunner.truth.paged_cache import PAGE_TOKENS
from labrunner.truth.verdict import Status

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


def decode_evidence(evidence: Evidence, case: Case, inputs: Inputs, out: np.ndarray, compare: bool) -> Evidence:
    """What a failing decode case shows: which sequences have empty partitions or a partly used last
    page, and which decode variants (a combine without rescaling or rescaled by partition 0's max, a
    dropped last partition, a slipped block-table index, another scale or KV head) reproduce the output."""
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
        variants["combine-first-max"] = DecodeChange(first_partition_max=partition)
        variants["partition-tail"] = DecodeChange(keys=lambda n: n // partition * partition)
    variants.update({f"page-{name}": DecodeChange(page_index=slip) for name, slip in PAGE_INDEX_SLIPS.items()})
    for name, change in variants.items():
        variant = decode_variant(inputs, **change)
        if explains_rows(out, variant):
            evidence["matches"].append(name)
            if not np.isfinite(variant).any():  # NaN for NaN: the case cannot tell this mistake from another
                evidence.setdefault("nan_only_matches", []).append(name)
    slips = [name for name in evidence["matches"] if name.startswith("page-")]
    if slips:
        evidence["matches"].append("page-table")
        if set(slips) <= set(evidence.get("nan_only_matches", [])):
            evidence.setdefault("nan_only_matches", []).append("page-table")
    if _explains_in_cache(out, decode_variant(inputs, table_ignored=True), _past_the_cache(inputs)):
        evidence["matches"].append("table-ignored")
    elif _explains_in_cache(out, decode_variant(inputs, first_pages=True), _past_the_cache(inputs, first_pages=True)):
        evidence["matches"].append("table-first-pages")
    per_kv = [decode_variant(inputs, kv_head=g) for g in range(KV_HEADS)]
    record_kv_heads_read(evidence["kv_heads_read"], out, heads_wrong, per_kv)
    # another KV head in K only, or in V only: the scores against one head, the values from the other
    unexplained = [h for h in heads_wrong if h not in evidence["kv_heads_read"]]
    if unexplained:
        evidence["k_heads_read"], evidence["v_heads_read"] = {}, {}
        k_only = [decode_variant(inputs, k_head=g) for g in range(KV_HEADS)]
        record_kv_heads_read(evidence["k_heads_read"], out, unexplained, k_only)
        v_only = [decode_variant(inputs, v_head=g) for g in range(KV_HEADS)]
        record_kv_heads_read(evidence["v_heads_read"], out, unexplained, v_only)
    return evidence


def decode_variant(
    inputs: Inputs,
    scale: float = SCALE,
    kv_head: int | None = None,
    k_head: int | None = None,
    v_head: int | None = None,
    page_index: Callable[[np.ndarray], np.ndarray] = lambda j: j // PAGE_TOKENS,
    keys: Callable[[int], int] = lambda n: n,
    unrescaled_partition: int = 0,
    first_partition_max: int = 0,
    table_ignored: bool = False,
    equal_splits: int = 0,
    first_pages: bool = False,
) -> np.ndarray:
    """Decode through the block table with one thing changed: the scale, one KV head read by every
    query head (for K and V, `kv_head`; for K alone, `k_head`; for V alone, `v_head`), the table index
    of key j (`page_index`), how many keys a sequence of n keys reads (`keys`), partitions of
    `unrescaled_partition` keys added up without rescaling each by its max, or partitions of
    `first_partition_max` keys each rescaled by exp(partMax - partition 0's max) in float32, as a kernel
    does: where a later partition's max lies more than 88 above the first's, that factor is inf and the
    sequence NaN. `table_ignored`: page j // 16 of sequence b read as page b * maxPages + j // 16 of the
    cache, as if the table were the identity; `first_pages`: page j // 16 of the cache itself, the same
    pages for every sequence, as if there were no table. `equal_splits`: the combine mistake asked for
    (`unrescaled_partition` or `first_partition_max`, whose size then only says which) made over that many
    equal splits of each sequence, cdiv(n, equal_splits) keys each (as vLLM, SGLang and LightLLM cut it),
    not over partitions of a fixed size. A sequence the change leaves without keys, sends to a -1 entry or
    past the cache's last page, is NaN. float64 `[B][32][64]`."""
    table = inputs.block_table
    assert table is not None, "a decode variant needs a decode case's inputs"
    heads = np.arange(QUERY_HEADS) // GROUP if kv_head is None else np.full(QUERY_HEADS, kv_head)
    out = np.full(inputs.q.shape, np.nan)
    for b, n in enumerate(inputs.lengths):
        j = np.arange(keys(n))
        index = page_index(j)
        if j.size == 0 or index.min() < 0 or index.max() >= table.shape[1] or (table[b, index] < 0).any():
            continue
        pages = b * table.shape[1] + index if table_ignored else table[b, index].astype(np.int64)
        if first_pages:
            pages = index.astype(np.int64)
        rows = pages * PAGE_TOKENS + j % PAGE_TOKENS
        if rows.max() >= inputs.k.shape[0]:  # past the cache's last page
            continue
        key_heads = heads if k_head is None else np.full(QUERY_HEADS, k_head)
        value_heads = heads if v_head is None else np.full(QUERY_HEADS, v_head)
        k = inputs.k.astype(np.float64)[rows][:, key_heads, :]  # [keys][32][64]
        v = inputs.v.astype(np.float64)[rows][:, value_heads, :]
        scores = np.einsum("hd,jhd->hj", inputs.q[b].astype(np.float64), k) * scale
        size = unrescaled_partition or first_partition_max or j.size
        if equal_splits and (unrescaled_partition or first_partition_max):
            size = -(-j.size // equal_splits)
        acc, total = np.zeros((QUERY_HEADS, inputs.q.shape[2])), np.zeros(QUERY_HEADS)
        first_max = scores[:, :size].max(axis=1).astype(np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            for start in range(0, j.size, size):
                part = scores[:, start : start + size]
                part_max = part.max(axis=1, keepdims=True)
                weights = np.exp(part - part_max)
                if first_partition_max:
                    # the partition's own softmax, rescaled by a float32 expf(partMax - m0)
                    weights = weights * np.exp(part_max.astype(np.float32) - first_max[:, None]).astype(np.float64)
                total += weights.sum(axis=1)
                acc += np.einsum("hj,jhd->hd", weights, v[start : start + size])
            out[b] = acc / total[:, None]
    return out


def _past_the_cache(inputs: Inputs, first_pages: bool = False) -> np.ndarray:
    """The sequences whose pages, read as if the block table were the identity (or, `first_pages`, as if
    every sequence's pages were the cache's first), run past the cache."""
    table = inputs.block_table
    assert table is not None, "a decode case's inputs have a block table"
    start = [0 if first_pages else b * table.shape[1] for b in range(len(inputs.lengths))]
    last_page = [start[b] + (max(int(n), 1) - 1) // PAGE_TOKENS for b, n in enumerate(inputs.lengths)]
    return np.array([(page + 1) * PAGE_TOKENS > inputs.k.shape[0] for page in last_page])


def _explains_in_cache(out: np.ndarray, variant: np.ndarray, past_the_cache: np.ndarray) -> bool:
    """A variant reproduces every sequence whose pages lie in the cache (within the pass rule where it is
    finite, not finite where it is not: the pages past a sequence's end hold NaN), one of them at least
    finite; a sequence read past the cache is whatever lies there, and says nothing."""
    inside = ~past_the_cache
    finite = inside & np.isfinite(variant).all(axis=(1, 2))
    nan = inside & ~finite
    if not finite.any():
        return False
    if not within_tolerance(out[finite], variant[finite]).all():
        return False
    return bool((~np.isfinite(out[nan])).any(axis=(1, 2)).all())


def explains_rows(out: np.ndarray, variant: np.ndarray) -> bool:
    """A decode variant reproduces the output: within the pass rule in every sequence it defines, and
    not finite in every sequence it leaves undefined (a kernel that divides 0 by 0 there). A variant NaN
    everywhere reproduces a kernel NaN everywhere whatever its mistake: `decode_evidence` records such a
    match as NaN only, which alone is no evidence."""
    undefined = np.isnan(variant).any(axis=(1, 2))
    if not within_tolerance(out[~undefined], variant[~undefined]).all():
        return False
    return bool((~np.isfinite(out[undefined])).any(axis=(1, 2)).all())
