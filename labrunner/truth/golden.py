"""The golden proof: the oracle must reproduce the closed-form golden cases before any grading.

`cases/golden.npz` is derived by `cases/make_golden.py` from closed forms (a zero query gives
the mean of the visible V rows; one planted key at score 128 gives a weighted mean that is all
but V at that key), never from the oracle. `cases/golden_decode.npz` holds the same closed forms
for decode through a block table (shuffled pages, -1 padding, NaN where no key stands), and a
sequence of one key, whose output must be V's row exactly. If the oracle and the closed forms disagree by more
than 1e-12, nothing the driver says about a kernel can be trusted, so it refuses to grade.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labrunner.exit_codes import environment_error
from labrunner.truth import oracle
from labrunner.truth.cases import CASES_DIR

GOLDEN_PATH = CASES_DIR / "golden.npz"
GOLDEN_DECODE_PATH = CASES_DIR / "golden_decode.npz"
PROOF_TOLERANCE = 1e-12
# The oracle's two entry points, passed in so a test can prove a broken one fails.
Attention = Callable[..., np.ndarray]


@dataclass
class OracleProof:
    max_error: float
    passed: bool
    file: str = GOLDEN_PATH.name  # the golden file with the largest error (a failure names it)

    def to_json(self) -> dict[str, object]:
        return {"case": "golden", "max_error": self.max_error, "tolerance": PROOF_TOLERANCE, "passed": self.passed}


def prove_oracle(
    path: Path = GOLDEN_PATH,
    attention: Attention = oracle.attention,
    decode_path: Path = GOLDEN_DECODE_PATH,
    decode: Attention = oracle.decode_attention,
) -> OracleProof:
    """Both golden cases: prefill (`attention`) and decode through a block table (`decode`)."""
    with np.load(path) as golden:
        got = attention(golden["q"], golden["k"], golden["v"], prefix=int(golden["prefix"]))
        errors = [(_max_error(got, golden["expected"]), path.name)]
    with np.load(decode_path) as golden:
        got = decode(golden["q"], golden["k"], golden["v"], golden["block_table"], golden["seq_lens"])
        errors.append((_max_error(got, golden["expected"]), decode_path.name))
    failed = [e for e in errors if not e[0] <= PROOF_TOLERANCE]
    max_error, file = failed[0] if failed else max(errors)
    return OracleProof(max_error=max_error, passed=not failed, file=file)


def _max_error(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.max(np.abs(got - expected)))


def require_proven_oracle(
    path: Path = GOLDEN_PATH, attention: Attention = oracle.attention, decode: Attention = oracle.decode_attention
) -> OracleProof:
    proof = prove_oracle(path, attention, decode=decode)
    if not proof.passed:
        raise environment_error(
            f"the oracle failed its golden proof (max error {proof.max_error:.3g} > {PROOF_TOLERANCE:g} "
            f"on {proof.file}): refusing to grade; reinstall attnlab or regenerate the case with cases/make_golden.py"
        )
    return proof
