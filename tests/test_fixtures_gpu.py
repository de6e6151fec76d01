"""Every fixture graded on the GPU: exact verdict, decisive case, first bad row and exit code."""

from __future__ import annotations

import pytest
from fixture_suite import run_suite, table


@pytest.mark.gpu
@pytest.mark.parametrize("lab", ["lab1", "lab2", "lab3"])
def test_every_fixture_gets_its_verdict_on_the_gpu(lab):
    outcomes = run_suite("gpu", lab)
    print("\n" + table(outcomes))
    mismatched = {o.fixture.name: (o.mismatches, o.got["message"]) for o in outcomes if o.mismatches}
    assert not mismatched
    assert all(o.got["json_exit_code"] == o.got["exit_code"] for o in outcomes)
