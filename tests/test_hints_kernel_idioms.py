"""Hints for the mistakes real Triton kernels make (and `.cu` files can make the same way): a causal edge one
key late behind a zero-filled load, equal splits in lab 3's combine, dots on TF32 operands, the block
table's padding read as pages.

Each mistake is made in a float32 simulation of a kernel's own loop (the shipped Triton solutions' and the
equal-splits port's, tiles, running maxima and dot precision as the GPU and the CPU's interpreter round
them), graded by the checker, and its evidence read as the driver reads it; each hint is asserted with its
exact words, and the same loops without the mistake, or with another one, must not earn it.
"""

from __future__ import annotations

import numpy as np
import pytest

from labrunner.truth.cases import load_catalogue, make_inputs
from labrunner.truth.checker import check_output
from labrunner.truth.contract import GROUP, QUERY_HEADS
from labrunner.truth.hints import derive_hints, gather_evidence
from labrunner.truth.hints_precision import tf32_rounded, tf32_truncated
from labrunner.truth.paged_cache import PAGE_TOKENS, max_parts

SEED = 20261129
F32 = np.float32
LOG2E = 1.4426950408889634

ZERO_KEY_TEXT = (
    "the output is attention with one key past the diagonal counted: the next key, or past the keys a tile "
    "loaded a zero key (a masked load's other=0.0, a tile padded with 0), which scores 0 and still takes "
    "exp(0 - max) of the weight: row i sees keys j <= prefixLen + i, and no further (test n <= prefixLen + i, and "
    "give every key the test leaves out the score -inf)"
)
TF32_TEXT = (
    "the error is what dots on TF32 operands leave (10 of float32's 23 mantissa bits: Triton's tl.dot default "
    'for float32), about 1e-3 of each value: write tl.dot(..., input_precision="tf32x3") (as accurate as '
    'float32 here, still on the tensor cores) or "ieee"'
)
TF32_ONE_KEY_TEXT = (
    "single-token's one-key output is V's row with its low 13 mantissa bits dropped, as a dot on TF32 operands "
    "(10 mantissa bits; Triton's tl.dot default for float32) reads it, where it must be V's row exactly: take "
    'the scores with tl.dot(..., input_precision="tf32x3") and p @ v with "ieee" (or V split into TF32 parts '
    "that sum to it exactly)"
)
TF32X3_ONE_KEY_TEXT = (
    "single-token's one-key output is V's row as tf32x3 leaves it (rounded to TF32, plus its remainder read as "
    "TF32: the last bits lost), where it must be V's row exactly: tf32x3 suits the scores, but take p @ v with "
    'input_precision="ieee", or split V into TF32 parts that sum to it exactly'
)
EMPTY_SPLIT_TEXT = (
    "exactly the sequences with an empty split fail, with nan: cut into maxParts equal splits of "
    "cdiv(seqLens[b], maxParts) keys, a short sequence's last splits hold no keys, and an empty split has max "
    "-inf and sum 0 (its output 0 / 0 is nan, and 0 * nan is nan in the combine): store nothing for it and skip "
    "it in the combine (a split whose start is at or past seqLens[b])"
)
SPLIT_TAIL_TEXT = (
    "the output is attention without the last seqLens[b] % maxParts keys of each sequence, as equal splits of "
    "seqLens[b] / maxParts keys (rounded down) leave them: a split holds cdiv(seqLens[b], maxParts) keys, and "
    "the last ends at seqLens[b]"
)
COMBINE_NO_RESCALE_TEXT = (
    "the output is every partition's softmax added up as it stands: partitions have different maxima, so "
    "scale each partition's sum and accumulator by exp(partMax - globalMax) before adding them, and divide once"
)
PADDING_TEXT = (
    "exactly the sequences with a partly used last page, or whose last tile of 32 or 64 keys runs past their last "
    "page, fail, with nan: keys past a sequence's end are loaded, in its last page rows of garbage and past it "
    "through the block table's -1 padding (page -1 lies before kCache): a key at or past seqLens[b] must not be "
    "loaded at all (mask its block-table read and its K and V loads with key < seqLens[b])"
)
MASKED_NAN_TEXT = (
    "only sequences whose last page is partly used fail, with nan: the rows past a sequence's end hold garbage, "
    "and a masked key must never be loaded into a sum (0 * NaN is NaN): skip it, do not weight it by 0"
)


# --- the kernels' loops, in float32 ------------------------------------------------------------------------


