"""The driver's side of timing: what to time, the verified calls checked, the figures derived.

Only correct kernels get here (grading checks every case first). The worker times; this module
sends it fresh input sets, checks every verified call's output against the oracle (a failed
check means no time is reported at all), and turns medians into the figures the labs print:
lab 1's cost table, lab 2's SPEEDUP and TFLOP/s.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, replace

import numpy as np

from labrunner.labs.definition import Lab
from labrunner.measure.device_state import clock_drop_warning
from labrunner.measure.timing import TimingOptions, comparison_from_json, pool_rounds
from labrunner.report.results import CaseResult
from labrunner.run.worker import Worker, WorkerFailure
from labrunner.truth import oracle
from labrunner.truth.cases import random_inputs
from labrunner.truth.check import check_output
from labrunner.truth.contract import HEAD_DIM, KV_HEADS, QUERY_HEADS
from labrunner.truth.poison import never_written

TIMING_INPUT_SETS = 3
MIB = 1024 * 1024
PROJECTED_SIZES = (4096, 32768)


def attention_flops(rows: int, prefix: int) -> float:
    """4 * 64 FLOPs per visible (query, key) pair per query head: QK^T and PV, a multiply and an add each."""
    visible_pairs = rows * prefix + rows * (rows + 1) // 2
    return 4.0 * HEAD_DIM * visible_pairs * QUERY_HEADS


def timing_inputs(seed: int, rows: int, prefix: int, count: int = TIMING_INPUT_SETS) -> list[dict]:
    """Fresh inputs for timed calls, never the correctness cases' own (a replayed answer must fail)."""
    sets = []
    for index in range(count):
        rng = np.random.default_rng([seed, zlib.crc32(b"timing"), rows, prefix, index])
        inputs = random_inputs(rng, rows, prefix)
        sets.append({"q": inputs.q, "k": inputs.k, "v": inputs.v})
    return sets


def timing_budget_s(options: TimingOptions, things: int) -> float:
    """How long the worker may take before the driver calls it a hang: budgets plus compile and warm-up."""
    return 120.0 + things * 2.5 * options.budget_s


def verify_timed_outputs(case_name: str, who: str, verified: list, input_sets: list[dict], rows: int, prefix: int,
                         references: dict[int, np.ndarray]) -> CaseResult | None:
    """Every verified call must match the oracle on its input set, V scaled by the call's factor; else a verdict.

    The factor is divided out of the output and the rest is held to the same pass rule as every
    case; the factor's own rounding (about 1e-7 relative) is far inside it.
    """
    for input_index, factor, out in verified:
        if input_index not in references:
            s = input_sets[input_index]
            references[input_index] = oracle.attention(s["q"], s["k"], s["v"], prefix=prefix)
        checked = check_output(divide_out(out, factor).reshape(rows, QUERY_HEADS, HEAD_DIM), references[input_index])
        if not checked.passed:
            return CaseResult(case_name, checked.status,
                              f"{who}: a timed call on fresh input set {input_index} (V scaled by {factor:.4g}, "
                              f"output re-poisoned) failed: {checked.message}; a kernel must compute every call, "
                              "so no time is reported",
                              rows, prefix, checked.max_abs_err, checked.bad_elements, checked.first_bad,
                              checked.failing_rows)
    return None


def divide_out(out: np.ndarray, factor: float) -> np.ndarray:
    """`out / factor`, where an element still holding the poison keeps it bit for bit (a NaN's payload
    need not survive arithmetic, and it is how an unwritten element is told apart)."""
    restored = (out / np.float64(factor)).astype(np.float32)
    unwritten = never_written(out)
    restored[unwritten] = out[unwritten]
    return restored


