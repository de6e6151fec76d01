"""Lab 3, decode against a paged KV cache: a partial kernel per partition, a combine, graded on bandwidth."""

from __future__ import annotations

import numpy as np

from labrunner.labs.definition import (
    MAX_SHARED_BYTES,
    MAX_THREADS_PER_BLOCK,
    Lab,
    Launch,
    bounded_workspace,
    check_block,
    check_nonnegative,
    entry,
)
from labrunner.labs.timing_strategy import AgainstCopy, TimingLayout
from labrunner.truth.contract import GROUP, HEAD_DIM, KV_HEADS, QUERY_HEADS
from labrunner.truth.paged_cache import PAGE_TOKENS, bytes_to_move, decode_flops, max_pages, max_parts, timing_batch

DEFAULTS = {
    "attnlab_partition_tokens": 0,  # keys per partition (grid.x); 0: one partition per sequence
    "attnlab_heads_per_block": 1,  # query heads of one KV group per block of decode_partial: grid.y = 32 / heads
    "attnlab_partial_threads": 32,  # threads per block of decode_partial
    "attnlab_partial_smem_bytes": 0,  # its dynamic shared memory; above 48 KB the driver raises the limit
    "attnlab_combine_threads": 64,  # threads per block of decode_combine, one block per (head, sequence)
}
# The longest sequence the lab grades or times has 32,768 keys (the `long` case, the timing shape). A
# partition of that many keys is a whole sequence, which 0 already says, and the cases grow with p
# (`skewed` holds 8p + 3 keys: 262,147 at this bound, 537 MB of K pages).
MAX_PARTITION_TOKENS = 32768
BOUNDS = {
    "attnlab_partition_tokens": MAX_PARTITION_TOKENS,
    "attnlab_heads_per_block": GROUP,  # the query heads of one KV group
    "attnlab_partial_threads": MAX_THREADS_PER_BLOCK,
    "attnlab_partial_smem_bytes": MAX_SHARED_BYTES,
    "attnlab_combine_threads": MAX_THREADS_PER_BLOCK,
}


def plan_launches(c: dict[str, int], batch: int, longest: int) -> list[Launch]:
    """A decode batch of `batch` sequences whose longest has `longest` keys (a decode case's rows and prefix)."""
    parts = max_parts(longest, c["attnlab_partition_tokens"])
    pages = max_pages(longest)
    return [
        Launch(
            "decode_partial",
            (parts, QUERY_HEADS // c["attnlab_heads_per_block"], batch),
            (c["attnlab_partial_threads"], 1, 1),
            c["attnlab_partial_smem_bytes"],
            ("q", "k", "v", "blockTable", "seqLens", "partOut", "partMax", "partSum", pages, parts),
        ),
        Launch(
            "decode_combine",
            (QUERY_HEADS, batch, 1),
            (c["attnlab_combine_threads"], 1, 1),
            0,
            ("partOut", "partMax", "partSum", "seqLens", "out", parts),
        ),
    ]


def workspace(c: dict[str, int], batch: int, longest: int) -> dict[str, int]:
    """The partial results' buffers, [B][32][maxParts][64] and twice [B][32][maxParts]: the driver poisons
    and guards them; what they hold between the two kernels is the file's business."""
    parts = max_parts(longest, c["attnlab_partition_tokens"])
    return bounded_workspace(
        f"the partial buffers at B = {batch}, longest {longest}",
        {
            "partOut": batch * QUERY_HEADS * parts * 64,
            "partMax": batch * QUERY_HEADS * parts,
            "partSum": batch * QUERY_HEADS * parts,
        },
    )


def validate(c: dict[str, int]) -> list[str]:
    problems = (
        check_block(c, "attnlab_partial_threads")
        + check_block(c, "attnlab_combine_threads")
        + check_nonnegative(c, "attnlab_partial_smem_bytes")
    )
    partition = c["attnlab_partition_tokens"]
    if partition < 0 or partition % PAGE_TOKENS:
        problems.append(
            f"attnlab_partition_tokens = {partition} must be 0 (one partition per sequence) or a "
            f"positive multiple of {PAGE_TOKENS} (whole pages)"
        )
    heads = c["attnlab_heads_per_block"]
    if heads not in (1, 2, GROUP):
        problems.append(f"attnlab_heads_per_block = {heads} must be 1, 2 or {GROUP} (query heads of one KV group)")
    return problems


def timing_layout(batch: int, longest: int, seed: int) -> TimingLayout:
    """The timing shape's cache: seeded lengths (one of exactly `longest`), every page used, shuffled."""
    lengths, table = timing_batch(batch, longest, seed)
    return {"pages": int(table.max()) + 1, "fixed": {"blockTable": table, "seqLens": np.array(lengths, dtype=np.int32)}}


def timed_bytes(batch: int, longest: int, layout: TimingLayout) -> int:
    return bytes_to_move(layout["fixed"]["seqLens"].tolist(), QUERY_HEADS, KV_HEADS, HEAD_DIM)


def timed_flops(batch: int, longest: int, layout: TimingLayout) -> float:
    """About 2 FLOPs per byte that must move: 256 per key and query head, 8,192 per key for the 32 heads,
    against the 4,096 bytes of that key's K and V rows (8 KV heads of 64 floats each). That is far left
    of any GPU's ridge point (about 14 FLOP/B on an H200), so decode is memory-bound."""
    return float(decode_flops(layout["fixed"]["seqLens"].tolist(), QUERY_HEADS, HEAD_DIM))


LAB3 = Lab(
    name="lab3",
    title="Decode against a paged KV cache",
    teaches="decode as a serving engine runs it, graded on bandwidth: read K and V through a block table of "
    "16-token pages, load each K/V row once for the 4 query heads of its group, split long sequences "
    "into partitions and combine them by their maxima",
    entry_points=(
        entry(
            "decode_partial",
            "const float* q, const float* kCache, const float* vCache, const int* blockTable, const int* seqLens, "
            "float* partOut, float* partMax, float* partSum, int maxPages, int maxParts",
            "for each (sequence, query head, partition): whatever decode_combine needs of the softmax of "
            "(q[b][h] . kCache[key j of b][h/4]) / 8 over the partition's keys j < seqLens[b], weighting vCache",
        ),
        entry(
            "decode_combine",
            "const float* partOut, const float* partMax, const float* partSum, const int* seqLens, float* out, "
            "int maxParts",
            "out[b][h] = softmax over keys j < seqLens[b] of (q[b][h] . kCache[key j of b][h/4]) / 8, "
            "weighting vCache, from the partitions' partial results",
        ),
    ),
    launch_defaults=DEFAULTS,
    bounds=BOUNDS,
    plan_launches=plan_launches,
    workspace=workspace,
    validate=validate,
    # bandwidth against the same run's device copy, the starter's SPEEDUP beside it
    timing_strategy=AgainstCopy(bytes_to_move=timed_bytes),
    cpu_seconds_per_unit=1.2e-4,
    interpreted_seconds_per_unit=3e-3,  # lab 3's starter, one program per head: 1.2e-3 s a unit there
    partition=lambda c: c["attnlab_partition_tokens"],
    timing_layout=timing_layout,
    flops=timed_flops,
    # the partial kernel does every q . k and p * v; the combine only rescales partitions (counted as none)
    flop_shares={"decode_partial": 1.0},
    triton_blocks={
        "decode_partial": ("attnlab_partial_threads", "attnlab_partial_smem_bytes"),
        "decode_combine": ("attnlab_combine_threads", None),  # its shared memory: the kernel's own, as launched
    },
)
