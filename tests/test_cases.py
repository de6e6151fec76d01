"""The case catalogues, seed resolution, seeded inputs and the planted hazards."""

from __future__ import annotations

import hashlib
import zlib

import numpy as np
import pytest

from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.truth.cases import (
    DEFAULT_SEED,
    PLANT_VALUE,
    Case,
    Seed,
    load_catalogue,
    make_inputs,
    resolve_seed,
)


def table(catalogue):
    return [(c.name, c.rows, c.prefix, c.planted) for c in catalogue.cases]


def test_lab1_catalogue():
    catalogue = load_catalogue("lab1")
    assert catalogue.lab == "lab1"
    assert table(catalogue) == [
        ("T1", 1, 0, ()),
        ("T17", 17, 0, ()),
        ("T33", 33, 0, ()),
        ("planted-T40", 40, 0, (0, 7, 16, 31, 39)),
        ("T257", 257, 0, ()),
        ("T512", 512, 0, ()),
    ]
    assert catalogue.timing == {"sizes": [512, 1024, 2048]}


def test_lab2_catalogue():
    catalogue = load_catalogue("lab2")
    assert catalogue.lab == "lab2"
    assert table(catalogue) == [
        ("C1-P31", 1, 31, ()),
        ("C17-P31", 17, 31, ()),
        ("C33-P31", 33, 31, ()),
        ("C1-P1000", 1, 1000, ()),
        ("C17-P1000", 17, 1000, ()),
        ("C33-P1000", 33, 1000, ()),
        ("planted-C33-P31", 33, 31, (3, 30, 31, 40, 63)),
        ("planted-C33-P1000", 33, 1000, (5, 500, 999, 1001, 1016, 1032)),
        ("lastkey-C33-P1000", 33, 1000, (1032,)),
        ("lastkey-C17-P31", 17, 31, (47,)),
        ("C2048-P2048", 2048, 2048, ()),
    ]
    assert catalogue.timing == {"rows": 2048, "prefix": 2048}


def test_every_case_says_why_it_exists():
    for lab in ("lab1", "lab2", "lab3"):
        for case in load_catalogue(lab).cases:
            assert case.why.strip(), f"{lab} {case.name}"


def test_case_keys_are_prefix_plus_rows():
    assert Case("x", rows=33, prefix=1000).keys == 1033
    assert Case("x", rows=17).keys == 17


def test_lastkey_cases_plant_only_the_last_key():
    lastkey = [c for c in load_catalogue("lab2").cases if c.name.startswith("lastkey-")]
    assert [c.name for c in lastkey] == ["lastkey-C33-P1000", "lastkey-C17-P31"]
    for case in lastkey:
        assert case.planted == (case.keys - 1,)


def test_a_planted_position_outside_the_sequence_is_refused(tmp_path):
    (tmp_path / "labx.toml").write_text(
        'lab = "labx"\n[[case]]\nname = "bad"\nrows = 33\nprefix = 31\nplanted = [3, 64, -1]\n'
    )
    with pytest.raises(ValueError, match=r"^labx case bad: planted positions") as caught:
        load_catalogue("labx", tmp_path)
    assert str(caught.value) == "labx case bad: planted positions [64, -1] are outside 0..63"


# --- seeds -----------------------------------------------------------------------------------


def test_seed_option_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("ATTNLAB_SEED", "99")
    assert resolve_seed(5) == Seed(5, "--seed")
    assert resolve_seed(5).shown == "5"


def test_seed_zero_from_the_option_is_not_ignored(monkeypatch):
    monkeypatch.setenv("ATTNLAB_SEED", "99")
    assert resolve_seed(0) == Seed(0, "--seed")


def test_environment_seed_is_used_and_shown_as_secret(monkeypatch):
    monkeypatch.setenv("ATTNLAB_SEED", " 12345 ")
    seed = resolve_seed(None)
    assert seed == Seed(12345, "ATTNLAB_SEED")
    assert seed.shown == "secret"


