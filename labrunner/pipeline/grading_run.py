"""One submission's run, once prepared: what every step after `prepare` needs, carried in one object.

`prepare` gives a `Prepared` (the lab, the gated file, the backend it runs on, the seed); once the worker
has the file loaded, a `GradingRun` adds the worker, how the cases are run and the reporter the run's
events go to. The steps take the run instead of the same values passed one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from labrunner.compile.backend import Backend
from labrunner.compile.gate import Submission
from labrunner.labs.definition import Lab
from labrunner.report.progress import Progress
from labrunner.report.reporter import Reporter, silent
from labrunner.run.worker import Worker
from labrunner.truth.cases import Inputs, Seed


@dataclass
class CaseOptions:
    seed: Seed
    timeout_s: float | None = None
    full: bool = False  # CPU: run the cases outside the default budget too
    race_check: bool = False  # CPU: every case under several thread schedules; GPU: racecheck and synccheck
    only: tuple[str, ...] = ()  # case names to run (empty: all)
    diagnose: bool = True  # GPU: replay a crashing case under compute-sanitizer, where installed
    rerun: bool = True  # CPU: rerun a failing case under three other schedules, to find a race unasked
    # where a case's float64 reference comes from: None is the CPU oracle (`Inputs.reference`); on the
    # GPU backend the driver's proven GPU oracle (`pipeline/oracle_ahead.py`)
    oracle: Callable[[Inputs], np.ndarray] | None = None


@dataclass(frozen=True)
class Prepared:
    """What `prepare` made of a request: the lab, the file through its compile gate, the backend that
    runs it and the seed of every case's inputs."""

    lab: Lab
    submission: Submission
    backend: Backend
    seed: Seed

    def with_worker(self, worker: Worker, cases: CaseOptions, reporter: Reporter) -> GradingRun:
        return GradingRun(self.lab, self.submission, self.backend, worker, cases, reporter)


@dataclass(frozen=True)
class GradingRun:
    """A prepared submission loaded in its worker: what the cases, their explanations and the timing read.

    `progress`: where the step under way reports each item as it starts (the cases' progress bar while
    they run; nothing otherwise)."""

    lab: Lab
    submission: Submission
    backend: Backend
    worker: Worker
    cases: CaseOptions
    reporter: Reporter = field(default_factory=silent)
    progress: Progress = field(default_factory=Progress)

    @property
    def interpreted(self) -> bool:
        """A Triton file run by Triton's interpreter on the CPU, or its cubins on the GPU: no source to replay."""
        return bool(self.submission.module.triton)
