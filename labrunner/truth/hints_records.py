"""What the hints read and give, as plain data (`truth/hints.py` derives one from the other).

A failing case's evidence is gathered once in the driver (`gather_evidence`) and read by
`derive_hints` with every other case's: both sides, and the tests, share these records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NotRequired, TypedDict

import numpy as np


class RescaleMissing(TypedDict):
    tile: int
    left_out: str


class Evidence(TypedDict):
    """What one failing case shows (`gather_evidence`). The decode keys are there for decode cases only,
    the factor keys where the wrong values are the exact ones times a factor, the stage keys where a
    staged pipeline (lab 1's three kernels) was rerun kernel by kernel and each buffer compared."""

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
    nan_only_matches: NotRequired[list[str]]  # of those, the ones NaN everywhere, as the output is: no evidence alone
    kv_heads_read: dict[int, int]  # wrong query head -> the KV head its output is attention over
    # wrong query head -> the KV head its scores (K) or its values (V) alone were read from, the other at h / 4
    k_heads_read: NotRequired[dict[int, int]]
    v_heads_read: NotRequired[dict[int, int]]
    # the online softmax that reproduces the output: its key tile (1: a key at a time) and what it left
    # unrescaled ("acc" or "l")
    rescale_missing: NotRequired[RescaleMissing]
    # the file's launch constants, where the unwritten rows repeat by block (`truth/hints.py`'s bounds)
    launch_constants: NotRequired[dict[str, int]]
    compared: bool  # the variants were recomputed
    empty_partition_rows: NotRequired[list[int]]
    partial_page_rows: NotRequired[list[int]]
    nonfinite_rows: NotRequired[list[int]]
    # decode: the sequences with an empty split when each is cut into maxParts equal splits (`hints_splits`)
    empty_split_rows: NotRequired[list[int]]
    # decode: tile size -> the sequences whose last tile of that many keys reads a -1 entry of the block
    # table's padding (`hints_padding`)
    padding_rows: NotRequired[dict[int, list[int]]]
    past_table_rows: NotRequired[dict[int, list[int]]]  # tile size -> the sequences whose last tile reads past it
    # the output's error has the signature of dots on TF32 operands (`hints_precision`): "tf32" (Triton's
    # default, operands truncated) or "tf32-rounded" (cvt.rna); in an exact case "exact-" and either, or
    # "exact-tf32x3" (V's row as tf32x3 leaves it); "" compared and none
    precision: NotRequired[str]
    # Every wrong element is the exact value times this one factor (`hints_factor`); `factor_text` is the
    # factor as the message writes it (every digit float32 keeps where the case is exact).
    factor: NotRequired[float]
    factor_text: NotRequired[str]
    # Every failing (row, head) is the exact value times a factor of its own: the smallest and largest.
    row_factors: NotRequired[list[float]]
    # A staged pipeline's kernels in order (scores, probabilities, output) and what each stage's buffer
    # shows (`hints_stages`).
    stage_kernels: NotRequired[list[str]]
    stage_matches: NotRequired[list[str]]
    scores_kv_heads_read: NotRequired[dict[int, int]]  # query head -> the KV head its scores were taken against
    wsum_kv_heads_read: NotRequired[dict[int, int]]  # query head -> the KV head its weighted sum read V from
    stages_compared: NotRequired[bool]
    # The race was seen between blocks: only their order changed, and the output moved (truth/judge.py).
    between_blocks: NotRequired[bool]


class Hint(TypedDict):
    hazard: str  # one of HAZARDS
    text: str


class AttentionChange(TypedDict, total=False):
    """The one thing a prefill variant changes (`variant_attention`'s keywords)."""

    scale: float
    shift: int
    kv_head: int
    k_head: int
    v_head: int


class DecodeChange(TypedDict, total=False):
    """The one thing a decode variant changes (`decode_variant`'s keywords)."""

    scale: float
    kv_head: int
    k_head: int
    v_head: int
    page_index: Callable[[np.ndarray], np.ndarray]
    keys: Callable[[int], int]
    unrescaled_partition: int
    first_partition_max: int
    equal_splits: int
