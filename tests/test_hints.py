"""Hints from evidence in every lab: lab 1 stage by stage, the combine's rescale by the wrong maximum,
and an error that is one constant factor. Each hint from synthetic evidence with its exact hazard and
text, and each kind of evidence from arrays built to show it (no kernel runs here: the fixture suite
grades the kernels, tests/fixture_suite.py)."""

from __future__ import annotations

import numpy as np
import pytest

from labrunner.truth.cases import load_catalogue, make_inputs
from labrunner.truth.checker import check_output
from labrunner.truth.contract import GROUP, HEAD_DIM, KV_HEADS, QUERY_HEADS, SCALE
from labrunner.truth.hints import (
    add_stage_evidence,
    decode_variant,
    derive_hints,
    factor_words,
    gather_evidence,
    online_without_rescale,
    variant_attention,
)
from labrunner.truth.hints_factor import factor_evidence

SEED = 20261129
KERNELS = ["attn_scores", "attn_softmax", "attn_weighted_sum"]


def evidence(**given) -> dict:
    """A failing lab-1 case at T = 17, its variants compared."""
    base = {
        "case": "T17",
        "status": "wrong",
        "rows": 17,
        "prefix": 0,
        "planted": False,
        "last_key": False,
        "nonfinite": 0,
        "workspace_poisoned": 0,
        "failing_rows": list(range(16)),
        "heads_wrong": list(range(32)),
        "matches": [],
        "kv_heads_read": {},
        "compared": True,
    }
    return {**base, **given}


def staged(**given) -> dict:
    """The same case with its three stages compared."""
    return evidence(
        **{
            "stage_kernels": KERNELS,
            "stage_matches": [],
            "scores_kv_heads_read": {},
            "wsum_kv_heads_read": {},
            "stages_compared": True,
            **given,
        }
    )


def decode_evidence(**given) -> dict:
    """A failing lab-3 case: planted-middle at p = 512 (one sequence of 1,543 keys)."""
    return evidence(
        **{
            "case": "planted-middle",
            "rows": 1,
            "prefix": 1543,
            "planted": True,
            "nonfinite": 64,
            "failing_rows": [0],
            "heads_wrong": [0],
            "empty_partition_rows": [],
            "partial_page_rows": [0],
            "nonfinite_rows": [0],
            **given,
        }
    )


def hinted(cases) -> list[tuple[str, str]]:
    return [(h["hazard"], h["text"]) for h in derive_hints(cases)]


# --- lab 1, stage by stage ----------------------------------------------------------------------------


def test_a_softmax_without_its_max_is_named_where_other_cases_fail_too():
    # T1 fails its exactness rule (expf(s) * (1 / expf(s)) is not 1), so "only the planted cases fail" does not hold
    cases = [
        evidence(case="T1", rows=1, failing_rows=[0], heads_wrong=[], compared=False, factor=1 - 2.0**-24),
        staged(case="planted-T40", rows=40, planted=True, nonfinite=320, stage_matches=["softmax-no-max"]),
    ]
    assert hinted(cases) == [
        (
            "max-subtraction",
            "attn_softmax's probabilities overflow to inf or nan where a score passes 88 (case planted-T40), as "
            "exp(s) without the row max does: subtract the row max before exponentiating (exp(s - max) is at most 1)",
        )
    ]


def test_a_weighted_sum_past_the_diagonal_is_a_causal_mask_hint():
    cases = [staged(stage_matches=["wsum-over-upper"]), staged(case="T33", rows=33, stage_matches=["wsum-over-upper"])]
    assert hinted(cases) == [
        (
            "causal-mask",
            "attn_weighted_sum sums over keys above the diagonal, where attn_softmax left what attn_scores wrote: "
            "row i weights keys j <= i only (stop at key i, or write 0 above the diagonal)",
        )
    ]


