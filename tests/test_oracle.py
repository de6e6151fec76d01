"""The float64 oracle against a slow reference written here from the contract's words.

The reference loops over rows, heads and keys in plain Python: score every visible key
(j <= prefix + i), scale by exactly 0.125, subtract the row max, exponentiate, normalize, and
take the weighted sum of V, with query head h reading KV head h // 4. It shares no code with
`labrunner.truth.oracle`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from labrunner.truth import oracle
from labrunner.truth.contract import kv_head_of, visible_mask

HEADS, KV_HEADS, DIM = 32, 8, 64


def slow_row(q, k, v, prefix: int, i: int, h: int) -> list[float]:
    """One output vector, out[i][h], straight from the definition."""
    g = h // 4
    qi = [float(x) for x in q[i, h]]
    scores = []
    for j in range(prefix + i + 1):
        kj = k[j, g]
        dot = 0.0
        for d in range(DIM):
            dot += qi[d] * float(kj[d])
        scores.append(dot * 0.125)
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    total = sum(weights)
    out = [0.0] * DIM
    for j, w in enumerate(weights):
        vj = v[j, g]
        for d in range(DIM):
            out[d] += w / total * float(vj[d])
    return out


def slow_attention(q, k, v, prefix: int) -> np.ndarray:
    rows = q.shape[0]
    return np.array([[slow_row(q, k, v, prefix, i, h) for h in range(HEADS)] for i in range(rows)])


def random_case(rows: int, prefix: int, seed: int):
    rng = np.random.default_rng(seed)
    keys = prefix + rows
    q = rng.standard_normal((rows, HEADS, DIM), dtype=np.float32)
    k = rng.standard_normal((keys, KV_HEADS, DIM), dtype=np.float32)
    v = rng.standard_normal((keys, KV_HEADS, DIM), dtype=np.float32)
    return q, k, v


@pytest.mark.parametrize("rows, prefix, seed", [(5, 7, 1), (6, 0, 2), (1, 0, 3), (1, 12, 4)])
def test_matches_the_slow_reference(rows, prefix, seed):
    q, k, v = random_case(rows, prefix, seed)
    got = oracle.attention(q, k, v, prefix=prefix)
    expected = slow_attention(q, k, v, prefix)
    assert np.max(np.abs(got - expected)) <= 1e-12


@pytest.mark.parametrize("row_block", [1, 2, 3])
def test_row_blocks_do_not_change_the_answer(monkeypatch, row_block):
    """Rows are processed in blocks; a block edge must not move the causal edge."""
    monkeypatch.setattr(oracle, "_ROW_BLOCK", row_block)
    q, k, v = random_case(5, 7, 11)
    got = oracle.attention(q, k, v, prefix=7)
    assert np.max(np.abs(got - slow_attention(q, k, v, 7))) <= 1e-12


@pytest.mark.slow
def test_rows_either_side_of_the_real_row_block():
    """Rows 255, 256 and 259 straddle the 256-row block: spot-checked head by head."""
    rows = 260
    q, k, v = random_case(rows, 3, 12)
    got = oracle.attention(q, k, v, prefix=3)
    for i in (0, 255, 256, 259):
        for h in (0, 3, 4, 31):
            assert np.max(np.abs(got[i, h] - np.array(slow_row(q, k, v, 3, i, h)))) <= 1e-12, (i, h)


def test_output_is_float64_rows_by_32_by_64():
    q, k, v = random_case(5, 7, 5)
    got = oracle.attention(q, k, v, prefix=7)
    assert got.dtype == np.float64
    assert got.shape == (5, 32, 64)


def test_inputs_are_not_modified():
    q, k, v = random_case(5, 7, 6)
    copies = [q.copy(), k.copy(), v.copy()]
    oracle.attention(q, k, v, prefix=7)
    for before, after in zip(copies, (q, k, v)):
        assert np.array_equal(before, after)


def test_a_single_token_row_is_exactly_the_first_value_row():
    """T = 1: one visible key, probability exactly 1, so out[0][h] is v[0][h // 4] bit for bit."""
    q, k, v = random_case(1, 0, 7)
    got = oracle.attention(q, k, v)
    for h in range(HEADS):
        assert np.array_equal(got[0, h], v[0, h // 4].astype(np.float64))


def test_query_head_reads_kv_head_h_over_4():
    """V is constant per KV head (g + 1), so every output of head h is exactly h // 4 + 1."""
    q, k, _ = random_case(3, 2, 8)
    v = np.broadcast_to(np.arange(1, KV_HEADS + 1, dtype=np.float32)[None, :, None], k.shape).copy()
    got = oracle.attention(q, k, v, prefix=2)
    for h in range(HEADS):
        assert np.allclose(got[:, h, :], h // 4 + 1, rtol=0, atol=1e-13), h


def test_causal_edge_hides_the_keys_after_the_row():
    """Row i must not see keys past prefix + i: huge K and V there leave it unchanged."""
    rows, prefix = 4, 3
    q, k, v = random_case(rows, prefix, 9)
    expected = slow_attention(q, k, v, prefix)
    for i in range(rows):
        hidden_k, hidden_v = k.copy(), v.copy()
        hidden_k[prefix + i + 1 :] = 50.0
        hidden_v[prefix + i + 1 :] = 1e6
        got = oracle.attention(q, hidden_k, hidden_v, prefix=prefix)
        assert np.max(np.abs(got[i] - expected[i])) <= 1e-12, i


def test_planted_score_128_stays_finite_and_exact():
    """Query head 0 and KV head 0 all 4.0 at planted rows: score 128 where float expf overflows."""
    rows, prefix = 5, 7
    q, k, v = random_case(rows, prefix, 10)
    q[[0, 4], 0, :] = 4.0
    k[[2, 11], 0, :] = 4.0
    got = oracle.attention(q, k, v, prefix=prefix)
    assert np.isfinite(got).all()
    assert np.max(np.abs(got - slow_attention(q, k, v, prefix))) <= 1e-12
    # row 4 (position 11) sees both planted keys at score 128; everything else is ~e^-120 behind
    assert np.max(np.abs(got[4, 0] - (v[2, 0].astype(np.float64) + v[11, 0]) / 2)) <= 1e-12


def test_every_score_128_gives_the_uniform_mean():
    rows, prefix = 3, 2
    q = np.full((rows, HEADS, DIM), 4.0, np.float32)
    k = np.full((prefix + rows, KV_HEADS, DIM), 4.0, np.float32)
    v = random_case(rows, prefix, 13)[2]
    got = oracle.attention(q, k, v, prefix=prefix)
    for i in range(rows):
        mean = v[: prefix + i + 1].astype(np.float64).mean(axis=0)  # [8][64]
        for h in range(HEADS):
            assert np.max(np.abs(got[i, h] - mean[h // 4])) <= 1e-13


@pytest.mark.parametrize(
    "q_shape, k_shape, v_shape, message",
    [
        ((5, 32, 63), (12, 8, 64), (12, 8, 64), "q must be [rows][32][64], got [5, 32, 63]"),
        ((5, 8, 64), (12, 8, 64), (12, 8, 64), "q must be [rows][32][64], got [5, 8, 64]"),
        ((5, 32, 64), (11, 8, 64), (12, 8, 64), "k must be [12][8][64], got [11, 8, 64]"),
        ((5, 32, 64), (12, 32, 64), (12, 8, 64), "k must be [12][8][64], got [12, 32, 64]"),
        ((5, 32, 64), (12, 8, 64), (13, 8, 64), "v must be [12][8][64], got [13, 8, 64]"),
        ((5, 32, 64), (12, 8, 64), (12, 8, 64, 1), "v must be [12][8][64], got [12, 8, 64, 1]"),
    ],
)
def test_shape_errors_name_the_tensor_and_both_shapes(q_shape, k_shape, v_shape, message):
    q, k, v = (np.zeros(s, np.float32) for s in (q_shape, k_shape, v_shape))
    with pytest.raises(ValueError, match=r"^[qkv] must be \[") as caught:
        oracle.attention(q, k, v, prefix=7)
    assert str(caught.value) == message


def test_the_contracts_mapping_and_mask_helpers():
    assert [kv_head_of(h) for h in (0, 3, 4, 7, 31)] == [0, 0, 1, 1, 7]
    assert kv_head_of(np.arange(32)).tolist() == [h // 4 for h in range(32)]
    assert visible_mask(2, 3).tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    assert visible_mask(1, 0).tolist() == [[True]]


def test_scores_far_past_exps_range_stay_exact():
    # scores of +-392: exp(392) overflows float64 unless every row's own maximum is subtracted first
    q = np.zeros((2, 32, 64), np.float32)
    q[:, 0, :] = 7.0  # head 0 scores +392 against every key
    q[:, 1, :] = -7.0  # head 1 scores -392 against every key
    k = np.full((2, 8, 64), 7.0, np.float32)
    v = np.arange(2 * 8 * 64, dtype=np.float32).reshape(2, 8, 64)
    out = oracle.attention(q, k, v)
    for head in (0, 1):  # equal scores: row 0 sees key 0 alone, row 1 the mean of keys 0 and 1
        assert out[0, head].tolist() == v[0, 0].astype(np.float64).tolist()
        assert out[1, head].tolist() == ((v[0, 0].astype(np.float64) + v[1, 0]) / 2).tolist()
