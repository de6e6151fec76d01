"""The case catalogue: what each lab checks, read from `cases/<lab>.toml`, and the seeded inputs.

Data declares, code computes: sizes, planted positions and which cases the CPU backend runs
are data in `cases/`; this module turns a case and a seed into arrays.
"""

from __future__ import annotations

import os
import tomllib
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labrunner import data_dir
from labrunner.exit_codes import usage_error
from labrunner.truth.contract import DTYPE, HEAD_DIM, KV_HEADS, QUERY_HEADS

CASES_DIR = data_dir("cases")
DEFAULT_SEED = 20261129
SEED_ENVIRONMENT_VARIABLE = "ATTNLAB_SEED"
PLANT_VALUE = 4.0  # in query head 0 and KV head 0, all 64 dims: planted meets planted at score 128


@dataclass(frozen=True)
class Case:
    name: str
    rows: int
    prefix: int = 0
    planted: tuple[int, ...] = ()
    why: str = ""
    cpu: bool = False
    exact: bool = False  # every element must equal the reference exactly (lab 1's single token)

    @property
    def keys(self) -> int:
        return self.prefix + self.rows


@dataclass(frozen=True)
class Catalogue:
    lab: str
    cases: tuple[Case, ...]
    timing: dict


@dataclass(frozen=True)
class Seed:
    value: int
    source: str  # "default", "--seed" or the environment variable's name

    @property
    def shown(self) -> str:
        """How reports print it: a seed from the environment is a CI secret and is never printed."""
        return "secret" if self.source == SEED_ENVIRONMENT_VARIABLE else str(self.value)


def resolve_seed(option: int | None) -> Seed:
    """--seed wins, then $ATTNLAB_SEED (a CI job's secret seed), then the public default."""
    if option is not None:
        if option < 0:
            raise usage_error(f"--seed must not be negative, got {option}")
        return Seed(option, "--seed")
    secret = os.environ.get(SEED_ENVIRONMENT_VARIABLE, "").strip()
    if secret:
        try:
            value = int(secret, 10) if secret.lstrip("+-").isdigit() else int(secret, 0)
        except ValueError:
            raise usage_error(f"${SEED_ENVIRONMENT_VARIABLE} must be an integer, got {secret!r}") from None
        if value < 0:
            raise usage_error(f"${SEED_ENVIRONMENT_VARIABLE} must not be negative, got {value}")
        return Seed(value, SEED_ENVIRONMENT_VARIABLE)
    return Seed(DEFAULT_SEED, "default")


def load_catalogue(lab: str, cases_dir: Path = CASES_DIR) -> Catalogue:
    with open(cases_dir / f"{lab}.toml", "rb") as handle:
        data = tomllib.load(handle)
    cases = tuple(
        Case(
            name=entry["name"],
            rows=entry["rows"],
            prefix=entry.get("prefix", 0),
            planted=tuple(entry.get("planted", ())),
            why=entry.get("why", ""),
            cpu=entry.get("cpu", False),
            exact=entry.get("exact", False),
        )
        for entry in data["case"]
    )
    for case in cases:
        outside = [p for p in case.planted if not 0 <= p < case.keys]
        if outside:
            raise ValueError(f"{lab} case {case.name}: planted positions {outside} are outside 0..{case.keys - 1}")
    return Catalogue(lab=data["lab"], cases=cases, timing=data.get("timing", {}))


@dataclass
class Inputs:
    q: np.ndarray  # [rows][32][64] float32
    k: np.ndarray  # [prefix + rows][8][64] float32
    v: np.ndarray  # [prefix + rows][8][64] float32


def make_inputs(case: Case, seed: int) -> Inputs:
    """Standard-normal inputs, the same for a given (seed, case name), then the plants."""
    rng = np.random.default_rng([seed, zlib.crc32(case.name.encode())])
    inputs = random_inputs(rng, case.rows, case.prefix)
    plant(inputs, case.planted, case.prefix)
    return inputs


def random_inputs(rng: np.random.Generator, rows: int, prefix: int) -> Inputs:
    keys = prefix + rows
    return Inputs(
        q=rng.standard_normal((rows, QUERY_HEADS, HEAD_DIM), dtype=DTYPE),
        k=rng.standard_normal((keys, KV_HEADS, HEAD_DIM), dtype=DTYPE),
        v=rng.standard_normal((keys, KV_HEADS, HEAD_DIM), dtype=DTYPE),
    )


def plant(inputs: Inputs, positions: tuple[int, ...], prefix: int) -> None:
    """4.0 in KV head 0 at every planted position, and in query head 0 where the chunk holds it."""
    for position in positions:
        inputs.k[position, 0, :] = PLANT_VALUE
        if position >= prefix:
            inputs.q[position - prefix, 0, :] = PLANT_VALUE
