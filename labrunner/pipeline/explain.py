"""What a student needs beyond where a case failed: the kernel a race is in, lab 1's first wrong stage.

A diagnosis only: it reads a case's output once the judge (truth/judge.py) has decided the case,
and gives the words its message ends with before the case's result is made; nothing here changes
a verdict.
"""

from __future__ import annotations

import numpy as np

from labrunner.compile.gate import Submission
from labrunner.labs.definition import Lab
from labrunner.pipeline.schedules import FIRST_SCHEDULE
from labrunner.run.worker import Worker, WorkerFailure
from labrunner.truth.cases import (
    Case,
)
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS
from labrunner.truth.hints import Evidence, add_stage_evidence, factor_words, gather_evidence, stages_wanted
from labrunner.truth.judge import same_values
from labrunner.truth.poison import SHARED_POISON_BITS, carries
from labrunner.truth.verdict import Status


def explain_failure(
    lab: Lab,
    submission: Submission,
    worker: Worker,
    case: Case,
    inputs,
    run,
    reference,
    status: Status,
    failing_rows: list[int],
    schedules: dict[int, str],
    timeout_s: float,
    explain: bool = True,
    stage_check: bool = True,
    words: bool = True,
) -> tuple[Evidence, str]:
    """The evidence for hints, and the words the message ends with: the kernel a race is in, or lab 1's
    first wrong stage. `status`: what the output showed (wrong, never-written or race); `words`: False
    where the message takes none (compute-sanitizer's own names the kernel and the line).

    A diagnosis only: nothing here changes a verdict. A kernel that misbehaves while being
    explained (it passed once, so it should not) leaves the words out.
    """
    out = run.outputs["out"].reshape(case.rows, QUERY_HEADS, HEAD_DIM)
    evidence = gather_evidence(case, inputs, out, reference, status, failing_rows, explain)
    evidence["launch_constants"] = dict(submission.constants)  # the settings a hint on the rows may name
    launches = lab.plan_launches(submission.constants, case.rows, case.prefix)
    stages = staged_evidence(lab, worker, case, inputs, launches, out, evidence, timeout_s)
    if not words:
        return evidence, ""
    # wrong values that are the exact ones times one factor: the message says so, beside where they are
    factor = factor_words(evidence)
    said = f"; {factor}" if factor else ""
    try:
        if status == Status.RACE:
            kernel = racing_kernel(lab, submission, worker, case, inputs, launches, run, schedules, timeout_s)
            if kernel is None:
                return evidence, "; no one kernel's thread order alone changes the output"
            return evidence, f"; in kernel {kernel}"
        if lab.stages and stage_check and shows_every_stage(case):
            stage = first_wrong_stage(lab, worker, case, inputs, launches, timeout_s, stages)
            if stage:
                return evidence, f"{said}; stage check: {stage}"
    except WorkerFailure:
        pass
    return evidence, said


def shows_every_stage(case: Case) -> bool:
    """A case on which every kernel of a staged pipeline can show its error: more than one key. With one
    key the softmax gives probability 1 whatever the scores were, so a wrong scores kernel looks right
    after it, and the stage check would clear a kernel the case cannot judge."""
    return case.keys > 1


def staged_evidence(
    lab: Lab,
    worker: Worker,
    case: Case,
    inputs,
    launches: list,
    out: np.ndarray,
    evidence: Evidence,
    timeout_s: float,
) -> list[tuple[str, np.ndarray]] | None:
    """Lab 1's pipeline rerun kernel by kernel for the hints: each stage's buffer compared with what one
    known mistake would leave there (truth/hints_stages.py), where the case's own variants were compared.
    The buffers come back for the stage check to read; None where none were taken (another lab, a case
    too large or not wrong, or a rerun that misbehaved: the hints then do without)."""
    if not lab.stages or not stages_wanted(evidence, case):
        return None
    try:
        stages = stage_buffers(lab, worker, case, inputs, launches[:-1], timeout_s)
    except WorkerFailure:
        return None
    add_stage_evidence(evidence, inputs, case, stages, str(launches[-1].kernel), out)
    return stages


def stage_buffers(
    lab: Lab,
    worker: Worker,
    case: Case,
    inputs,
    launches: list,
    timeout_s: float,
    schedule: int = FIRST_SCHEDULE,
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
    run,
    schedules: dict[int, str],
    timeout_s: float,
) -> str | None:
    """The kernel the race is in, from evidence: the first kernel whose own thread order changes the
    output, each kernel in turn run under another schedule while every other keeps the first order.

    A kernel's argument list says nothing about where its shared memory raced (lab 1's softmax races
    on its reduction, yet writes the workspace attn_scores wrote first), so the search reruns the whole
    pipeline. Where no single kernel's order moves the output but the output carries the shared-memory
    poison, the first kernel whose own result carries it read shared memory no thread wrote. None when
    neither shows: the message then names no kernel rather than guess one.
    """
    if len(launches) == 1:
        return str(launches[0].kernel)
    given = inputs.buffers()
    writable = {
        "out": case.rows * QUERY_HEADS * HEAD_DIM,
        **lab.workspace(submission.constants, case.rows, case.prefix),
    }
    first = run.outputs["out"]
    for index, launch in enumerate(launches):
        for number in schedules:
            alone = [FIRST_SCHEDULE] * len(launches)
            alone[index] = number
            other = worker.run_case(
                "student", launches, given, writable, ("out",), timeout_s, reverse_threads=alone, quiet=True
            )
            if not same_values(other.outputs["out"], first).all():
                return str(launch.kernel)
    if carries(first, SHARED_POISON_BITS).any():
        for kernel, buffer in stage_buffers(
            lab, worker, case, inputs, launches, timeout_s, FIRST_SCHEDULE, submission.constants
        ):
            if carries(buffer, SHARED_POISON_BITS).any():
                return str(kernel)
    return None


def first_wrong_stage(
    lab: Lab,
    worker: Worker,
    case: Case,
    inputs,
    launches: list,
    timeout_s: float,
    stages: list[tuple[str, np.ndarray]] | None = None,
) -> str | None:
    """Lab 1's stage check: the first kernel whose result disagrees with the definition, in words.
    `stages`: the buffers of a rerun already made for the hints (`staged_evidence`), else rerun here.

    A stage that disagrees but is made good by the next one (scores left unscaled, scaled inside
    the softmax) is a different split of the same work, not the bug: the stage named is the first
    that disagrees after the last one that agrees. The last stage is the output, already wrong.
    """
    if stages is None:
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
