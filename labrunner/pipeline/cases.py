"""The correctness cases: which run, each one run in the worker and judged, the sanitizer's reports.

Correctness gates timing: nothing is timed (`timing.py`) until every case passed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from labrunner.build.gate import Submission
from labrunner.exit_codes import usage_error
from labrunner.labs.definition import Lab
from labrunner.pipeline.backend import DEFAULT_TIMEOUT_S
from labrunner.pipeline.explain import explain_failure, same_values
from labrunner.report.progress import Progress
from labrunner.report.results import CaseResult
from labrunner.run.diagnose import replay_under_sanitizer
from labrunner.run.racecheck import find_hazard
from labrunner.run.worker import Worker, WorkerFailure
from labrunner.truth.cases import (
    Case,
    Seed,
    geometry_case,
    make_inputs,
)
from labrunner.truth.check import check_output, describe_rows
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS
from labrunner.truth.poison import inspect_guards


@dataclass
class CaseOptions:
    seed: Seed
    timeout_s: float | None = None
    full: bool = False  # CPU: run the cases outside the default budget too
    race_check: bool = False  # CPU: every case under several thread schedules; GPU: racecheck and synccheck
    only: tuple[str, ...] = ()  # case names to run (empty: all)
    diagnose: bool = True  # GPU: replay a crashing case under compute-sanitizer, where installed


# Failing cases whose output is compared with the variant oracles for hints (the first ones).
EXPLAINED_FAILURES = 3


# The CPU schedules --race-check runs each case under besides the first (threads in order), by the
# number the CPU backend knows them by: reversed, then seeded random priorities (run/cpu/fiber.h).
# Reversal alone misses a warp that runs ahead through a reduction before a slower warp has read
# the value it overwrites; random priorities let some warp run ahead at every barrier.
RACE_SCHEDULES: tuple[tuple[int, str], ...] = (
    (1, "reverse order"),
    (2, "random order (seed 2)"),
    (3, "random order (seed 3)"),
    (4, "random order (seed 4)"),
    (5, "random order (seed 5)"),
)


def select_cases(
    lab: Lab, backend: str, options: CaseOptions, constants: dict[str, int] | None = None
) -> tuple[list[Case], list[tuple[Case, str]]]:
    """The cases to run, and those skipped with the reason (the CPU backend's time budget).

    `constants`: the submission's launch geometry. Where no case of the default set spans three of
    its blocks, the case derived from it joins the set (`geometry_case`), on every backend.
    """
    catalogue = lab.catalogue
    cases = resolved_cases(lab, catalogue, constants)
    derived = geometry_case(catalogue, lab.row_tiles(constants)) if constants is not None else None
    by_default = [c for c in cases if backend != "cpu" or options.full or c.cpu]
    if derived and not any(c.rows >= derived.rows for c in by_default):
        cases.append(derived)
    if options.only:
        unknown = [n for n in options.only if n not in {c.name for c in cases}]
        if unknown:
            raise usage_error(
                f"--case {unknown[0]}: {lab.name} has no such case (it has {', '.join(c.name for c in cases)})"
            )
        cases = [c for c in cases if c.name in options.only]
    if backend != "cpu" or options.full:
        return cases, []
    skipped = [(c, "outside the CPU backend's time budget; --full runs it") for c in cases if not c.cpu]
    return [c for c in cases if c.cpu], skipped


def resolved_cases(lab: Lab, catalogue, constants: dict[str, int] | None) -> list[Case]:
    """The catalogue's cases with a decode case's lengths written out for the file's own partition size
    (the catalogue's `partition_when_whole` for a file that keeps one partition per sequence)."""
    own = lab.partition(constants if constants is not None else lab.constants({}))
    return [case.resolved(own or catalogue.geometry.get("partition_when_whole", 0), own) for case in catalogue.cases]


def run_cases(
    lab: Lab,
    submission: Submission,
    worker: Worker,
    backend: str,
    options: CaseOptions,
    progress: Progress = Progress(),
    results: list[CaseResult] | None = None,
) -> list[CaseResult]:
    """Every case, in order. `results` (when given) fills as each case finishes, so an interrupted
    run still has the cases it finished."""
    cases, skipped = select_cases(lab, backend, options, submission.constants)
    timeout = options.timeout_s or DEFAULT_TIMEOUT_S[backend]
    results = [] if results is None else results
    progress.start("checking cases", len(cases))
    stopped_by: str | None = None
    for case in cases:
        if stopped_by:
            results.append(CaseResult(case.name, "not-run", f"not run: {stopped_by}", case.rows, case.prefix))
            continue
        progress.advance(f"{case.name} ({case.rows} rows, prefix {case.prefix})")
        failures = sum(1 for r in results if r.status != "pass")
        # Once a race is found the verdict is race: later cases need no more schedules to say so.
        raced = any(r.status == "race" for r in results)
        result = run_one_case(
            lab,
            submission,
            worker,
            case,
            replace(options, race_check=False) if raced else options,
            timeout,
            explain=failures < EXPLAINED_FAILURES,
            stage_check=failures == 0,
        )
        if result.status == "crash" and backend == "gpu" and options.diagnose:
            progress.advance(f"{case.name}: replaying under compute-sanitizer")
            add_diagnosis(lab, submission, case, options, timeout, result)
        results.append(result)
        if result.status in ("crash", "timeout"):
            stopped_by = f"case {case.name} ended in a {result.status}"
    if options.race_check and backend == "gpu" and not stopped_by:
        progress.advance("racecheck and synccheck under compute-sanitizer")
        add_race_report(lab, submission, [c for c in cases if c.cpu], options, timeout, results)
    progress.done()
    results += [CaseResult(c.name, "skipped", f"skipped: {why}", c.rows, c.prefix) for c, why in skipped]
    return results


def run_one_case(
    lab: Lab,
    submission: Submission,
    worker: Worker,
    case: Case,
    options: CaseOptions,
    timeout_s: float,
    explain: bool = True,
    stage_check: bool = True,
) -> CaseResult:
    """One case, judged; a failure explained. `explain`: compare a wrong output with the variant
    oracles the hints read; `stage_check`: rerun a wrong pipeline kernel by kernel (lab 1). The driver
    does both for the first failures only, since each costs time."""
    inputs = make_inputs(case, options.seed.value)
    given = inputs.buffers()
    launches = lab.plan_launches(submission.constants, case.rows, case.prefix)
    writable = {
        "out": case.rows * QUERY_HEADS * HEAD_DIM,
        **lab.workspace(submission.constants, case.rows, case.prefix),
    }
    schedules = RACE_SCHEDULES if options.race_check and worker.backend == "cpu" else ()
    tried: list[tuple[int, str]] = []

    def under_other_schedules():
        # Run one at a time, as judge_case asks: the first schedule that disagrees ends the search.
        # The worker's reverse_threads carries the CPU schedule's number (True and False keep their meaning).
        for number, label in schedules:
            tried.append((number, label))
            yield (
                label,
                worker.run_case("student", launches, given, writable, ("out",), timeout_s, reverse_threads=number),
            )

    try:
        run = worker.run_case("student", launches, given, writable, ("out",), timeout_s)
        reference = inputs.reference()
        result = judge_case(case, run, given, writable, reference, under_other_schedules())
    except WorkerFailure as failure:
        return misbehaved(case, failure)
    if result.status in ("wrong", "never-written", "race"):
        # the schedule that disagreed is the last one tried: the kernel search replays only that one
        explain_failure(
            lab,
            submission,
            worker,
            case,
            inputs,
            run,
            reference,
            result,
            dict(tried[-1:]),
            timeout_s,
            explain,
            stage_check,
        )
    return result


def add_race_report(
    lab: Lab,
    submission: Submission,
    cases: list[Case],
    options: CaseOptions,
    timeout_s: float,
    results: list[CaseResult],
) -> None:
    """GPU --race-check: the small cases under compute-sanitizer's racecheck and synccheck; the first
    hazard makes its case a race, with the kernel and line the tool names."""
    for case in cases:
        result = next((r for r in results if r.name == case.name), None)
        if result is None or result.status not in ("pass", "wrong", "never-written"):
            continue
        hazard, inconclusive = find_hazard(case_payload(lab, submission, case, options), case_timeout_s=timeout_s)
        if hazard or inconclusive:
            result.status = "race" if hazard else "race-check-inconclusive"
            result.message = hazard or inconclusive
            return


def case_payload(lab: Lab, submission: Submission, case: Case, options: CaseOptions) -> dict:
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


def add_diagnosis(
    lab: Lab, submission: Submission, case: Case, options: CaseOptions, timeout_s: float, result: CaseResult
) -> None:
    report = replay_under_sanitizer(case_payload(lab, submission, case, options), case_timeout_s=timeout_s)
    if report:
        result.diagnosis = report
        result.message += "; compute-sanitizer: " + " | ".join(line.strip() for line in report.splitlines())


def misbehaved(case: Case, failure: WorkerFailure) -> CaseResult:
    message = failure.detail if failure.kind != "error" else f"the run failed in a kernel launch: {failure.detail}"
    return CaseResult(case.name, failure.status, message, case.rows, case.prefix)


def judge_case(
    case: Case, run, given: dict[str, np.ndarray], writable: dict[str, int], reference: np.ndarray, others=()
) -> CaseResult:
    """Guards first (they explain everything after them), then inputs, then every output value.

    `others`: (label, run) of the same case under other thread schedules (--race-check on the CPU),
    taken one at a time. Any difference from the first run is a race, whether or not the first run
    passed.
    """
    for name in writable:
        damage = inspect_guards(name, *run.bands[name])
        if damage:
            return CaseResult(case.name, "out-of-bounds", damage.describe(writable[name]), case.rows, case.prefix)
    for name, original in given.items():
        after = run.inputs_after[name]
        changed = np.flatnonzero(after.view(np.uint32).ravel() != original.view(np.uint32).ravel())
        if changed.size:
            return CaseResult(
                case.name,
                "input-mutated",
                f"input {name} was modified: {changed.size} element(s) changed, the first at flat "
                f"index {changed[0]}; kernels must treat {_listed(list(given))} as read-only",
                case.rows,
                case.prefix,
            )
    out = run.outputs["out"].reshape(case.rows, QUERY_HEADS, HEAD_DIM)
    checked = check_output(out, reference, exact=case.exact)
    result = CaseResult(
        case.name,
        checked.status,
        checked.message,
        case.rows,
        case.prefix,
        checked.max_abs_err,
        checked.bad_elements,
        checked.first_bad,
        checked.failing_rows,
        nonfinite=checked.nonfinite,
    )
    if not checked.passed:
        result.message += f"; {describe_rows(checked.failing_rows, case.rows)}"
    if checked.status == "race":
        return result
    for label, other_run in others:
        other = other_run.outputs["out"].reshape(out.shape)
        agree = same_values(other, out)
        if not agree.all():
            row, head, col = np.unravel_index(np.flatnonzero(~agree)[0], out.shape)
            result.status = "race"
            result.message = (
                f"the output depends on thread order: with each block's threads in {label} between "
                f"barriers, row {row}, head {head}, col {col} is {_value(other[row, head, col])} "
                f"instead of {_value(out[row, head, col])}: a missing __syncthreads()?"
            )
            break
    return result


def _listed(names: list[str]) -> str:
    """`q, k and v`: the inputs a lab's kernels receive, in words."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _value(x) -> str:
    return f"{float(x):.6g}" if np.isfinite(x) else str(float(x))


def bench_check_case(
    lab: Lab, constants: dict | None = None, chunk: int | None = None, prefix: int | None = None
) -> Case:
    """The one correctness check before timing, as the lab's timing strategy picks it: the timed shape
    itself, a decode batch's longest sequence, or the catalogue's longest case."""
    catalogue = lab.catalogue
    return lab.timing_strategy.check_case(resolved_cases(lab, catalogue, constants), catalogue.timing, chunk, prefix)