def time_speedup(lab: Lab, worker: Worker, student_constants: dict, baseline_constants: dict,
                 rows: int, prefix: int, seed: int, options: TimingOptions,
                 student_label: str, baseline_label: str) -> tuple[dict | None, CaseResult | None]:
    """Student and baseline interleaved on the same input sets, in `options.rounds` independent
    rounds (a fresh worker process each), pooled. Returns (timing, failure)."""
    input_sets = timing_inputs(seed, rows, prefix)
    launches = {"student_launches": lab.plan_launches(student_constants, rows, prefix),
                "baseline_launches": lab.plan_launches(baseline_constants, rows, prefix)}
    references: dict[int, np.ndarray] = {}
    replies = []
    for round_index in range(options.rounds):
        if round_index:
            worker.restart()
        # each round draws its own verification schedule
        round_options = replace(options, seed=options.seed + round_index)
        request = {"kind": "speedup", "input_sets": input_sets, "options": asdict(round_options),
                   "out_count": rows * QUERY_HEADS * HEAD_DIM, **launches}
        try:
            reply = worker.time(request, timing_budget_s(options, 2))
        except WorkerFailure as failure:
            return None, CaseResult(f"timed C{rows}-P{prefix}", failure.status, failure.detail, rows, prefix)
        for who, label in (("student", student_label), ("baseline", baseline_label)):
            failure = verify_timed_outputs(f"timed C{rows}-P{prefix}", label, reply["verified"][who], input_sets,
                                           rows, prefix, references)
            if failure:
                return None, failure
        replies.append(reply)
    rounds = [comparison_from_json(reply["comparison"]) for reply in replies]
    comparison = pool_rounds(rounds, seed=options.seed).to_json()
    timing = {
        "kind": "speedup", "rows": rows, "prefix": prefix, "gflop": attention_flops(rows, prefix) / 1e9,
        "student_label": student_label, "baseline_label": baseline_label, "comparison": comparison,
        "speedup": comparison["speedup"],
        "rounds": [{"speedup": r.speedup, "ci_low": r.ci_low, "ci_high": r.ci_high,
                    "student_median_ms": r.student.median_ms, "baseline_median_ms": r.baseline.median_ms,
                    "student_per_input_set_ms": per_input_set_medians(r.student.samples_ms, len(input_sets)),
                    "baseline_per_input_set_ms": per_input_set_medians(r.baseline.samples_ms, len(input_sets))}
                   for r in rounds],
        "verified_calls": {who: sum(len(reply["verified"][who]) for reply in replies)
                           for who in ("student", "baseline")},
        **_common(replies[0], replies[-1]),
    }
    timing["warnings"] += [w for w in (comparison["student"].get("warning"), comparison["baseline"].get("warning")) if w]
    return timing, None


def per_input_set_medians(samples_ms: list[float], n_inputs: int) -> list[float]:
    """The median time on each input set (sample k ran on set k % n_inputs): a set whose buffers
    landed somewhere slower shows up here, where the overall median hides it."""
    return [float(np.median(samples_ms[i::n_inputs])) for i in range(n_inputs) if samples_ms[i::n_inputs]]


def time_pipeline(lab: Lab, worker: Worker, constants: dict, sizes: list[int], seed: int,
                  options: TimingOptions) -> tuple[dict | None, CaseResult | None]:
    """Each kernel alone and the whole call at every size: lab 1's cost table."""
    size_requests = []
    for t in sizes:
        input_sets = timing_inputs(seed, t, 0, count=2)
        size_requests.append({"T": t, "input_sets": input_sets, "launches": lab.plan_launches(constants, t, 0),
                              "workspace": lab.workspace(t, 0), "out_count": t * QUERY_HEADS * HEAD_DIM})
    request = {"kind": "pipeline", "sizes": size_requests, "options": asdict(options)}
    try:
        reply = worker.time(request, timing_budget_s(options, 4 * len(sizes)))
    except WorkerFailure as failure:
        return None, CaseResult("timed pipeline", failure.status, failure.detail, sizes[-1], 0)
    rows = []
    for size, measured in zip(size_requests, reply["sizes"]):
        t = size["T"]
        failure = verify_timed_outputs(f"timed T{t}", "the pipeline", measured["verified"], size["input_sets"], t, 0, {})
        if failure:
            return None, failure
        rows.append(pipeline_row(t, measured["stats"]))
    timing = {"kind": "pipeline", "rows": rows, "projections": [pipeline_row(t, None) for t in PROJECTED_SIZES],
              **_common(reply, reply)}
    for row in rows:
        timing["warnings"] += [f"T={row['T']} {name}: {stats['warning']}" for name, stats in
                               {**row["kernels"], "total": row["total"]}.items() if stats.get("warning")]
    return timing, None


def pipeline_row(t: int, stats: dict | None) -> dict:
    """The cost of lab 1's matrix at T tokens: sizes always; times where measured."""
    matrix_bytes = QUERY_HEADS * t * t * 4
    tensor_bytes = (2 * t * QUERY_HEADS * HEAD_DIM + 2 * t * KV_HEADS * HEAD_DIM) * 4  # q, out, k, v
    traffic = 4 * matrix_bytes  # scores writes it; softmax reads and writes it; the weighted sum reads it
    row = {"T": t, "matrix_mib": matrix_bytes / MIB, "tensors_mib": tensor_bytes / MIB,
           "matrix_over_tensors": matrix_bytes / tensor_bytes, "matrix_traffic_mib": traffic / MIB,
           "projected": stats is None}
    if stats is not None:
        row["kernels"] = {k: v for k, v in stats.items() if k != "total"}
        row["total"] = stats["total"]
        row["implied_gb_s"] = traffic / (stats["total"]["median_ms"] * 1e-3) / 1e9
    return row


def _common(first: dict, last: dict) -> dict:
    """What every timing reports about its conditions: from the first reply's start to the last reply's end."""
    before, after = first["state_before"], last["state_after"]
    warnings = []
    drop = clock_drop_warning(before.get("sm_clock_mhz"), after.get("sm_clock_mhz"))
    if drop:
        warnings.append(drop)
    return {"overhead_ms": first["overhead"]["median_ms"], "device_before": before, "device_after": after,
            "l2_flush_bytes": first["l2_flush_bytes"], "warnings": warnings}
