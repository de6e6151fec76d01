"""`attnlab bench`: one correctness check at the timed shape, then the timing against a baseline or peer."""

from __future__ import annotations

from pathlib import Path

from labrunner import box as boxes
from labrunner.compile.backend import Backend
from labrunner.exit_codes import usage_error
from labrunner.labs import get_lab
from labrunner.labs.definition import Lab
from labrunner.pipeline import backend
from labrunner.pipeline.backend import device_facts, gpu_share
from labrunner.pipeline.correctness import bench_check_case, run_one_case
from labrunner.pipeline.grade import close_report
from labrunner.pipeline.grading_run import CaseOptions
from labrunner.pipeline.prepare import display_path, load_student, prepare
from labrunner.pipeline.requests import BenchRequest, refuse_speedup_options, refuse_triton_options
from labrunner.pipeline.timing_stage import TimingAsk, run_lab_timing
from labrunner.report.reporter import Reporter
from labrunner.report.results import RunResult
from labrunner.run.worker import Worker


def bench_submission(request: BenchRequest, result: RunResult, reporter: Reporter) -> None:
    lab = get_lab(request.lab)
    refuse_speedup_options(lab, request)
    refuse_triton_options(request)
    path = request.file or lab.solution_path
    result.file = display_path(path)
    peer = request.versus if lab.peer is not None and request.versus == lab.peer else None
    baseline = None if peer else resolve_baseline(lab, request.versus)  # a usage error comes before all else
    refuse_bench_without_gpu(request)
    with boxes.required(request.require_box):
        prepared = prepare(request, Path(result.file), result, reporter)
        if prepared.backend != Backend.GPU:
            raise backend.needs_a_gpu(
                "bench",
                f"the {prepared.backend} backend takes no timings",
                backend.grade_instead(request.lab, request.file),
            )
        result.device = device_facts(prepared.backend)
        check_case = bench_check_case(lab, prepared.submission.constants, request.chunk, request.prefix)
        seed = prepared.seed
        with Worker(prepared.backend) as worker:
            load_student(worker, lab, prepared.submission, request.load_options)
            run = prepared.with_worker(worker, CaseOptions(seed=seed, timeout_s=request.timeout_s), reporter)
            result.cases = [run_one_case(run, check_case, request.timeout_s or 60.0)]
            if result.decisive_case is None:
                with gpu_share(prepared.backend, "timing"):
                    run_lab_timing(run, result, TimingAsk.of(request, seed.value, baseline=baseline, peer=peer))
            result.kernel_output = worker.kernel_output()
        reporter.judged(result)
        reporter.timed(result)
        reporter.kernel_output(result.kernel_output)
        close_report(run, result, request, seed.value)


def refuse_bench_without_gpu(request: BenchRequest) -> None:
    """Before the compile gate: bench times, and the CPU backend takes no timings."""
    backend.refuse_without_gpu("bench", request.device, backend.grade_instead(request.lab, request.file))


def resolve_baseline(lab: Lab, versus: str) -> Path | None:
    """The baseline file `--vs` names, where the lab's timing has a baseline kernel."""
    return lab.timing_strategy.baseline(lambda: versus_path(lab, versus))


def versus_path(lab: Lab, versus: str) -> Path:
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
