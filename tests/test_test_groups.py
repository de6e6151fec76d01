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


@pytest.mark.slow
def test_a_test_too_slow_for_the_fast_set_fails_the_fast_run_with_its_name(tmp_path):
    """The fast set holds itself to its limit (tests/conftest.py): a test over it fails `-m "not slow"` with
    its name, and passes a run of the whole suite."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_probe.py").write_text("import time\n\n\ndef test_sleeps_a_second():\n    time.sleep(1.0)\n")
    tests = Path(__file__).resolve().parent  # the conftest's own helpers, and the package beside them
    env = {**os.environ, "ATTNLAB_FAST_TEST_LIMIT_S": "0.5", "PYTHONPATH": f"{tests}{os.pathsep}{tests.parent}"}
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    fast = subprocess.run([*command, "-m", "not slow", "test_probe.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert fast.returncode == 1
    assert "test_probe.py::test_sleeps_a_second took " in fast.stdout
    assert "in the fast set (its limit is 0.5 s, tests/conftest.py): mark it @pytest.mark.slow" in fast.stdout
    whole = subprocess.run([*command, "test_probe.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    assert whole.returncode == 0, whole.stdout
