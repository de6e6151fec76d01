"""`attnlab profile`: look inside a correct kernel. The Trace timeline, the Range pass, the roofline, the model.

In order, each step only once the one before it has something to show:

1. the oracle's proof, the compile gate and one correctness check at the timed shape (as `bench`):
   a wrong kernel gets no profile, as it gets no time;
2. the Trace timeline in the worker: K calls at every timing shape, every launch's GPU start and
   end (CUPTI, else CUDA events), drawn as bars and written as a Perfetto trace with `--trace`;
3. the Range pass: Nsight Compute in a child process over one call of the student's kernels and
   one of the starter's at the largest timing shape, with a fixed set of counters;
4. the roofline from both: the lab's FLOP count over ncu's duration, over ncu's DRAM bytes,
   against this GPU's FP32 peak and HBM bandwidth, and a model beside the bytes ncu measured: the
   lesson's traffic model for a prefill, the lab's own bytes that must move where it has them (a
   decode batch).

A lab's timed inputs are either a prefill's Q, K and V, made here from the seed and sent down, or
a paged cache (the lab's `timing_layout`) of gigabytes: those are made where they are used, in the
worker and in ncu's target, by the timing sets' generator on the GPU from a key derived from the
seed, with the layout's block table and lengths sent along (as `bench` does: `input_pool`).

Without ncu, or without permission to read the counters, steps 3 and 4 say exactly that and how
to fix it; the trace does not need them. `grade --profile` and `bench --profile` run step 3 alone
and print one line.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import labrunner
from labrunner import box as boxes
from labrunner.compile.backend import Backend
from labrunner.compile.gate import Submission, load_submission
from labrunner.compile.triton_build import is_triton_file
from labrunner.exit_codes import AttnlabError, ExitCode, usage_error
from labrunner.labs.definition import Lab
from labrunner.labs.timing_strategy import TimingLayout
from labrunner.measure.range_pass import RangePassUnavailable, run_ncu
from labrunner.measure.roofline import Point, ceilings_from_facts
from labrunner.measure.trace import slices_from_reply
from labrunner.measure.traffic import traffic
from labrunner.pipeline.backend import device_facts, grade_instead, refuse_without_gpu
from labrunner.pipeline.correctness import bench_check_case, run_one_case
from labrunner.pipeline.grading_run import CaseOptions, GradingRun
from labrunner.pipeline.prepare import display_path, load_student, prepare
from labrunner.pipeline.requests import ProfileRequest
from labrunner.records.kernel_slice import KernelSlice
from labrunner.records.profile import (
    MustMove,
    Profile,
    RangeContender,
    RangeKernel,
    RangeReport,
    RangeShape,
    RooflineCeilings,
    Trace,
    TraceVsNcu,
)
from labrunner.records.roofline import Ceilings, GpuFacts, RooflinePoint
from labrunner.records.traffic import TrafficShape
from labrunner.report.reporter import Reporter
from labrunner.report.results import RunResult
from labrunner.report.roofline_plot import plot_roofline, require_matplotlib
from labrunner.report.trace_events import write_trace
from labrunner.run.sandbox import scrubbed_environment
from labrunner.run.wire import Message
from labrunner.run.worker import Worker, WorkerFailure
from labrunner.truth.cases import random_inputs
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS
from labrunner.truth.timing_sets import KEY_BITS

WARMUP_CALLS = 3  # unprofiled calls of every contender before ncu's one, so the clocks are up
RANGE_TIMEOUT_S = 600.0
TRACE_TIMEOUT_S = 300.0
# A profile's inputs' own stream, beside the seed: in the prefill generator's seed and as the second
# word of a paged cache's timing-set key alike.
PROFILE_KEY_WORD = 0x70F11E


def profile_inputs(seed: int, rows: int, prefix: int) -> dict[str, np.ndarray]:
    """Seeded inputs at a timing shape. A profile reports what a kernel costs, not a verdict, so
    these need none of the timed calls' secrecy; they are never a correctness case's own."""
    inputs = random_inputs(np.random.default_rng([seed, rows, prefix, PROFILE_KEY_WORD]), rows, prefix)
    return {"q": inputs.q, "k": inputs.k, "v": inputs.v}


def profile_key(seed: int) -> list[int]:
    """The timing-set key of a profile's paged inputs: from the seed, since a profile needs no secrecy."""
    return [seed % (1 << KEY_BITS), PROFILE_KEY_WORD]


