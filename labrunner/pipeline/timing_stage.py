"""The driver's side of timing: what to time, the checked calls judged, the figures derived.

Only correct kernels get here (grading checks every case first). The worker times; this module
gives it, for every round, a secret key to the pool of input sets (`labrunner.truth.timing_sets`:
every timed call runs on a set of its own, made in the worker from the key and the set's
number), and checks every checked call's output against the oracle's reference of that very set,
made here from the same two numbers (a failed check means no time is reported at all). Every
figure is then held to what the GPU can do (`labrunner.measure.physics`: bytes no faster than the
same run's device copy, FLOPs no faster than the tensor cores); one past it means no time is
reported either. Then it turns medians into the figures the labs print: lab 1's cost table, lab 2's
SPEEDUP and TFLOP/s.

The references come from the oracle on the driver's own GPU (`labrunner.run.gpu_oracle`), which
proves itself first; the tests pass `CpuReferences`, the same definitions in numpy.
"""

from __future__ import annotations

import random
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeGuard

import numpy as np

from labrunner.compile.compiler_process import CompileLimits
from labrunner.compile.gate import Submission, load_submission
from labrunner.compile.module_cache import compiled_grader_file
from labrunner.exit_codes import AttnlabError, environment_error
from labrunner.labs.definition import Lab, Launch
from labrunner.labs.timing_strategy import TimingLayout
from labrunner.measure.device_state import clock_drop_warning
from labrunner.measure.gates import DEFAULT_COPY_FRACTION
from labrunner.measure.peers import SPECS as PEER_SPECS
from labrunner.measure.physics import Limits, impossible, limits
from labrunner.measure.sampling import TimingOptions, pool_rounds
from labrunner.measure.timed_runs import INPUT_SLOTS
from labrunner.measure.traffic import traffic
from labrunner.phases import phase
from labrunner.pipeline.grading_run import GradingRun
from labrunner.pipeline.prepare import display_path, load_module
from labrunner.pipeline.requests import RunRequest
from labrunner.records.roofline import GpuFacts
from labrunner.records.timing import (
    Bandwidth,
    Comparison,
    Conditions,
    CopyTimed,
    Peer,
    PipelineRow,
    PipelineTiming,
    Round,
    SpeedupTiming,
    Timing,
)
from labrunner.records.traffic import TrafficShape
from labrunner.report.results import CaseResult, RunResult
from labrunner.run.gpu_oracle import GpuOracle
from labrunner.run.replies import kernel_series, peer_row, round_comparison
from labrunner.run.untrusted_text import shown, shown_path
from labrunner.run.worker import Worker, WorkerFailure
from labrunner.truth import oracle
from labrunner.truth.checker import OutputCheck, check_output
from labrunner.truth.contract import HEAD_DIM, KV_HEADS, QUERY_HEADS
from labrunner.truth.timing_sets import KEY_BITS, make_set
from labrunner.truth.verdict import Status

MIB = 1024 * 1024
PROJECTED_SIZES = (4096, 32768)


class References(Protocol):
    """Where the references of checked timed calls come from: the driver's GPU, or numpy in the tests."""

    def reference(
        self, key: tuple[int, int], number: int, rows: int, prefix: int, layout: TimingLayout | None = None
    ) -> Any: ...  # a numpy array, or a CuPy one on the driver's GPU

    def check(self, out: np.ndarray, reference: Any) -> OutputCheck: ...

    def release(self) -> None: ...


class CpuReferences:
    """The numpy definition of each set and the CPU oracle: exact, and seconds per set at the timing shape."""

    def __init__(self, decode: bool = True) -> None:
        """Made as `gpu_references` is (it stands in for it); the CPU oracle judges decode batches anyway."""

    def reference(
        self, key: tuple[int, int], number: int, rows: int, prefix: int, layout: TimingLayout | None = None
    ) -> np.ndarray:
        given: TimingLayout = layout or {}
        pages = given.get("pages")
        s = make_set(key, number, rows, prefix, pages)
        if pages is not None:
            fixed = given["fixed"]
            return oracle.decode_attention(s["q"], s["k"], s["v"], fixed["blockTable"], fixed["seqLens"])
        return oracle.attention(s["q"], s["k"], s["v"], prefix=prefix)

    def check(self, out: np.ndarray, reference: np.ndarray) -> OutputCheck:
        return check_output(out, reference)

    def release(self) -> None:
        pass


@dataclass(frozen=True)
class TimedShape:
    """The one shape a comparison is timed at: a chunk of `rows` queries after `prefix` cached keys (lab 3:
    a batch of `rows` sequences, the longest of `prefix` keys). The launches, the input sets, the
    references and every figure are made at it, so the two numbers travel together."""

    rows: int
    prefix: int


