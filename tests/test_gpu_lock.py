"""The per-GPU lock: checks share a GPU, a timer has it alone, and a waiting timer is not starved."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from labrunner.measure.gpu_lock import exclusive_timing, shared_checking

PROBE = textwrap.dedent("""
    import fcntl, os, sys
    from labrunner.measure.gpu_lock import lock_folder
    handle = os.open(lock_folder() / f"{sys.argv[1]}.lock", os.O_RDONLY | os.O_CREAT)
    mode = fcntl.LOCK_EX if sys.argv[2] == "exclusive" else fcntl.LOCK_SH
    try:
        fcntl.flock(handle, mode | fcntl.LOCK_NB)
        print("free")
    except BlockingIOError:
        print("held")
""")


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_LOCK_DIR", str(tmp_path))
    return tmp_path


def probe(mode: str) -> str:
    """What another process finds when it asks for the lock without waiting."""
    return subprocess.run(
        [sys.executable, "-c", PROBE, "bus-0000_01_00.0", mode], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_checking_shares_the_gpu_with_other_checks_but_not_with_a_timer(lock_dir):
    with shared_checking("bus-0000_01_00.0"):
        assert probe("shared") == "free"
        assert probe("exclusive") == "held"
    assert probe("exclusive") == "free"


def test_timing_has_the_gpu_alone(lock_dir):
    with exclusive_timing("bus-0000_01_00.0"):
        assert probe("shared") == "held"
        assert probe("exclusive") == "held"
    assert probe("shared") == "free"


def test_another_gpu_is_another_lock(lock_dir):
    with exclusive_timing("bus-0000_02_00.0"):
        assert probe("exclusive") == "free"


def test_grading_locks_the_gpu_it_runs_on_and_nothing_on_the_cpu(lock_dir, monkeypatch):
    from labrunner.pipeline import backend as backend_module

    monkeypatch.setattr(backend_module, "gpu_key", lambda: "bus-0000_01_00.0")
    with backend_module.gpu_share("gpu", "checking"):
        assert (probe("shared"), probe("exclusive")) == ("free", "held")
    with backend_module.gpu_share("gpu", "timing"):
        assert probe("shared") == "held"
    with backend_module.gpu_share("cpu", "timing"):
        assert probe("exclusive") == "free"
