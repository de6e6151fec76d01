"""What a student needs beyond where a case failed: the kernel a race is in, lab 1's first wrong stage.

A diagnosis only: it reads a case's output once the judge (truth/judge.py) has decided the case,
and gives the words its message ends with before the case's result is made; nothing here changes
a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from labrunner.compile.gate import Submission
from labrunner.labs.definition import Lab, Launch
from labrunner.pipeline.schedules import FIRST_SCHEDULE
from labrunner.run.worker import Worker, WorkerFailure
from labrunner.truth.cases import Case, Inputs
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS
from labrunner.truth.hints import Evidence, add_stage_evidence, factor_words, gather_evidence, stages_wanted
from labrunner.truth.hints_prefill import scores_kept
from labrunner.truth.judge import same_values
from labrunner.truth.poison import SHARED_POISON_BITS, carries
from labrunner.truth.verdict import Status


@dataclass(frozen=True)
class CaseStudied:
    """A case whose output the judge found wrong, as the explanations rerun it: the lab, the file, the
    worker that has it loaded, the case with its inputs and planned launches, and the seconds each run may
    take."""

    lab: Lab
    submission: Submission
    worker: Worker
    case: Case
    inputs: Inputs
    launches: list[Launch]
    timeout_s: float

    def writable(self, constants: dict[str, int] | None = None) -> dict[str, int]:
        """The buffers a run may write: the output and the lab's workspace, sized by `constants` (the
        file's launch geometry by default)."""
        geometry = self.submission.constants if constants is None else constants
        return {
            "out": self.case.rows * QUERY_HEADS * HEAD_DIM,
            **self.lab.workspace(geometry, self.case.rows, self.case.prefix),
        }


@dataclass(frozen=True)
class FailedRun:
    """What the judge saw: the run, the reference it was held to, what the output showed (wrong,
    never-written or race), the rows that failed, and the schedules to replay in search of a race."""

    output: Any  # the worker's reply to the run (`run/worker.py`): its outputs by buffer name
    reference: np.ndarray
    status: Status
    failing_rows: list[int]
    schedules: dict[int, str]


@dataclass(frozen=True)
class Explaining:
    """What to explain: `explain` compares the output with the variant oracles the hints read,
    `stage_check` reruns lab 1's pipeline kernel by kernel, and `words` is False where the message takes
    none (compute-sanitizer's own names the kernel and the line)."""

    explain: bool = True
    stage_check: bool = True
    words: bool = True


def explain_failure(studied: CaseStudied, failed: FailedRun, asked: Explaining = Explaining()) -> tuple[Evidence, str]:
    """The evidence for hints, and the words the message ends with: the kernel a race is in, or lab 1's
    first wrong stage.

    A diagnosis only: nothing here changes a verdict. A kernel that misbehaves while being
    explained (it passed once, so it should not) leaves the words out. The score matrices are made once
    for all of it (`scores_kept`).
    """
    with scores_kept():
        return _explained(studied, failed, asked)


def _explained(studied: CaseStudied, failed: FailedRun, asked: Explaining) -> tuple[Evidence, str]:
    lab, case, submission = studied.lab, studied.case, studied.submission
    out = failed.output.outputs["out"].reshape(case.rows, QUERY_HEADS, HEAD_DIM)
    evidence = gather_evidence(
        case, studied.inputs, out, failed.reference, failed.status, failed.failing_rows, asked.explain
    )
    evidence["launch_constants"] = dict(submission.constants)  # the settings a hint on the rows may name
    stages = staged_evidence(studied, out, evidence)
    if not asked.words:
        return evidence, ""
    # wrong values that are the exact ones times one factor: the message says so, beside where they are
    factor = factor_words(evidence)
    said = f"; {factor}" if factor else ""
    try:
        if failed.status == Status.RACE:
            kernel = racing_kernel(studied, failed)
            if kernel is None:
                return evidence, "; no one kernel's thread order alone changes the output"
            return evidence, f"; in kernel {kernel}"
        if lab.stages and asked.stage_check and shows_every_stage(case):
            stage = first_wrong_stage(studied, stages)
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


