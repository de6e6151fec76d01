"""The records results travel in: each built as its producer builds it, with realistic figures; its JSON
checked against the schema (result-1.json) and key by key; every figure it derives checked exactly; and,
where a reader holds only the JSON, read back to the same record."""

from __future__ import annotations

import pytest
from result_schema import validate_result

from labrunner.compile.nvrtc import KernelResources
from labrunner.measure.device_state import DeviceState
from labrunner.measure.gates import SCHEMA as GATES_SCHEMA
from labrunner.measure.gates import apply_bandwidth_gate, apply_gate, write_gate
from labrunner.measure.roofline import Point, ceilings_from_facts
from labrunner.measure.trace import CUPTI_MISSING
from labrunner.measure.traffic import traffic
from labrunner.pipeline.batch.submission import SubmissionTask, dead_result
from labrunner.records.compile import CompileSummary
from labrunner.records.device import CPU_NAME, DeviceFacts
from labrunner.records.gate import Gate
from labrunner.records.kernel_slice import KernelSlice
from labrunner.records.profile import (
    KernelMetrics,
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
from labrunner.records.roofline import RooflinePoint
from labrunner.records.timing import Bandwidth, Comparison, Series, SpeedupTiming
from labrunner.records.traffic import TrafficShape
from labrunner.report.batch_row import BatchRow
from labrunner.report.results import CaseResult, RunResult

H200 = DeviceState(
    name="NVIDIA H200",
    driver="13.0",
    cuda_runtime="13.0",
    cupy_version="13.6.0",
    sm_clock_mhz=1980,
    temperature_c=41,
    driver_release="580.65.06",
    pci_bus_id="0000:19:00.0",
)
H200_FACTS = {
    "name": "NVIDIA H200",
    "compute_capability": [9, 0],
    "sm_count": 132,
    "max_sm_clock_mhz": 1980,
    "max_memory_clock_mhz": 2619,
    "memory_bus_width_bits": 6144,
    "measured_copy_bytes_per_s": None,
}


def passed_case() -> CaseResult:
    return CaseResult("C17-P31", "pass", "all 17408 elements within the pass rule", 17, 31, max_abs_err=2.4e-7)


def valid(result: RunResult) -> dict:
    return validate_result(result.to_json())


# --- the compile gate's summary -------------------------------------------------------------------


def test_a_compile_summary_writes_its_kernels_and_constants_and_says_where_each_constant_came_from():
    summary = CompileSummary(
        arch="sm_90",
        nvrtc="13.0",
        entry_points={"flash_prefill": ["u64", "u64", "u64", "u64", "u32", "u32"]},
        constants={"attnlab_block_rows": 64, "attnlab_threads": 128},
        exported={"attnlab_block_rows": 64},
        resources={"flash_prefill": KernelResources(96, 16384, 0, 0, 0)},
        warnings=['attention.cu(12): warning: variable "x" was declared but never referenced'],
    )
    assert summary.to_json() == {
        "arch": "sm_90",
        "nvrtc": "13.0",
        "entry_points": {"flash_prefill": ["u64", "u64", "u64", "u64", "u32", "u32"]},
        "constants": {"attnlab_block_rows": 64, "attnlab_threads": 128},
        "exported": {"attnlab_block_rows": 64},
        "resources": {
            "flash_prefill": {
                "registers": 96,
                "shared_bytes": 16384,
                "stack_bytes": 0,
                "spill_stores": 0,
                "spill_loads": 0,
            }
        },
        "warnings": ['attention.cu(12): warning: variable "x" was declared but never referenced'],
    }
    assert [summary.constant_source(name) for name in summary.constants] == ["file", "default"]
    assert CompileSummary.from_json(summary.to_json()) == summary
    assert valid(RunResult("check", "lab2", "flash.cu", compile=summary))["compile"] == summary.to_json()


# --- the device -------------------------------------------------------------------------------------


def test_a_gpus_facts_are_its_whole_snapshot_and_the_cpus_only_its_name():
    gpu = DeviceFacts.of_gpu(H200)
    assert gpu.to_json() == {
        "name": "NVIDIA H200",
        "driver": "13.0",
        "cuda_runtime": "13.0",
        "cupy_version": "13.6.0",
        "sm_clock_mhz": 1980,
        "temperature_c": 41,
        "driver_release": "580.65.06",
        "pci_bus_id": "0000:19:00.0",
    }
    assert list(gpu.to_json().items()) == list(H200.to_json().items())  # the snapshot's own keys, in its order
    assert DeviceFacts.cpu().to_json() == {"name": "CPU (attnlab's fiber backend)"} == {"name": CPU_NAME}
    assert DeviceFacts.from_json(gpu.to_json()) == gpu
    assert DeviceFacts.from_json(DeviceFacts.cpu().to_json()) == DeviceFacts.cpu()
    data = valid(RunResult("grade", "lab2", "flash.cu", backend="gpu", device=gpu, cases=[passed_case()]))
    assert (data["device"], data["gpu"]) == (gpu.to_json(), "NVIDIA H200")
    data = valid(RunResult("grade", "lab2", "flash.cu", backend="cpu", device=DeviceFacts.cpu()))
    assert (data["device"], data["gpu"]) == ({"name": CPU_NAME}, None)


# --- the speed gate -----------------------------------------------------------------------------------


GATES = {"schema": GATES_SCHEMA, "lab2": {"NVIDIA H200": {"solution_speedup": 13.0, "fraction": 0.5}}}


@pytest.mark.parametrize(
    ("decided", "keys", "verdict", "exit_code"),
    [
        (
            apply_gate(GATES, "lab2", "NVIDIA H200", 7.1).to_json(),
            ["status", "passed", "required_speedup", "speedup", "message"],
            "pass",
            0,
        ),
        (
            apply_gate(GATES, "lab2", "NVIDIA H200", 3.1).to_json(),
            ["status", "passed", "required_speedup", "speedup", "message"],
            "speed-gate",
            5,
        ),
        (apply_gate(GATES, "lab2", "NVIDIA H100", 3.1).to_json(), ["status", "passed", "message"], "pass", 0),
        (
            apply_bandwidth_gate(
                Bandwidth(0, student_tb_s=3.4, baseline_tb_s=0.0, copy_tb_s=4.0, copy=[], required_fraction=0.8),
                "NVIDIA H200",
            ).to_json(),
            ["status", "passed", "required_fraction", "copy_fraction", "message"],
            "pass",
            0,
        ),
    ],
    ids=["met", "missed", "no-gate", "bandwidth-met"],
)
def test_a_gate_is_read_from_the_gates_decision_and_writes_it_back_key_for_key(decided, keys, verdict, exit_code):
    gate = Gate.from_json(decided)
    assert gate.to_json() == decided and list(gate.to_json()) == keys
    assert Gate.from_json(gate.to_json()) == gate
    data = valid(RunResult("grade", "lab2", "flash.cu", backend="gpu", cases=[passed_case()], gate=gate))
    assert (data["gate"], data["verdict"], data["exit_code"]) == (decided, verdict, exit_code)


def test_calibrations_record_carries_the_file_it_wrote_and_that_files_new_entry(tmp_path, monkeypatch):
    details = {
        "ci_low": 12.8,
        "ci_high": 13.1,
        "solution_ms": 2.0,
        "starter_ms": 26.1,
        "shape": {"rows": 2048, "prefix": 2048},
    }
    entry = write_gate(tmp_path / "gates.json", "lab2", "NVIDIA H200", 13.04, 0.5, details)
    gate = Gate(
        status="calibrated",
        passed=True,
        message="wrote the lab2 gate for NVIDIA H200 to gates.json: a student needs SPEEDUP >= 6.52x",
        file="gates.json",
        calibration=entry,
    )
    assert gate.to_json() == {
        "status": "calibrated",
        "passed": True,
        "file": "gates.json",
        "solution_speedup": 13.04,
        "fraction": 0.5,
        "calibrated": entry["calibrated"],
        **details,
        "message": "wrote the lab2 gate for NVIDIA H200 to gates.json: a student needs SPEEDUP >= 6.52x",
    }
    assert list(gate.to_json())[:3] == ["status", "passed", "file"] and list(gate.to_json())[-1] == "message"
    assert Gate.from_json(gate.to_json()) == gate
    assert valid(RunResult("calibrate", "lab2", "solution.cu", cases=[passed_case()], gate=gate))["exit_code"] == 0


# --- the profile -----------------------------------------------------------------------------------------


def lab1_slice(call: int, kernel: str, start_ns: float, end_ns: float) -> KernelSlice:
    """A launch as the trace records it (`measure.trace.KernelSlice`), taken into the report's record."""
    launch = KernelSlice("T = 4", call, kernel, start_ns, end_ns, (1, 32, 1), (128, 1, 1), 0, 1024, 40, 7)
    taken = KernelSlice.from_json(launch.to_json())
    assert taken.to_json() == launch.to_json() and taken.duration_ms == launch.duration_ms
    return taken


# two calls of lab 1 at T = 4, every duration a binary fraction of a millisecond, so each sum is exact
SLICES = [
    lab1_slice(0, "attn_scores", 0, 31_250),
    lab1_slice(0, "attn_softmax", 46_875, 62_500),
    lab1_slice(0, "attn_weighted_sum", 62_500, 125_000),
    lab1_slice(1, "attn_scores", 250_000, 312_500),
    lab1_slice(1, "attn_softmax", 312_500, 328_125),
    lab1_slice(1, "attn_weighted_sum", 328_125, 390_625),
]


def lab1_trace() -> Trace:
    return Trace("events", CUPTI_MISSING, None, 2, ["T = 4"], SLICES, "trace.json")


def test_the_trace_derives_each_calls_total_and_span_and_the_longest_call():
    trace = lab1_trace()
    first, second = trace.calls_at("T = 4")
    assert (first.total_ms, first.span_ms) == (0.03125 + 0.015625 + 0.0625, 0.125) == (0.109375, 0.125)
    assert (second.total_ms, second.span_ms) == (0.0625 + 0.015625 + 0.0625, 0.140625) == (0.140625, 0.140625)
    assert trace.longest_ms("T = 4") == 0.140625 and trace.longest_ms("T = 8") == 0.0
    assert trace.kernels == ["attn_scores", "attn_softmax", "attn_weighted_sum"]
    data = trace.to_json()
    assert list(data) == [
        "source",
        "why_not_cupti",
        "cupti_version",
        "calls",
        "shapes",
        "slices",
        "file",
        "call_totals",
        "longest_call_ms",
    ]
    assert data["slices"] == [s.to_json() for s in SLICES]
    assert data["call_totals"] == [
        {"shape": "T = 4", "call": 0, "total_ms": 0.109375, "span_ms": 0.125},
        {"shape": "T = 4", "call": 1, "total_ms": 0.140625, "span_ms": 0.140625},
    ]
    assert data["longest_call_ms"] == {"T = 4": 0.140625}
    assert Trace.from_json(data) == trace


def lab1_range(ceilings) -> RangeReport:
    # 163,840 DRAM bytes in all: twice the flash model's 81,920 at T = 4
    kernels = [
        RangeKernel(
            KernelMetrics(
                i,
                name,
                "(128, 1, 1)",
                "(1, 32, 1)",
                {
                    "duration_ns": duration,
                    "sm_throughput_pct": 12.5,
                    "dram_read_bytes": read,
                    "dram_write_bytes": write,
                    "l2_hit_rate_pct": 50.0,
                    "achieved_occupancy_pct": 25.0,
                    "registers_per_thread": 40.0,
                    "shared_bank_conflicts": 0.0,
                    "fma_pipe_pct": 3.0,
                },
            ),
            flops,
            RooflinePoint.of(Point(flops, read + write, duration * 1e-9, ceilings)),
        )
        for i, (name, duration, read, write, flops) in enumerate(
            [
                ("attn_scores", 31_250.0, 49_152.0, 2_048.0, 65_536.0),
                ("attn_softmax", 15_625.0, 2_048.0, 2_048.0, 0.0),
                ("attn_weighted_sum", 62_500.0, 18_432.0, 90_112.0, 65_536.0),
            ]
        )
    ]
    whole = RooflinePoint.of(Point(131_072.0, 163_840.0, 109_375.0 * 1e-9, ceilings))
    contender = RangeContender("solution.cu", "student", kernels, 0.109375, 163_840.0, 131_072.0, whole)
    return RangeReport(
        True,
        None,
        RangeShape("T = 4", 4, 0),
        3,
        dict(H200_FACTS),
        seconds=4.5,
        command=["ncu", "--csv"],
        dropped_metrics=[],
        contenders=[contender],
    )


def test_a_profile_writes_what_it_reached_in_order_and_sets_ncus_dram_bytes_beside_the_model():
    ceilings, problem = ceilings_from_facts(H200_FACTS)
    model = traffic(TrafficShape(rows=4, keys=4))
    assert (model.flash_bytes, model.naive_bytes) == (81_920, 90_112)
    profile = Profile(
        trace=lab1_trace(),
        roofline=RooflineCeilings(dict(H200_FACTS), ceilings, problem),
        no_starter_row="lab1's starter has empty kernel bodies, so the Range pass has no starter row to compare with",
        traffic=model,
        range=lab1_range(ceilings),
        trace_vs_ncu=[TraceVsNcu("attn_scores", 0.046875, 0.03125)],
    )
    (beside,) = profile.dram_beside_model
    assert (beside.label, beside.dram_bytes, beside.times_flash, beside.times_naive) == (
        "solution.cu",
        163_840.0,
        2.0,
        163_840 / 90_112,
    )
    assert profile.trace_vs_ncu[0].difference == 0.5
    data = profile.to_json()
    assert list(data) == [
        "schema",
        "trace",
        "gpu_facts",
        "ceilings_problem",
        "ceilings",
        "no_starter_row",
        "traffic",
        "range",
        "trace_vs_ncu",
        "dram_beside_model",
    ]
    assert data["dram_beside_model"] == [
        {"label": "solution.cu", "dram_bytes": 163_840.0, "times_flash": 2.0, "times_naive": 163_840 / 90_112}
    ]
    assert data["trace_vs_ncu"] == [
        {"kernel": "attn_scores", "trace_median_ms": 0.046875, "ncu_ms": 0.03125, "difference": 0.5}
    ]
    assert list(data["range"]) == [
        "shape",
        "warmup_calls",
        "gpu_facts",
        "available",
        "message",
        "seconds",
        "command",
        "dropped_metrics",
        "contenders",
    ]
    kernel = data["range"]["contenders"][0]["kernels"][0]
    assert list(kernel)[:4] == ["index", "kernel", "block", "grid"] and list(kernel)[-3:] == [
        "dram_bytes",
        "flops",
        "point",
    ]
    assert kernel["dram_bytes"] == 51_200.0
    assert Profile.from_json(data).to_json() == data
    written = valid(RunResult("profile", "lab1", "solution.cu", cases=[passed_case()], profile=profile))
    assert written["profile"] == data


def test_a_decode_profile_sets_ncus_bytes_beside_the_bytes_that_must_move():
    ceilings, _ = ceilings_from_facts(H200_FACTS)
    profile = Profile(must_move=MustMove("B = 3, longest 40", 81_920), range=lab1_range(ceilings))
    assert [row.to_json() for row in profile.dram_beside_model] == [
        {"label": "solution.cu", "dram_bytes": 163_840.0, "times_must_move": 2.0}
    ]
    assert Profile.from_json(profile.to_json()).to_json() == profile.to_json()


def test_a_profile_that_stopped_early_or_never_ran_ncu_writes_only_what_it_reached():
    assert Profile().to_json() == {"schema": "attnlab.profile/1"}  # the kernel failed its check
    not_asked = RangeReport(available=False, message="the Range pass was not asked for (--no-range)")
    assert not_asked.to_json() == {"available": False, "message": "the Range pass was not asked for (--no-range)"}
    no_ncu = RangeReport(False, "Nsight Compute's `ncu` is not on PATH", RangeShape("T = 4", 4, 0), 3)
    assert list(no_ncu.to_json()) == ["shape", "warmup_calls", "available", "message"]
    mismatch = RangeReport(False, "ncu profiled attn_scores where ...", RangeShape("T = 4", 4, 0), 3, None)
    assert list(mismatch.to_json()) == ["shape", "warmup_calls", "gpu_facts", "available", "message"]
    assert mismatch.to_json()["gpu_facts"] is None and mismatch.facts is None
    for report in (not_asked, no_ncu, mismatch):
        assert RangeReport.from_json(report.to_json()) == report
    summary = Profile(range=no_ncu)  # grade --profile: the Range pass alone
    assert valid(RunResult("grade", "lab1", "solution.cu", profile=summary))["profile"] == {
        "schema": "attnlab.profile/1",
        "range": no_ncu.to_json(),
    }


# --- a batch's row, and the result of a grading process that died ------------------------------------------


def test_a_batch_row_is_read_from_a_submissions_json_and_writes_the_gradebooks_cells():
    comparison = Comparison(Series({"median_ms": 2.0}), Series({"median_ms": 25.9742}), 12.9871, 12.9, 13.1)
    result = RunResult(
        "grade",
        "lab2",
        "subs/ana.cu",
        backend="gpu",
        device=DeviceFacts.of_gpu(H200),
        cases=[passed_case(), CaseResult("C33-P31", "skipped", "left out on the CPU", 33, 31)],
        timing=SpeedupTiming(17, 31, 0.0713, "subs/ana.cu", "starter.cu", comparison),
        gate=apply_gate(GATES, "lab2", "NVIDIA H200", 12.9871),
        sha256="ab" * 32,
        seconds=41.04,
        hints=[{"hazard": "causal", "text": "check the  causal\nbound"}],
    )
    row = BatchRow.from_json(valid(result), seconds=43.26)
    assert (row.speedup, row.seconds, row.speedup_text, row.seconds_text) == (12.9871, 43.26, "12.987", "43.3")
    assert row.to_json() == {
        "file": "subs/ana.cu",
        "sha256": "ab" * 32,
        "verdict": "pass",
        "exit_code": 0,
        "backend": "gpu",
        "cases_run": 1,
        "cases_skipped": 1,
        "speedup": "12.987",
        "gate_met": "yes",
        "first_failing_case": "",
        "first_hint": "check the causal bound",
        "hints": "check the causal bound",  # one line, its spacing collapsed
        "cluster_state": "",
        "cluster_elapsed_s": "",
        "cluster_reason": "",
        "seconds": "43.3",
    }
    assert BatchRow.from_json(valid(result)).seconds_text == "41.0"  # the result's own clock without the batch's


def test_a_dead_grading_process_leaves_every_field_of_the_schema_and_says_it_never_said_its_version():
    task = SubmissionTask("lab2", "subs/b\x1b.cu", (), "b.json", "b.xml", None, ".")
    data = validate_result(dead_result(task, "the grading process was killed by SIGKILL without a result"))
    assert data == {
        "schema": "attnlab.result/1",
        "command": "grade",
        "lab": "lab2",
        "file": "subs/b\\x1b.cu",
        "backend": None,
        "device": None,
        "seed": None,
        "verdict": "environment-missing",
        "summary": "environment-missing",
        "exit_code": 6,
        "error": "the grading process was killed by SIGKILL without a result",
        "skipped": 0,
        "hints": [],
        "decisive_case": None,
        "oracle_proof": None,
        "compile": None,
        "cases": [],
        "timing": None,
        "gate": None,
        "notes": [],
        "kernel_output": [],
        "attnlab_version": None,
        "sha256": None,
        "options": {},
        "gpu": None,
        "seconds": None,
        "timings": None,
    }
    assert list(data) == list(RunResult("grade").to_json())  # the keys in the order every result writes them
    assert BatchRow.from_json(data).to_json() == {
        "file": "subs/b\\x1b.cu",
        "sha256": "",
        "verdict": "environment-missing",
        "exit_code": 6,
        "backend": "",
        "cases_run": 0,
        "cases_skipped": 0,
        "speedup": "",
        "gate_met": "",
        "first_failing_case": "",
        "first_hint": "",
        "hints": "",
        "cluster_state": "",
        "cluster_elapsed_s": "",
        "cluster_reason": "",
        "seconds": "",
    }
