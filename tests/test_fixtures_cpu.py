"""Every fixture that makes sense on a CPU, graded through the CPU backend: this is how CI, which has
no GPU, checks the kernels' verdicts on every change. Same expectations as on the GPU."""

from __future__ import annotations

import pytest
from fixture_suite import grade, load_fixtures


@pytest.mark.parametrize("fixture", [f for f in load_fixtures() if f.runs_on("cpu")], ids=lambda f: f.name)
def test_fixture_gets_its_verdict_on_the_cpu(fixture):
    outcome = grade(fixture, "cpu")
    assert outcome.mismatches == [], outcome.got["message"]
    assert outcome.got["json_exit_code"] == outcome.got["exit_code"]
