"""The checker's verdicts and messages, the pass rule's boundary, poison and guard bands."""

from __future__ import annotations

import numpy as np
import pytest

from labrunner.truth.checker import NEVER_WRITTEN, PASS, WRONG, check_output, describe_rows
from labrunner.truth.contract import within_tolerance
from labrunner.truth.poison import (
    CANARY_BITS,
    GUARD_ELEMENTS,
    POISON_BITS,
    WORKSPACE_POISON_BITS,
    filled,
    inspect_guards,
    never_written,
    poison_for,
    poisoned,
)


def reference(shape=(3, 32, 64), seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def exact(ref: np.ndarray) -> np.ndarray:
    return ref.astype(np.float32)


def test_a_float32_rounding_of_the_reference_passes():
    ref = reference()
    checked = check_output(exact(ref), ref)
    assert checked.status == PASS and checked.passed
    assert checked.message == "all 6144 elements within the pass rule"
    assert checked.bad_elements == 0 and checked.total_elements == 6144
    assert checked.first_bad is None and checked.failing_rows == []
    assert checked.max_abs_err == float(np.max(np.abs(exact(ref).astype(np.float64) - ref)))


def test_a_wrong_value_message_names_row_head_col_got_expected_rule_and_count():
    ref = np.zeros((17, 2, 64))
    ref[16, 0, 3] = 0.2519
    out = exact(ref)
    out[16, 0, 3] = np.nan  # the first bad element, in flat order
    out[16, 0, 4:] = 1.0  # 60 more
    out[16, 1, :3] = -1.0  # 3 more: 64 wrong of 17 * 2 * 64 = 2176
    checked = check_output(out, ref)
    assert checked.status == WRONG
    assert checked.message == (
        "row 16, head 0, col 3: got nan, expected 0.2519 (|err| > 1e-4 + 1e-3*|ref|); 64 of 2176 elements wrong"
    )
    assert checked.bad_elements == 64 and checked.total_elements == 2176
    assert checked.first_bad == {"row": 16, "head": 0, "col": 3, "got": "nan", "expected": 0.2519}
    assert checked.failing_rows == [16]
    assert np.isnan(checked.max_abs_err)  # a NaN anywhere: the largest error is no number
    assert checked.nonfinite == 1


def test_a_finite_wrong_value_prints_six_significant_digits():
    ref = reference((2, 32, 64), seed=1)
    ref[1, 5, 7] = 0.123456789
    out = exact(ref)
    out[1, 5, 7] = 0.5
    checked = check_output(out, ref)
    assert checked.message == (
        "row 1, head 5, col 7: got 0.5, expected 0.123457 (|err| > 1e-4 + 1e-3*|ref|); 1 of 4096 elements wrong"
    )
    assert checked.first_bad == {"row": 1, "head": 5, "col": 7, "got": 0.5, "expected": 0.123456789}
    assert checked.max_abs_err == pytest.approx(0.5 - 0.123456789, abs=1e-15)


def test_an_infinite_output_is_reported_as_inf():
    ref = reference((1, 32, 64), seed=2)
    out = exact(ref)
    out[0, 31, 63] = -np.inf
    checked = check_output(out, ref)
    assert checked.status == WRONG
    assert checked.message.startswith("row 0, head 31, col 63: got -inf, expected ")
    assert checked.first_bad["got"] == "-inf"


def test_the_untouched_poison_is_never_written():
    ref = reference((4, 32, 64), seed=3)
    out = poisoned(ref.shape)
    out[:2] = exact(ref[:2])
    out[2, :, :10] = exact(ref[2, :, :10])  # row 2 half written: the first unwritten is (2, 0, 10)
    checked = check_output(out, ref)
    assert checked.status == NEVER_WRITTEN
    unwritten = 32 * 54 + 2048
    assert checked.message == (
        "row 2, head 0, col 10: never written, or computed from a value never written "
        "(an output or shared buffer read before it was set?); "
        f"{unwritten} of 8192 elements never written"
    )
    assert checked.bad_elements == unwritten
    assert checked.first_bad == {"row": 2, "head": 0, "col": 10, "got": None, "expected": float(ref[2, 0, 10])}
    assert checked.failing_rows == [2, 3]


def test_never_written_wins_and_counts_the_other_wrong_elements():
    ref = reference((2, 32, 64), seed=4)
    out = exact(ref)
    out[1, 3, :] = poisoned((64,))
    out[0, 0, 0] = 9.0  # wrong, and earlier than the poison: still the poison is the reported bug
    out[0, 0, 1] = np.nan
    checked = check_output(out, ref)
    assert checked.status == NEVER_WRITTEN
    assert checked.message == (
        "row 1, head 3, col 0: never written, or computed from a value never written "
        "(an output or shared buffer read before it was set?); "
        "64 of 4096 elements never written, 2 more wrong"
    )
    assert checked.failing_rows == [0, 1]


def test_a_nan_with_another_payload_is_wrong_not_never_written():
    ref = reference((1, 32, 64), seed=5)
    out = exact(ref)
    out[0, 2, 2] = filled(1, CANARY_BITS)[0]
    checked = check_output(out, ref)
    assert checked.status == WRONG
    assert checked.message.startswith("row 0, head 2, col 2: got nan, expected ")


def test_the_poison_and_canary_are_distinct_quiet_nans():
    poison, canary = filled(1, POISON_BITS), filled(1, CANARY_BITS)
    assert np.isnan(poison[0]) and np.isnan(canary[0])
    assert poison.view(np.uint32)[0] == 0x7FEDBEEF and canary.view(np.uint32)[0] == 0x7FCA11ED
    assert never_written(poisoned((2, 3))).all()
    assert not never_written(np.full((2, 3), np.nan, np.float32)).any()


@pytest.mark.parametrize("bad, ref_value", [(np.nan, 0.0), (np.inf, 1e30), (-np.inf, -1e30)])
def test_nan_and_inf_never_pass(bad, ref_value):
    out = np.full((1, 1, 1), bad, np.float32)
    ref = np.full((1, 1, 1), ref_value)
    assert not within_tolerance(out, ref).any()
    assert check_output(out, ref).status == WRONG


# The pass rule, |out - ref| <= 1e-4 + 1e-3*|ref|, at its exact edge: out = 0 against this ref is
# exactly at tolerance in float64 arithmetic, and the next float away from 0 is just past it.
EDGE = -0.0001001001001001001


def test_exactly_at_tolerance_passes():
    assert abs(0.0 - EDGE) == 1e-4 + 1e-3 * abs(EDGE)  # the premise: exactly on the edge
    ref = np.zeros((1, 32, 64))
    ref[0, 0, 0] = EDGE
    assert check_output(np.zeros((1, 32, 64), np.float32), ref).status == PASS


def test_just_past_tolerance_fails():
    past = np.nextafter(EDGE, -1.0)
    assert abs(0.0 - past) > 1e-4 + 1e-3 * abs(past)
    ref = np.zeros((1, 32, 64))
    ref[0, 0, 0] = past
    checked = check_output(np.zeros((1, 32, 64), np.float32), ref)
    assert checked.status == WRONG
    assert checked.message == (
        "row 0, head 0, col 0: got 0, expected -0.0001001 (|err| > 1e-4 + 1e-3*|ref|); 1 of 2048 elements wrong"
    )


@pytest.mark.parametrize(
    "ref_value, out_value, passes",
    [
        (100.0, 100.1, True),  # 0.1 <= 1e-4 + 0.1: the relative term carries large values
        (100.0, 100.1002, False),
        (0.0, 0.0000999, True),
        (0.0, 0.0001001, False),
        (-2.0, -2.0020, True),  # 0.0020 <= 0.0021
        (-2.0, -2.0022, False),
    ],
)
def test_the_rule_is_absolute_plus_relative(ref_value, out_value, passes):
    ref = np.full((1, 1, 1), ref_value)
    out = np.full((1, 1, 1), out_value, np.float32)
    assert bool(within_tolerance(out, ref)[0, 0, 0]) is passes


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match=r"^output shape \(2, 32, 64\) does not match") as caught:
        check_output(np.zeros((2, 32, 64), np.float32), np.zeros((3, 32, 64)))
    assert str(caught.value) == "output shape (2, 32, 64) does not match the reference (3, 32, 64)"