@dataclass(frozen=True)
class DrawnSets:
    """The input sets one round drew: each made from the round's secret `key` and its own number at the
    timed `shape` (with the lab's `layout`: lab 3's paged cache), `count` of them. It is what the driver
    needs to make a checked call's reference again, and to refuse a record of a set never drawn."""

    key: list[int]
    count: int
    shape: TimedShape
    layout: TimingLayout | None = None


@dataclass(frozen=True)
class Contender:
    """A kernel in a comparison: the label its messages and figures name it by, with the constants its
    launches and workspace are planned from (each file's own geometry)."""

    label: str
    constants: dict[str, int]


@dataclass(frozen=True)
class PeerContender:
    """A PyTorch peer (`measure.peers`, by `name`) timed in a baseline kernel's place, checked first by
    `check_peer`: the worker runs it by name, and it has no constants, since it has no kernel of its own."""

    name: str
    label: str


@dataclass(frozen=True)
class Contenders:
    """Who a SPEEDUP compares, interleaved on the same fresh input sets: the student's kernel, and its
    baseline, a kernel or a PyTorch peer in its place. The student's is reported first wherever both fail."""

    student: Contender
    baseline: Contender | PeerContender


@dataclass(frozen=True)
class WholeCall:
    """What lab 1's timing times: the student's whole call, its launches planned from `constants`, and the
    PyTorch `peer` interleaved beside it at every size where one was asked for and passed `check_peer`."""

    constants: dict[str, int]
    peer: str | None = None


@dataclass(frozen=True)
class Sampling:
    """How a timing samples and what its checked calls are held to: the run's `seed`, the sampling's
    `options` (rounds, budgets, calls checked) and the `references` (None: the driver's GPU oracle, proven
    when the timing starts). Every timing takes the three, whatever it times.

    The seed seeds the cases and a paged cache's layout (the shape of the work), never the timed inputs:
    a seed may be public, and a kernel that knew its inputs could have their answers ready."""

    seed: int
    options: TimingOptions
    references: References | None = None


def gpu_references(decode: bool = True) -> References:
    """The driver's GPU oracle, proven; a GPU the driver cannot use is an environment error (exit 6).
    `decode`: it will judge decode batches too (lab 3), so its decode oracle is proven as well."""
    try:
        return GpuOracle(decode=decode)
    except AttnlabError:
        raise
    except Exception as exc:  # CuPy's own errors: no device for this process, out of memory, ...
        raise environment_error(
            f"the driver checks timed calls with the oracle on the GPU and could not use it ({type(exc).__name__}: "
            f"{exc}); a GPU in exclusive-process compute mode cannot serve the driver and the worker at once: "
            "`nvidia-smi -c DEFAULT` allows both"
        ) from None


def proven_gpu_references(decode: bool = True) -> References:
    """`gpu_references`, made here because no oracle was started ahead of the timing (bench, calibrate)."""
    with phase("GPU oracle and its proof"):
        return gpu_references(decode)


def new_key() -> list[int]:
    """A round's key to the pool of input sets, from the operating system's entropy: no kernel can know it."""
    draw = random.SystemRandom()
    return [draw.getrandbits(KEY_BITS), draw.getrandbits(KEY_BITS)]


def timing_budget_s(options: TimingOptions, things: int) -> float:
    """How long the worker may take before the driver calls it a hang: budgets plus compile and warm-up."""
    return 120.0 + things * 2.5 * options.budget_s