def shape_inputs(lab: Lab, seed: int, rows: int, prefix: int, layout: TimingLayout | None = None) -> dict[str, Any]:
    """What a trace shape (or ncu's target) needs to make its inputs: a prefill's arrays themselves
    (`inputs`), or, for a lab whose timing layout is a paged cache, the timing-set request `bench`
    sends (`sets`: key, shape, pages and the fixed block table and lengths), filled on the GPU.
    `layout`: the lab's timing layout at this shape, where the caller has made it already."""
    layout = lab.timing_layout(rows, prefix, seed) if layout is None else layout
    if not layout:
        return {"inputs": profile_inputs(seed, rows, prefix)}
    return {"sets": {"key": profile_key(seed), "rows": rows, "prefix": prefix, **layout}}


def timing_shapes(lab: Lab) -> list[tuple[str, int, int]]:
    """(label, rows, prefix) of every shape the lab times (its timing strategy's, from its catalogue):
    lab 1's sizes, or the one timed shape."""
    return [
        (lab.shape_label(rows, prefix), rows, prefix)
        for rows, prefix in lab.timing_strategy.shapes(lab.catalogue.timing)
    ]


def kernel_flops(lab: Lab, kernel: str, call_flops: float) -> float:
    """One kernel's part of the lab's FLOP count for a call: a one-kernel lab does it all; a lab of
    several gives each kernel its share (`Lab.flop_shares`; lab 1's softmax and lab 3's combine none)."""
    if len(lab.entry_points) == 1:
        return call_flops
    return lab.flop_shares.get(kernel, 0.0) * call_flops


