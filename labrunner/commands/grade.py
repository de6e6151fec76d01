"""Grading: the golden proof, the compile gate, every case in an isolated worker, the verdicts.

Correctness gates timing: nothing is timed (see `benchmark.py`) until every case passed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from labrunner import box as boxes
from labrunner.build.gate import Submission
from labrunner.exit_codes import environment_error, usage_error
from labrunner.labs.definition import Lab
from labrunner.report.progress import Progress
from labrunner.report.results import CaseResult
from labrunner.run.worker import Worker, WorkerFailure
from labrunner.truth.cases import Case, Seed, geometry_case, load_catalogue, make_inputs
from labrunner.truth.check import check_output, describe_rows
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS, within_tolerance
from labrunner.truth.hints import gather_evidence
from labrunner.truth.poison import SHARED_POISON_BITS, carries, inspect_guards

DEFAULT_TIMEOUT_S = {"gpu": 20.0, "cpu": 120.0}
BACKENDS = ("gpu", "cpu", "auto")


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


def gpu_status() -> tuple[bool, str]:
    """Whether CuPy sees a GPU, and the words to say so (one line)."""
    try:
        import cupy
    except ImportError:
        return False, "CuPy is not installed: pip install 'attnlab[cuda13]' (or [cuda12] for a CUDA 12 driver)"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, or a driver too old for this CuPy
        reason = str(exc).split(":")[0]
        if reason in ("cudaErrorInsufficientDriver", "cudaErrorNoDevice"):
            return False, f"no GPU present (CUDA reports {reason}: no NVIDIA GPU or driver on this machine)"
        return False, f"no usable GPU ({reason})"
    if count == 0:
        return False, "no GPU found"
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    return True, name.decode() if isinstance(name, bytes) else str(name)


def resolve_backend(requested: str, unsafe_cpu: bool = False) -> tuple[str, list[str]]:
    """gpu, cpu, or auto (the GPU where there is one, else the CPU, said plainly). Returns notes.

    The CPU backend runs the file as native code, so it grades only where its worker can seal
    itself with seccomp, unless `--unsafe-cpu` says the file is the user's own."""
    if requested not in BACKENDS:
        raise usage_error(f"--device {requested}: choose gpu, cpu or auto")
    if requested == "cpu":
        return "cpu", cpu_sandbox_notes(unsafe_cpu)
    available, words = gpu_status()
    if available:
        return "gpu", gpu_box_notes()
    if requested == "auto":
        notes = cpu_sandbox_notes(unsafe_cpu)
        return "cpu", [f"{words}: grading on the CPU backend instead (correctness only, no GPU timings)", *notes]
    raise environment_error(
        f"{words}. Grade on the CPU instead with --device cpu (correctness only), "
        "or --device auto to fall back to it automatically"
    )


def cpu_sandbox_notes(unsafe_cpu: bool) -> list[str]:
    """Refuses the CPU backend where it cannot be sealed (exit 6), unless --unsafe-cpu; the notes to print."""
    from labrunner.run.cpu_device import cpu_sandbox_status

    unboxed = boxes.availability()
    if unsafe_cpu:
        notes = [
            "--unsafe-cpu: the CPU worker runs this file's code without a syscall filter; grade only files you trust"
        ]
        return notes + ([f"--unsafe-cpu: the CPU worker runs unboxed ({unboxed})"] if unboxed else [])
    if unboxed is not None:
        raise environment_error(
            f"the CPU backend cannot box its worker here: {unboxed}. It runs the file as native "
            "code, so it does not grade; use a GPU, or --unsafe-cpu for a file you wrote yourself"
        )
    reason = cpu_sandbox_status()
    if reason is not None:
        raise environment_error(
            f"the CPU backend cannot seal its worker here: {reason}. It runs the file as native "
            "code, so it does not grade; use a GPU, or --unsafe-cpu for a file you wrote yourself"
        )
    return []


def gpu_box_notes() -> list[str]:
    """The GPU path grades unboxed where no box can be made, and says so (`--require-box` refuses)."""
    unboxed = boxes.availability()
    return [f"the GPU worker and the compiler run unboxed: {unboxed}"] if unboxed else []


def select_cases(
    lab: Lab, backend: str, options: CaseOptions, constants: dict[str, int] | None = None
) -> tuple[list[Case], list[tuple[Case, str]]]:
    """The cases to run, and those skipped with the reason (the CPU backend's time budget).

    `constants`: the submission's launch geometry. Where no case of the default set spans three of
    its blocks, the case derived from it joins the set (`geometry_case`), on every backend.
    """
    catalogue = load_catalogue(lab.name)
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
    from labrunner.run.racecheck import find_hazard

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
    from labrunner.run.diagnose import replay_under_sanitizer

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


def same_values(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two runs agree on an element when both are NaN, or equal within the pass rule."""
    return (np.isnan(a) & np.isnan(b)) | within_tolerance(a, b.astype(np.float64))


def _value(x) -> str:
    return f"{float(x):.6g}" if np.isfinite(x) else str(float(x))


def load_student(worker: Worker, lab: Lab, submission: Submission, options: dict | None = None) -> None:
    """Load the file in the worker; the backend's own build refusing it (the CPU's g++, its limits,
    its object check) is a compile error like NVRTC's, and a load that crashes is a verdict too."""
    worker.load(
        "student",
        submission.module.composed_source,
        submission.label,
        lab.entry_point_types(),
        options,
        binary=(submission.module.arch, submission.module.cubin),
    )
