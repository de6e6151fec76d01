"""The commands that run kernels (grade, bench, calibrate), step by step, filling one RunResult.

Order matters and is the same everywhere: prove the oracle, compile-gate the file, pick the
backend, run every case in the worker, and only then time. Rendering happens as each step
finishes, so a long run shows its cases before its timing starts.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from labrunner.build.compiler_process import DEFAULT_COMPILE_TIMEOUT_S, CompileLimits
from labrunner.build.gate import Submission, load_submission
from labrunner.commands.benchmark import check_peer, time_pipeline, time_speedup
from labrunner.commands.grade import CaseOptions, load_student, resolve_backend, resolved_cases, run_cases, run_one_case
from labrunner.exit_codes import AttnlabError, ExitCode, usage_error
from labrunner.labs import get_lab
from labrunner.labs.definition import Lab
from labrunner.measure.gates import (
    DEFAULT_COPY_FRACTION,
    DEFAULT_FRACTION,
    apply_bandwidth_gate,
    apply_gate,
    load_gates,
    write_gate,
)
from labrunner.measure.gpu_lock import exclusive_timing, gpu_key, shared_checking
from labrunner.measure.timing import TimingOptions
from labrunner.report import terminal
from labrunner.report.results import RunResult
from labrunner.run.untrusted_text import shown_path
from labrunner.run.worker import Worker
from labrunner.truth.cases import Case, load_catalogue, resolve_seed
from labrunner.truth.golden import require_proven_oracle
from labrunner.truth.hints import derive_hints


@dataclass
class RunRequest:
    """What grade, bench and calibrate share: the file, the backend, and how to time."""

    lab: str
    file: Path | None
    device: str = "gpu"
    seed: int | None = None
    timeout_s: float | None = None
    arch: str = "sm_90"
    compile_timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S
    budget_s: float = 3.0
    noise_target: float = 0.005
    rounds: int = 1
    unsafe_cpu: bool = False  # --unsafe-cpu: the CPU worker without its syscall filter
    profile: bool = False  # --profile: the Range pass's one line after a correct GPU run


@dataclass
class GradeRequest(RunRequest):
    full: bool = False
    race_check: bool = False
    only: tuple[str, ...] = ()
    diagnose: bool = True
    gates_path: Path | None = None
    timing: bool = True


@dataclass
class BenchRequest(RunRequest):
    chunk: int | None = None
    prefix: int | None = None
    versus: str = "starter"


def compile_limits(request: RunRequest) -> CompileLimits:
    return CompileLimits(timeout_s=request.compile_timeout_s)


def timing_options_for(request: RunRequest, seed: int) -> TimingOptions:
    return TimingOptions(budget_s=request.budget_s, noise_target=request.noise_target, seed=seed, rounds=request.rounds)


def refuse_speedup_options(lab: Lab, request: RunRequest) -> None:
    """Options that shape a SPEEDUP mean nothing to a lab that times a pipeline: say so before any work."""
    if lab.baseline != "none":
        return
    given = [
        flag
        for flag, present in (
            ("--chunk", getattr(request, "chunk", None) is not None),
            ("--prefix", getattr(request, "prefix", None) is not None),
            ("--vs", getattr(request, "versus", "starter") not in ("starter", lab.peer)),
            ("--rounds", request.rounds > 1),
        )
        if present
    ]
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        peer = (
            f" (its --vs takes {lab.peer} only: PyTorch beside the whole call)" if "--vs" in given and lab.peer else ""
        )
        raise usage_error(
            f"{' and '.join(given)} {verb} to lab2's SPEEDUP; {lab.name} times its pipeline at fixed sizes{peer}"
        )


def prepare(
    result: RunResult,
    lab_name: str,
    path: Path,
    device: str,
    arch: str,
    seed: int | None,
    limits: CompileLimits = CompileLimits(),
    unsafe_cpu: bool = False,
):
    """Oracle proof, compile gate, backend: everything before the first kernel runs."""
    lab = get_lab(lab_name)
    result.oracle_proof = require_proven_oracle().to_json()
    submission = load_submission(lab, path, shown_path(path), arch, limits)  # the name as every message shows it
    backend, notes = resolve_backend(device, unsafe_cpu)
    for words in notes:
        terminal.note(words)
    result.backend, result.notes = backend, result.notes + notes
    chosen = resolve_seed(seed)
    result.seed = chosen.shown
    return lab, submission, backend, chosen


def device_facts(worker_backend: str) -> dict | None:
    if worker_backend != "gpu":
        return {"name": "CPU (attnlab's fiber backend)"}
    from labrunner.measure.device_state import read_device_state

    return read_device_state().to_json()


def grade_submission(request: GradeRequest, result: RunResult) -> None:
    refuse_speedup_options(get_lab(request.lab), request)
    lab, submission, backend, seed = prepare(
        result,
        request.lab,
        request.file,
        request.device,
        request.arch,
        request.seed,
        compile_limits(request),
        request.unsafe_cpu,
    )
    gates = load_gates_where_timed(request.gates_path, backend, result)
    options = CaseOptions(
        seed=seed,
        timeout_s=request.timeout_s,
        full=request.full,
        race_check=request.race_check,
        only=request.only,
        diagnose=request.diagnose,
    )
    result.device = device_facts(backend)
    with Worker(backend) as worker:  # closed on every way out (its whole process group), Ctrl-C and SIGTERM included
        load_student(worker, lab, submission, load_options(request))
        with terminal.progress_display() as progress, gpu_share(backend, "checking"):
            run_cases(lab, submission, worker, backend, options, progress, results=result.cases)
        result.hints = derive_hints([c.evidence for c in result.cases if c.evidence])
        terminal.cases_report(result)
        correct = result.decisive_case is None
        if correct and request.timing and backend == "gpu" and not request.only:
            timing_options = timing_options_for(request, seed.value)
            with gpu_share(backend, "timing"):
                run_lab_timing(
                    lab,
                    submission,
                    worker,
                    seed.value,
                    timing_options,
                    result,
                    request.timeout_s,
                    baseline=lab.starter_path if lab.baseline == "starter" else None,
                    arch=request.arch,
                    limits=compile_limits(request),
                )
            if result.timing and "bandwidth" in result.timing:
                result.gate = apply_bandwidth_gate(result.timing["bandwidth"], (result.device or {}).get("name"))
            elif result.timing and result.timing.get("kind") == "speedup":
                result.gate = apply_gate(gates, lab.name, (result.device or {}).get("name"), result.timing["speedup"])
        elif correct and backend == "cpu":
            result.notes.append("the CPU backend checks correctness only: no timings are taken or shown")
        result.kernel_output = worker.kernel_output()
    terminal.timing_report(result)
    terminal.gate_report(result)
    terminal.kernel_output(result.kernel_output)
    close_report(lab, submission, result, request, seed.value)


def close_report(lab: Lab, submission: Submission, result: RunResult, request: RunRequest, seed: int) -> None:
    """What grade and bench print last: the Range pass's one line where --profile asks, then the verdict."""
    if request.profile:
        from labrunner.commands.profile import append_range_summary

        append_range_summary(lab, submission, result, request.arch, seed)
    terminal.verdict_line(result)


