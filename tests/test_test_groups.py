"""The suite's own scheduling: the tests of one xdist group run on one worker (`--dist loadgroup`, which
tests/conftest.py relies on for module fixtures made once and for the machine-wide looks run one at a
time). pytest-xdist says a test's group in its node id; a pytest it cannot do that with (pyproject.toml's
pin) groups nothing and says nothing, so this test says it."""

from __future__ import annotations

import pytest


@pytest.mark.xdist_group("attnlab-group-check")
def test_a_test_of_a_group_runs_in_that_group(request):
    if not hasattr(request.config, "workerinput"):
        pytest.skip("not run by pytest-xdist workers (-n 0): nothing is scheduled")
    if not getattr(request.config.option, "loadgroup", False):  # the worker's own word for --dist loadgroup
        pytest.skip("groups are not asked for (--dist is not loadgroup)")
    assert request.node.nodeid.endswith("@attnlab-group-check"), (
        "pytest-xdist did not group this test: a module fixture would be made once per worker and the "
        "machine-wide tests would run side by side (pytest >= 9.2 with pytest-xdist 3.8 does this; see "
        "pyproject.toml's dev extra)"
    )


@pytest.fixture(scope="module")
def made_once():
    return object()


def test_a_test_that_shares_a_module_fixture_joins_its_modules_group(request, made_once):
    if not hasattr(request.config, "workerinput") or not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run by pytest-xdist workers with --dist loadgroup")
    assert request.node.nodeid.endswith("@test_test_groups")
