"""Shared test setup: the gpu marker skips, with its reason, where no GPU is, every JSON result a
test makes in this process is checked against the shipped JSON Schema, and the tests that share what a
module fixture made run on one xdist worker.

`$CI` (and any `COLUMNS`) is taken out of the environment here, once: with CI=true and no $ATTNLAB_SEED, grading refuses
to use the public seed unasked (truth/cases.py), and the tests grade with the public seed on purpose.
`RUNNING_IN_CI` keeps what it said, for the tests whose tool must be there in CI (a cluster, a browser):
there a missing tool fails the test instead of skipping it."""

from __future__ import annotations

import functools
import os

import pytest

RUNNING_IN_CI = os.environ.pop("CI", "").lower() == "true"
# Each test chooses the width it grades at: a width left in the environment (pytest-xdist's workers are
# started with COLUMNS=80 and LINES=24) would wrap a log's lines, and only under xdist. Taken out before
# labrunner's consoles are made, which read COLUMNS as they start.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)


def needed_in_ci(reason: str) -> None:
    """Skip with `reason` on a developer's machine; in CI, fail: the tool is installed there on purpose."""
    if RUNNING_IN_CI:
        pytest.fail(f"{reason}, and CI must have it (.ci/run installs it)")
    pytest.skip(reason)


@functools.lru_cache(maxsize=1)
def gpu_reason() -> str | None:
    from labrunner.pipeline.backend import gpu_status

    available, words = gpu_status()
    return None if available else words


# Tests that look at the whole machine, not only at their own folders, for what a hostile file leaves: each
# such look, and every grade that could leave what it looks for, run in one xdist group, one at a time.
ESCAPEE = pytest.mark.xdist_group("attnlab-escapee")  # a process named attnlab-escapee, /tmp/attnlab-*escape*
PWNED = pytest.mark.xdist_group("attnlab-pwned")  # files /tmp/attnlab-pwned-*
LINGER = pytest.mark.xdist_group("attnlab-linger")  # a process named attnlab-linger

# A fixture of these scopes is made once per worker process: the tests that share one are kept together.
SHARED_SCOPES = {"class", "module", "package", "session"}


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups (--dist loadgroup, pyproject's addopts)
def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or gpu_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"needs a GPU: {reason}"))
        keep_with_its_modules_fixture(item)


def keep_with_its_modules_fixture(item) -> None:
    """A test that uses a module's (or a session's) fixture joins its module's xdist group, so that the
    fixture (a build, twenty grades, a wheel and its virtual environment, the Slurm time-limit batch) is
    made once and not once per worker. A test with a group of its own (`xdist_group`, for tests that look
    at the whole machine: a process's name, a file at a fixed path) keeps that one."""
    if item.get_closest_marker("xdist_group"):
        return
    definitions = getattr(item, "_fixtureinfo", None)
    if definitions is None:
        return
    for name in item.fixturenames:
        found = definitions.name2fixturedefs.get(name)
        if found and found[-1].scope in SHARED_SCOPES:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
            return


# The fast set (`pytest -m "not slow"`) stays fast: a test in it that spends longer than this of its own
# (setup, a module fixture's build included, and call) fails that run with its name, to be marked slow. The
# limit is far above a fast test's few tenths of a second, so a loaded machine does not trip it; only the
# fast run is held to it, never the whole suite CI runs.
FAST_TEST_LIMIT_S = float(os.environ.get("ATTNLAB_FAST_TEST_LIMIT_S", "30"))


def fast_run(config) -> bool:
    return " ".join(str(config.getoption("markexpr", "") or "").split()) == "not slow"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when not in ("setup", "call") or not report.passed or not fast_run(item.config):
        return
    spent = getattr(item, "_attnlab_spent_s", 0.0) + report.duration
    item._attnlab_spent_s = spent
    if report.when == "call" and spent > FAST_TEST_LIMIT_S:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {spent:.1f} s in the fast set (its limit is {FAST_TEST_LIMIT_S:g} s, "
            "tests/conftest.py): mark it @pytest.mark.slow"
        )


@pytest.fixture(autouse=True)
def every_json_result_keeps_its_schema(monkeypatch):
    """Wrap RunResult.to_json (which --json writes) so a result that breaks the schema fails its test."""
    from result_schema import validate_result

    from labrunner.report.results import RunResult

    original = RunResult.to_json
    monkeypatch.setattr(RunResult, "to_json", lambda self: validate_result(original(self)))