# --- failing rows ----------------------------------------------------------------------------


def test_failing_rows_lists_every_row_with_a_bad_element():
    ref = reference((40, 32, 64), seed=6)
    out = exact(ref)
    out[:16, 7, 0] += 1.0
    out[17, 31, 63] += 1.0
    checked = check_output(out, ref)
    assert checked.failing_rows == list(range(16)) + [17]
    assert describe_rows(checked.failing_rows, 40) == "rows 0-15, 17 fail (17 of 40)"


@pytest.mark.parametrize(
    "rows, total, words",
    [
        ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17], 40, "rows 0-15, 17 fail (17 of 40)"),
        ([2, 3], 4, "rows 2-3 fail (2 of 4)"),
        ([1, 3, 5], 6, "rows 1, 3, 5 fail (3 of 6)"),
        ([0, 1, 5, 6, 7, 9], 10, "rows 0-1, 5-7, 9 fail (6 of 10)"),
    ],
)
def test_describe_rows_folds_runs(rows, total, words):
    assert describe_rows(rows, total) == words


def test_describe_rows_with_one_row_is_grammatical():
    assert describe_rows([3], 10) == "row 3 fails (1 of 10)"


# --- guard bands -----------------------------------------------------------------------------


def bands():
    return filled(GUARD_ELEMENTS, CANARY_BITS), filled(GUARD_ELEMENTS, CANARY_BITS)


