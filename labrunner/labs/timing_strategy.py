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

The pipeline asks the strategy and never reads a flag of it: `time` picks which of the driver's timings
runs (the pipeline passes them in, as `Timings`: a lab never imports what times it), `baseline` says
whether a baseline kernel is timed (and the Range pass profiled) beside the student's, and the refusals
say which options and commands apply; the rest says which case `bench` checks first, which shapes
`profile` traces and how a shape is named. The shapes come from the lab's catalogue, which the pipeline
passes in.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, TypeVar

import numpy as np

from labrunner.exit_codes import usage_error
from labrunner.truth.catalogue import Case

Shape = tuple[int, int]  # (rows, prefix): a chunk and its cached prefix, or a decode batch and its longest sequence


class TimingLayout(TypedDict, total=False):
    """What a timed call's inputs hold beside the random Q, K and V; empty: nothing."""

    pages: int  # a paged cache's page count
    fixed: dict[str, np.ndarray]  # the int32 arrays every timed call shares (the block table and lengths)


Made = TypeVar("Made")


class Timings(Protocol):
    """The driver's two timings, one of which a strategy's `time` runs. The pipeline passes them in: the
    labs sit below everything that times (`pipeline.timing_stage`), so a strategy calls back rather than
    imports."""

    def whole_call(self, sizes: list[int]) -> None:
        """The whole call at every size, each kernel timed inside it (the lab's peer beside it, if asked)."""
        ...

    def against_baseline(self, rows: int, prefix: int) -> None:
        """The student's kernel against a baseline kernel (or the lab's peer in its place) at one shape."""
        ...


class TimingStrategy(ABC):
    """What the orchestration asks of a lab's timing. `timing` below is the catalogue's `[timing]` table."""

    @abstractmethod
    def time(
        self, timings: Timings, timing: Mapping[str, Any], chunk: int | None = None, prefix: int | None = None
    ) -> None:
        """Time a correct kernel the lab's way, at its `shapes`: one of the driver's `timings`."""

    @abstractmethod
    def baseline(self, made: Callable[[], Made]) -> Made | None:
        """The baseline kernel timed beside the student's (the starter unless `bench --vs` names another),
        as `made` makes it (its path, its compile, its row in the Range pass); None, and `made` never
        called, where the lab times the student's kernel alone."""

    @abstractmethod
    def refuse_shape_options(self, lab_name: str, peer: str | None, given: Sequence[str]) -> None:
        """--chunk, --prefix, --vs (beyond the lab's `peer`) and --rounds, as `given`, shape a comparison;
        a timing they do not shape refuses them (a usage error) before any work."""

    @abstractmethod
    def refuse_calibration(self, lab_name: str) -> None:
        """`calibrate` times the solution against the starter and writes this GPU's speed gate; a timing
        with no gate refuses it (a usage error)."""

    @abstractmethod
    def shapes(self, timing: Mapping[str, Any], chunk: int | None = None, prefix: int | None = None) -> list[Shape]:
        """Every shape the lab times, in order; `chunk` and `prefix` stand in for the catalogue's where
        they shape the timing (`refuse_shape_options` refuses them elsewhere)."""

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

    def time(
        self, timings: Timings, timing: Mapping[str, Any], chunk: int | None = None, prefix: int | None = None
    ) -> None:
        ((rows, cached),) = self.shapes(timing, chunk, prefix)
        timings.against_baseline(rows, cached)

    def baseline(self, made: Callable[[], Made]) -> Made | None:
        return made()

    def refuse_shape_options(self, lab_name: str, peer: str | None, given: Sequence[str]) -> None:
        """Every option shapes this comparison: none is refused."""

    def refuse_calibration(self, lab_name: str) -> None:
        """The SPEEDUP is gated, on a fraction of the solution's on this GPU: calibrate writes it."""

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

    def time(
        self, timings: Timings, timing: Mapping[str, Any], chunk: int | None = None, prefix: int | None = None
    ) -> None:
        timings.whole_call([rows for rows, _ in self.shapes(timing)])

    def baseline(self, made: Callable[[], Made]) -> Made | None:
        return None

    def refuse_shape_options(self, lab_name: str, peer: str | None, given: Sequence[str]) -> None:
        """The sizes are the catalogue's and nothing is compared: each option given is refused, and the
        lab's `peer` alone is taken by --vs (PyTorch beside the whole call)."""
        if not given:
            return
        verb = "applies" if len(given) == 1 else "apply"
        beside = f" (its --vs takes {peer} only: PyTorch beside the whole call)" if "--vs" in given and peer else ""
        raise usage_error(
            f"{' and '.join(given)} {verb} to lab2's SPEEDUP; {lab_name} times its pipeline at fixed sizes{beside}"
        )

    def refuse_calibration(self, lab_name: str) -> None:
        raise usage_error(f"{lab_name} has no speed gate to calibrate (it times its pipeline; only lab2 is gated)")

    def shapes(self, timing: Mapping[str, Any], chunk: int | None = None, prefix: int | None = None) -> list[Shape]:
        return [(t, 0) for t in timing["sizes"]]

    def shape_label(self, rows: int, prefix: int) -> str:
        return f"T = {rows}"

    def check_case(
        self, cases: Sequence[Case], timing: Mapping[str, Any], chunk: int | None = None, prefix: int | None = None
    ) -> Case:
        """The catalogue's case of the most rows (the first of them, where several tie)."""
        return next(c for c in cases if c.rows == max(c.rows for c in cases))