def dot(a: np.ndarray, b: np.ndarray, precision: str) -> np.ndarray:
    """a @ b of float32 operands as an sm_90 GPU's tl.dot computes it (labrunner/run/cpu/triton_module.py has
    the evidence): "tf32" reads each operand with its low 13 mantissa bits dropped, "tf32x3" adds the products
    of rounded parts and truncated remainders, "ieee" is float32 FMAs."""
    a, b = np.asarray(a, F32), np.asarray(b, F32)
    if precision == "ieee":
        return np.matmul(a, b, dtype=F32)
    if precision == "tf32":
        return np.matmul(tf32_truncated(a), tf32_truncated(b), dtype=F32)
    if precision == "tf32-rna":  # a .cu file's wmma on operands converted with __float_to_tf32 (cvt.rna)
        return np.matmul(tf32_rounded(a), tf32_rounded(b), dtype=F32)
    a_big, b_big = tf32_rounded(a), tf32_rounded(b)
    partial = np.matmul(tf32_truncated(a - a_big), b_big, dtype=F32)
    partial = partial + np.matmul(a_big, tf32_truncated(b - b_big), dtype=F32)
    return np.asarray(np.matmul(a_big, b_big, dtype=F32) + partial, F32)


@np.errstate(invalid="ignore", over="ignore")
def lab2_prefill(
    inputs, prefix: int, precision: str = "tf32x3", late: int = 0, scale: float = 0.125, block_m: int = 32
) -> np.ndarray:
    """kernels/lab2/solution.py's loop: a program per BLOCK_M rows and KV group, the four query heads stacked,
    key tiles of 64 loaded with the keys past the program's range masked to 0.0, the causal test `n <= prefix
    + row + late`. A `.cu` flash kernel that pads its shared K/V tile with zeros is the same loop."""
    q, k, v = inputs.q, inputs.k, inputs.v
    rows, block_n = q.shape[0], 64
    out = np.zeros(q.shape, F32)
    for first in range(0, rows, block_m):
        r = np.arange(block_m * GROUP)
        row, inside = first + r // GROUP, first + r // GROUP < rows
        for g in range(QUERY_HEADS // GROUP):
            head = g * GROUP + r % GROUP
            qt = np.where(inside[:, None], q[np.minimum(row, rows - 1), head], 0).astype(F32) * F32(scale)
            m, l_i, acc = np.full(r.size, -np.inf, F32), np.zeros(r.size, F32), np.zeros((r.size, 64), F32)
            end = min(prefix + first + block_m, prefix + rows)
            for start in range(0, end, block_n):
                n = start + np.arange(block_n)
                real = (n < end)[:, None]
                kt = np.where(real, k[np.minimum(n, end - 1), g], F32(0))
                vt = np.where(real, v[np.minimum(n, end - 1), g], F32(0))
                s = dot(qt, kt.T, precision)
                s = np.where(n[None, :] <= (prefix + row + late)[:, None], s, F32(-np.inf))
                m_new = np.maximum(m, s.max(axis=1))
                alpha, p = np.exp(m - m_new), np.exp(s - m_new[:, None])
                l_i = l_i * alpha + p.sum(axis=1, dtype=F32)
                acc = acc * alpha[:, None] + dot(p, vt, precision)
                m = m_new
            out[row[inside], head[inside]] = (acc / l_i[:, None])[inside]
    return out


def key_rows(inputs, b: int, keys: np.ndarray, masked: bool = True) -> np.ndarray:
    """The cache rows of `keys` of sequence b through its block table (row -1 where the table's entry is -1 or
    the read runs past the table: an address outside kCache). `masked`: keys past the end read no entry."""
    table = inputs.block_table.reshape(-1)
    index = b * inputs.block_table.shape[1] + keys // PAGE_TOKENS
    page = np.where(index < table.size, table[np.minimum(index, table.size - 1)], -1)
    if masked:
        page = np.where(keys < inputs.lengths[b], page, 0)
    return np.where(page < 0, -1, page.astype(np.int64) * PAGE_TOKENS + keys % PAGE_TOKENS)


def gathered(cache: np.ndarray, rows: np.ndarray, g: int, real: np.ndarray | None) -> np.ndarray:
    """K or V rows of KV head g: zero where `real` masks the key out, NaN at an address outside the cache (the
    guard band before it holds the poison)."""
    values = np.where((rows >= 0)[:, None], cache[np.maximum(rows, 0), g], F32(np.nan))
    return values if real is None else np.where(real[:, None], values, F32(0))


@np.errstate(invalid="ignore", over="ignore")
def lab3_decode(
    inputs, partition: int, scores: str = "tf32x3", weighted: str = "ieee", unmasked: bool = False, block_n: int = 64
) -> np.ndarray:
    """kernels/lab3/solution.py's loops: partitions of `partition` keys, tiles of 64 keys through the block
    table, q scaled by log2(e) / 8 and exp2, then the combine by the partitions' maxima. `weighted`: the p @ v
    dot ("ieee" stands for the solution's exact split). `unmasked`: K and V loaded for every key of a tile of
    `block_n`, the keys past the end only scored -inf."""
    q, lengths = inputs.q, inputs.lengths
    parts_grid = max_parts(max(lengths), partition)
    out = np.zeros(q.shape, F32)
    for b, n in enumerate(lengths):
        part_out = np.zeros((parts_grid, QUERY_HEADS, 64), F32)
        part_max = np.full((parts_grid, QUERY_HEADS), -np.inf, F32)
        part_sum = np.zeros((parts_grid, QUERY_HEADS), F32)
        for part in range(-(-n // partition)):
            start, end = part * partition, min(part * partition + partition, n)
            for g in range(QUERY_HEADS // GROUP):
                heads = slice(g * GROUP, g * GROUP + GROUP)
                qt = q[b, heads] * F32(0.125 * LOG2E)
                m, l_i, acc = np.full(GROUP, -np.inf, F32), np.zeros(GROUP, F32), np.zeros((GROUP, 64), F32)
                for first in range(start, end, block_n):
                    key = first + np.arange(block_n)
                    real = key < end
                    rows = key_rows(inputs, b, key, masked=not unmasked)
                    mask = None if unmasked else real
                    kt, vt = gathered(inputs.k, rows, g, mask), gathered(inputs.v, rows, g, mask)
                    s = np.where(real[None, :], dot(qt, kt.T, scores), F32(-np.inf))
                    m_new = np.maximum(m, s.max(axis=1))
                    alpha, p = np.exp2(m - m_new), np.exp2(s - m_new[:, None])
                    l_i = l_i * alpha + p.sum(axis=1, dtype=F32)
                    acc = acc * alpha[:, None] + dot(p, vt, weighted)
                    m = m_new
                part_out[part, heads], part_max[part, heads], part_sum[part, heads] = acc, m, l_i
        used = -(-n // partition)
        top = part_max[:used].max(axis=0)
        factor = np.exp2(part_max[:used] - top)
        out[b] = (factor[..., None] * part_out[:used]).sum(axis=0) / (factor * part_sum[:used]).sum(axis=0)[:, None]
    return out


@np.errstate(invalid="ignore", over="ignore", divide="ignore")
def equal_splits_decode(inputs, splits: int, empty_kept: bool = False, rescaled: bool = True, floor=False):
    """tests/fixtures/lab3/correct/triton_equal_splits.py's two stages: each sequence cut into `splits` equal
    splits of cdiv(n, splits) keys, each stored divided by its own sum with its log-sum-exp, merged by their
    log-sum-exps. `empty_kept`: an empty split stored as it stands (0 / 0, -inf + log 0) and merged; `rescaled`
    False: the splits' outputs weighted by their sums alone (no max); `floor`: n // splits keys a split."""
    q, lengths = inputs.q, inputs.lengths
    out = np.zeros(q.shape, F32)
    for b, n in enumerate(lengths):
        size = n // splits if floor else -(-n // splits)
        acc, e_sum, e_max = (
            np.zeros((QUERY_HEADS, 64), F32),
            np.zeros(QUERY_HEADS, F32),
            np.full(QUERY_HEADS, -np.inf, F32),
        )
        for split in range(splits):
            start, end = size * split, min(size * split + size, n)
            if end <= start and not empty_kept:
                continue
            heads = np.arange(QUERY_HEADS)
            s_acc, s_sum, s_max = (
                np.zeros((QUERY_HEADS, 64), F32),
                np.zeros(QUERY_HEADS, F32),
                np.full(QUERY_HEADS, -np.inf, F32),
            )
            for first in range(start, end, 64):
                key = first + np.arange(64)
                real = key < end
                rows = key_rows(inputs, b, np.where(real, key, 0))
                k = np.stack([gathered(inputs.k, rows, g, real) for g in range(8)], axis=1)[:, heads // GROUP]
                v = np.stack([gathered(inputs.v, rows, g, real) for g in range(8)], axis=1)[:, heads // GROUP]
                qk = np.where(real[:, None], (q[b][None] * k).sum(axis=2, dtype=F32) * F32(0.125), F32(-np.inf))
                n_max = np.maximum(qk.max(axis=0), s_max)
                re_scale, p = np.exp(s_max - n_max), np.exp(qk - n_max)
                s_acc = s_acc * re_scale[:, None] + (p[..., None] * v).sum(axis=0, dtype=F32)
                s_sum, s_max = s_sum * re_scale + p.sum(axis=0, dtype=F32), n_max
            split_out, lse = s_acc / s_sum[:, None], s_max + np.log(s_sum)
            if rescaled:
                n_max = np.maximum(lse, e_max)
                old, weight = np.exp(e_max - n_max), np.exp(lse - n_max)
                acc = acc * old[:, None] + weight[:, None] * split_out
                e_sum, e_max = e_sum * old + weight, n_max
            else:
                acc, e_sum = acc + s_sum[:, None] * split_out, e_sum + s_sum
        out[b] = acc / e_sum[:, None]
    return out


# --- grading a simulated output as the driver does ---------------------------------------------------------


def lab_case(lab: str, name: str, partition: int = 64):
    case = next(c for c in load_catalogue(lab).cases if c.name == name)
    return case.resolved(partition) if case.decode else case


def found(case, inputs, out) -> dict:
    reference = inputs.reference()
    checked = check_output(out, reference, exact=case.exact)
    if checked.passed:
        return {}
    with np.errstate(divide="raise", over="raise", invalid="raise"):  # no numpy warning reaches a student
        return gather_evidence(case, inputs, out, reference, checked.status, checked.failing_rows)


def hints_of(results: list[dict]) -> list[tuple[str, str]]:
    return [(h["hazard"], h["text"]) for h in derive_hints([r for r in results if r])]


def graded(lab: str, names: list[str], kernel, partition: int = 64) -> list[dict]:
    """Each named case's evidence ({} where it passes) for the output `kernel(case, inputs)` gives."""
    results = []
    for name in names:
        case = lab_case(lab, name, partition)
        inputs = make_inputs(case, SEED)
        results.append(found(case, inputs, kernel(case, inputs)))
    return results


LAB2_CPU_CASES = [
    "C1-P31",
    "C17-P31",
    "C33-P31",
    "C1-P1000",
    "C17-P1000",
    "C33-P1000",
    "planted-C33-P31",
    "lastkey-C17-P31",
]
LAB3_CPU_CASES = [
    "single-token",
    "lengths-around-p",
    "skewed",
    "planted-key0",
    "planted-middle",
    "planted-last-partition",
]


# --- a causal edge one key late behind a zero-filled load ---------------------------------------------------

PREFIX_31 = ["C1-P31", "C17-P31", "C33-P31"]


@pytest.mark.slow
def test_the_causal_edge_one_key_late_behind_a_zero_filled_load_is_a_causal_hint():
    # the shipped lab-2 loop with `n <= prefix + row + 1`: rows 0-30 of a program count the next key, row 31
    # and the chunk's last row a zero key, so the whole-output variant with the real next key explains no case
    results = graded("lab2", PREFIX_31, lambda case, inputs: lab2_prefill(inputs, case.prefix, late=1))
    assert [r["failing_rows"][:3] for r in results] == [[0], [0, 1, 2], [0, 1, 2]]
    assert [r["matches"] for r in results] == [["causal-zero-key"]] * 3
    assert hints_of(results) == [("causal-mask", ZERO_KEY_TEXT)]


def test_a_cu_tile_padded_with_zeros_past_the_chunk_earns_the_same_hint():
    # one block over the whole chunk, its last tile padded with zeros past the cache: only the chunk's last
    # row meets the zero key, every other row the real next one
    def padded(case, inputs):
        return lab2_prefill(inputs, case.prefix, late=1, block_m=64)

    results = graded("lab2", PREFIX_31, padded)
    assert hints_of(results) == [("causal-mask", ZERO_KEY_TEXT)]


@pytest.mark.slow
def test_a_long_prefix_hides_the_zero_key():
    # C1-P1000: the zero key's exp(0 - max) is lost among a thousand keys: the case passes, as the issue found
    case = lab_case("lab2", "C1-P1000")
    inputs = make_inputs(case, SEED)
    assert check_output(lab2_prefill(inputs, case.prefix, late=1), inputs.reference()).passed


def test_the_real_next_key_everywhere_keeps_the_plain_words():
    from labrunner.truth.hints import variant_attention

    def late(case, inputs):
        return variant_attention(inputs.q, inputs.k, inputs.v, case.prefix, shift=1).astype(F32)

    results = graded("lab2", PREFIX_31[1:], late)
    assert all({"causal-plus-one", "causal-zero-key"} <= set(r["matches"]) for r in results)
    assert hints_of(results) == [
        (
            "causal-mask",
            "the output is attention with one key past the diagonal counted: row i sees keys j <= prefixLen + i, "
            "and no further",
        )
    ]


def test_the_shipped_loop_passes_and_another_mistake_is_not_a_zero_key():
    assert graded("lab2", PREFIX_31, lambda case, inputs: lab2_prefill(inputs, case.prefix)) == [{}, {}, {}]
    results = graded("lab2", PREFIX_31, lambda case, inputs: lab2_prefill(inputs, case.prefix, scale=1.0))
    assert all("causal-zero-key" not in r["matches"] and r["precision"] == "" for r in results)
    assert [h for h, _ in hints_of(results)] == ["scale"]


# --- dots on TF32 operands -----------------------------------------------------------------------------------


def test_plain_tf32_dots_in_lab_2_are_a_precision_hint():
    results = graded("lab2", PREFIX_31, lambda case, inputs: lab2_prefill(inputs, case.prefix, precision="tf32"))
    assert [r["precision"] for r in results] == ["tf32"] * 3
    assert hints_of(results) == [("precision", TF32_TEXT)]


def test_a_cu_files_rounded_tf32_operands_are_said_as_such():
    results = graded("lab2", PREFIX_31, lambda case, inputs: lab2_prefill(inputs, case.prefix, precision="tf32-rna"))
    assert [r["precision"] for r in results] == ["tf32-rounded"] * 3
    assert hints_of(results) == [
        (
            "precision",
            "the error is what dots on operands rounded to TF32 (10 of float32's 23 mantissa bits, "
            "cvt.rna.tf32.f32) leave, about 1e-3 of each value: split each operand into a TF32 part and its "
            "remainder and add the three products (3xTF32), or keep float32 FMAs",
        )
    ]


def wrong_case(name: str, **given) -> dict:
    """A failing case's evidence as `gather_evidence` leaves it, for the rules alone."""
    base = {
        "case": name,
        "status": "wrong",
        "rows": 17,
        "prefix": 31,
        "planted": False,
        "last_key": False,
        "nonfinite": 0,
        "workspace_poisoned": 0,
        "failing_rows": [0, 1],
        "heads_wrong": [0, 1],
        "matches": [],
        "kv_heads_read": {},
        "compared": True,
    }
    return {**base, **given}


def test_a_precision_hint_needs_every_compared_case_and_ignores_one_too_large_to_compare():
    # C2048-P2048 (a GPU case) is too large to recompute: it carries no signature and says nothing either way
    large = wrong_case("C2048-P2048", compared=False)
    assert hints_of([wrong_case("C1-P31", precision="tf32"), large]) == [("precision", TF32_TEXT)]
    assert hints_of([wrong_case("C1-P31", precision="tf32"), wrong_case("C17-P31", precision="")]) == []
    assert hints_of([wrong_case("C1-P31", precision="tf32"), wrong_case("C17-P31", status="never-written")]) == [
        (
            "unwritten",
            "some outputs were never written, or were computed from a value never written: write every "
            "row, head and dim, and read no buffer before it is set",
        )
    ]
    assert hints_of([large]) == []


def test_tf32x3_dots_pass_lab_2():
    assert graded("lab2", PREFIX_31, lambda case, inputs: lab2_prefill(inputs, case.prefix, precision="tf32x3")) == [
        {},
        {},
        {},
    ]


@pytest.mark.slow
def test_plain_tf32_dots_in_lab_3_are_named_by_the_one_key_case():
    results = graded("lab3", LAB3_CPU_CASES, lambda case, inputs: lab3_decode(inputs, 64, "tf32", "tf32"))
    assert [r["precision"] for r in results] == ["exact-tf32"] + ["tf32"] * 5
    assert hints_of(results) == [("precision", TF32_ONE_KEY_TEXT)]


def test_tf32_scores_alone_in_lab_3_are_found_in_the_tolerance_cases():
    # a one-key sequence is exact (p = 1, V through an exact dot), the rest carry the scores' TF32 error, which
    # the simulation with q scaled by log2(e) / 8 before it is rounded (base-2 exponentials) explains
    results = graded("lab3", LAB3_CPU_CASES, lambda case, inputs: lab3_decode(inputs, 64, "tf32", "ieee"))
    assert results[0] == {} and [r["precision"] for r in results[1:]] == ["tf32"] * 5
    assert hints_of(results) == [("precision", TF32_TEXT)]


def test_tf32x3_for_p_at_v_fails_only_the_one_key_case_and_is_no_rounding_factor():
    # the one-key row is V's row to within float32's rounding of a factor 1, which alone would be said as a
    # constant; the bits are exactly tf32x3's
    results = graded("lab3", LAB3_CPU_CASES, lambda case, inputs: lab3_decode(inputs, 64, "tf32x3", "tf32x3"))
    assert results[1:] == [{}] * 5 and results[0]["precision"] == "exact-tf32x3" and "factor" in results[0]
    assert hints_of(results) == [("precision", TF32X3_ONE_KEY_TEXT)]


def test_the_shipped_lab_3_loop_passes():
    assert graded("lab3", LAB3_CPU_CASES, lambda case, inputs: lab3_decode(inputs, 64)) == [{}] * 6


# --- equal splits in lab 3's combine -------------------------------------------------------------------------


def splits_of(case) -> int:
    return max_parts(case.prefix, case.partition)


def test_an_empty_equal_split_merged_is_an_empty_partition_hint_not_masked_nan():
    # at p = 64, lengths-around-p's grid has 3 splits: 1 and 2 keys leave an empty one, 16 keys (6, 6, 4) do
    # not; fixed partitions of 64 would leave sequences 0 to 8 with one
    results = graded(
        "lab3", LAB3_CPU_CASES, lambda case, inputs: equal_splits_decode(inputs, splits_of(case), empty_kept=True)
    )
    lengths = next(r for r in results if r)
    assert (lengths["case"], lengths["failing_rows"], lengths["empty_split_rows"]) == (
        "lengths-around-p",
        [0, 1],
        [0, 1],
    )
    assert lengths["empty_partition_rows"] == list(range(9))
    assert hints_of(results) == [("empty-partition", EMPTY_SPLIT_TEXT)]


@pytest.mark.slow
def test_equal_splits_added_without_rescaling_are_a_combine_hint():
    results = graded(
        "lab3", LAB3_CPU_CASES, lambda case, inputs: equal_splits_decode(inputs, splits_of(case), rescaled=False)
    )
    failing = [r for r in results if r]
    assert all("splits-no-rescale" in r["matches"] and "combine-no-rescale" not in r["matches"] for r in failing)
    assert hints_of(results) == [("combine-rescale", COMBINE_NO_RESCALE_TEXT)]


def test_a_split_length_rounded_down_is_a_tail_hint():
    results = graded(
        "lab3", LAB3_CPU_CASES, lambda case, inputs: equal_splits_decode(inputs, splits_of(case), floor=True)
    )
    assert all("split-tail" in r["matches"] and "partition-tail" not in r["matches"] for r in results if r)
    assert hints_of(results) == [("partition-tail", SPLIT_TAIL_TEXT)]


def test_the_equal_splits_port_passes():
    assert graded("lab3", LAB3_CPU_CASES, lambda case, inputs: equal_splits_decode(inputs, splits_of(case))) == [{}] * 6


# --- the block table's padding --------------------------------------------------------------------------------


@pytest.mark.slow
def test_keys_loaded_through_the_tables_padding_are_a_page_table_hint():
    # K and V loaded for every key of a 64-key tile: a partly used last page's NaN rows, and past the last page
    # the -1 padding's page (NaN before kCache); 32-key tiles would fail the same sequences in these cases
    results = graded("lab3", LAB3_CPU_CASES, lambda case, inputs: lab3_decode(inputs, 64, unmasked=True))
    lengths = results[1]
    assert (lengths["failing_rows"], lengths["partial_page_rows"]) == ([0, 1, 2, 3, 4, 5, 7, 9], [0, 1, 2, 4, 5, 7, 9])
    assert hints_of(results) == [("page-table", PADDING_TEXT)]


def test_a_masked_key_read_within_the_last_page_stays_masked_nan():
    # 16-key tiles end with the page: the NaN rows of a partly used last page are read, the padding never
    results = graded("lab3", LAB3_CPU_CASES, lambda case, inputs: lab3_decode(inputs, 64, unmasked=True, block_n=16))
    assert all(r["failing_rows"] == r["partial_page_rows"] for r in results if r)
    assert hints_of(results)[0] == ("masked-nan", MASKED_NAN_TEXT)
