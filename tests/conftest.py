"""Shared test setup: the gpu marker skips, with its reason, where no GPU is."""

from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def gpu_reason() -> str | None:
    from labrunner.commands.grade import gpu_status

    available, words = gpu_status()
    return None if available else words


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or gpu_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"needs a GPU: {reason}"))
