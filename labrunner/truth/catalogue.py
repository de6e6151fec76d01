"""The case catalogue: what each lab checks, read from its case file (`cases/<lab>.toml`).

Data declares, code computes: sizes, planted positions, which cases the CPU backend runs and what
each part of a grade is worth on Gradescope (`[points]`) are data in the case file; this module
reads it into `Case`s and `Points` and checks what can be checked before any kernel runs. It knows
nothing of the inputs a case becomes (`truth.cases`) or of the oracle, so a lab (`labs/`), which
owns its parsed catalogue, reaches no correct answer through it.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from labrunner import data_dir
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.truth import paged_cache
from labrunner.truth.contract import HEAD_DIM, KV_HEADS, QUERY_HEADS
from labrunner.truth.memory_bound import check_buffers

CASES_DIR = data_dir("cases")


@dataclass(frozen=True)
class Case:
    """A chunk of `rows` query rows at `prefix` (labs 1 and 2), or a decode batch (`lengths` given).

    A decode case is a batch of sequences, one new token each, whose keys live in a paged cache
    (`paged_cache`): `lengths` and `plants` are written against the partition size `p` of the file
    being graded and become numbers in `resolved`. A resolved decode case has `rows` = its batch
    size and `prefix` = its longest sequence's length (the shape its launches are planned for).
    """

    name: str
    rows: int
    prefix: int = 0
    planted: tuple[int, ...] = ()
    why: str = ""
    cpu: bool = False
    exact: bool = False  # every element must equal the reference exactly (lab 1's single token)
    lengths: tuple[int | str, ...] = ()  # decode: each sequence's keys ("2p+1", 17, ...)
    # decode: (sequence, key) pairs planted at score 128 (key "L-1": the last)
    plants: tuple[tuple[int, int | str], ...] = ()
    partition: int = 0  # decode: the graded file's own partition size (0: one partition per sequence)

    @property
    def keys(self) -> int:
        return self.prefix + self.rows

    @property
    def decode(self) -> bool:
        return bool(self.lengths)

    def buffer_bytes(self) -> dict[str, int]:
        """The bytes of every buffer this case builds (its inputs, as `make_inputs` makes them, and its
        output), worked out without building any: float32 and int32 are 4 bytes an element."""
        row = QUERY_HEADS * HEAD_DIM * 4  # one row of q or out
        if self.decode:
            lengths = [int(n) for n in self.lengths]
            cache = paged_cache.page_count(lengths) * paged_cache.PAGE_TOKENS * KV_HEADS * HEAD_DIM * 4
            return {
                "q": len(lengths) * row,
                "k": cache,
                "v": cache,
                "blockTable": len(lengths) * paged_cache.max_pages(max(lengths)) * 4,
                "seqLens": len(lengths) * 4,
                "out": len(lengths) * row,
            }
        keys = self.keys * KV_HEADS * HEAD_DIM * 4
        return {"q": self.rows * row, "k": keys, "v": keys, "out": self.rows * row}

    def resolved(self, partition: int, own: int | None = None) -> Case:
        """The decode case with `p` = partition: numbers for lengths and plants, rows and prefix set.
        `own`: the file's own partition size where it differs (0: one partition per sequence, whose
        cases are written against the catalogue's `partition_when_whole`)."""
        if not self.decode:
            return self
        lengths = tuple(paged_cache.evaluate(n, partition) for n in self.lengths)
        if min(lengths) < 1:
            raise ValueError(f"case {self.name}: with p = {partition} a length is {min(lengths)}; each is at least 1")
        plants = tuple((int(b), paged_cache.evaluate(key, partition, lengths[int(b)])) for b, key in self.plants)
        outside = [(b, key) for b, key in plants if not (0 <= b < len(lengths) and 0 <= key < lengths[b])]
        if outside:
            raise ValueError(f"case {self.name}: planted (sequence, key) {outside[0]} is outside the batch")
        case = replace(
            self,
            lengths=lengths,
            plants=plants,
            rows=len(lengths),
            prefix=max(lengths),
            partition=partition if own is None else own,
        )
        # p is the file's: here it becomes sizes, so here they meet the bound (OverBound past it)
        check_buffers(f"case {self.name} at p = {partition}", case.buffer_bytes())
        return case


