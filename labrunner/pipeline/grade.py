"""`attnlab grade`: the oracle's proof, the gate, every case, then timing and the speed gate.

Order matters: prove the oracle, compile-gate the file, pick the backend, run every case in the
worker, and only then time. Rendering happens as each step finishes, so a long run shows its cases
before its timing starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from labrunner import box as boxes
from labrunner.compile.backend import Backend
from labrunner.compile.gate import Submission
from labrunner.compile.includes import code_tokens
from labrunner.labs import get_lab
from labrunner.measure.gates import (
    Gates,
    apply_bandwidth_gate,
    apply_gate,
    load_gates,
)
from labrunner.phases import phase
from labrunner.pipeline.backend import device_facts, gpu_share, why_on_the_cpu
from labrunner.pipeline.correctness import inputs_ahead, race_check_words, run_cases
from labrunner.pipeline.grading_run import CaseOptions, GradingRun
from labrunner.pipeline.oracle_ahead import OracleAhead
from labrunner.pipeline.prepare import load_student, load_text, prepare
from labrunner.pipeline.profile import append_range_summary
from labrunner.pipeline.requests import GradeRequest, RunRequest, refuse_speedup_options, refuse_triton_options
from labrunner.pipeline.timing_stage import TimingAsk, compile_starter_ahead, run_lab_timing
from labrunner.pipeline.worker_ahead import WorkerAhead
from labrunner.records.device import DeviceFacts
from labrunner.records.timing import SpeedupTiming
from labrunner.report.reporter import Reporter
from labrunner.report.results import RunResult
from labrunner.run.worker import Worker
from labrunner.truth.hints import Evidence, derive_hints
from labrunner.truth.verdict import Status


def grade_submission(request: GradeRequest, result: RunResult, reporter: Reporter) -> None:
    lab = get_lab(request.lab)
    refuse_speedup_options(lab, request)
    refuse_triton_options(request)
    if request.file is None:  # the command always names the file it grades; a request without one is a caller's mistake
        raise TypeError("grade_submission: the request names no file to grade")
    with boxes.required(request.require_box):
        # While the file compiles: the GPU oracle is made and proven, and the worker's box starts.
        oracle_ahead = OracleAhead(request.device, decode=any(case.decode for case in lab.catalogue.cases))
        worker_ahead = WorkerAhead(request.device, request.arch, lambda backend: Worker(backend))
        try:
            grade_with(Ahead(request, oracle_ahead, worker_ahead), result, reporter)
        finally:
            worker_ahead.close()


@dataclass(frozen=True)
class Ahead:
    """A grade's request, with what was started for it before its file compiled: the GPU oracle with its
    proof, and the worker's box."""

    request: GradeRequest
    oracle: OracleAhead
    worker: WorkerAhead


def grade_with(ahead: Ahead, result: RunResult, reporter: Reporter) -> None:
    request = ahead.request
    assert request.file is not None
    lab = get_lab(request.lab)
    options_of_load = request.load_options

    def load_early(composed_source: str, label: str) -> None:
        ahead.worker.load_ahead(lambda worker: load_text(worker, lab, composed_source, label, options_of_load))

    early = load_early if ahead.worker.backend == Backend.CPU else None  # a GPU worker loads the gate's cubin
    prepared = prepare(request, request.file, result, reporter, early)
    lab, submission, backend, seed = prepared.lab, prepared.submission, prepared.backend, prepared.seed
    if backend == Backend.CPU and submission.module.triton:
        reporter.note(
            "the Triton file runs in Triton's interpreter on the CPU: its dots rounded to TF32 as the GPU's "
            "tensor cores round them, every load and store checked against its buffer"
        )
    gates = load_gates_where_timed(request.gates_path, backend, reporter)
    options = CaseOptions(
        seed=seed,
        timeout_s=request.timeout_s,
        full=request.full,
        race_check=request.race_check,
        only=request.only,
        diagnose=request.diagnose,
        oracle=ahead.oracle.for_cases() if backend == Backend.GPU else None,
    )
    facts = facts_ahead(backend)
    timed = not request.no_timing and backend == Backend.GPU and not request.only
    starter = (
        lab.timing_strategy.baseline(lambda: compile_starter_ahead(lab, request.arch, request.compile_limits))
        if timed
        else None
    )
    made = inputs_ahead(lab, submission, backend, options)  # while the module loads
    # the worker is closed on every way out (its whole process group), Ctrl-C and SIGTERM included
    with made, ahead.worker.take(backend) as worker, facts_kept(result, facts):
        ahead.worker.loaded(worker, lambda: load_student(worker, lab, submission, request.load_options))
        run = prepared.with_worker(worker, options, reporter)
        with checks_share_the_gpu(worker, backend):
            run_cases(run, results=result.cases, made=made)
        with phase("hints"):
            result.hints = derive_hints([c.evidence for c in result.cases if gathered(c.evidence)])
        advice = race_check_advice(backend, request.race_check, result, submission)
        if advice:
            reporter.recorded(advice)  # printed last (below): what to run next
        result.device = facts.result()  # the cases' report names it
        with phase("reports"):
            reporter.judged(result)
        checked = race_check_words(lab, backend, options, submission.constants, result.cases)
        if checked:
            reporter.note(checked)
        correct = result.decisive_case is None
        if correct and timed:
            with gpu_share(backend, "timing"), phase("timing"):
                baseline = lab.timing_strategy.baseline(lambda: lab.starter_path)
                references = ahead.oracle.for_timing()
                ask = TimingAsk.of(request, seed.value, baseline=baseline, starter=starter, references=references)
                run_lab_timing(run, result, ask)
            timing = result.timing
            if isinstance(timing, SpeedupTiming) and timing.bandwidth is not None:
                result.gate = apply_bandwidth_gate(timing.bandwidth, result.device_name)
            elif isinstance(timing, SpeedupTiming):
                result.gate = apply_gate(gates, lab.name, result.device_name, timing.speedup)
        elif correct and backend == Backend.CPU:
            # recorded, and said by the verdict line's own words
            reporter.recorded("the CPU backend checks correctness only: no timings are taken or shown")
        with phase("worker stop"):  # killed, and waited for: its CUDA context is gone before the next grade's timing
            result.kernel_output = worker.kernel_output()
    with phase("reports"):
        reporter.timed(result)
        reporter.gated(result)
        reporter.kernel_output(result.kernel_output)
        close_report(run, result, request, seed.value)
    if advice:
        reporter.advice(advice)


