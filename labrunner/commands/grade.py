"""Grading: the golden proof, the compile gate, every case in an isolated worker, the verdicts.

Correctness gates timing: nothing is timed (see `benchmark.py`) until every case passed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labrunner.build.gate import Submission
from labrunner.exit_codes import environment_error, usage_error
from labrunner.labs.definition import Lab
from labrunner.report.progress import Progress
from labrunner.report.results import CaseResult
from labrunner.run.worker import Worker, WorkerFailure
from labrunner.truth import oracle
from labrunner.truth.cases import Case, Seed, load_catalogue, make_inputs
from labrunner.truth.check import check_output, describe_rows
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS, within_tolerance
from labrunner.truth.poison import inspect_guards

DEFAULT_TIMEOUT_S = {"gpu": 20.0, "cpu": 120.0}
BACKENDS = ("gpu", "cpu", "auto")


@dataclass
class CaseOptions:
    seed: Seed
    timeout_s: float | None = None
    full: bool = False          # CPU: run the cases outside the default budget too
    race_check: bool = False    # CPU: run every case again with each block's threads reversed
    only: tuple[str, ...] = ()  # case names to run (empty: all)
    diagnose: bool = True       # GPU: replay a crashing case under compute-sanitizer, where installed


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
        return "gpu", []
    if requested == "auto":
        notes = cpu_sandbox_notes(unsafe_cpu)
        return "cpu", [f"{words}: grading on the CPU backend instead (correctness only, no GPU timings)", *notes]
    raise environment_error(f"{words}. Grade on the CPU instead with --device cpu (correctness only), "
                            "or --device auto to fall back to it automatically")


def cpu_sandbox_notes(unsafe_cpu: bool) -> list[str]:
    """Refuses the CPU backend where it cannot be sealed (exit 6), unless --unsafe-cpu; the notes to print."""
    from labrunner.run.cpu_device import cpu_sandbox_status

    if unsafe_cpu:
        return ["--unsafe-cpu: the CPU worker runs this file's code without a syscall filter; grade only files you trust"]
    reason = cpu_sandbox_status()
    if reason is not None:
        raise environment_error(f"the CPU backend cannot seal its worker here: {reason}. It runs the file as native "
                                "code, so it does not grade; use a GPU, or --unsafe-cpu for a file you wrote yourself")
    return []


def select_cases(lab: Lab, backend: str, options: CaseOptions) -> tuple[list[Case], list[tuple[Case, str]]]:
    """The cases to run, and those skipped with the reason (the CPU backend's time budget)."""
    catalogue = load_catalogue(lab.name)
    cases = list(catalogue.cases)
    if options.only:
        unknown = [n for n in options.only if n not in {c.name for c in cases}]
        if unknown:
            raise usage_error(f"--case {unknown[0]}: {lab.name} has no such case (it has {', '.join(c.name for c in cases)})")
        cases = [c for c in cases if c.name in options.only]
    if backend != "cpu" or options.full:
        return cases, []
    skipped = [(c, "outside the CPU backend's time budget; --full runs it") for c in cases if not c.cpu]
    return [c for c in cases if c.cpu], skipped


def run_cases(lab: Lab, submission: Submission, worker: Worker, backend: str, options: CaseOptions,
              progress: Progress = Progress()) -> list[CaseResult]:
    cases, skipped = select_cases(lab, backend, options)
    timeout = options.timeout_s or DEFAULT_TIMEOUT_S[backend]
    results: list[CaseResult] = []
    progress.start("checking cases", len(cases))
    stopped_by: str | None = None
    for case in cases:
        if stopped_by:
            results.append(CaseResult(case.name, "not-run", f"not run: {stopped_by}", case.rows, case.prefix))
            continue
        progress.advance(f"{case.name} ({case.rows} rows, prefix {case.prefix})")
        result = run_one_case(lab, submission, worker, case, options, timeout)
        if result.status == "crash" and backend == "gpu" and options.diagnose:
            progress.advance(f"{case.name}: replaying under compute-sanitizer")
            add_diagnosis(lab, submission, case, options, timeout, result)
        results.append(result)
        if result.status in ("crash", "timeout"):
            stopped_by = f"case {case.name} ended in a {result.status}"
    progress.done()
    results += [CaseResult(c.name, "skipped", f"skipped: {why}", c.rows, c.prefix) for c, why in skipped]
    return results


def run_one_case(lab: Lab, submission: Submission, worker: Worker, case: Case, options: CaseOptions,
                 timeout_s: float) -> CaseResult:
    inputs = make_inputs(case, options.seed.value)
    given = {"q": inputs.q, "k": inputs.k, "v": inputs.v}
    launches = lab.plan_launches(submission.constants, case.rows, case.prefix)
    writable = {"out": case.rows * QUERY_HEADS * HEAD_DIM, **lab.workspace(case.rows, case.prefix)}
    try:
        run = worker.run_case("student", launches, given, writable, ("out",), timeout_s)
        reversed_run = (worker.run_case("student", launches, given, writable, ("out",), timeout_s, reverse_threads=True)
                        if options.race_check else None)
    except WorkerFailure as failure:
        return misbehaved(case, failure)
    reference = oracle.attention(inputs.q, inputs.k, inputs.v, prefix=case.prefix)
    return judge_case(case, run, given, writable, reference, reversed_run)


def add_diagnosis(lab: Lab, submission: Submission, case: Case, options: CaseOptions, timeout_s: float,
                  result: CaseResult) -> None:
    from labrunner.run.diagnose import replay_under_sanitizer

    inputs = make_inputs(case, options.seed.value)
    request = {"launches": lab.plan_launches(submission.constants, case.rows, case.prefix),
               "inputs": {"q": inputs.q, "k": inputs.k, "v": inputs.v},
               "writable": {"out": case.rows * QUERY_HEADS * HEAD_DIM, **lab.workspace(case.rows, case.prefix)},
               "returned": ("out",), "reverse_threads": False}
    report = replay_under_sanitizer({"source": submission.module.composed_source, "filename": submission.label,
                                     "entry_types": lab.entry_point_types(), "request": request},
                                    case_timeout_s=timeout_s)
    if report:
        result.diagnosis = report
        result.message += "; compute-sanitizer: " + " | ".join(line.strip() for line in report.splitlines())


def misbehaved(case: Case, failure: WorkerFailure) -> CaseResult:
    message = failure.detail if failure.kind != "error" else f"the run failed in a kernel launch: {failure.detail}"
    return CaseResult(case.name, failure.status, message, case.rows, case.prefix)


def judge_case(case: Case, run, given: dict[str, np.ndarray], writable: dict[str, int],
               reference: np.ndarray, reversed_run=None) -> CaseResult:
    """Guards first (they explain everything after them), then inputs, then every output value."""
    for name in writable:
        damage = inspect_guards(name, *run.bands[name])
        if damage:
            return CaseResult(case.name, "out-of-bounds", damage.describe(writable[name]), case.rows, case.prefix)
    for name, original in given.items():
        after = run.inputs_after[name]
        changed = np.flatnonzero(after.view(np.uint32).ravel() != original.view(np.uint32).ravel())
        if changed.size:
            return CaseResult(case.name, "input-mutated",
                              f"input {name} was modified: {changed.size} element(s) changed, the first at flat "
                              f"index {changed[0]}; kernels must treat q, k and v as read-only",
                              case.rows, case.prefix)
    out = run.outputs["out"].reshape(case.rows, QUERY_HEADS, HEAD_DIM)
    checked = check_output(out, reference, exact=case.exact)
    result = CaseResult(case.name, checked.status, checked.message, case.rows, case.prefix, checked.max_abs_err,
                        checked.bad_elements, checked.first_bad, checked.failing_rows)
    if not checked.passed:
        result.message += f"; {describe_rows(checked.failing_rows, case.rows)}"
    elif reversed_run is not None:
        other = reversed_run.outputs["out"].reshape(out.shape)
        agree = within_tolerance(other, out.astype(np.float64))
        if not agree.all():
            row, head, col = np.unravel_index(np.flatnonzero(~agree)[0], out.shape)
            result.status = "race"
            result.message = (f"the output depends on thread order: with each block's threads run in reverse, row {row}, "
                              f"head {head}, col {col} is {other[row, head, col]:.6g} instead of {out[row, head, col]:.6g}; "
                              "a missing __syncthreads()?")
    return result


def load_student(worker: Worker, lab: Lab, submission: Submission, options: dict | None = None) -> None:
    """Load the file in the worker; the backend's own build refusing it (the CPU's g++, its limits,
    its object check) is a compile error like NVRTC's, and a load that crashes is a verdict too."""
    worker.load("student", submission.module.composed_source, submission.label, lab.entry_point_types(), options)

