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


def test_within_one_process_a_second_check_is_covered_and_the_lock_lasts_until_the_last_leaves(lock_dir):
    import threading

    key = "bus-0000_01_00.0"
    inner_done = threading.Event()
    with shared_checking(key):
        # the driver's GPU oracle, in its thread, while the cases hold the GPU
        def oracle() -> None:
            with shared_checking(key):
                inner_done.set()

        thread = threading.Thread(target=oracle)
        thread.start()
        thread.join(5)
        assert inner_done.is_set()
        assert probe("exclusive") == "held"  # the oracle leaving did not unlock what the cases still hold
    assert probe("exclusive") == "free"


def test_a_check_inside_this_process_s_timing_is_granted_and_the_gpu_stays_exclusive(lock_dir):
    key = "bus-0000_01_00.0"
    with exclusive_timing(key):
        with shared_checking(key):  # the oracle checking the timed calls
            assert probe("shared") == "held"
        assert probe("shared") == "held"
    assert probe("shared") == "free"


def test_a_timer_waits_for_its_own_process_s_checks_and_then_has_the_gpu_alone(lock_dir):
    import threading
    import time

    key = "bus-0000_01_00.0"
    order: list[str] = []
    release = threading.Event()

    def oracle() -> None:
        with shared_checking(key):
            order.append("oracle holds")
            release.wait(5)
            order.append("oracle leaves")

    thread = threading.Thread(target=oracle)
    thread.start()
    while not order:
        time.sleep(0.01)
    timer_started = threading.Event()

    def timer() -> None:
        timer_started.set()
        with exclusive_timing(key):
            order.append("timing")
            assert probe("shared") == "held"

    timing = threading.Thread(target=timer)
    timing.start()
    timer_started.wait(5)
    time.sleep(0.2)
    assert order == ["oracle holds"]  # the timer waits: the process's own check still runs
    release.set()
    thread.join(5)
    timing.join(5)
    assert order == ["oracle holds", "oracle leaves", "timing"]
    assert probe("exclusive") == "free"


def test_a_check_covered_by_the_process_does_not_queue_behind_another_process_s_waiting_timer(lock_dir):
    # process B's timer waits at the turnstile for this process's check; the oracle's second request must
    # not queue behind it (it would wait for B, and B for this process: neither would end)
    import threading

    key = "bus-0000_01_00.0"
    waiting_timer = textwrap.dedent("""
        import sys
        from labrunner.measure.gpu_lock import exclusive_timing
        with exclusive_timing(sys.argv[1]):
            print("timed")
    """)
    with shared_checking(key):
        other = subprocess.Popen([sys.executable, "-c", waiting_timer, key], stdout=subprocess.PIPE, text=True)
        import time

        time.sleep(0.5)  # the other process holds the turnstile now, waiting for this check
        granted = threading.Event()

        def oracle() -> None:
            with shared_checking(key):
                granted.set()

        thread = threading.Thread(target=oracle, daemon=True)
        thread.start()
        assert granted.wait(5)
        assert other.poll() is None  # and the other timer still waits for this process's check
    out, _ = other.communicate(timeout=10)
    assert out.strip() == "timed"


def test_a_grade_s_cases_hold_the_gpu_run_by_run_and_not_between_runs(lock_dir, monkeypatch):
    from labrunner.pipeline import backend as backend_module
    from labrunner.pipeline.grade import checks_share_the_gpu
    from labrunner.run.worker import Worker

    monkeypatch.setattr(backend_module, "gpu_key", lambda: "bus-0000_01_00.0")
    worker = Worker("gpu")  # never started: only its hold around runs is used here
    seen: list[str] = []
    with checks_share_the_gpu(worker, "gpu"):  # type: ignore[arg-type]
        seen.append(probe("exclusive"))  # between runs: a timer elsewhere may take the GPU
        with worker.runs_held():  # a case's run
            seen.append(probe("exclusive"))
            seen.append(probe("shared"))
        seen.append(probe("exclusive"))
    with worker.runs_held():  # after the cases: no hold (the timing holds it exclusive on its own)
        seen.append(probe("exclusive"))
    assert seen == ["free", "held", "free", "free", "free"]
    with checks_share_the_gpu(worker, "cpu"), worker.runs_held():  # type: ignore[arg-type]
        assert probe("exclusive") == "free"  # the CPU backend shares no GPU
