"""The cases' inputs and the run's seed: a case of the catalogue (`truth.catalogue`) and a seed become arrays.

Data declares, code computes: sizes, planted positions and which cases the CPU backend runs
are data in `cases/` (read by `truth.catalogue`); this module turns a case and a seed into arrays.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from dataclasses import dataclass

import numpy as np

from labrunner.exit_codes import usage_error
from labrunner.truth import oracle, paged_cache

# the catalogue's records, read in `truth.catalogue` and named here too, where callers have long found them
from labrunner.truth.catalogue import CASES_DIR as CASES_DIR
from labrunner.truth.catalogue import Case as Case
from labrunner.truth.catalogue import Catalogue as Catalogue
from labrunner.truth.catalogue import load_catalogue as load_catalogue
from labrunner.truth.contract import DTYPE, HEAD_DIM, KV_HEADS, QUERY_HEADS
from labrunner.truth.memory_bound import check_buffers

DEFAULT_SEED = 20261129
SEED_ENVIRONMENT_VARIABLE = "ATTNLAB_SEED"
PLANT_VALUE = 4.0  # in query head 0 and KV head 0, all 64 dims: planted meets planted at score 128


@dataclass(frozen=True)
class Seed:
    value: int
    source: str  # "default", "--seed" or the environment variable's name

    @property
    def shown(self) -> str:
        """How reports print it: a seed from the environment is a CI secret and is never printed."""
        return "secret" if self.source == SEED_ENVIRONMENT_VARIABLE else str(self.value)


# $ATTNLAB_SEED as the driver found it: taken out of its environment as it starts (see the command
# line's start), so that nothing it runs inherits it and /proc shows it to nobody.
_TAKEN_SEED: str | None = None


def keep_environment_seed(value: str | None) -> None:
    global _TAKEN_SEED
    if value is not None:
        _TAKEN_SEED = value


def environment_seed() -> str:
    """$ATTNLAB_SEED's text: the value taken at start, else the environment's ("" when unset)."""
    return _TAKEN_SEED if _TAKEN_SEED is not None else os.environ.get(SEED_ENVIRONMENT_VARIABLE, "")


def resolve_seed(option: int | None, public_seed: bool = False) -> Seed:
    """--seed wins, then $ATTNLAB_SEED (a CI job's secret seed), then the public default.

    The secret may be any text a CI system stores: a decimal or 0x integer is that seed, anything else
    is hashed to one (never shown, not even in an error). An empty secret is what a pull request from a
    fork or a misspelt secret's name gives, and in CI (`CI=true`) so is an unset one; grading with the
    public seed, whose inputs every student can reproduce, would then be silent, so both are refused
    unless `--public-seed` says that seed is meant."""
    if option is not None:
        if option < 0:
            raise usage_error(f"--seed must not be negative, got {option}")
        return Seed(option, "--seed")
    secret = environment_seed().strip()
    if secret:
        return Seed(secret_seed(secret), SEED_ENVIRONMENT_VARIABLE)
    was_set = SEED_ENVIRONMENT_VARIABLE in os.environ or _TAKEN_SEED is not None
    in_ci = os.environ.get("CI", "").lower() == "true"
    if was_set and not public_seed:
        raise usage_error(
            f"${SEED_ENVIRONMENT_VARIABLE} is empty: set it to the course's secret (a fork's pull request gets "
            "none, a misspelt secret's name an empty value), unset it, or pass --public-seed to grade with the "
            "public inputs on purpose"
        )
    if in_ci and not public_seed:
        raise usage_error(
            f"${SEED_ENVIRONMENT_VARIABLE} is not set, and CI=true: a CI grade uses the course's secret seed; "
            f"set ${SEED_ENVIRONMENT_VARIABLE} from the CI system's secret (a fork's pull request gets none), "
            "or pass --public-seed to grade with the public inputs on purpose"
        )
    return Seed(DEFAULT_SEED, "default")


def secret_seed(secret: str) -> int:
    """The seed a secret stands for: a non-negative integer as itself, any other text hashed to 63 bits."""
    try:
        value = int(secret, 10) if secret.lstrip("+-").isdigit() else int(secret, 0)
    except ValueError:
        value = -1
    if value >= 0:
        return value
    return int.from_bytes(hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest()[:8], "big") >> 1


def geometry_case(catalogue: Catalogue, tiles: list[int]) -> Case | None:
    """The case a file's own launch geometry calls for: rows spanning three blocks of its largest row tile.

    `tiles` holds, for every grid dimension that runs over rows (or keys), how many a block covers
    (0: one block covers them all). A fixed catalogue can only guess at tile sizes; a kernel that
    exports 64 rows per block and computes every block's rows from block 0 passes every case of
    64 rows or fewer. Two whole blocks and one partial one cross every boundary of that geometry:
    the first block, a middle block, and a last block that must stop at the chunk's end.
    """
    tiles = [t for t in tiles if t > 0]
    if not tiles or not catalogue.geometry:
        return None
    rows = 2 * max(tiles) + 1
    prefix = catalogue.geometry.get("prefix", 0)
    name = catalogue.geometry["name"].format(rows=rows, prefix=prefix)
    case = Case(
        name=name,
        rows=rows,
        prefix=prefix,
        why=f"rows span three blocks of the file's own launch geometry ({max(tiles)} rows per block)",
        cpu=rows <= catalogue.geometry.get("max_cpu_rows", rows),
    )
    # the rows are the file's tile: here they meet the bound (OverBound past it)
    check_buffers(f"case {name}", case.buffer_bytes())
    return case


@dataclass
class Inputs:
    q: np.ndarray  # [rows][32][64] float32
    k: np.ndarray  # [prefix + rows][8][64] float32; decode: the key pages, [numPages * 16][8][64]
    v: np.ndarray  # like k
    prefix: int = 0
    block_table: np.ndarray | None = None  # decode: [B][maxPages] int32, unused entries -1
    seq_lens: np.ndarray | None = None  # decode: [B] int32

    @property
    def lengths(self) -> list[int]:
        assert self.seq_lens is not None, "only a decode case's inputs have sequence lengths"
        return [int(n) for n in self.seq_lens]

    def buffers(self) -> dict[str, np.ndarray]:
        """The inputs as the kernels receive them, by the names a lab's launches use."""
        given = {"q": self.q, "k": self.k, "v": self.v}
        if self.block_table is not None:
            assert self.seq_lens is not None  # a decode case's inputs carry both
            given.update(blockTable=self.block_table, seqLens=self.seq_lens)
        return given

    def reference(self) -> np.ndarray:
        """The float64 oracle's output for these inputs: `[rows][32][64]`."""
        if self.block_table is not None:
            assert self.seq_lens is not None  # a decode case's inputs carry both
            return oracle.decode_attention(
                self.q, self.k, self.v, self.block_table, self.seq_lens, paged_cache.PAGE_TOKENS
            )
        return oracle.attention(self.q, self.k, self.v, prefix=self.prefix)


def make_inputs(case: Case, seed: int) -> Inputs:
    """Standard-normal inputs, the same for a given (seed, case name), then the plants."""
    rng = np.random.default_rng([seed, zlib.crc32(case.name.encode())])
    if case.decode:
        return paged_inputs(rng, case)
    inputs = random_inputs(rng, case.rows, case.prefix)
    plant(inputs, case.planted, case.prefix)
    inputs.prefix = case.prefix
    return inputs


def paged_inputs(rng: np.random.Generator, case: Case) -> Inputs:
    """A resolved decode case's batch: queries, shuffled pages with NaN where no key stands, the table."""
    lengths = [int(n) for n in case.lengths]
    table, pages = paged_cache.layout(rng, lengths)
    q = rng.standard_normal((len(lengths), QUERY_HEADS, HEAD_DIM), dtype=DTYPE)
    k = paged_cache.fill_pages(rng, table, lengths, pages, (KV_HEADS, HEAD_DIM))
    v = paged_cache.fill_pages(rng, table, lengths, pages, (KV_HEADS, HEAD_DIM))
    for b, key in case.plants:
        q[b, 0, :] = PLANT_VALUE
        k[paged_cache.key_row(table, b, int(key)), 0, :] = PLANT_VALUE  # resolved: every key a number
    return Inputs(q, k, v, block_table=table, seq_lens=np.array(lengths, dtype=np.int32))


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
