"""The case catalogue: what each lab checks, read from its case file (`cases/<lab>.toml`).

Data declares, code computes: sizes, planted positions and which cases the CPU backend runs are
data in the case file; this module reads it into `Case`s and checks what can be checked before any
kernel runs. It knows nothing of the inputs a case becomes (`truth.cases`) or of the oracle, so a lab
(`labs/`), which owns its parsed catalogue, reaches no correct answer through it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from labrunner import data_dir
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

    def resolved(self, partition: int, own: int | None = None) -> "Case":
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


@dataclass(frozen=True)
class Catalogue:
    lab: str
    cases: tuple[Case, ...]
    timing: dict[str, Any]  # the catalogue's [timing] table, as TOML gives it
    geometry: dict[str, Any] = field(default_factory=dict)  # how the case derived from a file's launch geometry looks


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
    return Catalogue(lab=data["lab"], cases=cases, timing=data.get("timing", {}), geometry=data.get("geometry", {}))