def verify_timed_outputs(
    case_name: str,
    contenders: dict[str, tuple[str, dict[str, Any]]],
    drawn: DrawnSets,
    references: References,
    minimum: int = 0,
) -> CaseResult | None:
    """Every checked call must match the oracle on its own input set; else a verdict, and no time.

    `contenders` maps who ("student", "baseline", "peer") to (the label a message names, the worker's
    `checked` record: set numbers and outputs). A set checked for both is made and referenced
    once. A student's failure is reported before a baseline's (or a peer's). A record that cannot be what the
    timing loop produced (fewer checked calls than `minimum`, a set twice, a set never drawn) is
    refused: a time is reported only for calls that were really checked.
    """
    rows, prefix, sets_drawn, layout = drawn.shape.rows, drawn.shape.prefix, drawn.count, drawn.layout
    by_set: dict[int, list[tuple[str, str, np.ndarray]]] = {}
    for who, (label, checked) in contenders.items():
        numbers, outputs = [int(n) for n in checked["sets"]], checked["outputs"]
        if (
            getattr(outputs, "shape", None) != (len(numbers), rows * QUERY_HEADS * HEAD_DIM)
            or len(numbers) < minimum
            or numbers != sorted(set(numbers))
            or any(not 0 <= n < sets_drawn for n in numbers)
        ):
            raise WorkerFailure(
                "error",
                f"the worker's record of {who}'s checked calls is not one the timing loop "
                f"makes ({len(numbers)} calls, at least {minimum}, each on its own set of "
                f"the {sets_drawn} drawn, each output {rows} x {QUERY_HEADS} x {HEAD_DIM}): "
                "no time is reported",
            )
        for number, out in zip(numbers, outputs):
            by_set.setdefault(int(number), []).append((who, label, out))
    baseline_failure = None
    pair = key_pair(drawn.key)
    for number in sorted(by_set):
        reference = (
            references.reference(pair, number, rows, prefix, layout)
            if layout
            else references.reference(pair, number, rows, prefix)
        )
        for who, label, out in by_set[number]:
            verdict = references.check(out.reshape(rows, QUERY_HEADS, HEAD_DIM), reference)
            if verdict.passed:
                continue
            failure = CaseResult(
                case_name,
                verdict.status,
                f"{label}: a timed call on fresh input set {number} (output re-poisoned) failed: "
                f"{verdict.message}; a kernel must compute every call, so no time is reported",
                rows,
                prefix,
                verdict.max_abs_err,
                verdict.bad_elements,
                verdict.first_bad,
                verdict.failing_rows,
            )
            if who not in ("baseline", "peer"):
                references.release()
                return failure
            baseline_failure = baseline_failure or failure
        del reference
    references.release()
    return baseline_failure


def key_pair(key: list[int]) -> tuple[int, int]:
    """A round's key (`new_key`: two words, as it crosses the wire) as the pair the references take."""
    first, second = key
    return first, second


def peer_record(name: str) -> dict[str, Any]:
    spec = PEER_SPECS[name]
    return {"name": spec.name, "label": spec.label, "includes": spec.includes}


def check_peer(
    name: str, worker: Worker, rows: int, prefix: int, references: References | None = None
) -> dict[str, Any]:
    """The peer `name` run once in the worker on a fresh input set at the timed shape, and held to the
    oracle before it is timed. Returns its record for the report: `status` "checked" (it may be
    timed), "missing" (no PyTorch, or none with CUDA), "wrong" (its output failed the pass rule) or
    "failed" (it raised or its worker died); the last three with `message`, one line."""
    record = peer_record(name)
    key = new_key()
    request = {
        "peer": name,
        "sets": {"key": key, "rows": rows, "prefix": prefix},
        "out_count": rows * QUERY_HEADS * HEAD_DIM,
    }
    try:
        reply = worker.check_peer(request, timing_budget_s(TimingOptions(budget_s=1.0), 1))
    except WorkerFailure as failure:
        return {
            **record,
            "status": "failed",
            "message": f"{record['label']} could not run ({failure.detail}); the bench goes on without it",
        }
    if not reply.get("available"):
        # words from the worker's process: shown, never interpreted, and cut to a line
        why = shown(reply["why"][:500]) if isinstance(reply.get("why"), str) else "no reason given"
        return {**record, "status": "missing", "message": f"--vs {name}: {why}; the bench goes on without the peer"}
    references = references or proven_gpu_references()
    checked = reply.get("checked")
    if not isinstance(checked, dict) or set(checked) != {"sets", "outputs"} or int(checked["sets"][0]) != 0:
        return {
            **record,
            "status": "failed",
            "message": f"{record['label']}: the worker's reply to its check is not "
            "one the check makes; the bench goes on without it",
        }
    number = int(checked["sets"][0])
    reference = references.reference(key_pair(key), number, rows, prefix)
    verdict = references.check(checked["outputs"][0].reshape(rows, QUERY_HEADS, HEAD_DIM), reference)
    references.release()
    if not verdict.passed:
        return {
            **record,
            "status": "wrong",
            "message": f"{record['label']} failed the oracle's check on a fresh input set: {verdict.message}; "
            "it is not timed",
        }
    return {**record, "status": "checked"}


