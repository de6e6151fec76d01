"""How a lab is timed: the strategy the orchestration asks, so it never asks which lab it is timing.

A correct kernel is timed in one of three ways, a class each:

- `AgainstBaseline` (lab 2): the student's kernel and a baseline kernel (the starter unless `bench --vs`
  names the solution, the expert, a .cu file or the lab's PyTorch peer), interleaved on the same fresh
  input sets at one shape, the catalogue's `[timing]` rows and prefix (or `--chunk` and `--prefix`): a
  SPEEDUP, which a speed gate calibrated on this GPU may ask a minimum of.
- `AgainstCopy` (lab 3): the same comparison with the starter, and the bytes one call must move (the
  lab's own model of its traffic) over its median time, set against a device copy timed in the same
  run: bandwidth, gated on a fraction of that copy.
- `PerKernel` (lab 1): the whole call at each of the catalogue's `[timing] sizes`, each kernel timed
  inside it: a cost table with no baseline and no gate (its `--vs` takes only the lab's PyTorch peer,
  beside the whole call).

The pipeline reads the answers here (`kind` picks what times; the rest says which options apply, what
`calibrate` and the Range pass compare with, which case `bench` checks first, which shapes `profile`
traces and how a shape is named) and the shapes from the lab's catalogue, which it passes in.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, TypedDict

import numpy as np

from labrunner.truth.catalogue import Case

Shape = tuple[int, int]  # (rows, prefix): a chunk and its cached prefix, or a decode batch and its longest sequence


class TimingLayout(TypedDict, total=False):
    """What a timed call's inputs hold beside the random Q, K and V; empty: nothing."""

    pages: int  # a paged cache's page count
    fixed: dict[str, np.ndarray]  # the int32 arrays every timed call shares (the block table and lengths)


class TimingKind(Enum):
    """What the timing measures, and so which of the driver's timings runs."""

    SPEEDUP = "speedup"  # against a baseline kernel
    BANDWIDTH = "bandwidth"  # against the device copy (with the baseline's SPEEDUP beside it)
    PIPELINE = "pipeline"  # each kernel inside the whole call, at fixed sizes


class TimingStrategy(ABC):
    """What the orchestration asks of a lab's timing. `timing` below is the catalogue's `[timing]` table."""

    kind: ClassVar[TimingKind]
    # A kernel is timed beside the student's (the starter unless `bench --vs` names another): the Range
    # pass profiles the starter beside the student's kernel too.
    baseline_kernel: ClassVar[bool]
    # --chunk, --prefix, --vs (beyond the lab's peer) and --rounds shape this timing; where they do not,
    # they are refused before any work.
    takes_shape_options: ClassVar[bool]
    # `calibrate` may time the solution against the starter here and write this GPU's speed gate.
    calibrates: ClassVar[bool]

    @abstractmethod
    def shapes(self, timing: Mapping[str, Any], chunk: int | None = None, prefix: int | None = None) -> list[Shape]:
        """Every shape the lab times, in order; `chunk` and `prefix` stand in for the catalogue's where
        `takes_shape_options` (the pipeline refuses them elsewhere)."""

    @abstractmethod
    def shape_label(self, rows: int, prefix: int) -> str:
        """How `profile`, the trace and a figure past the hardware name a timing shape."""

    def shape_in_note(self, rows: int, prefix: int) -> str:
        """How the note before a comparison names its shape (`timing X against Y at ...`)."""
        return self.shape_label(rows, prefix)

    @abstractmethod
    def check_case(
        self, cases: Sequence[Case], timing: Mapping[str, Any], chunk: int | None = None, prefix: int | None = None
    ) -> Case:
        """The one correctness check `bench` and `profile` run before timing, from the catalogue's cases
        (a decode case's lengths written for the file's own partition size)."""

    def must_move(self, rows: int, prefix: int, layout: TimingLayout) -> int | None:
        """The bytes one call must move at the least, for a lab timed on bandwidth; None: no such figure."""
        return None


@dataclass(frozen=True)
class AgainstBaseline(TimingStrategy):
    """SPEEDUP against a baseline kernel at one shape (lab 2)."""

    kind: ClassVar[TimingKind] = TimingKind.SPEEDUP
    baseline_kernel: ClassVar[bool] = True
    takes_shape_options: ClassVar[bool] = True
    calibrates: ClassVar[bool] = True

    def shapes(self, timing: Mapping[str, Any], chunk: int | None = None, prefix: int | None = None) -> list[Shape]:
        return [(chunk or timing["rows"], timing["prefix"] if prefix is None else prefix)]

    def shape_label(self, rows: int, prefix: int) -> str:
        return f"C = {rows}, P = {prefix}"

    def check_case(
        self, cases: Sequence[Case], timing: Mapping[str, Any], chunk: int | None = None, prefix: int | None = None
    ) -> Case:
        """The timed shape itself, checked in full once."""
        ((rows, cached),) = self.shapes(timing, chunk, prefix)
        return Case(f"C{rows}-P{cached}", rows, cached, why="the timed shape, checked once before timing")


@dataclass(frozen=True)
class AgainstCopy(AgainstBaseline):
    """Bandwidth against the same run's device copy, the starter's SPEEDUP beside it (lab 3): a decode
    batch of `rows` sequences whose longest holds `prefix` keys."""

    # (rows, prefix, the timing layout) -> the bytes one call must move at the least: the lab's model
    bytes_to_move: Callable[[int, int, TimingLayout], int]

    kind: ClassVar[TimingKind] = TimingKind.BANDWIDTH

    def shape_label(self, rows: int, prefix: int) -> str:
        return f"B = {rows}, longest {prefix:,}"

    def shape_in_note(self, rows: int, prefix: int) -> str:
        return f"B = {rows}, longest {prefix}"

    def check_case(
        self, cases: Sequence[Case], timing: Mapping[str, Any], chunk: int | None = None, prefix: int | None = None
    ) -> Case:
        """The catalogue's case with the longest sequence: the timed batch's gigabytes would cross the
        worker's pipe, so its longest sequence is checked in a batch of its own instead."""
        decode = [c for c in cases if c.decode]
        if not decode:
            return super().check_case(cases, timing, chunk, prefix)
        return max(decode, key=lambda c: c.prefix)

    def must_move(self, rows: int, prefix: int, layout: TimingLayout) -> int:
        return self.bytes_to_move(rows, prefix, layout)


@dataclass(frozen=True)
class PerKernel(TimingStrategy):
    """Every kernel timed inside the whole call at the catalogue's fixed sizes, no baseline (lab 1)."""

    kind: ClassVar[TimingKind] = TimingKind.PIPELINE
    baseline_kernel: ClassVar[bool] = False
    takes_shape_options: ClassVar[bool] = False
    calibrates: ClassVar[bool] = False

    def shapes(self, timing: Mapping[str, Any], chunk: int | None = None, prefix: int | None = None) -> list[Shape]:
        return [(t, 0) for t in timing["sizes"]]

    def shape_label(self, rows: int, prefix: int) -> str:
        return f"T = {rows}"

    def check_case(
        self, cases: Sequence[Case], timing: Mapping[str, Any], chunk: int | None = None, prefix: int | None = None
    ) -> Case:
        """The catalogue's case of the most rows (the first of them, where several tie)."""
        return next(c for c in cases if c.rows == max(c.rows for c in cases))