def staged_evidence(studied: CaseStudied, out: np.ndarray, evidence: Evidence) -> list[tuple[str, np.ndarray]] | None:
    """Lab 1's pipeline rerun kernel by kernel for the hints: each stage's buffer compared with what one
    known mistake would leave there (truth/hints_stages.py), where the case's own variants were compared.
    The buffers come back for the stage check to read; None where none were taken (another lab, a case
    too large or not wrong, or a rerun that misbehaved: the hints then do without)."""
    if not studied.lab.stages or not stages_wanted(evidence, studied.case):
        return None
    try:
        stages = stage_buffers(studied, studied.launches[:-1])
    except WorkerFailure:
        return None
    add_stage_evidence(evidence, studied.inputs, studied.case, stages, str(studied.launches[-1].kernel), out)
    return stages


def stage_buffers(
    studied: CaseStudied,
    launches: list[Launch],
    schedule: int = FIRST_SCHEDULE,
    constants: dict[str, int] | None = None,
) -> list[tuple[str, np.ndarray]]:
    """The pipeline rerun kernel by kernel: after the first k launches, the buffer launch k wrote.
    `constants`: the file's launch geometry, where its workspace depends on it (the defaults otherwise)."""
    given = studied.inputs.buffers()
    writable = studied.writable(constants or studied.lab.constants({}))
    stages = []
    for count, launch in enumerate(launches, start=1):
        written = next(a for a in reversed(launch.args) if isinstance(a, str) and a in writable)
        run = studied.worker.run_case(
            "student", launches[:count], given, writable, (written,), studied.timeout_s, reverse_threads=schedule
        )
        stages.append((launch.kernel, run.outputs[written]))
    return stages


def racing_kernel(studied: CaseStudied, failed: FailedRun) -> str | None:
    """The kernel the race is in, from evidence: the first kernel whose own thread order changes the
    output, each kernel in turn run under another schedule while every other keeps the first order.

    A kernel's argument list says nothing about where its shared memory raced (lab 1's softmax races
    on its reduction, yet writes the workspace attn_scores wrote first), so the search reruns the whole
    pipeline. Where no single kernel's order moves the output but the output carries the shared-memory
    poison, the first kernel whose own result carries it read shared memory no thread wrote. None when
    neither shows: the message then names no kernel rather than guess one.
    """
    launches = studied.launches
    if len(launches) == 1:
        return str(launches[0].kernel)
    given = studied.inputs.buffers()
    writable = studied.writable()
    first = failed.output.outputs["out"]
    for index, launch in enumerate(launches):
        for number in failed.schedules:
            alone = [FIRST_SCHEDULE] * len(launches)
            alone[index] = number
            other = studied.worker.run_case(
                "student", launches, given, writable, ("out",), studied.timeout_s, reverse_threads=alone, quiet=True
            )
            if not same_values(other.outputs["out"], first).all():
                return str(launch.kernel)
    if carries(first, SHARED_POISON_BITS).any():
        for kernel, buffer in stage_buffers(studied, launches, FIRST_SCHEDULE, studied.submission.constants):
            if carries(buffer, SHARED_POISON_BITS).any():
                return str(kernel)
    return None


def first_wrong_stage(studied: CaseStudied, stages: list[tuple[str, np.ndarray]] | None = None) -> str | None:
    """Lab 1's stage check: the first kernel whose result disagrees with the definition, in words.
    `stages`: the buffers of a rerun already made for the hints (`staged_evidence`), else rerun here.

    A stage that disagrees but is made good by the next one (scores left unscaled, scaled inside
    the softmax) is a different split of the same work, not the bug: the stage named is the first
    that disagrees after the last one that agrees. The last stage is the output, already wrong.
    """
    launches = studied.launches
    if stages is None:
        stages = stage_buffers(studied, launches[:-1])
    problems = [studied.lab.stages[kernel](buffer, studied.inputs, studied.case.rows) for kernel, buffer in stages]
    kernels = [kernel for kernel, _ in stages] + [launches[-1].kernel]
    agreeing = [i for i, problem in enumerate(problems) if problem is None]
    first = (agreeing[-1] + 1) if agreeing else 0
    if first == len(stages):
        return (
            f"{kernels[first]} is the first kernel whose result disagrees with the definition "
            "(every kernel before it agrees)"
        )
    return f"{kernels[first]} is the first kernel whose result disagrees with the definition: {problems[first]}"