def load_options(request: RunRequest) -> dict:
    """What the worker's compile needs beyond the source: the CPU build defines the arch the gate compiled for."""
    return {"arch": request.arch, "sandboxed": not request.unsafe_cpu, "timeout_s": request.compile_timeout_s}


def run_lab_timing(
    lab: Lab,
    submission: Submission,
    worker: Worker,
    seed: int,
    options: TimingOptions,
    result: RunResult,
    timeout_s: float | None,
    baseline: Path | None,
    arch: str,
    chunk: int | None = None,
    prefix: int | None = None,
    limits: CompileLimits = CompileLimits(),
    peer: str | None = None,
) -> None:
    catalogue = load_catalogue(lab.name)
    if lab.baseline == "none":
        sizes = catalogue.timing["sizes"]
        checked = peer_checked(peer, worker, sizes[0], 0, result)
        terminal.note(
            "timing the pipeline at "
            + ", ".join(f"T = {t}" for t in sizes)
            + (f", interleaved with {checked['label']}" if ready(checked) else "")
        )
        timing, failure = time_pipeline(
            lab, worker, submission.constants, sizes, seed, options, peer=peer if ready(checked) else None
        )
    else:
        rows = chunk or catalogue.timing["rows"]
        cached = catalogue.timing["prefix"] if prefix is None else prefix
        checked = peer_checked(peer, worker, rows, cached, result)
        if ready(checked):
            rounds = f", {options.rounds} rounds in fresh worker processes" if options.rounds > 1 else ""
            terminal.note(
                f"timing {submission.label} against {checked['label']} at C = {rows}, P = {cached}, interleaved{rounds}"
            )
            timing, failure = time_speedup(
                lab,
                worker,
                submission.constants,
                None,
                rows,
                cached,
                seed,
                options,
                submission.label,
                checked["label"],
                baseline_peer=peer,
            )
            finish_timing(result, timing, failure, checked)
            return
        baseline = baseline or lab.starter_path  # a peer that cannot be timed leaves the starter in its place
        base = load_submission(lab, baseline, shown_path(display_path(baseline)), arch, limits)
        worker.load(
            "baseline",
            base.module.composed_source,
            base.label,
            lab.entry_point_types(),
            binary=(base.module.arch, base.module.cubin),
        )
        rounds = f", {options.rounds} rounds in fresh worker processes" if options.rounds > 1 else ""
        shape = f"B = {rows}, longest {cached}" if lab.bytes_to_move else f"C = {rows}, P = {cached}"
        terminal.note(f"timing {submission.label} against {base.label} at {shape}, interleaved{rounds}")
        timing, failure = time_speedup(
            lab, worker, submission.constants, base.constants, rows, cached, seed, options, submission.label, base.label
        )
        if timing and "bandwidth" in timing:
            timing["bandwidth"]["required_fraction"] = catalogue.timing.get("copy_fraction", DEFAULT_COPY_FRACTION)
    finish_timing(result, timing, failure, checked)