def profile_submission(request: ProfileRequest, result: RunResult, reporter: Reporter) -> None:
    if request.plot_path:
        require_matplotlib()
    refuse_without_gpu("profile", request.device, grade_instead(request.lab, request.file))
    if is_triton_file(request.file):
        raise usage_error(
            f"profile takes a .cu file: {request.file} is a Triton file, whose kernels Nsight's replay cannot "
            f"rebuild yet (`attnlab bench {request.lab} {request.file}` times it)"
        )
    prepared = prepare(replace(request, device=Backend.GPU), request.file, result, reporter)
    lab, submission, backend, seed = prepared.lab, prepared.submission, prepared.backend, prepared.seed
    result.device = device_facts(backend)
    profile = Profile()
    result.profile = profile
    check_case = bench_check_case(lab, submission.constants)
    shapes = timing_shapes(lab)
    with Worker(backend) as worker:
        load_student(worker, lab, submission)
        run = prepared.with_worker(worker, CaseOptions(seed=seed, timeout_s=request.timeout_s), reporter)
        result.cases = [run_one_case(run, check_case, request.timeout_s or 60.0)]
        reporter.judged(result)
        if result.decisive_case is not None:
            result.kernel_output = worker.kernel_output()
            reporter.kernel_output(result.kernel_output)
            reporter.verdict(result)
            return
        reporter.note(f"tracing {request.calls} calls at " + "; ".join(label for label, _, _ in shapes))
        trace_request = {
            "calls": request.calls,
            "use_cupti": request.cupti,
            "shapes": [
                {
                    "label": label,
                    **shape_inputs(lab, seed.value, rows, prefix),
                    "launches": lab.plan_launches(submission.constants, rows, prefix),
                    "workspace": lab.workspace(submission.constants, rows, prefix),
                    "out_count": rows * QUERY_HEADS * HEAD_DIM,
                }
                for label, rows, prefix in shapes
            ],
        }
        reply = take_trace(worker, trace_request)
        result.kernel_output = worker.kernel_output()
    try:
        slices = fill_from_compile(slices_from_reply(reply, {e.name for e in lab.entry_points}), submission)
    except (ValueError, KeyError, TypeError) as exc:  # what comes back from the process that ran the kernels
        raise AttnlabError(f"the trace came back malformed: {exc}", ExitCode.MISBEHAVED) from None
    profile.trace = Trace(
        source=reply["source"],
        why_not_cupti=reply["why_not_cupti"],
        cupti_version=reply.get("cupti_version"),
        calls=request.calls,
        shapes=[label for label, _, _ in shapes],
        slices=list(slices),
        file=str(request.trace_path) if request.trace_path else None,
    )
    facts: GpuFacts = reply.get("gpu_facts") or GpuFacts()  # an empty one where the reply has none
    ceilings, problem = ceilings_from_facts(facts)
    profile.roofline = RooflineCeilings(facts, ceilings, problem)
    reporter.traced(profile.trace)
    if request.trace_path:
        write_trace(
            [s.to_json() for s in slices],
            result.device_name or "GPU",
            trace_source_words(reply["source"]),
            request.trace_path,
        )
        reporter.note(f"wrote the trace to {request.trace_path}: open it in https://ui.perfetto.dev")

    label, rows, prefix = shapes[-1]
    contenders = [(submission.label, "student", submission)]
    starter = lab.timing_strategy.baseline(lambda: starter_contender(lab, request.arch))
    if starter is not None:
        contenders.append(starter)
    else:
        profile.no_starter_row = (
            f"{lab.name}'s starter has empty kernel bodies, so the Range pass has no starter row to compare with"
        )
    moved = lab.timing_strategy.must_move(rows, prefix, lab.timing_layout(rows, prefix, seed.value))
    if moved is None:
        profile.traffic = traffic(TrafficShape(rows, prefix + rows))
    else:  # the lab's own model: a decode batch's bytes are its layout's, not a prefill's rows and keys
        profile.must_move = MustMove(label, moved)
    if request.range_pass:
        reporter.note(f"Range pass: Nsight Compute over one call of {', '.join(c[0] for c in contenders)} at {label}")
        at = RangeAt(label, rows, prefix, seed.value)
        profile.range = range_pass(lab, contenders, at, ceilings, request.ncu_csv_path)
        if ceilings is None and profile.range.facts:
            ceilings, problem = ceilings_from_facts(profile.range.facts)
            profile.roofline = RooflineCeilings(facts, ceilings, problem)
        profile.trace_vs_ncu = trace_vs_ncu(slices, label, profile.range)
    else:
        profile.range = RangeReport(available=False, message="the Range pass was not asked for (--no-range)")
    reporter.profiled(profile)
    if request.plot_path:
        points = roofline_points(profile.range)
        if profile.ceilings is None:
            reporter.note(f"--plot: nothing drawn, the ceilings are unknown ({profile.ceilings_problem})")
        else:
            title = f"{lab.name} · {submission.label} · {label}"
            plot_roofline(profile.ceilings.to_json(), points, title, request.plot_path)
            profile.plot = str(request.plot_path)
            reporter.note(f"wrote the roofline to {request.plot_path}")
    reporter.kernel_output(result.kernel_output)
    reporter.verdict(result)


def take_trace(worker: Worker, trace_request: Message) -> Message:
    """The worker's trace; if it dies with CUPTI on, once more with events (a CUPTI library that does not
    match the driver can take a process down), and said so. A second death is the kernel's."""
    try:
        return worker.trace(trace_request, TRACE_TIMEOUT_S)
    except WorkerFailure as failure:
        if not trace_request["use_cupti"] or failure.kind != "crash":
            raise AttnlabError(f"the trace did not finish: {failure.detail}", ExitCode.MISBEHAVED) from None
        first = failure.detail
    try:
        reply = worker.trace({**trace_request, "use_cupti": False}, TRACE_TIMEOUT_S)
    except WorkerFailure as failure:
        raise AttnlabError(f"the trace did not finish: {failure.detail}", ExitCode.MISBEHAVED) from None
    reply["why_not_cupti"] = f"the worker died with CUPTI on ({first}); the trace was taken again with events"
    return reply


def trace_source_words(source: str) -> str:
    return "CUPTI activity records" if source == "cupti" else "CUDA events around each launch"


