"""The box from outside: what a SIGKILL of the driver leaves (nothing), and where the seed can be read
(nowhere but the driver's own memory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labrunner import box as boxes
from labrunner.run.sandbox import descendants

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
HANG = REPO / "tests" / "fixtures" / "lab2" / "hostile" / "hang.cu"
needs_box = pytest.mark.skipif(boxes.availability() is not None, reason=f"no box here: {boxes.availability()}")
SECRET = "739182645501"


def start_grade(tmp_path: Path) -> subprocess.Popen:
    """`attnlab grade lab2 hang.cu --device cpu` in the background, with a secret seed."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "ATTNLAB_SEED": SECRET, "TMPDIR": str(scratch)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "labrunner",
            "grade",
            "lab2",
            str(HANG),
            "--device",
            "cpu",
            "--no-timing",
            "--timeout",
            "60",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def wait_for_box(driver: subprocess.Popen, timeout_s: float = 60) -> list[int]:
    """The driver's descendants once a box (bwrap) runs among them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = descendants(driver.pid)
        if any(_comm(pid) == "bwrap" for pid in found) and len(found) >= 3:
            time.sleep(1.0)  # the worker past its start, inside its kernel
            return descendants(driver.pid)
        time.sleep(0.1)
    raise AssertionError("no box started")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@needs_box
def test_a_sigkill_of_the_driver_leaves_no_process_and_no_folder(tmp_path):
    driver = start_grade(tmp_path)
    try:
        boxed = wait_for_box(driver)
        driver.kill()
        driver.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(pid) for pid in boxed):
            time.sleep(0.1)
        assert [pid for pid in boxed if alive(pid)] == []
        assert list((tmp_path / "tmp").iterdir()) == []  # the worker's private folder was a tmpfs in its box
    finally:
        if driver.poll() is None:
            driver.kill()


@needs_box
def test_the_seed_is_readable_from_no_process_but_the_drivers_own_memory(tmp_path):
    driver = start_grade(tmp_path)
    try:
        boxed = wait_for_box(driver)
        for pid in [driver.pid, *boxed]:
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue  # gone, or refused: either way not readable
            assert SECRET.encode() not in environ, (pid, _comm(pid))
        # the driver's own start-up block: the name is left, its value overwritten in place
        assert "ATTNLAB_SEED=xxxxxxxxxxxx" in Path(f"/proc/{driver.pid}/environ").read_text()
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