def peer_checked(peer: str | None, worker: Worker, rows: int, prefix: int, result: RunResult) -> dict | None:
    """The peer's record after its check before timing (`benchmark.check_peer`); one line where it is
    not timed (a note where PyTorch is missing, an error where it ran and failed)."""
    if peer is None:
        return None
    checked = check_peer(peer, worker, rows, prefix)
    if not ready(checked):
        (terminal.note if checked["status"] == "missing" else terminal.error)(checked["message"])
        result.notes.append(checked["message"])
    return checked


def ready(checked: dict | None) -> bool:
    return checked is not None and checked["status"] == "checked"


def finish_timing(result: RunResult, timing: dict | None, failure, checked: dict | None) -> None:
    if failure:
        result.cases.append(failure)
        terminal.error(f"{failure.name}: {failure.message}")
    if timing is not None and checked is not None and "peer" not in timing:
        timing["peer"] = checked  # a peer that was asked for and not timed: the record says why
    result.timing = timing


def display_path(path: Path) -> str:
    """A path as short as it can be said: relative to the working folder when it lies inside it.

    Never resolved through links: the file read is the one named (a link named is refused as one)."""
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def bench_submission(request: BenchRequest, result: RunResult) -> None:
    lab = get_lab(request.lab)
    refuse_speedup_options(lab, request)
    path = request.file or lab.solution_path
    result.file = display_path(path)
    peer = request.versus if lab.peer is not None and request.versus == lab.peer else None
    baseline = None if peer else resolve_baseline(lab, request.versus)  # a usage error comes before all else
    refuse_bench_without_gpu(request.device)
    lab, submission, backend, seed = prepare(
        result,
        request.lab,
        Path(result.file),
        request.device,
        request.arch,
        request.seed,
        compile_limits(request),
        request.unsafe_cpu,
    )
    if backend != "gpu":
        raise bench_needs_a_gpu(None)
    result.device = device_facts(backend)
    catalogue = load_catalogue(lab.name)
    check_case = bench_check_case(lab, catalogue, request, submission.constants)
    with Worker(backend) as worker:
        load_student(worker, lab, submission, load_options(request))
        options = CaseOptions(seed=seed, timeout_s=request.timeout_s)
        result.cases = [run_one_case(lab, submission, worker, check_case, options, request.timeout_s or 60.0)]
        if result.decisive_case is None:
            timing_options = timing_options_for(request, seed.value)
            with gpu_share(backend, "timing"):
                run_lab_timing(
                    lab,
                    submission,
                    worker,
                    seed.value,
                    timing_options,
                    result,
                    request.timeout_s,
                    baseline,
                    request.arch,
                    request.chunk,
                    request.prefix,
                    compile_limits(request),
                    peer,
                )
        result.kernel_output = worker.kernel_output()
    terminal.cases_report(result)
    terminal.timing_report(result)
    terminal.kernel_output(result.kernel_output)
    close_report(lab, submission, result, request, seed.value)


def bench_needs_a_gpu(why: str | None) -> AttnlabError:
    """The one message for bench on a backend that cannot time, whichever way the CPU was chosen."""
    reason = f" ({why})" if why else ""
    return AttnlabError(
        f"bench times kernels, which needs a GPU{reason}; check correctness on the CPU with "
        "`attnlab grade LAB FILE --device cpu`",
        ExitCode.ENVIRONMENT,
    )


