"""Lab 1, the full score matrix: three kernels with a [32][T][T] workspace between them."""

from __future__ import annotations

from labrunner.labs.definition import (
    MAX_SHARED_BYTES,
    MAX_THREADS_PER_BLOCK,
    Lab,
    Launch,
    bounded_workspace,
    ceil_div,
    check_block,
    check_nonnegative,
    check_positive,
    entry,
)
from labrunner.labs.timing_strategy import PerKernel
from labrunner.truth.checker import probabilities_stage_problem, scores_stage_problem
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS

DEFAULTS = {
    # scores: thread (x, y) of block (bx, by, bz) owns score (row = by*tile_rows + y, key = bx*tile_keys + x) of head bz
    "attnlab_scores_threads_x": 16,
    "attnlab_scores_threads_y": 16,
    "attnlab_scores_tile_keys": 16,
    "attnlab_scores_tile_rows": 16,
    "attnlab_scores_smem_bytes": 0,
    # softmax: one block per (row, head) by default
    "attnlab_softmax_threads": 256,
    "attnlab_softmax_rows_per_block": 1,
    "attnlab_softmax_smem_bytes": 0,
    # weighted sum: thread (x, y) owns output (row = by*tile_rows + y, dim = bx*tile_dims + x) of head bz
    "attnlab_wsum_threads_x": 16,
    "attnlab_wsum_threads_y": 16,
    "attnlab_wsum_tile_dims": 16,
    "attnlab_wsum_tile_rows": 16,
    "attnlab_wsum_smem_bytes": 0,
}


# A tile over rows or keys covers at most 1,024 of them. The longest T the lab times is 2,048, so a
# tile of 1,024 already leaves it only two blocks, and a block of at most 1,024 threads that owns more
# rows than it has threads walks them in a loop: that is no longer a tile. Its geometry case (T = 2,049)
# holds a [32][T][T] workspace of 537 MB, below the driver's memory bound.
MAX_TILE = 1024
BOUNDS = {
    "attnlab_scores_threads_x": MAX_THREADS_PER_BLOCK,
    "attnlab_scores_threads_y": MAX_THREADS_PER_BLOCK,
    "attnlab_scores_tile_keys": MAX_TILE,
    "attnlab_scores_tile_rows": MAX_TILE,
    "attnlab_scores_smem_bytes": MAX_SHARED_BYTES,
    "attnlab_softmax_threads": MAX_THREADS_PER_BLOCK,
    "attnlab_softmax_rows_per_block": MAX_TILE,
    "attnlab_softmax_smem_bytes": MAX_SHARED_BYTES,
    "attnlab_wsum_threads_x": MAX_THREADS_PER_BLOCK,
    "attnlab_wsum_threads_y": MAX_THREADS_PER_BLOCK,
    "attnlab_wsum_tile_dims": HEAD_DIM,  # a block over more dims than a head's 64 covers nothing more
    "attnlab_wsum_tile_rows": MAX_TILE,
    "attnlab_wsum_smem_bytes": MAX_SHARED_BYTES,
}


def plan_launches(c: dict[str, int], rows: int, prefix: int) -> list[Launch]:
    t = rows
    return [
        Launch(
            "attn_scores",
            (ceil_div(t, c["attnlab_scores_tile_keys"]), ceil_div(t, c["attnlab_scores_tile_rows"]), QUERY_HEADS),
            (c["attnlab_scores_threads_x"], c["attnlab_scores_threads_y"], 1),
            c["attnlab_scores_smem_bytes"],
            ("q", "k", "scores", t),
        ),
        Launch(
            "attn_softmax",
            (ceil_div(t, c["attnlab_softmax_rows_per_block"]), QUERY_HEADS, 1),
            (c["attnlab_softmax_threads"], 1, 1),
            c["attnlab_softmax_smem_bytes"],
            ("scores", t),
        ),
        Launch(
            "attn_weighted_sum",
            (ceil_div(HEAD_DIM, c["attnlab_wsum_tile_dims"]), ceil_div(t, c["attnlab_wsum_tile_rows"]), QUERY_HEADS),
            (c["attnlab_wsum_threads_x"], c["attnlab_wsum_threads_y"], 1),
            c["attnlab_wsum_smem_bytes"],
            ("scores", "v", "out", t),
        ),
    ]


def validate(c: dict[str, int]) -> list[str]:
    return (
        check_block(c, "attnlab_scores_threads_x", "attnlab_scores_threads_y")
        + check_block(c, "attnlab_softmax_threads")
        + check_block(c, "attnlab_wsum_threads_x", "attnlab_wsum_threads_y")
        + check_positive(
            c,
            "attnlab_scores_tile_keys",
            "attnlab_scores_tile_rows",
            "attnlab_softmax_rows_per_block",
            "attnlab_wsum_tile_dims",
            "attnlab_wsum_tile_rows",
        )
        + check_nonnegative(c, "attnlab_scores_smem_bytes", "attnlab_softmax_smem_bytes", "attnlab_wsum_smem_bytes")
    )


LAB1 = Lab(
    name="lab1",
    title="The full score matrix",
    teaches="attention as three eager kernels (scores matmul, row softmax, weighted sum) with the whole "
    "T x T score matrix in global memory, and what that matrix costs as the prompt grows",
    entry_points=(
        entry(
            "attn_scores",
            "const float* q, const float* k, float* scores, int T",
            "scores[h][i][j] = (q[i][h] . k[j][h/4]) / 8 for j <= i, and -INFINITY above the diagonal (j > i)",
        ),
        entry(
            "attn_softmax",
            "float* scores, int T",
            "normalize every row of scores in place: subtract the row max, exponentiate, divide by the sum; "
            "0 above the diagonal",
        ),
        entry(
            "attn_weighted_sum",
            "const float* scores, const float* v, float* out, int T",
            "out[i][h][d] = sum over j of scores[h][i][j] * v[j][h/4][d]",
        ),
    ),
    launch_defaults=DEFAULTS,
    bounds=BOUNDS,
    plan_launches=plan_launches,
    workspace=lambda constants, rows, prefix: bounded_workspace(
        f"the scores workspace at T = {rows}", {"scores": QUERY_HEADS * rows * rows}
    ),
    validate=validate,
    # the pipeline at the catalogue's sizes, each kernel timed inside the whole call: no baseline, no gate
    timing_strategy=PerKernel(),
    # scores tiles rows (grid.y) and keys (grid.x), softmax rows (grid.x), the weighted sum rows (grid.y)
    stages={
        "attn_scores": lambda buffer, inputs, rows: scores_stage_problem(buffer, inputs.q, inputs.k, rows),
        "attn_softmax": lambda buffer, inputs, rows: probabilities_stage_problem(buffer, inputs.q, inputs.k, rows),
    },
    row_tiles=lambda c: [
        c["attnlab_scores_tile_keys"],
        c["attnlab_scores_tile_rows"],
        c["attnlab_softmax_rows_per_block"],
        c["attnlab_wsum_tile_rows"],
    ],
    peer="torch",
    cpu_seconds_per_unit=2.5e-5,
    # the two matmuls share the lab's FLOP count, half each; the softmax is counted as none, as the count is
    flop_shares={"attn_scores": 0.5, "attn_weighted_sum": 0.5},
)