class PointsError(AttnlabError, ValueError):
    """A `[points]` table that cannot be right: a usage error (exit 2) that names the file and the key, so
    the grade that loads it ends with that line, not a traceback; a ValueError, as the catalogue's other
    checks raise."""

    def __init__(self, message: str):
        super().__init__(message, ExitCode.USAGE)


@dataclass(frozen=True)
class Points:
    """What a grade is worth on Gradescope (`report/gradescope.py`): the case file's `[points]` table.

    `cases` points are shared by the cases a grade ran, in proportion to their shares (one each, or the
    case's entry in `[points.shares]`; the case derived from a file's launch geometry has one), so the
    total is the same whichever cases run: the CPU backend's default set, `--full`, `--case`, with or
    without the geometry case. `speed` points are a met speed gate's (0: the lab has no speed part)."""

    cases: float = 100.0
    speed: float = 0.0
    shares: dict[str, int] = field(default_factory=dict)

    def share(self, case: str) -> int:
        return self.shares.get(case, 1)


@dataclass(frozen=True)
class Catalogue:
    lab: str
    cases: tuple[Case, ...]
    timing: dict[str, Any]  # the catalogue's [timing] table, as TOML gives it
    geometry: dict[str, Any] = field(default_factory=dict)  # how the case derived from a file's launch geometry looks
    points: Points = field(default_factory=Points)  # the [points] table: what a grade is worth on Gradescope


def load_catalogue(lab: str, cases_dir: Path = CASES_DIR) -> Catalogue:
    with open(cases_dir / f"{lab}.toml", "rb") as handle:
        data = tomllib.load(handle)
    cases = tuple(
        Case(
            name=entry["name"],
            rows=entry.get("rows", len(entry.get("lengths", ()))),
            prefix=entry.get("prefix", 0),
            planted=tuple(entry.get("planted", ())),
            why=entry.get("why", ""),
            cpu=entry.get("cpu", False),
            exact=entry.get("exact", False),
            lengths=tuple(entry.get("lengths", ())),
            plants=tuple(tuple(pair) for pair in entry.get("plants", ())),
        )
        for entry in data["case"]
    )
    for case in cases:
        outside = [p for p in case.planted if not 0 <= p < case.keys]
        if outside:
            raise ValueError(f"{lab} case {case.name}: planted positions {outside} are outside 0..{case.keys - 1}")
    return Catalogue(
        lab=data["lab"],
        cases=cases,
        timing=data.get("timing", {}),
        geometry=data.get("geometry", {}),
        points=load_points(f"{cases_dir / lab}.toml", data.get("points", {}), cases),
    )


def load_points(file: str, table: dict[str, Any], cases: tuple[Case, ...]) -> Points:
    """The `[points]` table of `file`, checked: a misspelt key or a share for a case that does not exist
    would otherwise change every student's score without a word."""
    where = f"{file} [points]"
    unknown = sorted(set(table) - {"cases", "speed", "shares"})
    if unknown:
        raise PointsError(f"{where}: unknown key {unknown[0]!r}; the keys are cases, speed and shares")
    numbers = {}
    for key, default in (("cases", Points.cases), ("speed", Points.speed)):
        value = table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise PointsError(f"{where}: {key} = {value!r}; write a number of points, 0 or more")
        numbers[key] = float(value)
    if numbers["cases"] <= 0:
        raise PointsError(f"{where}: cases = {table['cases']!r}; the cases must be worth more than 0 points")
    shares = table.get("shares", {})
    if not isinstance(shares, dict):
        raise PointsError(f"{where}: shares = {shares!r}; write a table, [points.shares], of case = share")
    names = {c.name for c in cases}
    for name, share in shares.items():
        if name not in names:
            raise PointsError(f"{where}.shares: {name!r} is no case of this file; name one of its [[case]] entries")
        if isinstance(share, bool) or not isinstance(share, int) or share < 1:
            raise PointsError(f"{where}.shares: {name} = {share!r}; a share is a whole number, 1 or more")
    return Points(cases=numbers["cases"], speed=numbers["speed"], shares=dict(shares))
