"""What a student needs beyond where a case failed: the kernel a race is in, lab 1's first wrong stage.

A diagnosis only: nothing here changes a verdict.
"""

from __future__ import annotations

import numpy as np

from labrunner.build.gate import Submission
from labrunner.labs.definition import Lab
from labrunner.report.results import CaseResult
from labrunner.run.worker import Worker, WorkerFailure
from labrunner.truth.cases import (
    Case,
)
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS, within_tolerance
from labrunner.truth.hints import gather_evidence
from labrunner.truth.poison import SHARED_POISON_BITS, carries


def explain_failure(
    lab: Lab,
    submission: Submission,
    worker: Worker,
    case: Case,
    inputs,
    run,
    reference,
    result: CaseResult,
    schedules: dict[int, str],
    timeout_s: float,
    explain: bool = True,
    stage_check: bool = True,
) -> None:
    """What a student needs beyond where: the kernel a race is in, lab 1's first wrong stage, the evidence for hints.

    A diagnosis only: nothing here changes a verdict. A kernel that misbehaves while being
    explained (it passed once, so it should not) leaves the explanation out.
    """
    out = run.outputs["out"].reshape(case.rows, QUERY_HEADS, HEAD_DIM)
    result.evidence = gather_evidence(case, inputs, out, reference, result.status, result.failing_rows, explain)
    launches = lab.plan_launches(submission.constants, case.rows, case.prefix)
    try:
        if result.status == "race":
            kernel = racing_kernel(lab, submission, worker, case, inputs, launches, result, schedules, timeout_s)
            result.message += f"; in kernel {kernel}"
        elif lab.stages and stage_check:
            stage = first_wrong_stage(lab, worker, case, inputs, launches, timeout_s)
            if stage:
                result.message += f"; stage check: {stage}"
    except WorkerFailure:
        pass


def stage_buffers(
    lab: Lab,
    worker: Worker,
    case: Case,
    inputs,
    launches: list,
    timeout_s: float,
    schedule: int = 0,
    constants: dict[str, int] | None = None,
) -> list[tuple[str, np.ndarray]]:
    """The pipeline rerun kernel by kernel: after the first k launches, the buffer launch k wrote.
    `constants`: the file's launch geometry, where its workspace depends on it (the defaults otherwise)."""
    given = inputs.buffers()
    workspace = lab.workspace(constants or lab.constants({}), case.rows, case.prefix)
    writable = {"out": case.rows * QUERY_HEADS * HEAD_DIM, **workspace}
    stages = []
    for count, launch in enumerate(launches, start=1):
        written = next(a for a in reversed(launch.args) if isinstance(a, str) and a in writable)
        run = worker.run_case(
            "student", launches[:count], given, writable, (written,), timeout_s, reverse_threads=schedule
        )
        stages.append((launch.kernel, run.outputs[written]))
    return stages


def racing_kernel(
    lab: Lab,
    submission: Submission,
    worker: Worker,
    case: Case,
    inputs,
    launches: list,
    result: CaseResult,
    schedules: dict[int, str],
    timeout_s: float,
) -> str:
    """The first kernel whose own result carries the shared-memory poison, or differs between schedules."""
    if len(launches) == 1:
        return launches[0].kernel
    first = stage_buffers(lab, worker, case, inputs, launches, timeout_s, constants=submission.constants)
    for kernel, buffer in first:
        if carries(buffer, SHARED_POISON_BITS).any():
            return kernel
    for number in schedules:
        other = stage_buffers(lab, worker, case, inputs, launches, timeout_s, number, submission.constants)
        for (kernel, a), (_, b) in zip(first, other):
            if not same_values(a, b).all():
                return kernel
    return launches[-1].kernel


def first_wrong_stage(lab: Lab, worker: Worker, case: Case, inputs, launches: list, timeout_s: float) -> str | None:
    """Lab 1's stage check: the first kernel whose result disagrees with the definition, in words.

    A stage that disagrees but is made good by the next one (scores left unscaled, scaled inside
    the softmax) is a different split of the same work, not the bug: the stage named is the first
    that disagrees after the last one that agrees. The last stage is the output, already wrong.
    """
    stages = stage_buffers(lab, worker, case, inputs, launches[:-1], timeout_s)
    problems = [lab.stages[kernel](buffer, inputs, case.rows) for kernel, buffer in stages]
    kernels = [kernel for kernel, _ in stages] + [launches[-1].kernel]
    agreeing = [i for i, problem in enumerate(problems) if problem is None]
    first = (agreeing[-1] + 1) if agreeing else 0
    if first == len(stages):
        return (
            f"{kernels[first]} is the first kernel whose result disagrees with the definition "
            "(every kernel before it agrees)"
        )
    return f"{kernels[first]} is the first kernel whose result disagrees with the definition: {problems[first]}"


def same_values(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two runs agree on an element when both are NaN, or equal within the pass rule."""
    return (np.isnan(a) & np.isnan(b)) | within_tolerance(a, b.astype(np.float64))