def test_environment_seed_accepts_hex(monkeypatch):
    monkeypatch.setenv("ATTNLAB_SEED", "0x10")
    assert resolve_seed(None).value == 16


@pytest.mark.parametrize("value", [None, "", "   "])
def test_default_seed_without_option_or_environment(monkeypatch, value):
    """Unset, the public default; set but empty, the public default only where --public-seed asks for it
    (an empty secret is a CI secret gone missing: tests/test_batch_runs.py)."""
    if value is None:
        monkeypatch.delenv("ATTNLAB_SEED", raising=False)
    else:
        monkeypatch.setenv("ATTNLAB_SEED", value)
    seed = resolve_seed(None, public_seed=value is not None)
    assert seed == Seed(20261129, "default") == Seed(DEFAULT_SEED, "default")
    assert seed.shown == "20261129"


@pytest.mark.parametrize("value", ["abc", "1.5", "12 34", "-5"])
def test_a_secret_that_is_not_a_whole_number_is_hashed_to_its_seed(monkeypatch, value):
    """A CI secret is any text: it is hashed to a seed of its own, never refused and never the default."""
    monkeypatch.setenv("ATTNLAB_SEED", value)
    seed = resolve_seed(None)
    expected = int.from_bytes(hashlib.sha256(value.encode()).digest()[:8], "big") >> 1
    assert seed == Seed(expected, "ATTNLAB_SEED") and seed.shown == "secret"
    assert seed.value != DEFAULT_SEED


def test_an_environment_seed_with_leading_zeros_is_an_integer(monkeypatch):
    monkeypatch.setenv("ATTNLAB_SEED", "007")
    assert resolve_seed(None) == Seed(7, "ATTNLAB_SEED")


def test_a_negative_environment_seed_never_crashes(monkeypatch):
    """Either the seed is refused as a usage error, or it yields inputs; never a traceback."""
    monkeypatch.setenv("ATTNLAB_SEED", "-5")
    try:
        inputs = make_inputs(Case("C1-P31", 1, 31), resolve_seed(None).value)
    except AttnlabError as error:
        assert error.exit_code == ExitCode.USAGE
    else:
        assert inputs.q.shape == (1, 32, 64)


# --- inputs ----------------------------------------------------------------------------------


def test_inputs_have_the_contract_shapes_and_dtype():
    inputs = make_inputs(Case("C17-P31", 17, 31), DEFAULT_SEED)
    assert inputs.q.shape == (17, 32, 64) and inputs.q.dtype == np.float32
    assert inputs.k.shape == (48, 8, 64) and inputs.k.dtype == np.float32
    assert inputs.v.shape == (48, 8, 64) and inputs.v.dtype == np.float32
    for array in (inputs.q, inputs.k, inputs.v):
        assert array.flags.c_contiguous


def test_inputs_are_the_same_for_the_same_seed_and_case():
    case = Case("C17-P31", 17, 31)
    a, b = make_inputs(case, 7), make_inputs(case, 7)
    for name in ("q", "k", "v"):
        assert np.array_equal(getattr(a, name).view(np.uint32), getattr(b, name).view(np.uint32)), name


def test_inputs_differ_across_seeds():
    case = Case("C17-P31", 17, 31)
    a, b = make_inputs(case, 7), make_inputs(case, 8)
    for name in ("q", "k", "v"):
        assert np.mean(getattr(a, name) == getattr(b, name)) < 1e-3, name


def test_inputs_differ_across_case_names_of_the_same_shape():
    a = make_inputs(Case("C17-P31", 17, 31), 7)
    b = make_inputs(Case("other", 17, 31), 7)
    assert not np.array_equal(a.q, b.q)


