"""An error that is a factor: every wrong value is the exact one times a constant.

A kernel that divides by `sum + 1e-6f` is within the tolerance everywhere, but a one-key case must be
exactly V, and there it gives V times 1 / (1 + 1e-6f) = 0.99999905 in every element. Saying "row 0 is
off by 1e-6" hides what the numbers say plainly: one constant factor, so one constant in the code
(an epsilon in a denominator, a scale, a normalisation). Where each failing row carries a factor of
its own, the row's own divisor is wrong (a softmax never divided by its sum, or by the wrong one).
"""

from __future__ import annotations

import numpy as np

from labrunner.truth.contract import exactly_equal, within_tolerance
from labrunner.truth.hints_records import Evidence

# float32 keeps 24 significant bits: a product c * v is within half of 2^-23 of the exact one, and a
# kernel's own arithmetic on top of it a few such roundings more. Within this relative distance, an
# exact case's wrong element "is" the exact value times c.
FLOAT32_ROUNDINGS = 4 * 2.0**-24
# A factor within two float32 roundings of 1 (1 - 2^-24, 1 + 2^-23) is no constant in the code but a
# rounding: x * (1 / x) in place of exactly 1.
ONE_ROUNDING = 2 * 2.0**-23
# A factor near 0 is an output that is (nearly) zero, and one far from 1 no slip of a constant: neither
# is said as a factor.
SMALLEST_FACTOR, LARGEST_FACTOR = 1e-3, 1e3


def factor_evidence(evidence: Evidence, out: np.ndarray, reference: np.ndarray, exact: bool) -> None:
    """Record in `evidence` the one factor every wrong element is the exact value times (`factor`,
    `factor_text`), or else the range of the factors each failing (row, head) carries (`row_factors`).

    `exact`: the case's rule is equality (its wrong elements may be within the tolerance; the factor must
    then hold to float32's rounding). A non-finite wrong element is no factor of anything.
    """
    values = out.astype(np.float64)
    bad = ~(exactly_equal(out, reference) if exact else within_tolerance(out, reference))
    if bad.sum() < 2 or not np.isfinite(values[bad]).all():
        return
    factor = _fitted(values[bad], reference[bad], exact)
    if factor is not None:
        evidence["factor"] = factor
        # an exact case's factor to every digit float32 keeps (0.99999905); a tolerance's to three
        evidence["factor_text"] = str(np.float32(factor)) if exact else f"{factor:.3g}"
        return
    pairs = np.argwhere(bad.any(axis=2))  # failing (row, head)
    if len(pairs) < 2:
        return
    factors = []
    for row, head in pairs:
        fitted = _fitted(values[row, head], reference[row, head], exact)
        if fitted is None:
            return
        factors.append(fitted)
    evidence["row_factors"] = [min(factors), max(factors)]


def _fitted(values: np.ndarray, reference: np.ndarray, exact: bool) -> float | None:
    """The factor c (least squares) with values = c * reference, where it holds for every element (to
    float32's rounding in an exact case, within the pass rule of c * reference otherwise); else None."""
    weight = float((reference * reference).sum())
    if weight == 0.0:
        return None
    c = float((values * reference).sum()) / weight
    if not SMALLEST_FACTOR <= abs(c) <= LARGEST_FACTOR:
        return None
    if exact:
        # the nearest float32: a constant in a kernel is one, and the least squares lands within rounding of it
        c = float(np.float32(c))
        scaled = c * reference
        holds = np.abs(values - scaled) <= FLOAT32_ROUNDINGS * np.abs(scaled)
    else:
        holds = within_tolerance(values, c * reference)
    return c if bool(holds.all()) else None


def factor_words(evidence: Evidence) -> str:
    """The factor in words, as the case's message and the hint say it ("" where there is none)."""
    if "factor" in evidence:
        factor = evidence["factor"]
        if abs(factor - 1.0) <= ONE_ROUNDING:
            guess = "a rounding: a value that must be exactly 1 (exp(0) / 1) computed another way, as x * (1 / x)?"
        elif 0.99 < factor < 1.0:
            guess = "an epsilon in the denominator?"
        else:
            guess = "a scale or normalisation factor?"
        return f"every element is the exact value times {evidence['factor_text']}: {guess}"
    if "row_factors" in evidence:
        low, high = evidence["row_factors"]
        return (
            f"each failing row is the exact value times a factor of its own ({low:.3g} to {high:.3g}): "
            "a row not divided by its own sum, or by the wrong one?"
        )
    return ""
