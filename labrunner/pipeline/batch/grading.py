"""What an executor is given besides the tasks: who hears each submission end, the job that grades one,
the batch's stop and the reporter its notes go to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from labrunner.pipeline.batch.stop import BatchStop
from labrunner.pipeline.batch.submission import Outcome, grade_in_process
from labrunner.report.reporter import Reporter, silent


@dataclass(frozen=True)
class Grading:
    """`finished` is called with each submission's outcome as it ends. `job` grades one submission: given
    the task and, where it takes one, the registry its process is entered in (so that a stop can end it);
    a process of its own by default, and in the tests one that dies or misbehaves. `stop` (a signal,
    --batch-timeout) ends the batch early. `reporter` hears what the executor says of the batch as it goes
    (a cluster's job ids, what it cancelled)."""

    finished: Callable[[Outcome], None] = lambda outcome: None
    job: Callable[..., Outcome] = grade_in_process
    stop: BatchStop = field(default_factory=BatchStop)
    reporter: Reporter = field(default_factory=silent)


@dataclass(frozen=True)
class Executing:
    """How a batch runs its submissions: the reporter that hears the batch and, for tests, a job in place
    of a grading process and a submitit executor in place of the one the options name."""

    reporter: Reporter = field(default_factory=silent)
    job: Callable[..., Outcome] = grade_in_process
    executor: Any = None