def test_inputs_follow_the_seeding_recipe():
    """The recipe is fixed: (seed, crc32 of the case name) seeds q, then k, then v, standard normal."""
    inputs = make_inputs(Case("C1-P31", 1, 31), DEFAULT_SEED)
    rng = np.random.default_rng([DEFAULT_SEED, zlib.crc32(b"C1-P31")])
    assert np.array_equal(inputs.q, rng.standard_normal((1, 32, 64), dtype=np.float32))
    assert np.array_equal(inputs.k, rng.standard_normal((32, 8, 64), dtype=np.float32))
    assert np.array_equal(inputs.v, rng.standard_normal((32, 8, 64), dtype=np.float32))


# --- planted hazards -------------------------------------------------------------------------


def planted_and_plain(case: Case, seed: int = 3):
    plain = Case(case.name, case.rows, case.prefix)  # same name, same random draw, nothing planted
    return make_inputs(case, seed), make_inputs(plain, seed)


def changed_slots(planted: np.ndarray, plain: np.ndarray) -> list[tuple[int, int]]:
    """(position, head) pairs where any dim differs."""
    differs = np.any(planted != plain, axis=2)
    return [tuple(int(x) for x in p) for p in np.argwhere(differs)]


def test_lab2_planting_touches_exactly_the_planted_slots():
    assert PLANT_VALUE == 4.0
    case = next(c for c in load_catalogue("lab2").cases if c.name == "planted-C33-P31")
    planted, plain = planted_and_plain(case)
    # keys: every planted position, KV head 0 only
    assert changed_slots(planted.k, plain.k) == [(3, 0), (30, 0), (31, 0), (40, 0), (63, 0)]
    # queries: only positions inside the chunk (31, 40, 63 -> rows 0, 9, 32), query head 0 only
    assert changed_slots(planted.q, plain.q) == [(0, 0), (9, 0), (32, 0)]
    assert np.array_equal(planted.v, plain.v)
    for position in case.planted:
        assert np.all(planted.k[position, 0, :] == 4.0)
    for row in (0, 9, 32):
        assert np.all(planted.q[row, 0, :] == 4.0)


def test_lab1_planting_puts_rows_and_keys_at_the_same_positions():
    case = next(c for c in load_catalogue("lab1").cases if c.name == "planted-T40")
    planted, plain = planted_and_plain(case)
    assert changed_slots(planted.q, plain.q) == [(p, 0) for p in (0, 7, 16, 31, 39)]
    assert changed_slots(planted.k, plain.k) == [(p, 0) for p in (0, 7, 16, 31, 39)]


def test_a_planted_query_against_a_planted_key_scores_exactly_128():
    case = next(c for c in load_catalogue("lab2").cases if c.name == "planted-C33-P31")
    inputs = make_inputs(case, DEFAULT_SEED)
    score = np.dot(inputs.q[9, 0, :], inputs.k[63, 0, :]) * np.float32(0.125)
    assert score.dtype == np.float32
    assert score == 128.0


@pytest.mark.parametrize("name", ["lastkey-C33-P1000", "lastkey-C17-P31"])
def test_the_lastkey_case_plants_only_the_last_key_and_row(name):
    case = next(c for c in load_catalogue("lab2").cases if c.name == name)
    planted, plain = planted_and_plain(case)
    assert changed_slots(planted.k, plain.k) == [(case.keys - 1, 0)]
    assert changed_slots(planted.q, plain.q) == [(case.rows - 1, 0)]


def test_a_cases_progress_line_speaks_of_its_size_as_its_lab_does():
    from labrunner.pipeline.correctness import size_in_words
    from labrunner.truth.cases import load_catalogue

    def named(lab: str, name: str):
        case = next(c for c in load_catalogue(lab).cases if c.name == name)
        return case.resolved(64) if case.decode else case

    assert size_in_words(named("lab1", "T1")) == "1 row"
    assert size_in_words(named("lab1", "T17")) == "17 rows"
    assert size_in_words(named("lab2", "C1-P1000")) == "1 row, prefix 1000"
    assert size_in_words(named("lab3", "single-token")) == "3 sequences, the longest 1 key"
