"""The golden proof: the oracle must reproduce the closed-form golden case before any grading.

`cases/golden.npz` is derived by `cases/make_golden.py` from closed forms (a zero query gives
the mean of the visible V rows; one planted key at score 128 gives a weighted mean that is all
but V at that key), never from the oracle. If the oracle and the closed forms disagree by more
than 1e-12, nothing the driver says about a kernel can be trusted, so it refuses to grade.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labrunner.exit_codes import environment_error
from labrunner.truth import oracle
from labrunner.truth.cases import CASES_DIR

GOLDEN_PATH = CASES_DIR / "golden.npz"
PROOF_TOLERANCE = 1e-12


@dataclass
class OracleProof:
    max_error: float
    passed: bool

    def to_json(self) -> dict:
        return {"case": "golden", "max_error": self.max_error, "tolerance": PROOF_TOLERANCE, "passed": self.passed}


def prove_oracle(path: Path = GOLDEN_PATH, attention=oracle.attention) -> OracleProof:
    with np.load(path) as golden:
        got = attention(golden["q"], golden["k"], golden["v"], prefix=int(golden["prefix"]))
        max_error = float(np.max(np.abs(got - golden["expected"])))
    return OracleProof(max_error=max_error, passed=bool(max_error <= PROOF_TOLERANCE))


def require_proven_oracle(path: Path = GOLDEN_PATH, attention=oracle.attention) -> OracleProof:
    proof = prove_oracle(path, attention)
    if not proof.passed:
        raise environment_error(
            f"the oracle failed its golden proof (max error {proof.max_error:.3g} > {PROOF_TOLERANCE:g} "
            f"on {path.name}): refusing to grade; reinstall attnlab or regenerate the case with cases/make_golden.py"
        )
    return proof
