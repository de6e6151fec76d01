"""The correctness cases: which run, and each one run in the worker with its evidence gathered
(other thread schedules, compute-sanitizer's report) and judged once (`truth/judge.py`).

Correctness gates timing: nothing is timed (`timing.py`) until every case passed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from labrunner.compile.backend import Backend
from labrunner.compile.gate import Submission
from labrunner.exit_codes import usage_error
from labrunner.labs.definition import Lab
from labrunner.phases import phase
from labrunner.pipeline.case_inputs import CaseInputs
from labrunner.pipeline.case_limit import CaseLimit, case_limit
from labrunner.pipeline.explain import CaseStudied, Explaining, FailedRun, explain_failure, shows_every_stage
from labrunner.pipeline.grading_run import CaseOptions, GradingRun
from labrunner.pipeline.schedules import FIRST_SCHEDULE, RACE_SCHEDULES, RERUN_WHEN_FAILING
from labrunner.report.results import CaseResult
from labrunner.run.diagnose import ReplayPayload, replay_under_sanitizer
from labrunner.run.racecheck import find_hazard
from labrunner.run.worker import CaseRun, WorkerFailure
from labrunner.truth.cases import (
    Case,
    geometry_case,
    make_inputs,
)
from labrunner.truth.catalogue import Catalogue
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS
from labrunner.truth.hints import Evidence
from labrunner.truth.judge import Judgement, SanitizerReport, judge, judge_failure
from labrunner.truth.verdict import Status

# Failing cases whose output is compared with the variant oracles for hints (the first ones).
EXPLAINED_FAILURES = 3


def select_cases(
    lab: Lab, backend: Backend, options: CaseOptions, constants: dict[str, int] | None = None
) -> tuple[list[Case], list[tuple[Case, str]]]:
    """The cases to run, and those skipped with the reason (the CPU backend's time budget).

    `constants`: the submission's launch geometry. Where no case of the default set spans three of
    its blocks, the case derived from it joins the set (`geometry_case`), on every backend.
    """
    catalogue = lab.catalogue
    cases = resolved_cases(lab, catalogue, constants)
    derived = geometry_case(catalogue, lab.row_tiles(constants)) if constants is not None else None
    by_default = [c for c in cases if backend != Backend.CPU or options.full or c.cpu]
    if derived and not any(c.rows >= derived.rows for c in by_default):
        cases.append(derived)
    if options.only:
        unknown = [n for n in options.only if n not in {c.name for c in cases}]
        if unknown:
            raise usage_error(
                f"--case {unknown[0]}: {lab.name} has no such case (it has {', '.join(c.name for c in cases)})"
            )
        cases = [c for c in cases if c.name in options.only]
    if backend != Backend.CPU or options.full:
        return cases, []
    skipped = [(c, "outside the CPU backend's time budget; --full runs it") for c in cases if not c.cpu]
    return [c for c in cases if c.cpu], skipped


def resolved_cases(lab: Lab, catalogue: Catalogue, constants: dict[str, int] | None) -> list[Case]:
    """The catalogue's cases with a decode case's lengths written out for the file's own partition size
    (the catalogue's `partition_when_whole` for a file that keeps one partition per sequence)."""
    own = lab.partition(constants if constants is not None else lab.constants({}))
    return [case.resolved(own or catalogue.geometry.get("partition_when_whole", 0), own) for case in catalogue.cases]


def inputs_ahead(lab: Lab, submission: Submission, backend: Backend, options: CaseOptions) -> CaseInputs:
    """Every case's inputs and reference, started now: the grade starts them before the student's module
    loads (a second on the CPU backend), and `run_cases` takes them."""
    cases, _ = select_cases(lab, backend, options, submission.constants)
    return CaseInputs(options.seed.value, options.oracle, cases, ahead=True)


def run_cases(
    run: GradingRun, results: list[CaseResult] | None = None, made: CaseInputs | None = None
) -> list[CaseResult]:
    """Every case, in order, each reported to the run's reporter as it starts. `results` (when given) fills
    as each case finishes, so an interrupted run still has the cases it finished. `made`: the cases'
    inputs started ahead (`inputs_ahead`), closed here as the inputs made here are."""
    options = run.cases
    cases, skipped = select_cases(run.lab, run.backend, options, run.submission.constants)
    results = [] if results is None else results
    stopped_by: str | None = None
    # Explanations cost time, so only the first cases whose own run failed get them (a hazard that
    # compute-sanitizer reports names its kernel and line itself, and counts for none).
    failures = 0
    # Lab 1's stage check runs once, on the first failing case that can show every kernel's error
    stage_checked = False
    # GPU --race-check: the small cases, in order, each under compute-sanitizer after its own run,
    # until its first report (a hazard, or a check it could not finish) has decided a case.
    sanitizing = options.race_check and run.backend == Backend.GPU
    made = made or CaseInputs(options.seed.value, options.oracle, cases, ahead=True)
    try:
        with run.reporter.cases("checking cases", len(cases)) as progress:
            run = replace(run, progress=progress)
            for case in cases:
                if stopped_by:
                    results.append(
                        CaseResult(case.name, Status.NOT_RUN, f"not run: {stopped_by}", case.rows, case.prefix)
                    )
                    continue
                progress.advance(f"{case.name} ({size_in_words(case)})")
                # Once a race is found the verdict is race: later cases need no --race-check schedules to say
                # so, yet each failing one is still rerun (a few runs, ended by the first that disagrees), so
                # that every case carrying the race's evidence is called a race, not only the first ones
                raced = any(r.status == Status.RACE for r in results)
                checks = CaseChecks(
                    race_check=options.race_check and not raced,
                    rerun=options.rerun and (raced or failures < EXPLAINED_FAILURES),
                    explain=failures < EXPLAINED_FAILURES,
                    stage_check=not stage_checked and shows_every_stage(case),
                    sanitize=sanitizing and case.cpu,
                    # a replay recompiles a .cu file's source: a Triton file has only its cubins
                    diagnose=run.backend == Backend.GPU and options.diagnose and not run.interpreted,
                )
                limit = case_limit(run.lab, run.backend, case, options.timeout_s, interpreted=run.interpreted)
                with phase(f"case {case.name}"):
                    result, judgement = judged_case(run, case, limit, checks, made)
                results.append(result)
                failures += judgement.run_failed
                stage_checked = stage_checked or (judgement.run_failed and shows_every_stage(case))
                sanitizing = sanitizing and not judgement.by_sanitizer
                if result.status in (Status.CRASH, Status.TIMEOUT):
                    stopped_by = f"case {case.name} ended in a {result.status}"
    finally:
        made.close()
    results += [CaseResult(c.name, Status.SKIPPED, f"skipped: {why}", c.rows, c.prefix) for c, why in skipped]
    return results


# A case whose output was compared across schedules or read by the sanitizer: its own run ended, with
# guards and inputs intact (the judge asks about races only then).
RACE_CHECKED = (Status.PASS, Status.WRONG, Status.NEVER_WRITTEN)


def race_check_words(
    lab: Lab, backend: Backend, options: CaseOptions, constants: dict[str, int], results: list[CaseResult]
) -> str | None:
    """What --race-check ran and that it found nothing, for a grade it found no race in (None otherwise):
    on the CPU every checked case under each other schedule, on the GPU the small cases under
    compute-sanitizer's racecheck and synccheck."""
    if not options.race_check or any(r.status in (Status.RACE, Status.RACE_CHECK_INCONCLUSIVE) for r in results):
        return None
    cases, _ = select_cases(lab, backend, options, constants)
    small = {c.name for c in cases if c.cpu}
    checked = [r.name for r in results if r.status in RACE_CHECKED and (backend == Backend.CPU or r.name in small)]
    if not checked:
        return None
    counted = f"{len(checked)} case{'s' if len(checked) != 1 else ''} ({', '.join(checked)})"
    if backend != Backend.GPU:
        labels = [label for _, label in RACE_SCHEDULES]
        random = [label for label in labels if label.startswith("random order")]
        orders = [label for label in labels if label not in random] + [f"{len(random)} random orders"] * bool(random)
        return (
            f"--race-check: {counted} each ran again under {len(labels)} other schedules "
            f"({', '.join(orders[:-1])} and {orders[-1]}), and every output agreed with its first run"
        )
    return f"--race-check: compute-sanitizer's racecheck and synccheck ran on {counted} and reported no hazard"


def size_in_words(case: Case) -> str:
    """A case's size as its lab speaks of it: `3 sequences, the longest 2049 keys` (decode), `17 rows,
    prefix 31` (a prefill chunk), `1 row` (a whole prompt)."""

    def counted(n: int, word: str) -> str:
        return f"{n} {word}{'s' if n != 1 else ''}"

    if case.decode:
        return f"{counted(len(case.lengths), 'sequence')}, the longest {counted(case.prefix, 'key')}"
    rows = counted(case.rows, "row")
    return f"{rows}, prefix {case.prefix}" if case.prefix else rows


@dataclass(frozen=True)
class CaseChecks:
    """What one case's run looks for beyond its output, as `run_cases` decides for each case.

    `race_check`: every output compared under other thread schedules (CPU --race-check); `rerun`: a failing
    case rerun under three other schedules, to find a race unasked (CPU); `explain`: a wrong output compared
    with the variant oracles the hints read; `stage_check`: a wrong pipeline rerun kernel by kernel (lab 1);
    the driver does both for the first failures only, since each costs time. `sanitize`: the judge may ask
    compute-sanitizer's racecheck and synccheck about the case (GPU --race-check). `diagnose`: a crash is
    replayed under compute-sanitizer's memcheck, to name the kernel and the line (GPU)."""

    race_check: bool = False
    rerun: bool = True
    explain: bool = True
    stage_check: bool = True
    sanitize: bool = False
    diagnose: bool = False


def run_one_case(run: GradingRun, case: Case, timeout_s: float) -> CaseResult:
    """One case, judged; a failure explained (`judged_case`). The one check before timing uses it."""
    checks = CaseChecks(race_check=run.cases.race_check, rerun=run.cases.rerun)
    return judged_case(run, case, timeout_s, checks)[0]


def judged_case(
    run: GradingRun, case: Case, limit: CaseLimit | float, checks: CaseChecks, made: CaseInputs | None = None
) -> tuple[CaseResult, Judgement]:
    """One case: its run, its evidence handed to the judge, the judgement explained; its result is made
    once, from all of them. `limit`: the seconds the case may take and a hang's message naming the launch
    that was running (`CaseLimit`), or the seconds alone, a hang then told in the worker's own words.
    `made`: where the inputs and the reference were made ahead (`run_cases`); without it both are made here."""
    lab, submission, worker, options = run.lab, run.submission, run.worker, run.cases
    timeout_s = limit.seconds if isinstance(limit, CaseLimit) else limit
    made = made or CaseInputs(options.seed.value, options.oracle)
    inputs = made.inputs(case)
    given = inputs.buffers()
    launches = lab.plan_launches(submission.constants, case.rows, case.prefix)
    writable = {
        "out": case.rows * QUERY_HEADS * HEAD_DIM,
        **lab.workspace(submission.constants, case.rows, case.prefix),
    }
    on_cpu = worker.backend == Backend.CPU
    schedules = RACE_SCHEDULES if checks.race_check and on_cpu else ()
    # unasked, only the first failures are rerun, and every one once a race was found (`run_cases`); never a
    # Triton file's: the interpreter runs its programs in one order whatever the schedule says, so a
    # rerun could only repeat the run (three more runs of a failing case, minutes for a real kernel)
    reruns = RERUN_WHEN_FAILING if on_cpu and not checks.race_check and checks.rerun else ()
    reruns = () if run.interpreted else reruns
    tried: list[tuple[int, str]] = []

    def under_other_schedules(schedules: tuple[tuple[int, str], ...]) -> Iterator[tuple[str, CaseRun]]:
        # Run one at a time, as the judge asks: the first schedule that disagrees ends the search.
        # The worker's reverse_threads carries the CPU schedule's number (True and False keep their meaning).
        for number, label in schedules:
            tried.append((number, label))
            yield (
                label,
                worker.run_case(
                    "student", launches, given, writable, ("out",), timeout_s, reverse_threads=number, quiet=True
                ),
            )

    def under_sanitizer() -> SanitizerReport:
        # Asked by the judge only once the guards, the inputs and the output showed no race.
        run.progress.advance(f"{case.name}: racecheck and synccheck under compute-sanitizer")
        with worker.runs_held():  # the sanitizer runs the case's kernels on the GPU, as a case does
            return find_hazard(case_payload(lab, submission, case, options), case_timeout_s=timeout_s)

    try:
        output = worker.run_case(
            "student", launches, given, writable, ("out",), timeout_s, reverse_threads=FIRST_SCHEDULE
        )
        reference = made.reference(case, inputs)
        judgement = judge(
            case,
            output,
            given,
            writable,
            reference,
            under_other_schedules(schedules),
            under_sanitizer if checks.sanitize else None,
            when_failing=under_other_schedules(reruns),
        )
    except WorkerFailure as failure:
        judgement = judge_failure(failure.kind, failure.detail)
        message, diagnosis = judgement.message, None
        if judgement.status == Status.TIMEOUT and isinstance(limit, CaseLimit):
            message = limit.timed_out(failure.running)
        if checks.diagnose and judgement.status == Status.CRASH:
            run.progress.advance(f"{case.name}: replaying under compute-sanitizer")
            with worker.runs_held():
                diagnosis = replay_under_sanitizer(
                    case_payload(lab, submission, case, options), case_timeout_s=timeout_s
                )
            if diagnosis:
                message += "; compute-sanitizer: " + " | ".join(line.strip() for line in diagnosis.splitlines())
        return CaseResult(case.name, judgement.status, message, case.rows, case.prefix, diagnosis=diagnosis), judgement
    evidence: Evidence | dict[str, Any] = {}
    words = ""
    if judgement.output in (Status.WRONG, Status.NEVER_WRITTEN, Status.RACE):
        # the schedule that disagreed is the last one tried: the kernel search replays only that one
        studied = CaseStudied(lab, submission, worker, case, inputs, launches, timeout_s)
        failed = FailedRun(
            output,
            reference,
            judgement.output,
            list(judgement.failing_rows),
            dict(tried[-1:] or RACE_SCHEDULES[:2]),  # a poisoned output disagreed with no schedule: try two
        )
        asked = Explaining(checks.explain, checks.stage_check, words=not judgement.by_sanitizer)
        with phase("explain"):
            evidence, words = explain_failure(studied, failed, asked)
        if judgement.between_blocks:
            evidence["between_blocks"] = True
    result = CaseResult(
        case.name,
        judgement.status,
        judgement.message + words,
        case.rows,
        case.prefix,
        judgement.max_abs_err,
        judgement.bad_elements,
        judgement.first_bad,
        list(judgement.failing_rows),
        nonfinite=judgement.nonfinite,
        evidence=evidence,
    )
    return result, judgement


def case_payload(lab: Lab, submission: Submission, case: Case, options: CaseOptions) -> ReplayPayload:
    """One case as the replay process (`labrunner.run.replay`) runs it under a sanitizer."""
    inputs = make_inputs(case, options.seed.value)
    request = {
        "launches": lab.plan_launches(submission.constants, case.rows, case.prefix),
        "inputs": inputs.buffers(),
        "writable": {
            "out": case.rows * QUERY_HEADS * HEAD_DIM,
            **lab.workspace(submission.constants, case.rows, case.prefix),
        },
        "returned": ("out",),
        "reverse_threads": False,
    }
    return {
        "source": submission.module.composed_source,
        "filename": submission.label,
        "entry_types": lab.entry_point_types(),
        "request": request,
    }


def bench_check_case(
    lab: Lab, constants: dict[str, int] | None = None, chunk: int | None = None, prefix: int | None = None
) -> Case:
    """The one correctness check before timing, as the lab's timing strategy picks it: the timed shape
    itself, a decode batch's longest sequence, or the catalogue's longest case."""
    catalogue = lab.catalogue
    return lab.timing_strategy.check_case(resolved_cases(lab, catalogue, constants), catalogue.timing, chunk, prefix)