@contextmanager
def checks_share_the_gpu(worker: Worker, backend: Backend) -> Iterator[None]:
    """The cases hold the GPU shared run by run (`Worker.runs_held`): between runs (judging, explaining a
    failure on the host) a grader waiting to time is not kept waiting, nor every check queued behind it."""
    worker.runs_held = lambda: gpu_share(backend, "checking")
    try:
        yield
    finally:
        worker.runs_held = nullcontext


def facts_ahead(backend: Backend) -> Future[DeviceFacts]:
    """The device's facts (NVML's and CUDA's: a tenth of a second or two on a GPU host), read in a thread
    while the grade goes on; the cases' report, whose title names the device, waits for them."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnlab-device")
    try:
        return pool.submit(device_facts, backend)
    finally:
        pool.shutdown(wait=False)


@contextmanager
def facts_kept(result: RunResult, facts: Future[DeviceFacts]) -> Iterator[None]:
    """A grade stopped before its cases' report still names its device."""
    try:
        yield
    finally:
        if result.device is None:
            result.device = facts.result()


def race_check_advice(backend: Backend, race_check: bool, result: RunResult, submission: Submission) -> str | None:
    """On a GPU, a wrong grade of a file that uses shared memory ends by suggesting --race-check.

    A GPU's warps interleave differently from run to run, so a missing __syncthreads() can look like
    a wrong formula; the CPU backend reruns a failing case under other schedules unasked, but on a GPU
    only compute-sanitizer can look, and it is slow, so it is suggested rather than run."""
    if backend != Backend.GPU or race_check or result.verdict != Status.WRONG:
        return None
    shared = next((t for t in code_tokens(submission.source, submission.label) if t.text == "__shared__"), None)
    if shared is None:
        return None
    return (
        f"the file uses shared memory (__shared__ at line {shared.line}), and a missing __syncthreads() can make "
        "values wrong in a way that looks like a wrong formula: run again with --race-check, and "
        "compute-sanitizer looks for a race"
    )


def gathered(evidence: Evidence | dict[str, Any]) -> TypeGuard[Evidence]:
    """A case's evidence is empty (it passed, or none was gathered) or all that `gather_evidence` gathers."""
    return bool(evidence)


def close_report(run: GradingRun, result: RunResult, request: RunRequest, seed: int) -> None:
    """What grade and bench print last: the Range pass's one line where --profile asks, then the verdict."""
    if request.with_profile:
        append_range_summary(run, result, request.arch, seed)
    run.reporter.verdict(result, why_on_the_cpu(result.notes))


def load_gates_where_timed(path: Path | None, backend: Backend, reporter: Reporter) -> Gates | None:
    """Gates apply only where a GPU times; on the CPU a gates file is noted and left unread, so one course
    command runs on GPU and CPU runners alike."""
    if path is None:
        return None
    if backend != Backend.GPU:
        reporter.note(gates_not_applied(path, backend))
        return None
    return load_gates(path)


def gates_not_applied(path: Path | str, backend: Backend) -> str:
    """The note of a gates file a backend without timings leaves unread; one that is not there is named as
    missing, since the same command on a GPU refuses it."""
    if Path(path).is_file():
        return f"--gates {path}: not applied on the {backend} backend, which takes no timings"
    return (
        f"--gates {path}: no such file (on a GPU the grade refuses it; `attnlab calibrate LAB -o {path}` writes "
        f"one); not applied on the {backend} backend, which takes no timings"
    )
