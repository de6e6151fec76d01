"""Decode's paged cache: lengths derived from the partition size, the hostile layout, the decode oracle,
and lab 3's launch geometry."""

from __future__ import annotations

import re

import numpy as np
import pytest

from labrunner.labs import get_lab
from labrunner.truth import oracle
from labrunner.truth.cases import Case, load_catalogue, make_inputs
from labrunner.truth.paged_cache import PAGE_TOKENS, bytes_to_move, decode_flops, evaluate, layout, max_pages, max_parts

LAB3 = get_lab("lab3")


@pytest.mark.parametrize(
    "expression, value",
    [
        (17, 17),
        ("1", 1),
        ("p", 512),
        ("p-1", 511),
        ("2p+1", 1025),
        ("8p+3", 4099),
        ("L-1", 16),
        ("p+L", 529),
    ],
)
def test_lengths_are_expressions_of_p_and_L(expression, value):
    assert evaluate(expression, 512, length=17) == value


@pytest.mark.parametrize("expression", ["2*p", "p p", "", "q+1", "+"])
def test_an_expression_it_cannot_read_is_named(expression):
    with pytest.raises(
        ValueError, match=rf"^cannot read {re.escape(repr(expression))}: terms are integers, p, L or n\*p"
    ):
        evaluate(expression, 512)


def test_the_lengths_around_p_land_on_the_files_own_partition():
    case = next(c for c in load_catalogue("lab3").cases if c.name == "lengths-around-p")
    assert case.resolved(256).lengths == (1, 2, 15, 16, 17, 255, 256, 257, 512, 513)
    assert case.resolved(256).rows == 10 and case.resolved(256).prefix == 513
    assert case.resolved(256).partition == 256


def test_a_file_with_one_partition_per_sequence_meets_the_solutions_lengths():
    from labrunner.pipeline.correctness import select_cases
    from labrunner.pipeline.grading_run import CaseOptions
    from labrunner.truth.cases import Seed

    options = CaseOptions(seed=Seed(1, "default"))
    starter, _ = select_cases(LAB3, "gpu", options, LAB3.constants({}))
    wide, _ = select_cases(LAB3, "gpu", options, LAB3.constants({"attnlab_partition_tokens": 1024}))
    assert load_catalogue("lab3").geometry == {"partition_when_whole": 512}
    assert starter[1].lengths[-1] == 2 * 512 + 1 and starter[1].partition == 0
    assert wide[1].lengths[-1] == 2 * 1024 + 1 and wide[1].partition == 1024


def test_the_layout_shuffles_pages_pads_with_minus_one_and_spares_pages():
    rng = np.random.default_rng(7)
    lengths = [33, 16, 1, 100]
    table, pages = layout(rng, lengths)
    assert table.shape == (4, max_pages(100)) == (4, 8) and table.dtype == np.int32
    needed = [3, 1, 1, 7]
    assert pages == sum(needed) + 3
    for b, count in enumerate(needed):
        assert (table[b, count:] == -1).all() and (table[b, :count] >= 0).all()
        if count > 1:
            assert not (np.diff(table[b, :count]) > 0).all()  # never in order
    used = np.sort(table[table >= 0])
    assert len(set(used.tolist())) == used.size  # no page shared


def test_a_decode_case_holds_nan_wherever_no_key_stands():
    case = Case("t", rows=0, lengths=(17, 3)).resolved(512)
    inputs = make_inputs(case, 1)
    table = inputs.block_table
    k = inputs.k.reshape(-1, PAGE_TOKENS, 8, 64)
    assert np.isfinite(k[table[0, 1], 0]).all() and np.isnan(k[table[0, 1], 1:]).all()
    assert np.isfinite(k[table[1, 0], :3]).all() and np.isnan(k[table[1, 0], 3:]).all()
    spare = sorted(set(range(k.shape[0])) - set(table[table >= 0].tolist()))
    assert len(spare) == 3 and np.isnan(k[spare]).all()
    assert inputs.seq_lens.tolist() == [17, 3] and inputs.seq_lens.dtype == np.int32
    assert sorted(inputs.buffers()) == ["blockTable", "k", "q", "seqLens", "v"]


