"""The checker: one output against the oracle, under the contract's pass rule.

It reports what a student needs to find the bug: the first bad (row, head, column) with got
against expected and the rule they broke, how many elements are wrong, and which rows fail.
An element that still holds the poison pattern is reported as never written, not as a wrong
number, because "your kernel never wrote row 16" is a different bug from "row 16 is off".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from labrunner.truth.contract import EXACT_RULE, PASS_RULE, exactly_equal, within_tolerance
from labrunner.truth.poison import never_written

PASS = "pass"
WRONG = "wrong"
NEVER_WRITTEN = "never-written"


@dataclass
class OutputCheck:
    status: str                      # pass, wrong or never-written
    message: str
    max_abs_err: float | None        # over elements the kernel wrote with finite values
    bad_elements: int
    total_elements: int
    first_bad: dict | None = None    # {"row", "head", "col", "got", "expected"}
    failing_rows: list[int] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == PASS


def check_output(out: np.ndarray, ref: np.ndarray, exact: bool = False) -> OutputCheck:
    """`out` float32 `[rows][32][64]` from the kernel, `ref` float64 of the same shape from the oracle.

    `exact`: the case demands equality, not the tolerance (lab 1's single token, whose probability
    must be exactly 1, so its output is V's first row bit for bit).
    """
    if out.shape != ref.shape:
        raise ValueError(f"output shape {out.shape} does not match the reference {ref.shape}")
    ok = exactly_equal(out, ref) if exact else within_tolerance(out, ref)
    unwritten = never_written(out)
    finite = np.isfinite(out)
    errors = np.abs(out.astype(np.float64) - ref)
    max_abs_err = float(errors[finite].max()) if finite.any() else None
    bad = ~ok
    bad_count = int(bad.sum())
    if bad_count == 0:
        return OutputCheck(PASS, f"all {out.size} elements within the pass rule", max_abs_err, 0, out.size)

    failing_rows = np.flatnonzero(bad.reshape(bad.shape[0], -1).any(axis=1)).tolist()
    unwritten_count = int(unwritten.sum())
    if unwritten_count:
        row, head, col = np.unravel_index(np.flatnonzero(unwritten)[0], out.shape)
        where = f"row {row}, head {head}, col {col}"
        message = (f"{where}: never written (still holds the poison pattern); "
                   f"{unwritten_count} of {out.size} elements never written")
        if bad_count > unwritten_count:
            message += f", {bad_count - unwritten_count} more wrong"
        status = NEVER_WRITTEN
        got = None
    else:
        row, head, col = np.unravel_index(np.flatnonzero(bad)[0], out.shape)
        got = float(out[row, head, col])
        digits = 9 if exact else 6  # an exact case fails on the last bits: show them
        message = (f"row {row}, head {head}, col {col}: got {_number(got, digits)}, expected "
                   f"{_number(ref[row, head, col], digits)} ({EXACT_RULE if exact else PASS_RULE}); "
                   f"{bad_count} of {out.size} elements wrong")
        status = WRONG
    first_bad = {
        "row": int(row), "head": int(head), "col": int(col),
        "got": got if got is None or np.isfinite(got) else str(got),
        "expected": float(ref[row, head, col]),
    }
    return OutputCheck(status, message, max_abs_err, bad_count, out.size, first_bad, failing_rows)


def describe_rows(rows: list[int], total: int) -> str:
    """`rows 0-15, 17 fail (17 of 40)`: consecutive runs folded so the eye finds the pattern."""
    runs: list[str] = []
    start = previous = None
    for row in rows + [None]:
        if row is not None and previous is not None and row == previous + 1:
            previous = row
            continue
        if start is not None:
            runs.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = row
    label, verb = ("row", "fails") if len(rows) == 1 else ("rows", "fail")
    return f"{label} {', '.join(runs)} {verb} ({len(rows)} of {total})"


def _number(value: float, digits: int = 6) -> str:
    return f"{value:.{digits}g}" if np.isfinite(value) else str(value)
