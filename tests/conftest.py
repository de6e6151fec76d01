"""Shared test setup: the gpu marker skips, with its reason, where no GPU is, and every JSON result a
test makes in this process is checked against the shipped JSON Schema.

`$CI` is taken out of the environment here, once: with CI=true and no $ATTNLAB_SEED, grading refuses
to use the public seed unasked (truth/cases.py), and the tests grade with the public seed on purpose.
`RUNNING_IN_CI` keeps what it said, for the tests whose tool must be there in CI (a cluster, a browser):
there a missing tool fails the test instead of skipping it."""

from __future__ import annotations

import functools
import os

import pytest

RUNNING_IN_CI = os.environ.pop("CI", "").lower() == "true"


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


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or gpu_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"needs a GPU: {reason}"))


@pytest.fixture(autouse=True)
def every_json_result_keeps_its_schema(monkeypatch):
    """Wrap RunResult.to_json (which --json writes) so a result that breaks the schema fails its test."""
    from result_schema import validate_result

    from labrunner.report.results import RunResult

    original = RunResult.to_json
    monkeypatch.setattr(RunResult, "to_json", lambda self: validate_result(original(self)))