def test_a_plant_scores_128_in_its_own_sequence_only():
    case = Case("t", rows=0, lengths=("p+3", 40), plants=((0, "L-1"),)).resolved(16)
    inputs = make_inputs(case, 3)
    row = inputs.block_table[0, 18 // 16] * 16 + 18 % 16
    assert float(inputs.q[0, 0].astype(np.float64) @ inputs.k[row, 0]) / 8 == 128.0
    assert not (inputs.q[1, 0] == 4.0).all()


def test_decode_is_one_row_of_attention_at_its_own_prefix():
    """Through the table, each sequence's output is lab 2's oracle for one row against its keys in order."""
    case = Case("t", rows=0, lengths=(1, 20, 47)).resolved(512)
    inputs = make_inputs(case, 11)
    got = inputs.reference()
    for b, n in enumerate(inputs.lengths):
        rows = [inputs.block_table[b, j // 16] * 16 + j % 16 for j in range(n)]
        want = oracle.attention(inputs.q[b : b + 1], inputs.k[rows], inputs.v[rows], prefix=n - 1)
        assert np.array_equal(got[b], want[0])


def test_a_sequence_without_keys_is_refused():
    with pytest.raises(ValueError, match=r"^case t: with p = 16 a length is 0; each is at least 1"):
        Case("t", rows=0, lengths=("p-16",)).resolved(16)


def test_a_plant_outside_its_sequence_is_refused():
    with pytest.raises(ValueError, match=r"^case t: planted \(sequence, key\) \(0, 5\) is outside the batch"):
        Case("t", rows=0, lengths=(5,), plants=((0, 5),)).resolved(16)


def test_lab3_plans_its_partitions_from_the_files_constants():
    c = LAB3.constants({"attnlab_partition_tokens": 512, "attnlab_heads_per_block": 4, "attnlab_partial_threads": 128})
    partial, combine = LAB3.plan_launches(c, 10, 1025)
    assert (partial.grid, partial.block) == ((3, 8, 10), (128, 1, 1))
    assert partial.args == ("q", "k", "v", "blockTable", "seqLens", "partOut", "partMax", "partSum", 66, 3)
    assert (combine.grid, combine.block, combine.args) == (
        (32, 10, 1),
        (64, 1, 1),
        ("partOut", "partMax", "partSum", "seqLens", "out", 3),
    )
    assert LAB3.workspace(c, 10, 1025) == {"partOut": 10 * 32 * 3 * 64, "partMax": 10 * 32 * 3, "partSum": 10 * 32 * 3}
    assert max_parts(1025, 0) == 1 and LAB3.workspace(LAB3.constants({}), 2, 1025)["partMax"] == 64


@pytest.mark.parametrize(
    "constants, problem",
    [
        (
            {"attnlab_partition_tokens": 100},
            "attnlab_partition_tokens = 100 must be 0 (one partition per sequence) "
            "or a positive multiple of 16 (whole pages)",
        ),
        (
            {"attnlab_partition_tokens": -16},
            "attnlab_partition_tokens = -16 must be 0 (one partition per sequence) "
            "or a positive multiple of 16 (whole pages)",
        ),
        ({"attnlab_heads_per_block": 8}, "attnlab_heads_per_block = 8 must be 1, 2 or 4 (query heads of one KV group)"),
        ({"attnlab_partial_threads": 2048}, "attnlab_partial_threads = 2048 threads: a block holds at most 1024"),
    ],
)
def test_lab3_refuses_a_geometry_it_cannot_launch(constants, problem):
    assert LAB3.validate(LAB3.constants(constants)) == [problem]


def test_the_cpu_backend_passes_the_table_and_lengths_as_int_pointers():
    assert LAB3.entry_point_types()["decode_partial"] == [
        "float*",
        "float*",
        "float*",
        "int*",
        "int*",
        "float*",
        "float*",
        "float*",
        "int",
        "int",
    ]


def test_decode_flops_count_256_per_visible_key_and_query_head_and_the_intensity_is_about_two():
    # 17 + 1 visible keys, 32 query heads: q . k is 64 multiplies and 64 adds, p * v another 64 of each
    assert decode_flops([17, 1], 32, 64) == 18 * 32 * (2 * 64 + 2 * 64) == 147_456
    assert decode_flops([1], 1, 64) == 256
    # the bytes beside them: K and V once per KV head (18 keys x 8 x 64 x 2), q and out, 3 table entries, 2 lengths
    assert bytes_to_move([17, 1], 32, 8, 64) == 4 * (18 * 8 * 64 * 2 + 2 * 2 * 32 * 64 + 3 + 2) == 106_516
    # a long sequence tends to 8,192 FLOPs per 4,096 bytes of K and V: 2 FLOP/B, far left of an H200's ridge (13.6)
    assert decode_flops([32768], 32, 64) / bytes_to_move([32768], 32, 8, 64) == pytest.approx(2.0, abs=1e-3)