def time_speedup(
    lab: Lab,
    worker: Worker,
    contenders: Contenders,
    shape: TimedShape,
    sampling: Sampling,
) -> tuple[SpeedupTiming | None, CaseResult | None]:
    """Student and baseline interleaved on the same fresh input sets, in `options.rounds` independent
    rounds (a fresh worker process and a fresh key each), pooled. Returns (timing, failure).
    A PyTorch peer in the baseline's place (`PeerContender`) has no kernel: no launches, no workspace.

    The run's seed (`sampling.seed`) seeds the cases, never the timed inputs: a seed may be public, and a
    kernel that knew its inputs could have their answers ready."""
    rows, prefix, seed, options = shape.rows, shape.prefix, sampling.seed, sampling.options
    student, versus = contenders.student, contenders.baseline
    student_label, baseline_label = student.label, versus.label
    references = sampling.references or proven_gpu_references()
    baseline_peer = versus.name if isinstance(versus, PeerContender) else None
    baseline = versus.constants if isinstance(versus, Contender) else None  # a peer: no kernel of its own
    launches: dict[str, list[Launch] | str] = {
        "student_launches": lab.plan_launches(student.constants, rows, prefix),
        "baseline_launches": [] if baseline is None else lab.plan_launches(baseline, rows, prefix),
    }
    if baseline_peer:
        launches["baseline_peer"] = baseline_peer
    # a workspace follows each file's own geometry (lab 3's partial buffers); a paged cache's layout is
    # made from the run's seed (the shape of the work), its values from each round's secret key
    workspaces = {
        "student_workspace": lab.workspace(student.constants, rows, prefix),
        "baseline_workspace": {} if baseline is None else lab.workspace(baseline, rows, prefix),
    }
    layout = lab.timing_layout(rows, prefix, seed)
    moved = lab.timing_strategy.must_move(rows, prefix, layout)  # a lab timed on bandwidth: its own bytes
    must = moved or attention_bytes_must_move(rows, prefix)
    replies: list[dict[str, Any]] = []
    for round_index in range(options.rounds):
        if round_index:
            worker.restart()
        # each round its own bootstrap seed (the checked calls are drawn from the system's entropy)
        round_options = replace(options, seed=options.seed + round_index)
        key = new_key()
        request = {
            "kind": "speedup",
            "sets": {"key": key, "rows": rows, "prefix": prefix, **layout},
            "options": asdict(round_options),
            "out_count": rows * QUERY_HEADS * HEAD_DIM,
            **launches,
            **{name: sizes for name, sizes in workspaces.items() if sizes},
            "copy_bytes": copy_bytes(must),
        }
        try:
            with phase("timed runs"):
                reply = worker.time(request, timing_budget_s(options, 2))
            with phase("timed calls checked"):
                failure = verify_timed_outputs(
                    f"timed C{rows}-P{prefix}",
                    {
                        "student": (student_label, reply["checked"]["student"]),
                        "baseline": (baseline_label, reply["checked"]["baseline"]),
                    },
                    DrawnSets(key, reply["sets_drawn"], shape, layout),
                    references,
                    options.min_verified,
                )
        except WorkerFailure as crash:
            return None, CaseResult(f"timed C{rows}-P{prefix}", crash.status, crash.detail, rows, prefix)
        if failure:
            return None, failure
        replies.append(reply)
    rounds = [round_comparison(reply) for reply in replies]
    comparison = pool_rounds(rounds, seed=options.seed)
    bounds = run_limits(replies)
    # each contender's fastest call over every round bounds every time the report shows of it; its
    # inputs come from memory (the flush), its output may still be in L2 when the end event is recorded
    for fastest, label in (
        (comparison.student_stats.min_ms, student_label),
        (comparison.baseline_stats.min_ms, baseline_label),
    ):
        problem = impossible(
            f"{label} at {lab.shape_label(rows, prefix)}",
            fastest,
            must,
            lab.flops(rows, prefix, layout),
            bounds,
            (rows * QUERY_HEADS * HEAD_DIM * 4,),
        )
        if problem:
            return None, CaseResult(f"timed C{rows}-P{prefix}", Status.WRONG, problem, rows, prefix)
    conditions = _common(replies[0], replies[-1])
    warnings = list(conditions.warnings)
    peer = None
    if baseline_peer:
        enqueue = max((reply["peer_enqueue"] for reply in replies), key=lambda e: e["median_ms"])
        peer = Peer(
            **peer_record(baseline_peer),
            status="timed",
            median_ms=comparison.baseline.median_ms,
            speedup=comparison.speedup,
            ci_low=comparison.ci_low,
            ci_high=comparison.ci_high,
            enqueue=enqueue,
        )
        warnings += head_start_warning(peer.label, enqueue)
    warnings += [w for w in (comparison.student.warning, comparison.baseline.warning) if w]
    timing = SpeedupTiming(
        rows=rows,
        prefix=prefix,
        gflop=lab.flops(rows, prefix, layout) / 1e9,
        student_label=student_label,
        baseline_label=baseline_label,
        comparison=comparison,
        rounds=[
            Round(
                r.speedup,
                r.ci_low,
                r.ci_high,
                r.student.median_ms,
                r.baseline.median_ms,
                per_input_set_medians(r.student_stats.samples_ms, INPUT_SLOTS),
                per_input_set_medians(r.baseline_stats.samples_ms, INPUT_SLOTS),
            )
            for r in rounds
        ],
        verified_calls={
            who: sum(len(reply["checked"][who]["sets"]) for reply in replies) for who in ("student", "baseline")
        },
        input_sets=sum(reply["sets_drawn"] for reply in replies),
        oracle_proof=getattr(references, "proof", None),
        physics=bounds.to_json(),
        conditions=replace(conditions, warnings=warnings),
        peer=peer,
        bandwidth=bandwidth_figures(moved, comparison, replies) if moved else None,
    )
    return timing, None


