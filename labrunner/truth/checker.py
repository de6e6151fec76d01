"""The checker: one output against the oracle, under the contract's pass rule.

It reports what a student needs to find the bug: the first bad (row, head, column) with got
against expected and the rule they broke, how many elements are wrong, and which rows fail.
An element that still holds the poison pattern is reported as never written, not as a wrong
number, because "your kernel never wrote row 16" is a different bug from "row 16 is off"; one
that carries the CPU backend's shared-memory poison read shared memory before any thread wrote
it, which is a race.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np

from labrunner.truth.contract import (
    EXACT_RULE,
    GROUP,
    PASS_RULE,
    QUERY_HEADS,
    SCALE,
    exactly_equal,
    visible_mask,
    within_tolerance,
)
from labrunner.truth.poison import SHARED_POISON_BITS, WORKSPACE_POISON_BITS, carries, never_written
from labrunner.truth.verdict import Status

# What the values alone can show (truth/verdict.py holds every status).
PASS = Status.PASS
WRONG = Status.WRONG
NEVER_WRITTEN = Status.NEVER_WRITTEN
RACE = Status.RACE

NEVER_WRITTEN_WORDS = (
    "never written, or computed from a value never written (an output or shared buffer read before it was set?)"
)
RACE_WORDS = "read shared memory no thread had written since the last barrier: a missing __syncthreads()?"


class FirstBad(TypedDict):
    """The first wrong element, as the JSON shows it."""

    row: int
    head: int
    col: int
    got: float | str | None  # a finite float; "nan", "inf" or "-inf" as text; None where never written
    expected: float


@dataclass
class OutputCheck:
    status: Status  # pass, wrong, never-written or race
    message: str
    max_abs_err: float | None  # nan or inf when any element is; None for an empty output
    bad_elements: int
    total_elements: int
    first_bad: FirstBad | None = None
    failing_rows: list[int] = field(default_factory=list)
    nonfinite: int = 0  # elements that are NaN or Inf
    workspace_poisoned: int = 0  # elements carrying the workspace's poison: computed from an unwritten workspace

    @property
    def passed(self) -> bool:
        return self.status == PASS


def max_abs_error(out: np.ndarray, ref: np.ndarray) -> tuple[float | None, int]:
    """The largest |out - ref|, and how many elements are not finite.

    A NaN anywhere makes it nan and an Inf (with no NaN) inf: a column that reads 7.35e-07 beside
    `got nan` would say the kernel was nearly right.
    """
    if out.size == 0:
        return None, 0
    values = out.astype(np.float64)
    nonfinite = int((~np.isfinite(values)).sum())
    if np.isnan(values).any():
        return float("nan"), nonfinite
    return float(np.abs(values - ref).max()), nonfinite


def check_output(out: np.ndarray, ref: np.ndarray, exact: bool = False, row_noun: str = "row") -> OutputCheck:
    """`out` float32 `[rows][32][64]` from the kernel, `ref` float64 of the same shape from the oracle.

    `exact`: the case demands equality, not the tolerance (lab 1's single token, whose probability
    must be exactly 1, so its output is V's first row bit for bit). `row_noun`: what the lab calls one
    row of `out` (`sequence` in a decode batch, whose rows are its sequences' new tokens).
    """
    if out.shape != ref.shape:
        raise ValueError(f"output shape {out.shape} does not match the reference {ref.shape}")
    ok = exactly_equal(out, ref) if exact else within_tolerance(out, ref)
    unwritten = never_written(out)
    raced = carries(out, SHARED_POISON_BITS)
    max_abs_err, nonfinite = max_abs_error(out, ref)
    workspace_poisoned = int(carries(out, WORKSPACE_POISON_BITS).sum())
    bad = ~ok
    bad_count = int(bad.sum())
    if bad_count == 0:
        return OutputCheck(PASS, f"all {out.size} elements within the pass rule", max_abs_err, 0, out.size)

    failing_rows = np.flatnonzero(bad.reshape(bad.shape[0], -1).any(axis=1)).tolist()
    got: float | str | None = None
    if raced.any():
        # Severity first: a race makes every other wrong value suspect, so it is the reported bug.
        row, head, col = np.unravel_index(np.flatnonzero(raced)[0], out.shape)
        message = (
            f"{row_noun} {row}, head {head}, col {col}: {RACE_WORDS} "
            f"({int(raced.sum())} of {out.size} elements carry the shared-memory poison)"
        )
        status = RACE
        got = "nan"
    elif unwritten.any():
        unwritten_count = int(unwritten.sum())
        row, head, col = np.unravel_index(np.flatnonzero(unwritten)[0], out.shape)
        message = (
            f"{row_noun} {row}, head {head}, col {col}: {NEVER_WRITTEN_WORDS}; "
            f"{unwritten_count} of {out.size} elements never written"
        )
        if bad_count > unwritten_count:
            message += f", {bad_count - unwritten_count} more wrong"
        status = NEVER_WRITTEN
    else:
        row, head, col = np.unravel_index(np.flatnonzero(bad)[0], out.shape)
        got = float(out[row, head, col])
        digits = 9 if exact else 6  # an exact case fails on the last bits: show them
        message = (
            f"{row_noun} {row}, head {head}, col {col}: got {_number(got, digits)}, expected "
            f"{_number(float(ref[row, head, col]), digits)} ({EXACT_RULE if exact else PASS_RULE}); "
            f"{bad_count} of {out.size} elements wrong"
        )
        if workspace_poisoned:
            message += (
                f"; {workspace_poisoned} were computed from a workspace value never written "
                "(the workspace read before it was set?)"
            )
        status = WRONG
    first_bad: FirstBad = {
        "row": int(row),
        "head": int(head),
        "col": int(col),
        "got": got if got is None or isinstance(got, str) or np.isfinite(got) else str(got),
        "expected": float(ref[row, head, col]),
    }
    return OutputCheck(
        status, message, max_abs_err, bad_count, out.size, first_bad, failing_rows, nonfinite, workspace_poisoned
    )


def scores_stage_problem(scores: np.ndarray, q: np.ndarray, k: np.ndarray, rows: int) -> str | None:
    """Lab 1's first stage against its definition: scores[h][i][j] = q[i][h] . k[j][h/4] / 8 for j <= i.

    Above the diagonal is left to the softmax (a pipeline may mask there or later). None: agrees.
    """
    s = scores.reshape(QUERY_HEADS, rows, rows)
    expected = _scores(q, k)
    ok = within_tolerance(s, expected) | ~visible_mask(rows, 0)[None]
    if ok.all():
        return None
    h, i, j = np.unravel_index(np.flatnonzero(~ok)[0], ok.shape)
    return (
        f"scores[{h}][{i}][{j}] is {_number(float(s[h, i, j]))}, expected q[{i}][{h}] . k[{j}][{h // GROUP}] / 8 "
        f"= {_number(float(expected[h, i, j]))}"
    )


def probabilities_stage_problem(probabilities: np.ndarray, q: np.ndarray, k: np.ndarray, rows: int) -> str | None:
    """Lab 1's second stage: each row of probabilities sums to 1 and is the softmax of its scores (0 above
    the diagonal). None: agrees."""
    p = probabilities.reshape(QUERY_HEADS, rows, rows)
    visible = visible_mask(rows, 0)[None]
    scores = np.where(visible, _scores(q, k), -np.inf)
    expected = np.exp(scores - scores.max(axis=-1, keepdims=True))
    expected /= expected.sum(axis=-1, keepdims=True)
    sums = p.astype(np.float64).sum(axis=-1)
    off = ~(np.abs(sums - 1.0) <= 1e-3)
    if off.any():
        h, i = np.unravel_index(np.flatnonzero(off)[0], off.shape)
        return f"row {i} of head {h} sums to {_number(float(sums[h, i]))}; every probability row sums to 1"
    ok = within_tolerance(p, expected)
    if ok.all():
        return None
    h, i, j = np.unravel_index(np.flatnonzero(~ok)[0], ok.shape)
    where = "the softmax of its row" if j <= i else "0 above the diagonal"
    return (
        f"probability [{h}][{i}][{j}] is {_number(float(p[h, i, j]))}, expected {_number(float(expected[h, i, j]))} "
        f"({where})"
    )


def _scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """[32][rows][keys] float64 q.k / 8, every query head against its KV head h / 4."""
    k_of_head = k.astype(np.float64)[:, np.arange(QUERY_HEADS) // GROUP, :]  # [keys][32][64]
    scores: np.ndarray = np.einsum("ihd,jhd->hij", q.astype(np.float64), k_of_head) * SCALE
    return scores


def describe_rows(rows: list[int], total: int, noun: str = "row") -> str:
    """`rows 0-15, 17 fail (17 of 40)`: consecutive runs folded so the eye finds the pattern. `noun`: what
    the lab calls a row (`sequences 1-2 fail (2 of 3)` in a decode batch)."""
    runs: list[str] = []
    start = previous = None
    for row in rows + [None]:
        if row is not None and previous is not None and row == previous + 1:
            previous = row
            continue
        if start is not None:
            runs.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = row
    label, verb = (noun, "fails") if len(rows) == 1 else (f"{noun}s", "fail")
    return f"{label} {', '.join(runs)} {verb} ({len(rows)} of {total})"


def _number(value: float, digits: int = 6) -> str:
    return f"{value:.{digits}g}" if np.isfinite(value) else str(value)