def test_a_softmax_over_the_whole_row_is_a_causal_mask_hint():
    cases = [staged(stage_matches=["softmax-over-upper", "wsum-over-upper"], matches=["causal-none"])]
    assert hinted(cases) == [
        (
            "causal-mask",
            "attn_softmax normalises over keys above the diagonal too, which attn_scores left as scores: row i "
            "sees keys j <= i only (-INFINITY above the diagonal, or a softmax that stops at key i)",
        )
    ]


def test_attention_over_every_key_is_a_causal_mask_hint_in_any_lab():
    assert hinted([evidence(case="C17-P31", prefix=31, matches=["causal-none"])]) == [
        (
            "causal-mask",
            "the output is attention over every key, above the diagonal too: row i sees keys j <= prefixLen + i, "
            "and no further",
        )
    ]


def test_a_stage_match_in_some_cases_only_is_no_hint():
    cases = [staged(stage_matches=["wsum-over-upper"]), staged(case="T33", rows=33, stage_matches=[])]
    assert hinted(cases) == []


def test_scores_against_another_kv_head_are_a_gqa_hint_naming_the_scores_kernel():
    # h % 8 in the scores only: heads 0, 10, 21 and 31 are right (h % 8 == h / 4 there)
    wrong = [h for h in range(32) if h % KV_HEADS != h // GROUP]
    cases = [staged(heads_wrong=wrong, scores_kv_heads_read={h: h % KV_HEADS for h in wrong})]
    assert hinted(cases) == [
        (
            "gqa-mapping",
            "attn_scores takes query head 1's scores against KV head 1, where it must use KV head h / 4 = 0 "
            "(GROUP = 4: heads 0-3 share KV head 0)",
        )
    ]


def test_v_from_another_kv_head_is_a_gqa_hint_naming_the_weighted_sum():
    cases = [staged(heads_wrong=[5, 6], wsum_kv_heads_read={5: 5, 6: 6})]
    assert hinted(cases) == [
        (
            "gqa-mapping",
            "attn_weighted_sum takes query head 5's V from KV head 5, where it must use KV head h / 4 = 1 "
            "(GROUP = 4: heads 0-3 share KV head 0)",
        )
    ]


def test_a_gqa_hint_needs_every_wrong_head_explained():
    assert hinted([staged(heads_wrong=[5, 6, 7], scores_kv_heads_read={5: 5, 6: 6})]) == []


def test_probabilities_at_the_wrong_scale_are_a_scale_hint():
    assert hinted([staged(stage_matches=["scores-scale-missing", "probabilities-scale-missing"])]) == [
        (
            "scale",
            "attn_softmax's probabilities are the softmax of scores with the scale missing: scores are q.k / 8, "
            "exactly 0.125, applied once (attn_scores or attn_softmax)",
        )
    ]


def test_unscaled_scores_alone_are_no_scale_hint():
    # the scale applied inside the softmax instead (tests/fixtures/lab1/correct/scale_in_softmax.cu) is a split
    # of the same work: the scores stage alone says nothing
    assert hinted([staged(stage_matches=["scores-scale-missing"])]) == []


# --- lab 3: the combine's rescale by the wrong maximum --------------------------------------------------


def test_a_combine_rescaled_by_partition_0s_max_gets_its_own_hint_and_not_the_patterns_it_looks_like():
    # what it got before: only planted sequences fail, with NaN, on partly used last pages
    assert [h for h, _ in hinted([decode_evidence()])] == ["max-subtraction", "masked-nan"]
    cases = [decode_evidence(matches=["combine-first-max"]), decode_evidence(case="planted-last-partition")]
    cases[1]["matches"] = ["combine-first-max"]
    assert hinted(cases) == [
        (
            "combine-rescale",
            "the output is the partitions rescaled by partition 0's maximum, exp(partMax - partMax[0]): a later "
            "partition's max can lie more than 88 above the first's and expf overflows (inf / inf is nan); "
            "rescale by the global max over all of a sequence's partitions, so every factor is at most 1",
        )
    ]


def test_decode_evidence_recognises_a_combine_rescaled_by_partition_0s_max():
    case = next(c for c in load_catalogue("lab3").cases if c.name == "planted-middle").resolved(64)
    inputs = make_inputs(case, 5)
    reference = inputs.reference()
    with np.errstate(invalid="ignore"):
        out = decode_variant(inputs, first_partition_max=64).astype(np.float32)
    assert np.isnan(out[0, 0]).all() and np.isfinite(out[0, 1:]).all()  # head 0 holds the planted key
    checked = check_output(out, reference)
    found = gather_evidence(case, inputs, out, reference, checked.status, checked.failing_rows)
    assert "combine-first-max" in found["matches"] and "combine-no-rescale" not in found["matches"]
    # (a block-table slip that sends this one sequence past its table leaves it NaN too, so alone this case
    # may also earn page-table: the grade's other planted cases rule that out)
    hazards = [h["hazard"] for h in derive_hints([found])]
    assert hazards[0] == "combine-rescale" and not {"max-subtraction", "masked-nan"} & set(hazards)


def test_rescaling_by_partition_0s_max_is_exact_where_nothing_overflows():
    # any common reference cancels in o / sum: the variant is the oracle unless expf overflows
    case = next(c for c in load_catalogue("lab3").cases if c.name == "lengths-around-p").resolved(64)
    inputs = make_inputs(case, 5)
    assert np.abs(decode_variant(inputs, first_partition_max=64) - inputs.reference()).max() < 1e-6


# --- every lab: an error that is one constant factor -----------------------------------------------------


@pytest.mark.parametrize(
    "factor, text, words",
    [
        (
            0.99999905,
            "0.99999905",
            "every element is the exact value times 0.99999905: an epsilon in the denominator? (once the max is "
            "subtracted the softmax's sum is at least 1, so it needs no epsilon)",
        ),
        (
            1.25,
            "1.25",
            "every element is the exact value times 1.25: a scale or normalisation factor? (look for the one "
            "constant that multiplies or divides every output)",
        ),
        (
            1 - 2.0**-24,
            "0.99999994",
            "every element is the exact value times 0.99999994: a rounding: a value that must be exactly 1 "
            "(exp(0) / 1) computed another way, as x * (1 / x)? (a one-key row's probability is "
            "exp(s - s) / exp(s - s): exactly 1 once the max is subtracted)",
        ),
    ],
)
def test_a_constant_factor_is_said_as_such(factor, text, words):
    case = evidence(case="T1", rows=1, failing_rows=[0], heads_wrong=[], compared=False)
    assert hinted([{**case, "factor": factor, "factor_text": text}]) == [("constant-factor", words)]


def test_a_factor_per_row_is_said_with_its_range():
    assert hinted([evidence(failing_rows=list(range(1, 17)), row_factors=[1.0712, 7.5391])]) == [
        (
            "constant-factor",
            "each failing row is the exact value times a factor of its own (1.07 to 7.54): a row not divided by "
            "its own sum, or by the wrong one? (each row's probabilities must sum to 1)",
        )
    ]


def test_a_factor_needs_every_failing_case():
    cases = [evidence(case="T1", rows=1, factor=1.25, factor_text="1.25"), evidence(case="T33", rows=33)]
    assert hinted(cases) == []


def lab_case(lab: str, name: str):
    case = next(c for c in load_catalogue(lab).cases if c.name == name)
    return case.resolved(512) if case.decode else case


def test_an_epsilon_in_the_denominator_is_found_in_an_exact_case():
    # lab 1's T = 1: out must be V's row exactly; 1 / (1 + 1e-6f) times it is within the tolerance
    case = lab_case("lab1", "T1")
    inputs = make_inputs(case, SEED)
    reference = inputs.reference()
    inverse = np.float32(1) / (np.float32(1) + np.float32(1e-6))
    out = (inverse * reference.astype(np.float32)).astype(np.float32)
    checked = check_output(out, reference, exact=True)
    found = gather_evidence(case, inputs, out, reference, checked.status, checked.failing_rows)
    assert (found["factor_text"], found["heads_wrong"], found["compared"]) == ("0.99999905", [], False)
    assert factor_words(found) == "every element is the exact value times 0.99999905: an epsilon in the denominator?"


def test_a_decode_epsilon_is_found_in_the_single_token_case():
    case = lab_case("lab3", "single-token")
    inputs = make_inputs(case, SEED)
    reference = inputs.reference()
    out = (reference.astype(np.float32) * (np.float32(1) / (np.float32(1) + np.float32(1e-6)))).astype(np.float32)
    found = gather_evidence(case, inputs, out, reference, "wrong", [0, 1, 2])
    assert found["factor_text"] == "0.99999905"
    assert [h["hazard"] for h in derive_hints([found])] == ["constant-factor"]


def test_a_tolerance_case_factor_is_said_to_three_digits():
    reference = np.random.default_rng(1).standard_normal((17, QUERY_HEADS, HEAD_DIM))
    found: dict = {}
    factor_evidence(found, (reference * 1.25).astype(np.float32), reference, exact=False)
    assert found["factor_text"] == "1.25" and abs(found["factor"] - 1.25) < 1e-6


def test_a_factor_per_row_is_found_where_no_one_constant_holds():
    reference = np.random.default_rng(2).standard_normal((17, QUERY_HEADS, HEAD_DIM))
    sums = np.linspace(1.5, 6.0, 17 * QUERY_HEADS).reshape(17, QUERY_HEADS, 1)
    found: dict = {}
    factor_evidence(found, (reference * sums).astype(np.float32), reference, exact=False)
    assert "factor" not in found and found["row_factors"] == pytest.approx([1.5, 6.0], rel=1e-5)


@pytest.mark.parametrize(
    "spoil",
    [
        lambda r: np.zeros_like(r),  # a zero output is no factor
        lambda r: r + 0.5,  # an offset is none
        lambda r: r * 1.25 + np.where(np.arange(r.size).reshape(r.shape) == 7, 0.1, 0.0),  # one element off
        lambda r: np.where(np.arange(r.size).reshape(r.shape) == 7, np.nan, r * 1.25),  # a NaN is no factor
    ],
)
def test_no_factor_where_the_values_do_not_show_one(spoil):
    reference = np.random.default_rng(3).standard_normal((2, QUERY_HEADS, HEAD_DIM))
    found: dict = {}
    factor_evidence(found, spoil(reference).astype(np.float32), reference, exact=False)
    assert "factor" not in found and "row_factors" not in found


# --- lab 1's stage evidence from buffers built to show each mistake --------------------------------------


def pipeline(case_name: str, scores_of=None, softmax_over_all=False, without_max=False, wsum_over_all=False):
    """Lab 1's three stages in float32 as a kernel with one mistake computes them: (inputs, reference,
    scores buffer, probabilities buffer, out). `scores_of(q, k)`: the scores kernel's [32][T][T] (default
    q.k / 8 below the diagonal, -inf above)."""
    case = lab_case("lab1", case_name)
    inputs = make_inputs(case, SEED)
    q, k, v = (a.astype(np.float64) for a in (inputs.q, inputs.k, inputs.v))
    t = case.rows
    visible = np.tril(np.ones((t, t), dtype=bool))[None]
    heads = np.arange(QUERY_HEADS) // GROUP
    true = np.einsum("ihd,jhd->hij", q, k[:, heads]) * SCALE
    scores = (scores_of(q, k) if scores_of else np.where(visible, true, -np.inf)).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        over = np.ones_like(visible) if softmax_over_all else visible
        s = np.where(over, scores, np.float32(-np.inf))
        e = np.exp(s if without_max else s - s.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True, dtype=np.float32)
        probabilities = np.where(over, p, scores).astype(np.float32)  # what the softmax does not write stays
        weights = probabilities.astype(np.float64) if wsum_over_all else np.where(visible, probabilities, 0.0)
        out = np.einsum("hij,jhd->ihd", weights, v[:, heads]).astype(np.float32)
    return case, inputs, inputs.reference(), scores, probabilities, out


def stage_found(case, inputs, reference, scores, probabilities, out) -> dict:
    checked = check_output(out, reference, exact=case.exact)
    found = gather_evidence(case, inputs, out, reference, checked.status, checked.failing_rows)
    stages = [("attn_scores", scores.ravel()), ("attn_softmax", probabilities.ravel())]
    with np.errstate(divide="raise", over="raise", invalid="raise"):  # no numpy warning reaches a student
        add_stage_evidence(found, inputs, case, stages, "attn_weighted_sum", out)
    return found


def unmasked(q, k):
    return np.einsum("ihd,jhd->hij", q, k[:, np.arange(QUERY_HEADS) // GROUP]) * SCALE


def test_a_right_pipeline_shows_nothing_at_any_stage():
    case, inputs, reference, scores, probabilities, out = pipeline("T17")
    out[3, 5, 7] += 1.0  # one wrong element, so the case is wrong and compared
    found = stage_found(case, inputs, reference, scores, probabilities, out)
    assert found["stage_matches"] == []
    assert (found["scores_kv_heads_read"], found["wsum_kv_heads_read"]) == ({}, {})


def test_stage_evidence_sees_a_softmax_without_its_max_overflow():
    found = stage_found(*pipeline("planted-T40", without_max=True))
    assert found["stage_matches"] == ["softmax-no-max"]
    assert [h["hazard"] for h in derive_hints([found])] == ["max-subtraction"]


def test_without_a_planted_score_a_softmax_without_its_max_shows_nothing():
    case, inputs, reference, scores, probabilities, out = pipeline("T17", without_max=True)
    out[3, 5, 7] += 1.0
    assert "softmax-no-max" not in stage_found(case, inputs, reference, scores, probabilities, out)["stage_matches"]


def test_stage_evidence_sees_a_weighted_sum_past_the_diagonal():
    found = stage_found(*pipeline("T17", scores_of=unmasked, wsum_over_all=True))
    assert found["stage_matches"] == ["wsum-over-upper"]
    assert [h["hazard"] for h in derive_hints([found])] == ["causal-mask"]


def test_stage_evidence_sees_a_weighted_sum_past_the_diagonal_through_minus_infinity():
    # the scores' -INFINITY left above the diagonal: -inf * v, and the output is inf or NaN there
    found = stage_found(*pipeline("T17", wsum_over_all=True))
    assert found["nonfinite"] and found["stage_matches"] == ["wsum-over-upper"]


def test_stage_evidence_sees_a_softmax_over_the_whole_row():
    found = stage_found(*pipeline("T17", scores_of=unmasked, softmax_over_all=True, wsum_over_all=True))
    assert found["stage_matches"] == ["softmax-over-upper", "wsum-over-upper"]
    assert "causal-none" in found["matches"]
    assert derive_hints([found])[0]["text"].startswith("attn_softmax normalises over keys above the diagonal")


def test_stage_evidence_sees_scores_against_the_wrong_kv_head():
    def mod_8(q, k):
        return np.where(
            np.tril(np.ones((17, 17), dtype=bool)),
            np.einsum("ihd,jhd->hij", q, k[:, np.arange(32) % 8]) * SCALE,
            -np.inf,
        )

    found = stage_found(*pipeline("T17", scores_of=mod_8))
    wrong = [h for h in range(32) if h % KV_HEADS != h // GROUP]
    assert found["heads_wrong"] == wrong and found["kv_heads_read"] == {}
    assert found["scores_kv_heads_read"] == {h: h % KV_HEADS for h in wrong}
    assert found["wsum_kv_heads_read"] == {}
    assert [h["hazard"] for h in derive_hints([found])] == ["gqa-mapping"]


def test_stage_evidence_sees_probabilities_at_the_wrong_scale():
    def unscaled(q, k):
        return np.where(np.tril(np.ones((17, 17), dtype=bool)), unmasked(q, k) / SCALE, -np.inf)

    found = stage_found(*pipeline("T17", scores_of=unscaled))
    assert found["stage_matches"] == ["scores-scale-missing", "probabilities-scale-missing"]
    assert "scale-missing" in found["matches"]
    assert [h["hazard"] for h in derive_hints([found])] == ["scale"]


def test_a_case_too_large_to_redo_gets_no_stage_evidence():
    case = lab_case("lab1", "T257")
    inputs = make_inputs(case, SEED)
    reference = inputs.reference()
    out = (reference * 2).astype(np.float32)
    found = gather_evidence(case, inputs, out, reference, "wrong", list(range(257)))
    add_stage_evidence(found, inputs, case, [("attn_scores", np.zeros(1)), ("attn_softmax", np.zeros(1))], "w", out)
    assert "stage_matches" not in found and found["factor_text"] == "2"


IDENTITY_TABLE_TEXT = (
    "the output is attention over pages b * maxPages + j / 16, as if the block table were the identity: a "
    "sequence's pages lie wherever its row of the table says, so key j of sequence b is row j % 16 of page "
    "blockTable[b][j / 16]"
)


def test_pages_read_as_if_the_table_were_the_identity_are_a_page_table_hint_not_masked_nan():
    # the pages such a kernel reads include unused ones, which hold NaN: its NaN rows are the variant's too
    case = lab_case("lab3", "single-token")
    inputs = make_inputs(case, SEED)
    reference = inputs.reference()
    with np.errstate(invalid="ignore"):
        out = decode_variant(inputs, table_ignored=True).astype(np.float32)
    checked = check_output(out, reference, exact=True)
    assert checked.status == "wrong"
    found = gather_evidence(case, inputs, out, reference, checked.status, checked.failing_rows)
    assert "table-ignored" in found["matches"]
    assert derive_hints([found])[0] == {"hazard": "page-table", "text": IDENTITY_TABLE_TEXT}
    assert "masked-nan" not in [h["hazard"] for h in derive_hints([found])]


def test_a_correct_decode_is_never_the_identity_table_variant():
    case = lab_case("lab3", "lengths-around-p")
    inputs = make_inputs(case, SEED)
    reference = inputs.reference()
    wrong = reference.astype(np.float32) * np.float32(1.5)  # wrong, but not through the pages it reads
    checked = check_output(wrong, reference)
    found = gather_evidence(case, inputs, wrong, reference, checked.status, checked.failing_rows)
    assert "table-ignored" not in found["matches"]


# --- every hint's first clause true to the evidence, in the lab's own words ------------------------------


def test_lab_1s_causal_hint_speaks_of_no_prefix():
    assert hinted([evidence(matches=["causal-plus-one"])]) == [
        (
            "causal-mask",
            "the output is attention with one key past the diagonal counted: row i sees keys j <= i, and no further",
        )
    ]


def test_a_missing_rescale_in_every_case_says_what_was_left_out_and_over_which_keys():
    # the lab-2 starter without `alpha *` on its accumulator: every case fails, there are no key tiles
    cases = [
        evidence(
            case=name,
            prefix=31,
            matches=["rescale-missing"],
            rescale_missing={"tile": 1, "left_out": "acc"},
        )
        for name in ("C1-P31", "C17-P31")
    ]
    assert hinted(cases) == [
        (
            "rescale",
            "the output is the online softmax (a key at a time) with the accumulator never rescaled: whenever a "
            "key raises a row's max, rescale both l and the accumulator by exp(m_old - m_new)",
        )
    ]
    tiled = [
        evidence(
            case="C33-P1000", prefix=1000, matches=["rescale-missing"], rescale_missing={"tile": 64, "left_out": "l"}
        )
    ]
    assert hinted(tiled)[0][1].startswith(
        "the output is the online softmax (in key tiles of 64) with l, the running sum, never rescaled"
    )
    # only the last-key cases fail: the words that say so
    assert hinted([evidence(case="lastkey-C17-P31", prefix=31, last_key=True)])[0][1].startswith(
        "only cases where a row's max arrives in a later key tile fail"
    )


def test_the_online_softmax_without_its_accumulator_rescale_is_found_a_key_at_a_time():
    case = lab_case("lab2", "C17-P31")
    inputs = make_inputs(case, SEED)
    out = online_without_rescale(inputs.q, inputs.k, inputs.v, case.prefix, 1, "l").astype(np.float32)
    found = gather_evidence(case, inputs, out, inputs.reference(), "wrong", list(range(case.rows)))
    assert "rescale-missing" in found["matches"]
    assert found["rescale_missing"] == {"tile": 1, "left_out": "acc"}


def test_k_from_another_kv_head_alone_is_a_gqa_hint_that_says_so():
    case = lab_case("lab2", "C17-P31")
    inputs = make_inputs(case, SEED)
    heads = np.arange(QUERY_HEADS)
    out = np.empty((case.rows, QUERY_HEADS, HEAD_DIM), dtype=np.float32)
    for h in heads:  # K from h % 8, V from h / 4, as a kernel with the mapping wrong in K only reads them
        out[:, h] = variant_attention(inputs.q, inputs.k, inputs.v, case.prefix, k_head=h % KV_HEADS)[:, h]
    reference = inputs.reference()
    checked = check_output(out, reference)
    found = gather_evidence(case, inputs, out, reference, "wrong", checked.failing_rows)
    assert found["kv_heads_read"] == {}
    assert found["k_heads_read"] == {h: h % KV_HEADS for h in found["heads_wrong"]}
    assert hinted([found]) == [
        (
            "gqa-mapping",
            "query head 1 takes its scores (K) from KV head 1 and its values (V) from KV head 0: both K and V "
            "are read at KV head h / 4 = 0 (GROUP = 4: heads 0-3 share KV head 0)",
        )
    ]


def test_rows_unwritten_in_every_block_are_a_bounds_hint_naming_the_settings():
    constants = {"attnlab_threads": 128, "attnlab_rows_per_block": 64, "attnlab_heads_per_block": 1}
    cases = [
        evidence(case="C33-P31", rows=33, prefix=31, status="never-written", failing_rows=[32]),
        evidence(
            case="geometry-C129-P31",
            rows=129,
            prefix=31,
            status="never-written",
            failing_rows=[*range(32, 64), *range(96, 128)],
            launch_constants=constants,
        ),
    ]
    assert hinted(cases)[0] == (
        "bounds",
        "rows 32-63 of every 64-row block fail (case geometry-C129-P31): a block writes its first 32, while "
        "attnlab_rows_per_block = 64 gives it 64: attnlab_threads = 128 is too few threads for 64 rows as the "
        "kernel hands rows to threads; raise it, or lower attnlab_rows_per_block",
    )
    # the same rows in one case only: a suffix, whose words say so
    assert hinted(cases[:1])[0][1].startswith("only the last rows fail (from row 32 on in case C33-P31)")


def test_pages_read_from_the_start_of_the_cache_are_a_page_table_hint():
    case = lab_case("lab3", "skewed")
    inputs = make_inputs(case, SEED)
    out = decode_variant(inputs, first_pages=True).astype(np.float32)
    reference = inputs.reference()
    found = gather_evidence(case, inputs, out, reference, "wrong", check_output(out, reference).failing_rows)
    assert "table-first-pages" in found["matches"]
    assert hinted([found])[0] == (
        "page-table",
        "the output is attention over pages j / 16 of the cache, the same first pages for every sequence, as if "
        "there were no block table: a sequence's pages lie wherever its row of the table says, so key j of "
        "sequence b is row j % 16 of page blockTable[b][j / 16]",
    )


def test_a_variant_matched_only_by_nan_everywhere_is_no_hint_alone():
    # a kernel NaN in every sequence matches "without its last partition" where that leaves no key: no
    # evidence alone (reads past each sequence's end), evidence beside a case that matches with values
    nan_only = decode_evidence(planted=False, matches=["partition-tail"], nan_only_matches=["partition-tail"])
    assert "partition-tail" not in [hazard for hazard, _ in hinted([nan_only])]
    with_values = decode_evidence(case="lengths-around-p", planted=False, matches=["partition-tail"])
    assert "partition-tail" in [hazard for hazard, _ in hinted([nan_only, with_values])]


def test_a_decode_batch_s_last_sequences_failing_are_said_as_sequences():
    cases = [decode_evidence(case="skewed", rows=16, prefix=4099, planted=False, failing_rows=[15], nonfinite_rows=[])]
    assert hinted(cases)[0] == (
        "bounds",
        "only the last sequences fail (from sequence 15 on in case skewed): check the bounds of your sequence "
        "loops and how each block finds its first sequence",
    )


def test_an_explanation_makes_each_score_matrix_once_and_finds_what_it_found_before():
    from labrunner.truth import hints_prefill

    case = lab_case("lab2", "C17-P31")
    inputs = make_inputs(case, SEED)
    heads = np.arange(QUERY_HEADS)
    out = np.empty((case.rows, QUERY_HEADS, HEAD_DIM), dtype=np.float32)
    for h in heads:  # K from h % 8: every variant family is compared, the K-only and V-only ones too
        out[:, h] = variant_attention(inputs.q, inputs.k, inputs.v, case.prefix, k_head=h % KV_HEADS)[:, h]
    reference = inputs.reference()
    failing = check_output(out, reference).failing_rows
    made = []
    original = hints_prefill._kept

    def counted(kind, sources, heads, make):
        return original(kind, sources, heads, lambda: made.append(kind) or make())

    fresh = gather_evidence(case, inputs, out, reference, "wrong", failing)
    hints_prefill._kept = counted
    try:
        with hints_prefill.scores_kept():
            kept = gather_evidence(case, inputs, out, reference, "wrong", failing)
            own = np.arange(QUERY_HEADS) // GROUP
            scores = hints_prefill.head_scores(inputs.q, inputs.k, own)
            assert hints_prefill.head_scores(inputs.q, inputs.k, own) is scores
            assert not scores.flags.writeable  # a caller that changes it must copy
    finally:
        hints_prefill._kept = original
    assert kept == fresh
    assert kept["k_heads_read"] == {h: h % KV_HEADS for h in kept["heads_wrong"]}
    # each query head's own KV head and each KV head for all: 9 score and 9 value matrices, made once each
    assert (made.count("scores"), made.count("values")) == (9, 9)
    # outside it nothing is kept: a matrix is made, and may be changed, each time
    assert hints_prefill.head_scores(inputs.q, inputs.k, np.arange(QUERY_HEADS) // GROUP).flags.writeable


def test_the_online_variant_a_key_at_a_time_has_the_bits_of_one_product_per_key():
    """Tile 1 multiplies each key's weight and values directly: the same bits as the matmul per key it replaced."""
    from labrunner.truth.hints_prefill import head_scores, head_values

    case = lab_case("lab2", "C17-P31")
    inputs = make_inputs(case, SEED)
    heads = np.arange(QUERY_HEADS) // GROUP
    vh = head_values(inputs.v, heads)
    scores = head_scores(inputs.q, inputs.k, heads).copy()
    keys = case.keys
    scores[:, np.arange(keys)[None, :] > (case.prefix + np.arange(case.rows))[:, None]] = -np.inf
    m = np.full(scores.shape[:2], -np.inf)
    row_sum = np.zeros(scores.shape[:2])
    acc = np.zeros((*scores.shape[:2], HEAD_DIM))
    with np.errstate(invalid="ignore"):
        for key in range(keys):  # the loop as it was, a matmul per key, rescaling l only
            s = scores[:, :, key : key + 1]
            m_new = np.maximum(m, s.max(axis=-1))
            alpha = np.where(np.isneginf(m_new), 1.0, np.exp(m - m_new))
            p = np.where(np.isneginf(s), 0.0, np.exp(s - m_new[..., None]))
            row_sum = alpha * row_sum + p.sum(axis=-1)
            acc = acc + np.matmul(p, vh[:, key : key + 1])
            m = m_new
    expected = (acc / row_sum[..., None]).transpose(1, 0, 2)
    made = online_without_rescale(inputs.q, inputs.k, inputs.v, case.prefix, 1, "l")
    assert np.array_equal(made, expected)
