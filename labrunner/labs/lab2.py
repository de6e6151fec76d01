"""Lab 2, flash prefill against a cached prefix: one kernel, no workspace."""

from __future__ import annotations

from labrunner.labs.definition import (
    MAX_SHARED_BYTES,
    MAX_THREADS_PER_BLOCK,
    Lab,
    Launch,
    ceil_div,
    check_block,
    check_nonnegative,
    entry,
)
from labrunner.labs.timing_strategy import AgainstBaseline
from labrunner.truth.contract import QUERY_HEADS

DEFAULTS = {
    "attnlab_threads": 256,  # threads per block
    "attnlab_rows_per_block": 64,  # query rows of the chunk one block serves: grid.x = ceil(C / rows); 0: all of them
    "attnlab_heads_per_block": 1,  # query heads one block serves: grid.y = 32 / heads (4 = one KV group)
    "attnlab_smem_bytes": 0,  # dynamic shared memory per block; above 48 KB the driver raises the limit
}
BOUNDS = {
    "attnlab_threads": MAX_THREADS_PER_BLOCK,
    # The longest chunk the lab grades or times is 2,048 rows (C2048-P2048, the timing shape): a tile of
    # 1,024 rows leaves it two blocks, and a block of at most 1,024 threads that owns more rows than it has
    # threads walks them in a loop, which 0 (one block over all rows) already says. Its geometry case
    # has 2,049 rows.
    "attnlab_rows_per_block": 1024,
    "attnlab_heads_per_block": QUERY_HEADS,  # one block over every head
    "attnlab_smem_bytes": MAX_SHARED_BYTES,
}


def row_blocks(c: dict[str, int], rows: int) -> int:
    """grid.x: one block per attnlab_rows_per_block rows, or one block for the whole chunk when it is 0
    (a kernel that walks every row of its head itself says so without a magic number)."""
    per_block = c["attnlab_rows_per_block"]
    return 1 if per_block == 0 else ceil_div(rows, per_block)


def plan_launches(c: dict[str, int], rows: int, prefix: int) -> list[Launch]:
    return [
        Launch(
            "flash_prefill",
            (row_blocks(c, rows), QUERY_HEADS // c["attnlab_heads_per_block"], 1),
            (c["attnlab_threads"], 1, 1),
            c["attnlab_smem_bytes"],
            ("q", "k", "v", "out", rows, prefix),
        )
    ]


def validate(c: dict[str, int]) -> list[str]:
    problems = check_block(c, "attnlab_threads") + check_nonnegative(c, "attnlab_smem_bytes")
    heads = c["attnlab_heads_per_block"]
    if heads <= 0 or QUERY_HEADS % heads:
        problems.append(f"attnlab_heads_per_block = {heads} must divide {QUERY_HEADS}")
    if c["attnlab_rows_per_block"] < 0:
        problems.append(
            f"attnlab_rows_per_block = {c['attnlab_rows_per_block']} must be positive, or 0 for one block over all rows"
        )
    return problems


LAB2 = Lab(
    name="lab2",
    title="Flash prefill against a cached prefix",
    teaches="chunked prefill as a serving engine runs it: tile the query rows, stage each K/V tile in shared "
    "memory once, carry the online softmax across tiles; no score matrix exists",
    entry_points=(
        entry(
            "flash_prefill",
            "const float* q, const float* kCache, const float* vCache, float* out, int chunkLen, int prefixLen",
            "out[i][h] = softmax over keys j <= prefixLen + i of (q[i][h] . kCache[j][h/4]) / 8, "
            "weighting vCache[j][h/4]",
        ),
    ),
    launch_defaults=DEFAULTS,
    bounds=BOUNDS,
    plan_launches=plan_launches,
    validate=validate,
    # SPEEDUP against the starter (bench --vs: the solution, the expert, a .cu file or SDPA) at one shape
    timing_strategy=AgainstBaseline(),
    row_tiles=lambda c: [c["attnlab_rows_per_block"]],
    peer="sdpa",
    cpu_seconds_per_unit=1.2e-5,
    interpreted_seconds_per_unit=3e-4,
    flop_shares={"flash_prefill": 1.0},
    triton_blocks={"flash_prefill": ("attnlab_threads", "attnlab_smem_bytes")},
)