def fill_from_compile(slices: list[KernelSlice], submission: Submission) -> list[KernelSlice]:
    """Events know no registers or static shared memory: take them from the compile gate's report."""
    resources = submission.module.resources
    filled = []
    for s in slices:
        r = resources.get(s.kernel)
        if r is not None and s.registers is None:
            s = replace(s, registers=r.registers, static_shared_bytes=r.shared_bytes)
        filled.append(s)
    return filled


@dataclass(frozen=True)
class RangeAt:
    """Where the Range pass looks: the timed shape's label, rows and prefix, and the seed of its inputs."""

    label: str
    rows: int
    prefix: int
    seed: int


def range_pass(
    lab: Lab,
    contenders: list[tuple[str, str, Submission]],
    at: RangeAt,
    ceilings: Ceilings | None,
    csv_path: Path | None = None,
) -> RangeReport:
    """ncu over one call of each contender; per kernel its counters and roofline point, and the whole call's."""
    label, rows, prefix, seed = at.label, at.rows, at.prefix, at.seed
    plans = [(name, role, lab.plan_launches(sub.constants, rows, prefix), sub) for name, role, sub in contenders]
    per_round = sum(len(launches) for _, _, launches, _ in plans)
    shape = RangeShape(label, rows, prefix)
    layout = lab.timing_layout(rows, prefix, seed)
    call_flops = lab.flops(rows, prefix, layout)
    boxed = boxes.boxed()
    with tempfile.TemporaryDirectory(prefix="attnlab-range-") as scratch:
        # The target runs the student's file: in a box whose /job is this folder, so every path it is
        # given is the box's; the driver reads what comes back (ncu's CSV, the GPU's facts) from here.
        seen = boxes.PRIVATE if boxed else scratch
        facts_path = Path(scratch) / "facts.json"
        # each contender its own workspace, sized by its own geometry (lab 3's partitions differ by file)
        payload = {
            "rows": rows,
            "prefix": prefix,
            "seed": seed,
            "out_count": rows * QUERY_HEADS * HEAD_DIM,
            "warmup_calls": WARMUP_CALLS,
            "facts_path": str(Path(seen) / facts_path.name),
            "contenders": [
                {
                    "role": role,
                    "source": sub.module.composed_source,
                    "filename": sub.label,
                    "entry_types": lab.entry_point_types(),
                    "workspace": lab.workspace(sub.constants, rows, prefix),
                    "launches": [asdict(launch) for launch in launches],
                }
                for _, role, launches, sub in plans
            ],
        }
        made = shape_inputs(lab, seed, rows, prefix, layout)
        if "sets" in made:  # the paged layout's fixed arrays beside the payload; the values made on the GPU
            fixed_path = Path(scratch) / "fixed.npz"
            np.savez(fixed_path, **made["sets"]["fixed"])
            payload["sets"] = {
                **{k: v for k, v in made["sets"].items() if k != "fixed"},
                "fixed_path": str(Path(seen) / fixed_path.name),
            }
        payload_path = Path(scratch) / "payload.json"
        payload_path.write_text(json.dumps(payload))
        target = [sys.executable, "-m", "labrunner.run.profile_target", str(Path(seen) / payload_path.name)]
        package_root = str(Path(labrunner.__file__).resolve().parent.parent)
        if boxed:  # the box's environment: the allowed names, and the package on the import path
            env = {
                **scrubbed_environment(Path(boxes.PRIVATE), host_code=False, boxed=True),
                "TMPDIR": "/tmp",
                "PYTHONPATH": package_root,
            }
        else:
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
            }
        names = [launch.kernel for _, _, launches, _ in plans for launch in launches]
        try:
            run = run_ncu(
                names,
                WARMUP_CALLS * per_round,
                per_round,
                target,
                RANGE_TIMEOUT_S,
                env=env,
                box_folder=Path(scratch) if boxed else None,
            )
        except RangePassUnavailable as exc:
            return RangeReport(False, str(exc), shape, WARMUP_CALLS)
        try:
            facts = json.loads(facts_path.read_text())
        except (OSError, ValueError):
            facts = None
    if csv_path:
        csv_path.write_text(run.raw_csv)
    if ceilings is None and facts:
        ceilings, _ = ceilings_from_facts(facts)
    got = [m.kernel for m in run.launches]
    if got != names:
        return RangeReport(
            False, f"ncu profiled {', '.join(got)} where {', '.join(names)} were launched", shape, WARMUP_CALLS, facts
        )
    launches_done = iter(run.launches)
    measured = []
    for name, role, launches, _ in plans:
        kernels = []
        for launch in launches:
            metrics = next(launches_done)
            flops = kernel_flops(lab, launch.kernel, call_flops)
            point = roofline_point(flops, metrics.dram_bytes, metrics.values.get("duration_ns"), ceilings)
            kernels.append(RangeKernel(metrics, flops, point))
        total_ns = sum_or_none(k.duration_ns for k in kernels)
        total_bytes = sum_or_none(k.metrics.dram_bytes for k in kernels)
        measured.append(
            RangeContender(
                label=name,
                role=role,
                kernels=kernels,
                duration_ms=None if total_ns is None else total_ns / 1e6,
                dram_bytes=total_bytes,
                flops=call_flops,
                point=roofline_point(call_flops, total_bytes, total_ns, ceilings),
            )
        )
    return RangeReport(
        available=True,
        message=None,
        shape=shape,
        warmup_calls=WARMUP_CALLS,
        gpu_facts=facts,
        seconds=run.seconds,
        command=run.command,
        dropped_metrics=run.dropped_metrics,
        contenders=measured,
    )