def refuse_bench_without_gpu(device: str) -> None:
    """Asked before the compile gate, so `--device auto` never announces a CPU fall-back that bench then refuses."""
    from labrunner.commands import grade

    if device == "cpu":
        raise bench_needs_a_gpu("--device cpu")
    if device == "auto":
        available, words = grade.gpu_status()
        if not available:
            raise bench_needs_a_gpu(words)


def load_gates_where_timed(path: Path | None, backend: str, result: RunResult) -> dict | None:
    """Gates apply only where a GPU times; on the CPU a gates file is noted and left unread, so one course
    command runs on GPU and CPU runners alike."""
    if path is None:
        return None
    if backend != "gpu":
        words = gates_not_applied(path, backend)
        terminal.note(words)
        result.notes.append(words)
        return None
    return load_gates(path)


def gates_not_applied(path, backend: str) -> str:
    return f"--gates {path}: not applied on the {backend} backend, which takes no timings"


@contextmanager
def gpu_share(backend: str, phase: str):
    """On the GPU: checking shares it with other graders, timing has it alone (see measure/gpu_lock.py)."""
    if backend != "gpu":
        yield
        return
    with (shared_checking if phase == "checking" else exclusive_timing)(gpu_key()):
        yield


def bench_check_case(lab: Lab, catalogue, request: BenchRequest, constants: dict | None = None) -> Case:
    """The one correctness check before timing: at the timed shape itself (a decode batch: the case of
    the catalogue with the longest sequence, since the timed batch's gigabytes would cross the pipe)."""
    decode = [c for c in resolved_cases(lab, catalogue, constants) if c.decode]
    if decode:
        return max(decode, key=lambda c: c.prefix)
    if lab.baseline == "none":
        return next(c for c in catalogue.cases if c.rows == max(c.rows for c in catalogue.cases))
    rows = request.chunk or catalogue.timing["rows"]
    prefix = catalogue.timing["prefix"] if request.prefix is None else request.prefix
    return Case(f"C{rows}-P{prefix}", rows, prefix, why="the timed shape, checked once before timing")


def resolve_baseline(lab: Lab, versus: str) -> Path | None:
    if lab.baseline == "none":
        return None
    if versus == "starter":
        return lab.starter_path
    if versus == "solution":
        return lab.solution_path
    if versus == "expert":
        if not lab.expert_path.exists():
            raise usage_error(
                f"--vs expert: {lab.name}'s expert reference ({display_path(lab.expert_path)}) is not "
                "in this copy of attnlab; choose starter, solution, or a .cu file"
            )
        return lab.expert_path
    path = Path(versus)
    if not path.exists():
        peer = f", {lab.peer}" if lab.peer else ""
        raise usage_error(f"--vs {versus}: choose starter, solution, expert{peer}, or the path of an existing .cu file")
    return path


def calibrate_gate(request: BenchRequest, output: Path, fraction: float, result: RunResult) -> None:
    lab = get_lab(request.lab)
    if lab.baseline == "none":
        raise usage_error(f"{lab.name} has no speed gate to calibrate (it times its pipeline; only lab2 is gated)")
    if output.exists():
        load_gates(output, "-o")  # a broken file is refused now, not after the timing
    bench_submission(request, result)
    if result.decisive_case is not None or not result.timing:
        raise AttnlabError("calibration needs a correct, timed solution; see the failure above", ExitCode.WRONG_ANSWER)
    name = (result.device or {}).get("name") or "unknown GPU"
    comparison = result.timing["comparison"]
    entry = write_gate(
        output,
        lab.name,
        name,
        result.timing["speedup"],
        fraction or DEFAULT_FRACTION,
        {
            "ci_low": comparison["ci_low"],
            "ci_high": comparison["ci_high"],
            "solution_ms": comparison["student"]["median_ms"],
            "starter_ms": comparison["baseline"]["median_ms"],
            "shape": {"rows": result.timing["rows"], "prefix": result.timing["prefix"]},
        },
    )
    result.gate = {
        "status": "calibrated",
        "passed": True,
        "file": str(output),
        **entry,
        "message": f"wrote the {lab.name} gate for {name} to {output}: a student needs SPEEDUP >= "
        f"{entry['fraction'] * entry['solution_speedup']:.2f}x "
        f"({entry['fraction']:g} of the solution's {entry['solution_speedup']:.2f}x)",
    }
    terminal.gate_report(result)
