"""Grading jobs for the real-Slurm tests (tests/test_slurm_cluster.py).

Sent to the cluster by value (cloudpickle), so the node's process needs no path to this folder."""

from __future__ import annotations

import os
import time

from labrunner.pipeline.batch.submission import Outcome, RunningProcesses, SubmissionTask, dead_result, grade_in_process


def graded_once_requeued(task: SubmissionTask, running: RunningProcesses | None = None) -> Outcome:
    """The first attempt waits, as a long grading does, for the test to fail its node; an attempt the
    cluster requeued (SLURM_RESTART_COUNT 1 or more) grades the file. The wait outlasts every wait of the
    test, so that only the node's failure ends it: an attempt that ended by itself first, on a loaded
    machine where the controller is slow to declare the node down, would be recorded FAILED, not NODE_FAIL."""
    if int(os.environ.get("SLURM_RESTART_COUNT") or 0) == 0:
        time.sleep(900)
        raise RuntimeError("the node was never failed")
    return grade_in_process(task, running)


def says_where_it_ran(task: SubmissionTask) -> Outcome:
    """No grading: a result that names the array task it ran as, to see how a batch was split."""
    where = f"{os.environ.get('SLURM_ARRAY_JOB_ID', os.environ.get('SLURM_JOB_ID'))}"
    index = os.environ.get("SLURM_ARRAY_TASK_ID")
    return Outcome(task, dead_result(task, f"ran as {where}_{index}" if index else f"ran as {where}"), 0.0)