# A device-to-device copy of this many bytes (read once, written once), timed in every timing, sets the
# bandwidth every figure is held to (`measure.physics`), lab 1's floor and lab 3's fraction: at least
# 1 GiB, far past any L2, and no more than the call itself moves.
MIN_COPY_BYTES = 1 << 30


def copy_bytes(moved: int) -> int:
    return max(MIN_COPY_BYTES, moved // 2) // 256 * 256


def attention_bytes_must_move(rows: int, prefix: int) -> int:
    """What any attention call must move at the least: Q, K and V read once, the output written once
    (the lesson's flash traffic, `measure.traffic`): the score matrix need never reach memory."""
    return traffic(TrafficShape(rows=rows, keys=prefix + rows)).flash_bytes


def run_limits(replies: list[dict[str, Any]]) -> Limits:
    """What one timing's figures are held to, from its workers' replies: the fastest device copy among
    them, their GPU's L2 and its tensor-core peak (`measure.physics`)."""
    facts: GpuFacts | None = replies[0].get("gpu_facts")  # None where the reply has none: `limits` reads it as unknown
    return limits(
        [reply["copy"] for reply in replies if reply.get("copy")],
        max(reply.get("l2_bytes", 0) for reply in replies),
        facts,
    )


def bandwidth_figures(moved: int, comparison: Comparison, replies: list[dict[str, Any]]) -> Bandwidth:
    """Bytes that must move, each contender's achieved TB/s, and the same run's device copy: its TB/s
    (the best round's, each byte read and written counted) and the fraction of it the student reached."""
    copies = [CopyTimed(reply["copy"]["bytes"], reply["copy"]["stats"]["median_ms"]) for reply in replies]
    return Bandwidth.measured(moved, comparison, copies)


def head_start_warning(label: str, enqueue: dict[str, Any], where: str = "") -> list[str]:
    """A peer's host took longer to queue a call than the GPU waited for it: its time then holds host
    overhead, which the student's kernel's does not. Said with the numbers; nothing is corrected."""
    if enqueue["head_start_ms"] <= 0 or enqueue["median_ms"] <= enqueue["head_start_ms"]:
        return []
    return [
        f"{where}{label}: PyTorch took {enqueue['median_ms']:.3f} ms (median) to queue a call, more than the "
        f"{enqueue['head_start_ms']:.3f} ms head start the GPU gave it: its time includes host overhead"
    ]


def per_input_set_medians(samples_ms: list[float], n_inputs: int) -> list[float]:
    """The median time in each input slot (sample k ran in slot k % n_inputs): a slot whose buffers
    landed somewhere slower shows up here, where the overall median hides it."""
    return [float(np.median(samples_ms[i::n_inputs])) for i in range(n_inputs) if samples_ms[i::n_inputs]]


def time_pipeline(
    lab: Lab,
    worker: Worker,
    call: WholeCall,
    sizes: list[int],
    sampling: Sampling,
) -> tuple[PipelineTiming | None, CaseResult | None]:
    """The whole call at every size, each kernel timed inside it, every call on a fresh input set: lab 1's
    cost table. With the call's `peer` (checked first by `check_peer`), the whole call and the peer are
    interleaved at each size. (The seed, as in `time_speedup`, does not pick the timed inputs.)"""
    constants, peer, options = call.constants, call.peer, sampling.options
    references = sampling.references or proven_gpu_references()
    size_requests: list[dict[str, Any]] = [  # JSON for the worker, one a size
        {
            "T": t,
            "sets": {"key": new_key(), "rows": t, "prefix": 0},
            "launches": lab.plan_launches(constants, t, 0),
            "workspace": lab.workspace(constants, t, 0),
            "out_count": t * QUERY_HEADS * HEAD_DIM,
        }
        for t in sizes
    ]
    # the device copy timed in the same worker: the floor's bandwidth, and what every figure is held to
    request: dict[str, Any] = {
        "kind": "pipeline",
        "sizes": size_requests,
        "options": asdict(options),
        "copy_bytes": copy_bytes(sum(bytes_each_kernel_must_move(max(sizes)).values())),
    }
    if peer:
        request["peer"] = peer
    try:
        with phase("timed runs"):
            reply = worker.time(request, timing_budget_s(options, 4 * len(sizes)))
        bounds = run_limits([reply])
        rows = []
        for size, measured in zip(size_requests, reply["sizes"]):
            t = size["T"]
            contenders = {"pipeline": ("the pipeline", measured["checked"])}
            if peer:
                contenders["peer"] = (PEER_SPECS[peer].label, measured["checked_peer"])
            failure = verify_timed_outputs(
                f"timed T{t}",
                contenders,
                DrawnSets(size["sets"]["key"], measured["sets_drawn"], TimedShape(t, 0)),
                references,
                options.min_verified,
            )
            if failure:
                return None, failure
            problem = pipeline_problem(lab, t, measured, bounds, PEER_SPECS[peer].label if peer else None)
            if problem:
                return None, CaseResult(f"timed T{t}", Status.WRONG, problem, t, 0)
            row = pipeline_row(t, measured["stats"], copy_bandwidth(reply))
            if peer:
                versus = measured["peer"]
                row = row.with_peer(peer_row(versus))
            rows.append(row)
    except WorkerFailure as failure:
        return None, CaseResult("timed pipeline", failure.status, failure.detail, sizes[-1], 0)
    conditions = _common(reply, reply)
    warnings = list(conditions.warnings)
    if peer:
        for row in rows:
            if row.peer is not None:
                warnings += head_start_warning(PEER_SPECS[peer].label, row.peer.enqueue, f"T={row.t} ")
    for row in rows:
        warnings += [f"T={row.t} {name}: {s.warning}" for name, s in row.series().items() if s.warning]
    timing = PipelineTiming(
        rows=rows,
        projections=[pipeline_row(t, None) for t in PROJECTED_SIZES],
        input_sets=sum(m["sets_drawn"] for m in reply["sizes"]),
        oracle_proof=getattr(references, "proof", None),
        physics=bounds.to_json(),
        conditions=replace(conditions, warnings=warnings),
        peer=Peer(**peer_record(peer), status="timed") if peer else None,
    )
    return timing, None


def bytes_each_kernel_must_move(t: int) -> dict[str, int]:
    """What lab 1's contract makes each kernel move at T tokens, however it is written: the scores
    kernel reads Q and K and writes the visible (causal) half of the matrix, the softmax reads that
    half and writes every row whole (zeros past the diagonal), the weighted sum reads the visible half
    and V and writes the output. Above the diagonal the scores are left to the softmax (the stage check
    ignores them), so nothing else has to cross the memory bus."""
    visible = QUERY_HEADS * (t * (t + 1) // 2) * 4
    whole = QUERY_HEADS * t * t * 4
    q = out = t * QUERY_HEADS * HEAD_DIM * 4
    k = v = t * KV_HEADS * HEAD_DIM * 4
    return {"attn_scores": q + k + visible, "attn_softmax": visible + whole, "attn_weighted_sum": visible + v + out}


def pipeline_problem(lab: Lab, t: int, measured: dict[str, Any], bounds: Limits, peer_label: str | None) -> str | None:
    """Lab 1 at T tokens against physics: each kernel, the whole call and the peer, the first past it.

    The whole call's bytes count the score matrix between the kernels, so it may be spared what
    each of them may (`l2_parts_each_kernel`). The peer is held to what any attention must move."""
    must, parts = bytes_each_kernel_must_move(t), l2_parts_each_kernel(t)
    flops = lab.flops(t, 0, {})
    stats = measured["stats"]
    kernels = [name for name in stats if name != "total"]
    figures = [
        (
            f"{name} at T={t}",
            stats[name],
            must.get(name, 0),
            flops * lab.flop_shares.get(name, 0.0),
            parts.get(name, ()),
        )
        for name in kernels
    ]
    figures.append(
        (
            f"the whole call at T={t}",
            stats["total"],
            sum(must.get(name, 0) for name in kernels),
            flops,
            tuple(part for name in kernels for part in parts.get(name, ())),
        )
    )
    if "peer" in measured:
        figures.append(
            (
                f"{peer_label} at T={t}",
                measured["peer"]["stats"],
                attention_bytes_must_move(t, 0),
                flops,
                (t * QUERY_HEADS * HEAD_DIM * 4,),
            )
        )
    for what, figure, moved, work, spared in figures:
        problem = impossible(what, figure["min_ms"], moved, work, bounds, spared)
        if problem:
            return problem
    return None


def l2_parts_each_kernel(t: int) -> dict[str, tuple[int, ...]]:
    """The parts of each lab-1 kernel's bytes that L2 may hold instead of the memory (`physics.impossible`).

    The call starts cold (the flush before it), so the scores kernel reads Q and K from memory; what
    it writes may still be in L2 when its end event is recorded. Each later kernel may find in L2 what
    the one before it wrote last, and may leave its own writes there."""
    visible = QUERY_HEADS * (t * (t + 1) // 2) * 4
    whole = QUERY_HEADS * t * t * 4
    out = t * QUERY_HEADS * HEAD_DIM * 4
    return {"attn_scores": (visible,), "attn_softmax": (visible, whole), "attn_weighted_sum": (visible, out)}


def pipeline_row(t: int, stats: dict[str, Any] | None, copy_bytes_per_s: float | None = None) -> PipelineRow:
    """The cost of lab 1's matrix at T tokens (`PipelineRow`): sizes always; times where measured (`stats`,
    the worker's series by kernel and "total"); against the floor (the bytes the kernels must move at this
    run's device-copy bandwidth) where a copy was timed."""
    if stats is None:
        return PipelineRow.at(t)
    return PipelineRow.at(t, kernel_series(stats), bytes_each_kernel_must_move(t), copy_bytes_per_s)


def copy_bandwidth(reply: dict[str, Any]) -> float | None:
    """Bytes per second of the device copy timed in the same worker, counting each byte read and
    written (a copy of N bytes moves 2N); None where the reply has none."""
    copy = reply.get("copy")
    if not copy:
        return None
    return float(2 * copy["bytes"] / (copy["stats"]["median_ms"] * 1e-3))


def _common(first: dict[str, Any], last: dict[str, Any]) -> Conditions:
    """What every timing reports about its conditions: from the first reply's start to the last reply's end."""
    before, after = first["state_before"], last["state_after"]
    drop = clock_drop_warning(before.get("sm_clock_mhz"), after.get("sm_clock_mhz"))
    return Conditions(
        overhead_ms=first["overhead"]["median_ms"],
        device_before=before,
        device_after=after,
        l2_flush_bytes=first["l2_flush_bytes"],
        warnings=[drop] if drop else [],
    )


@dataclass(frozen=True)
class TimingAsk:
    """How a correct kernel is to be timed, as its command asks: the run's seed and the sampling's options,
    the baseline file (or the lab's `peer`) it is timed against, the shape where `chunk` and `prefix` set
    one, the compile of a baseline (`arch`, `limits`), the GPU's proven references, and the starter where
    it is already being compiled (`compile_starter_ahead`)."""

    seed: int
    options: TimingOptions
    arch: str
    baseline: Path | None = None
    chunk: int | None = None
    prefix: int | None = None
    limits: CompileLimits = CompileLimits()
    peer: str | None = None
    references: References | None = None
    starter: Future[Submission] | None = None

    @classmethod
    def of(cls, request: RunRequest, seed: int, **given: Any) -> TimingAsk:
        """What the request says of its timing, with `given` (the baseline, the peer, what was made ahead)."""
        return cls(
            seed=seed,
            options=request.timing_options(seed),
            arch=request.arch,
            chunk=getattr(request, "chunk", None),
            prefix=getattr(request, "prefix", None),
            limits=request.compile_limits,
            **given,
        )

    @property
    def sampling(self) -> Sampling:
        """The seed, the sampling's options and the references: what every timing takes of the ask."""
        return Sampling(self.seed, self.options, self.references)


def run_lab_timing(run: GradingRun, result: RunResult, ask: TimingAsk) -> None:
    """Time a correct kernel as its lab's timing strategy says (`TimingStrategy.time`): the whole call at
    fixed sizes, or against a baseline kernel (or the lab's peer) at one shape, the catalogue's unless the
    ask's `chunk` and `prefix` say."""
    lab = run.lab
    lab.timing_strategy.time(LabTimings(run, result, ask), lab.catalogue.timing, ask.chunk, ask.prefix)


@dataclass(frozen=True)
class LabTimings:
    """The driver's two timings of one run, as a lab's timing strategy picks them (`labs.timing_strategy.
    Timings`): each checks the lab's peer where the ask names one, says what it times, times, and records
    the timing (or the failure) in `result`."""

    run: GradingRun
    result: RunResult
    ask: TimingAsk

    def whole_call(self, sizes: list[int]) -> None:
        run, ask = self.run, self.ask
        checked = peer_checked(run, sizes[0], 0, ask)
        run.reporter.note(
            "timing the pipeline at "
            + ", ".join(run.lab.timing_strategy.shape_label(t, 0) for t in sizes)
            + (f", interleaved with {checked['label']}" if ready(checked) else "")
        )
        call = WholeCall(run.submission.constants, ask.peer if ready(checked) else None)
        timing, failure = time_pipeline(run.lab, run.worker, call, sizes, ask.sampling)
        finish_timing(run, self.result, timing, failure, checked)

    def against_baseline(self, rows: int, prefix: int) -> None:
        run, ask = self.run, self.ask
        lab, submission, options = run.lab, run.submission, ask.options
        shape = TimedShape(rows, prefix)
        checked = peer_checked(run, rows, prefix, ask)
        rounds = f", {options.rounds} rounds in fresh worker processes" if options.rounds > 1 else ""
        student = Contender(submission.label, submission.constants)
        if ready(checked) and ask.peer is not None:
            run.reporter.note(
                f"timing {submission.label} against {checked['label']} at "
                f"{lab.timing_strategy.shape_in_note(rows, prefix)}, interleaved{rounds}"
            )
            peer = PeerContender(ask.peer, checked["label"])
            timing, failure = time_speedup(lab, run.worker, Contenders(student, peer), shape, ask.sampling)
            finish_timing(run, self.result, timing, failure, checked)
            return
        baseline = ask.baseline or lab.starter_path  # a peer that cannot be timed leaves the starter in its place
        with phase("compile starter"):
            if ask.starter is not None and baseline == lab.starter_path:
                base = ask.starter.result()  # compiled while the cases ran (`compile_starter_ahead`)
            else:
                base = compile_baseline(lab, baseline, ask.arch, ask.limits)
        load_module(run.worker, lab, "baseline", base)
        note_shape = lab.timing_strategy.shape_in_note(rows, prefix)
        run.reporter.note(f"timing {submission.label} against {base.label} at {note_shape}, interleaved{rounds}")
        contenders = Contenders(student, Contender(base.label, base.constants))
        speedup, failure = time_speedup(lab, run.worker, contenders, shape, ask.sampling)
        if speedup is not None:
            speedup = speedup.with_required_fraction(lab.catalogue.timing.get("copy_fraction", DEFAULT_COPY_FRACTION))
        finish_timing(run, self.result, speedup, failure, checked)


def compile_starter_ahead(lab: Lab, arch: str, limits: CompileLimits = CompileLimits()) -> Future[Submission]:
    """The lab's starter through the compile gate, in a thread, while the cases run: the timing's
    baseline is then ready when a correct file reaches it (a fifth of a second off lab 2's grade). The
    starter is the grader's own file, compiled in the same box as on the timing's own path; where the
    file is wrong and never timed, its result is simply not used."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnlab-starter")

    def compiled() -> Submission:
        with phase("compile starter"):
            return compile_baseline(lab, lab.starter_path, arch, limits)

    made = pool.submit(compiled)
    pool.shutdown(wait=False)
    return made


def compile_baseline(lab: Lab, path: Path, arch: str, limits: CompileLimits) -> Submission:
    """A baseline file through the compile gate, named in messages as the user would write it. A `.cu`
    file the lab ships (its starter, the usual baseline) is compiled once and kept in the grader's cache
    (`compile/module_cache.py`); any other is compiled every time."""
    label = shown_path(display_path(path))
    if not is_shipped_kernel(lab, path):
        return load_submission(lab, path, label, arch, limits)
    return compiled_grader_file(path, label, arch, lambda: load_submission(lab, path, label, arch, limits))


def is_shipped_kernel(lab: Lab, path: Path) -> bool:
    """Whether `path` is a `.cu` file of the lab's own kernel folder (never a student's file)."""
    try:
        return path.suffix == ".cu" and path.resolve().parent == lab.kernel_folder.resolve() and path.is_file()
    except OSError:
        return False


def peer_checked(run: GradingRun, rows: int, prefix: int, ask: TimingAsk) -> dict[str, Any] | None:
    """The peer's record after its check before timing (`check_peer` above); one line where it is
    not timed (a note where PyTorch is missing, an error where it ran and failed), kept in the run's notes."""
    if ask.peer is None:
        return None
    checked = check_peer(ask.peer, run.worker, rows, prefix, ask.references)
    if not ready(checked):
        if checked["status"] == "missing":
            run.reporter.note(checked["message"])
        else:
            run.reporter.error(checked["message"])
            run.reporter.recorded(checked["message"])
    return checked


def ready(checked: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """A peer's record (`check_peer`) that says it may be timed: there is one, and its check passed."""
    return checked is not None and checked["status"] == "checked"


def finish_timing(
    run: GradingRun,
    result: RunResult,
    timing: Timing | None,
    failure: CaseResult | None,
    checked: dict[str, Any] | None,
) -> None:
    if failure:
        result.cases.append(failure)
        run.reporter.error(f"{failure.name}: {failure.message}")
    if timing is not None and checked is not None and timing.peer is None:
        # a peer that was asked for and not timed: the record says why
        timing = timing.with_peer(Peer(**checked))
    result.timing = timing