def sum_or_none(values: Iterable[float | None]) -> float | None:
    """The sum, or None where any value is unknown."""
    listed = list(values)
    known = [v for v in listed if v is not None]
    return float(sum(known)) if len(known) == len(listed) else None


def roofline_point(
    flops: float, dram_bytes: float | None, duration_ns: float | None, ceilings: Ceilings | None
) -> RooflinePoint | None:
    if ceilings is None or not dram_bytes or not duration_ns:
        return None
    return Point(flops, dram_bytes, duration_ns * 1e-9, ceilings).summary()


def trace_vs_ncu(slices: list[KernelSlice], label: str, report: RangeReport) -> list[TraceVsNcu]:
    """The student's kernels at the Range pass's shape: the trace's median beside ncu's one duration."""
    if not report.available:
        return []
    student = next(c for c in report.contenders if c.role == "student")
    rows = []
    for kernel in student.kernels:
        times = [s.duration_ms for s in slices if s.shape == label and s.kernel == kernel.kernel]
        if times and kernel.duration_ns:
            rows.append(TraceVsNcu(kernel.kernel, statistics.median(times), kernel.duration_ns / 1e6))
    return rows


def roofline_points(report: RangeReport | None) -> list[dict[str, Any]]:
    """Every contender's whole call, and each kernel of a several-kernel lab, as labelled points."""
    points: list[dict[str, Any]] = []
    for contender in report.contenders if report else []:
        if contender.point:
            points.append({"label": contender.label, **contender.point.to_json()})
        if len(contender.kernels) > 1:
            points += [
                {"label": f"{contender.label} {k.kernel}", **k.point.to_json()} for k in contender.kernels if k.point
            ]
    return points


def starter_contender(lab: Lab, arch: str) -> tuple[str, str, Submission]:
    """The lab's starter as the Range pass profiles it beside the student's kernel: (label, role, file)."""
    starter = display_path(lab.starter_path)
    return starter, "starter", load_submission(lab, lab.starter_path, starter, arch)


def append_range_summary(run: GradingRun, result: RunResult, arch: str, seed: int) -> None:
    """`grade --profile` and `bench --profile`: after a correct GPU run, the Range pass in one line."""
    lab, submission = run.lab, run.submission
    if result.backend != Backend.GPU or result.decisive_case is not None:
        run.reporter.note("--profile: no Range pass, since the kernel was not timed on the GPU")
        return
    label, rows, prefix = timing_shapes(lab)[-1]
    contenders = [(submission.label, "student", submission)]
    starter = lab.timing_strategy.baseline(lambda: starter_contender(lab, arch))
    if starter is not None:
        contenders.append(starter)
    report = range_pass(lab, contenders, RangeAt(label, rows, prefix, seed), None)
    result.profile = Profile(range=report)
    run.reporter.range_summary(report)
