"""Lab 1's evidence stage by stage: each kernel's buffer against what one known mistake would leave there.

Lab 1's output is three kernels deep (scores -> probabilities -> output), so most mistakes are
invisible in the output alone: scores taken against KV head h % 8 while the weighted sum reads V
from h / 4 make an output that is attention over no one KV head; a weighted sum that runs past the
diagonal adds whatever the softmax left there. Rerun kernel by kernel (pipeline/explain.py), each
buffer is compared with variants computed from the buffer before it, or from the inputs:

- scores: q.k / 8 with the scale missing, doubled or applied twice, or against another KV head;
- probabilities: the softmax without the max subtracted, in float32 as a kernel computes it (expf
  overflows past 88.7: inf or NaN where the true answer is finite); the softmax over every key of its
  row, above the diagonal too; the softmax of scores at the wrong scale;
- output: the weighted sum of the kernel's own probabilities over every key of the row, or with V read
  from another KV head.

Only the visible part (key j <= row i) of a stage is compared with its definition: what lies above the
diagonal is each pipeline's own business until a later kernel reads it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from labrunner.truth.cases import Inputs
from labrunner.truth.contract import GROUP, HEAD_DIM, KV_HEADS, QUERY_HEADS, visible_mask, within_tolerance
from labrunner.truth.hints_prefill import explains, head_scores, record_kv_heads_read
from labrunner.truth.hints_records import Evidence

# The scale mistakes, as the factor each leaves on the scores: q.k (missing), q.k / 4 (doubled), q.k / 64 (twice).
SCALE_SLIPS = (("scale-missing", 8.0), ("scale-doubled", 2.0), ("scale-twice", 0.125))


@np.errstate(over="ignore", invalid="ignore")  # a buffer may hold inf and NaN: that is often the evidence
def stage_evidence(
    evidence: Evidence,
    inputs: Inputs,
    rows: int,
    stages: Sequence[tuple[str, np.ndarray]],
    output_kernel: str,
    out: np.ndarray,
) -> None:
    """Compare a staged pipeline's buffers with the variants (see the module's docstring) and record what
    matches: `stage_matches`, `scores_kv_heads_read`, `wsum_kv_heads_read`. `stages`: (kernel, buffer) of
    the scores and the probabilities kernels, each [32][T][T] as the kernel left it; `out` [T][32][64]."""
    (scores_kernel, scores_buffer), (softmax_kernel, probabilities_buffer) = stages
    matches: list[str] = []
    evidence["stage_kernels"] = [scores_kernel, softmax_kernel, output_kernel]
    evidence["stage_matches"] = matches
    evidence["scores_kv_heads_read"] = {}
    evidence["wsum_kv_heads_read"] = {}
    evidence["stages_compared"] = True
    visible = visible_mask(rows, 0)[None]  # [1][T][T]: key j <= row i
    scores32 = scores_buffer.reshape(QUERY_HEADS, rows, rows)
    probabilities32 = probabilities_buffer.reshape(QUERY_HEADS, rows, rows)
    true = head_scores(inputs.q, inputs.k, np.arange(QUERY_HEADS) // GROUP)

    # -- scores
    for name, factor in SCALE_SLIPS:
        if explains(scores32, _lower(true * factor, visible)):
            matches.append(f"scores-{name}")
    heads_off = [
        h for h in range(QUERY_HEADS) if not within_tolerance(scores32[h][visible[0]], true[h][visible[0]]).all()
    ]
    if heads_off:
        per_kv = [_lower(head_scores(inputs.q, inputs.k, np.full(QUERY_HEADS, g)), visible) for g in range(KV_HEADS)]
        record_kv_heads_read(evidence["scores_kv_heads_read"], scores32, heads_off, per_kv, head_axis=0)

    # -- probabilities
    everywhere = np.ones_like(visible)
    own = _softmax(scores32.astype(np.float64), visible)
    raw = np.exp(np.where(visible, scores32, np.float32(-np.inf)))  # float32, as expf: inf past 88.7
    without_max = raw / raw.sum(axis=-1, keepdims=True, dtype=np.float32)
    overflowed = visible & ~np.isfinite(without_max) & np.isfinite(own)
    if overflowed.any() and _reproduces(probabilities32, without_max, visible):
        matches.append("softmax-no-max")
    if np.isfinite(scores32).all():
        whole_rows = _softmax(scores32.astype(np.float64), everywhere)
        if _differ(whole_rows, own) and _reproduces(probabilities32, whole_rows, everywhere):
            matches.append("softmax-over-upper")
    for name, factor in SCALE_SLIPS:
        if explains(probabilities32, _lower(_softmax(true * factor, visible), visible)):
            matches.append(f"probabilities-{name}")

    # -- output: the weighted sum of the kernel's own probabilities
    probabilities = probabilities32.astype(np.float64)
    weighted = np.where(visible, probabilities, 0.0)
    own_out = _weighted_sum(weighted, inputs.v, np.arange(QUERY_HEADS) // GROUP)
    whole_out = _weighted_sum(probabilities, inputs.v, np.arange(QUERY_HEADS) // GROUP)
    if _differ(whole_out, own_out) and _reproduces(out, whole_out, np.ones(out.shape, dtype=bool)):
        matches.append("wsum-over-upper")
    heads_off = [h for h in range(QUERY_HEADS) if not within_tolerance(out[:, h], own_out[:, h]).all()]
    if heads_off:
        per_kv = [_weighted_sum(weighted, inputs.v, np.full(QUERY_HEADS, g)) for g in range(KV_HEADS)]
        record_kv_heads_read(evidence["wsum_kv_heads_read"], out, heads_off, per_kv)


def _lower(values: np.ndarray, visible: np.ndarray) -> np.ndarray:
    """The variant on the visible part only: NaN above the diagonal, where `explains` compares nothing."""
    lower: np.ndarray = np.where(visible, values, np.nan)
    return lower


def _softmax(scores: np.ndarray, over: np.ndarray) -> np.ndarray:
    """The softmax of each row over the keys `over` marks (0 at the others), the max subtracted. float64."""
    masked = np.where(over, scores, -np.inf)
    weights = np.exp(masked - masked.max(axis=-1, keepdims=True))
    probabilities: np.ndarray = weights / weights.sum(axis=-1, keepdims=True)
    return probabilities


def _weighted_sum(probabilities: np.ndarray, v: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """out[i][h] = sum over j of probabilities[h][i][j] * v[j][heads[h]]: [T][32][64] float64."""
    vh = np.ascontiguousarray(v.astype(np.float64)[:, heads, :].transpose(1, 0, 2))  # [32][T][64]
    summed: np.ndarray = np.matmul(probabilities, vh).transpose(1, 0, 2)
    assert summed.shape[1:] == (QUERY_HEADS, HEAD_DIM)
    return summed


def _reproduces(buffer: np.ndarray, variant: np.ndarray, region: np.ndarray) -> bool:
    """The variant reproduces the buffer in `region`: within the pass rule where the variant is finite, not
    finite where it is not (an overflow the kernel made too), and finite somewhere."""
    region = np.broadcast_to(region, variant.shape)
    defined = region & np.isfinite(variant)
    undefined = region & ~np.isfinite(variant)
    return (
        bool(defined.any())
        and bool(within_tolerance(buffer[defined], variant[defined]).all())
        and bool((~np.isfinite(buffer[undefined])).all())
    )


def _differ(a: np.ndarray, b: np.ndarray) -> bool:
    """Two variants tell apart somewhere: an element where one is not within the pass rule of the other."""
    same = (np.isnan(a) & np.isnan(b)) | within_tolerance(a, b)
    return not bool(same.all())
