"""Grading jobs for the batch tests: one that dies part-way, as a Slurm task killed by its node would.

Sent to submitit's executor by value (cloudpickle), so its worker process needs no path to this folder."""

from __future__ import annotations

import os
import signal

from labrunner.pipeline.batch.submission import SubmissionTask, grade_in_process


def dies_on_foreign_include(task: SubmissionTask, running=None):
    if "foreign_include" in task.file:
        os.kill(os.getpid(), signal.SIGKILL)
    return grade_in_process(task, running)


def raises_on_foreign_include(task: SubmissionTask, running=None):
    if "foreign_include" in task.file:
        raise RuntimeError("node lost")
    return grade_in_process(task, running)