def test_intact_guards_report_nothing():
    assert inspect_guards("out", *bands()) is None


def test_guard_damage_counts_and_distances():
    before, after = bands()
    after[0] = 1.0  # the element just past the end
    after[9] = 0.0  # 10 past the end
    before[-1] = 2.0  # the element just before element 0
    damage = inspect_guards("out", before, after)
    assert (damage.buffer, damage.before, damage.after) == ("out", 1, 2)
    assert (damage.farthest_before, damage.farthest_after) == (1, 10)
    assert damage.describe(2048) == (
        "out-of-bounds write to out: 2 element(s) past its end (up to 10 past "
        "element 2047) and 1 element(s) before its start (up to 1 before element 0)"
    )


def test_guard_damage_at_the_far_ends_of_the_bands():
    before, after = bands()
    before[0] = 0.0
    after[-1] = 0.0
    damage = inspect_guards("scores", before, after)
    assert (damage.farthest_before, damage.farthest_after) == (GUARD_ELEMENTS, GUARD_ELEMENTS) == (4096, 4096)


def test_guard_damage_on_one_side_only():
    before, after = bands()
    before[4000] = filled(1, POISON_BITS)[0]  # even a NaN is damage if it is not the canary
    damage = inspect_guards("out", before, after)
    assert (damage.before, damage.after, damage.farthest_before, damage.farthest_after) == (1, 0, 96, 0)
    assert (
        damage.describe(64) == "out-of-bounds write to out: 1 element(s) before its start (up to 96 before element 0)"
    )


def test_an_exact_case_refuses_what_the_tolerance_would_pass():
    ref = np.ones((1, 32, 64))
    out = np.full((1, 32, 64), np.float32(1.0) - np.float32(2**-23))
    assert check_output(out, ref).passed
    checked = check_output(out, ref, exact=True)
    assert checked.status == WRONG
    assert checked.message == (
        "row 0, head 0, col 0: got 0.999999881, expected 1 (this case must reproduce the reference "
        "exactly); 2048 of 2048 elements wrong"
    )


def test_an_exact_case_passes_bit_for_bit_and_shows_nine_digits_of_both_numbers():
    ref = np.full((1, 32, 64), float(np.float32(0.1)))  # V's row, as the float32 it was
    out = ref.astype(np.float32)
    checked = check_output(out, ref, exact=True)
    assert (checked.status, checked.message, checked.bad_elements) == (
        PASS,
        "all 2048 elements within the pass rule",
        0,
    )
    out[0, 3, 5] = np.nextafter(np.float32(0.1), np.float32(1))
    checked = check_output(out, ref, exact=True)
    assert checked.message == (
        "row 0, head 3, col 5: got 0.100000009, expected 0.100000001 (this case must "
        "reproduce the reference exactly); 1 of 2048 elements wrong"
    )


def test_guard_damage_after_the_end_only_says_nothing_of_before():
    before, after = bands()
    after[0] = 0.0
    damage = inspect_guards("workspace", before, after)
    assert (damage.before, damage.after, damage.farthest_before, damage.farthest_after) == (0, 1, 0, 1)
    assert (
        damage.describe(64) == "out-of-bounds write to workspace: 1 element(s) past its end (up to 1 past element 63)"
    )


def test_the_output_and_a_workspace_have_poisons_of_their_own():
    assert (poison_for("out"), poison_for("workspace")) == (POISON_BITS, WORKSPACE_POISON_BITS)
    assert (POISON_BITS, WORKSPACE_POISON_BITS) == (0x7FEDBEEF, 0x7FEDF00D)
