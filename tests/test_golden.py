"""The golden proof: the oracle must match the closed-form case, and a broken oracle must not."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.truth import oracle
from labrunner.truth.cases import CASES_DIR
from labrunner.truth.contract import GROUP, HEAD_DIM, KV_HEADS, QUERY_HEADS, SCALE
from labrunner.truth.golden import GOLDEN_DECODE_PATH, GOLDEN_PATH, PROOF_TOLERANCE, prove_oracle, require_proven_oracle


def load_make_golden():
    spec = importlib.util.spec_from_file_location("make_golden", CASES_DIR / "make_golden.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def variant(q, k, v, prefix=0, *, scale=SCALE, subtract_max=True, edge=0, dtype=np.float64, kv_head=None):
    """Attention with one deliberate defect at a time (edge: j <= prefix + i + edge)."""
    rows = q.shape[0]
    out = np.empty((rows, QUERY_HEADS, HEAD_DIM), dtype)
    for h in range(QUERY_HEADS):
        g = kv_head(h) if kv_head else h // GROUP
        kh, vh = k[:, g, :].astype(dtype), v[:, g, :].astype(dtype)
        scores = q[:, h, :].astype(dtype) @ kh.T * dtype(scale)
        visible = np.arange(k.shape[0])[None, :] <= (prefix + np.arange(rows) + edge)[:, None]
        scores = np.where(visible, scores, -np.inf)
        if subtract_max:
            scores = scores - scores.max(axis=1, keepdims=True)
        with np.errstate(over="ignore", invalid="ignore"):
            weights = np.exp(scores)
            out[:, h, :] = (weights / weights.sum(axis=1, keepdims=True)) @ vh
    return out


def test_the_oracle_passes_its_proof():
    proof = prove_oracle()
    assert proof.passed is True
    assert proof.max_error <= 1e-12
    assert proof.to_json() == {"case": "golden", "max_error": proof.max_error, "tolerance": 1e-12, "passed": True}


def test_require_proven_oracle_returns_the_proof():
    assert require_proven_oracle().passed is True


def test_the_correct_variant_passes_too():
    """The defect-free variant passes, so the failures below come from the defects alone."""
    assert prove_oracle(attention=variant).passed is True


def test_golden_file_is_exactly_what_make_golden_derives():
    derived = load_make_golden().derive()
    with np.load(GOLDEN_PATH) as stored:
        assert sorted(stored.files) == sorted(derived)
        for name, array in derived.items():
            assert stored[name].dtype == array.dtype, name
            assert stored[name].shape == array.shape, name
            assert np.array_equal(stored[name], array), name


def test_golden_case_is_the_documented_shape():
    with np.load(GOLDEN_PATH) as golden:
        assert int(golden["prefix"]) == 3
        assert golden["q"].shape == (5, 32, 64) and golden["q"].dtype == np.float32
        assert golden["k"].shape == (8, 8, 64) and golden["v"].shape == (8, 8, 64)
        assert golden["expected"].dtype == np.float64
        # the planted query meets the planted key at exactly 128
        score = float(golden["q"][4, 0].astype(np.float64) @ golden["k"][6, 0]) * SCALE
        assert score == 128.0


@pytest.mark.parametrize(
    "defect",
    [
        pytest.param(dict(edge=-1), id="causal-edge-excludes-the-diagonal"),
        pytest.param(dict(edge=1), id="causal-edge-one-key-late"),
        pytest.param(dict(kv_head=lambda h: h % KV_HEADS), id="kv-head-h-mod-8"),
        pytest.param(dict(subtract_max=False, dtype=np.float32), id="float32-without-max-subtraction"),
    ],
)
def test_a_broken_oracle_fails_the_proof(defect):
    proof = prove_oracle(attention=lambda q, k, v, prefix: variant(q, k, v, prefix, **defect))
    assert proof.passed is False
    assert not proof.max_error <= PROOF_TOLERANCE


def test_a_wrong_scale_fails_the_proof():
    proof = prove_oracle(attention=lambda q, k, v, prefix: variant(q, k, v, prefix, scale=1 / 65**0.5))
    assert proof.passed is False


def test_require_proven_oracle_refuses_with_exit_6_and_the_exact_message():
    broken = lambda q, k, v, prefix: oracle.attention(q, k, v, prefix) + 0.5  # noqa: E731
    with pytest.raises(AttnlabError, match=r"^the oracle failed its golden proof \(max error 0\.5 ") as caught:
        require_proven_oracle(attention=broken)
    assert caught.value.exit_code == ExitCode.ENVIRONMENT == 6
    assert caught.value.message == (
        "the oracle failed its golden proof (max error 0.5 > 1e-12 on golden.npz): refusing to grade; "
        "reinstall attnlab or regenerate the case with cases/make_golden.py"
    )


def test_an_oracle_that_overflows_to_nan_is_refused():
    broken = lambda q, k, v, prefix: variant(q, k, v, prefix, subtract_max=False, dtype=np.float32)  # noqa: E731
    with pytest.raises(AttnlabError, match=r"^the oracle failed its golden proof \(max error nan ") as caught:
        require_proven_oracle(attention=broken)
    assert caught.value.exit_code == 6
    assert caught.value.message.startswith("the oracle failed its golden proof (max error nan > 1e-12 on golden.npz)")


def write_golden(path, expected):
    q = np.zeros((1, 32, 64), np.float32)
    kv = np.zeros((1, 8, 64), np.float32)
    np.savez(path, q=q, k=kv, v=kv, prefix=np.array(0), expected=expected)


@pytest.mark.parametrize("offset, passed", [(1e-12, True), (2e-12, False)])
def test_the_proof_tolerance_is_inclusive(tmp_path, offset, passed):
    expected = np.zeros((1, 32, 64))
    expected[0, 5, 9] = offset
    path = tmp_path / "golden.npz"
    write_golden(path, expected)
    proof = prove_oracle(path, attention=lambda q, k, v, prefix: np.zeros((1, 32, 64)))
    assert proof.max_error == offset
    assert proof.passed is passed


# -- decode through a block table (lab 3) ------------------------------------------------------------
def test_golden_decode_file_is_exactly_what_make_golden_derives():
    derived = load_make_golden().derive_decode()
    with np.load(GOLDEN_DECODE_PATH) as stored:
        assert sorted(stored.files) == sorted(derived)
        for name, array in derived.items():
            assert stored[name].dtype == array.dtype, name
            assert np.array_equal(stored[name], array, equal_nan=True), name


def test_golden_decode_holds_its_three_properties():
    """q = 0 gives the mean of the visible V rows; the planted key gives its V row; one key gives
    probability exactly 1 (V's row, bit for bit)."""
    with np.load(GOLDEN_DECODE_PATH) as golden:
        table, v, expected = golden["block_table"], golden["v"].astype(np.float64), golden["expected"]
        assert golden["seq_lens"].tolist() == [1, 21, 19]
        rows_of_1 = [table[1, j // 16] * 16 + j % 16 for j in range(21)]
        assert np.allclose(expected[1], v[rows_of_1].mean(axis=0)[np.arange(32) // GROUP], rtol=0, atol=1e-12)
        planted = table[2, 0] * 16 + 9
        assert np.allclose(expected[2, 0], v[planted, 0], rtol=0, atol=1e-12)
        assert np.array_equal(expected[0], v[table[0, 0] * 16, np.arange(32) // GROUP])
        got = oracle.decode_attention(golden["q"], golden["k"], golden["v"], table, golden["seq_lens"])
        assert np.array_equal(got[0], expected[0])  # exactly, not within a tolerance
        # NaN stands wherever no key does, so an oracle that read one would fail
        assert np.isnan(golden["k"][table[0, 0] * 16 + 1]).all() and np.isnan(golden["v"][16:32]).all()


def whole_pages(q, k, v, table, lengths):
    """A decode that reads every row of a sequence's last page, the masked ones too."""
    return oracle.decode_attention(q, k, v, table, -(-lengths // 16) * 16)


def pages_in_order(q, k, v, table, lengths):
    """A decode that ignores the table and reads each sequence's pages in physical order from its first."""
    ordered = table.copy()
    for b in range(len(lengths)):
        used = ordered[b] >= 0
        ordered[b, used] = ordered[b, 0] + np.arange(used.sum())
    return oracle.decode_attention(q, k, v, np.minimum(ordered, k.shape[0] // 16 - 1), lengths)


@pytest.mark.parametrize("decode", [whole_pages, pages_in_order], ids=["masked-rows-read", "pages-in-order"])
def test_a_broken_decode_oracle_fails_the_proof_and_names_the_decode_file(decode):
    proof = prove_oracle(decode=decode)
    assert proof.passed is False
    assert proof.file == "golden_decode.npz"
    with pytest.raises(
        AttnlabError, match=r"^the oracle failed its golden proof \(max error .* on golden_decode\.npz\)"
    ):
        require_proven_oracle(decode=decode)
