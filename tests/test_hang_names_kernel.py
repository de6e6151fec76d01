"""A hang names the kernel that was running: the worker marks each launch's index on a pipe of its own
before the launch, and the driver reads the last mark when it stops a case. What arrives there is the
worker's word, so it is read with a bound and taken only as an index into the case's own launches."""

from __future__ import annotations

import os

import pytest

from labrunner.labs import get_lab
from labrunner.run.worker import MARK_BYTES, Worker, WorkerFailure, running_launch

LAUNCHES = get_lab("lab1").plan_launches(get_lab("lab1").constants({}), 17, 0)


def test_a_launch_is_named_with_its_place_among_the_cases_launches():
    assert [running_launch(LAUNCHES, i) for i in range(3)] == [
        "attn_scores (launch 1 of 3)",
        "attn_softmax (launch 2 of 3)",
        "attn_weighted_sum (launch 3 of 3)",
    ]
    assert running_launch(LAUNCHES[:1], 0) == "attn_scores"


@pytest.fixture
def marked_worker():
    """A worker whose launch-mark pipe is one made here, never started: the test writes the worker's side."""
    worker = Worker("cpu")
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    worker._launch_marks = read
    yield worker, write
    os.close(write)
    worker.close()


def test_the_last_mark_is_read_and_the_pipe_drained(marked_worker):
    worker, write = marked_worker
    assert worker._last_launch_mark() is None
    os.write(write, bytes([0, 1]))
    assert worker._last_launch_mark() == 1
    assert worker._last_launch_mark() is None


def test_a_pipe_filled_by_student_code_is_read_within_the_bound(marked_worker):
    worker, write = marked_worker
    written = 0
    try:
        while True:
            written += os.write(write, b"\xfe" * 4096)
    except BlockingIOError:
        pass
    assert written <= MARK_BYTES
    assert worker._last_launch_mark() == 0xFE
    assert worker._last_launch_mark() is None  # a full pipe holds no more than the bound


@pytest.mark.parametrize(("mark", "running"), [(1, "attn_softmax (launch 2 of 3)"), (3, None), (0xFE, None)])
def test_a_timeout_names_the_marked_launch_only_where_the_case_has_it(monkeypatch, marked_worker, mark, running):
    worker, _ = marked_worker

    def hangs(request, timeout_s, expected):
        raise WorkerFailure("timeout", "no answer within 2 s; the kernel was stopped", mark)

    monkeypatch.setattr(worker, "_call", hangs)
    with pytest.raises(WorkerFailure) as failure:
        worker.run_case("student", LAUNCHES, {}, {"out": 4}, ("out",), 2.0)
    assert failure.value.running == running
    assert failure.value.detail == (
        f"no answer within 2 s; {running} was running, and was stopped"
        if running
        else "no answer within 2 s; the kernel was stopped"
    )
