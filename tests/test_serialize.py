"""The records' one JSON mechanism (labrunner/records/serialize.py): each record read back as it was written,
the exact keys of a few, and JSON that is not the record refused with the record and the key named."""

import json
import math

import pytest

from labrunner.compile.nvrtc import KernelResources
from labrunner.records.compile import CompileSummary
from labrunner.records.device import DeviceFacts
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
from labrunner.records.roofline import Ceilings, RooflinePoint
from labrunner.records.serialize import RecordError, from_json, to_json
from labrunner.records.timing import (
    Bandwidth,
    Comparison,
    Conditions,
    CopyTimed,
    Peer,
    PeerRow,
    PipelineRow,
    PipelineTiming,
    Round,
    Series,
    SpeedupTiming,
    Stats,
    timing_from_json,
)
from labrunner.records.traffic import Traffic, TrafficShape


def stats(median: float, samples: list[float] | None = None) -> Stats:
    return Stats(median, median, median, median, 3, 0.001, True, None, samples or [median] * 3, 3, "noise")


POINT = RooflinePoint(1e9, 1e8, 1e-3, 1e12, 1e11, 10.0, 5e12, "memory-bound", 0.2, "memory-bound: 10.0 FLOP/B")
SLICE = KernelSlice("T = 4", 0, "attn_scores", 0.0, 1500.0, (1, 2, 1), (128, 1, 1), 0, 1024, 32, 7)
COMPARISON = Comparison(Series({"median_ms": 2.0, "count": 3}), Series({"median_ms": 26.0}), 13.0, 12.8, 13.1)

RECORDS = [
    Gate("none", True, "no speed gate for NVIDIA H200"),
    Gate("met", True, "met", required_speedup=6.5, speedup=7.1),
    Gate("missed", False, "missed", required_fraction=0.8, copy_fraction=0.5),
    Gate("calibrated", True, "wrote", file="gates.json", calibration={"fraction": 0.5, "solution_speedup": 13.0}),
    DeviceFacts.cpu(),
    DeviceFacts("NVIDIA H200", "13.0", "13000", "14.0", 1980, 40, "580.65.06", "0000:01:00.0", gpu=True),
    DeviceFacts("NVIDIA H200", gpu=True),  # a GPU whose every fact was unreadable still writes them, as null
    CompileSummary("sm_90", "13.0", {"attn": ["u64"]}, {"BLOCK": 64}, {}, {"attn": KernelResources(32, 0)}, ["w"]),
    CompileSummary("sm_90", "13.0", {}, {}, {}, {}, [], "3.6.0", {"k": {"num_warps": 4}}, ("BLOCK",)),
    SpeedupTiming(
        2048,
        2048,
        51.5,
        "flash.cu",
        "starter.cu",
        COMPARISON,
        rounds=[Round(13.0, 12.9, 13.1, 2.0, 26.0, [2.0], [26.0])],
        verified_calls={"student": 2, "baseline": 2},
        input_sets=8,
        conditions=Conditions(0.003, {"clock": 1980}, None, 1 << 27, ["a warning"]),
        peer=Peer("sdpa", "PyTorch SDPA fp32", "the call", "timed", median_ms=1.0, enqueue={"median_ms": 0.1}),
        bandwidth=Bandwidth(1 << 30, 3.0, 1.0, 4.0, [CopyTimed(1 << 30, 0.5)], required_fraction=0.8),
    ),
    PipelineTiming(
        rows=[
            PipelineRow.at(512, {"attn_scores": Series({"median_ms": 0.1}), "total": Series({"median_ms": 0.3})}),
            PipelineRow.at(
                1024,
                {"attn_scores": Series({"median_ms": 0.2}), "total": Series({"median_ms": 0.5})},
                {"attn_scores": 1 << 20},
                4e12,
            ).with_peer(PeerRow(Series({"median_ms": 0.4}), 0.8, 0.7, 0.9, {"median_ms": 0.01})),
        ],
        projections=[PipelineRow.at(65536)],
        peer=Peer("torch", "PyTorch eager fp32", "the call", "missing", message="no torch"),
    ),
    Profile(
        trace=Trace("events", "no CUPTI", None, 1, ["T = 4"], [SLICE], "trace.json"),
        roofline=RooflineCeilings({"sm_count": 132}, Ceilings(6.7e13, 4.8e12, "SMs", "NVML"), None),
        traffic=Traffic(TrafficShape(4, 4), 1, 2, 3, 4, 5, 6),
        must_move=MustMove("KV", 1 << 20),
        range=RangeReport(
            True,
            None,
            RangeShape("T = 4", 4, 0),
            3,
            {"sm_count": 132},
            1.5,
            ["ncu"],
            [],
            [
                RangeContender(
                    "flash.cu",
                    "student",
                    [
                        RangeKernel(
                            KernelMetrics(0, "attn", "(128, 1, 1)", "(4, 1, 1)", {"duration_ns": 1e3}), 1e9, POINT
                        )
                    ],
                    1e-3,
                    1e8,
                    1e9,
                    POINT,
                )
            ],
        ),
        trace_vs_ncu=[TraceVsNcu("attn", 1.05, 1.0)],
        plot="roofline.png",
    ),
    Profile(range=RangeReport(False, "ncu is not installed", RangeShape("T = 4", 4, 0), 3)),
    Profile(),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_reads_back_as_it_was_written_and_writes_the_same_bytes(record):
    text = json.dumps(record.to_json())
    again = type(record).from_json(json.loads(text))
    assert again == record
    assert json.dumps(again.to_json()) == text


def test_a_timing_is_read_back_by_its_kind():
    for timing in (r for r in RECORDS if isinstance(r, (SpeedupTiming, PipelineTiming))):
        assert timing_from_json(timing.to_json()) == timing


def test_a_small_records_json_is_exactly_its_keys_in_order_with_its_figures():
    gate = Gate("met", True, "met: 7.10x", required_speedup=6.5, speedup=7.1)
    assert json.dumps(gate.to_json()) == (
        '{"status": "met", "passed": true, "required_speedup": 6.5, "speedup": 7.1, "message": "met: 7.10x"}'
    )
    bandwidth = Bandwidth(8, 3.0, 1.0, 4.0, [CopyTimed(8, 0.5)])
    assert json.dumps(bandwidth.to_json()) == (
        '{"bytes": 8, "student_tb_s": 3.0, "baseline_tb_s": 1.0, "copy_tb_s": 4.0, "copy_fraction": 0.75, '
        '"copy": [{"bytes": 8, "median_ms": 0.5}]}'
    )
    assert list(PipelineRow.at(4).to_json()) == [
        "T",
        "matrix_mib",
        "tensors_mib",
        "matrix_over_tensors",
        "matrix_traffic_mib",
        "projected",
    ]
    assert SLICE.to_json()["duration_ms"] == 0.0015 and SLICE.to_json()["grid"] == [1, 2, 1]


def test_raw_samples_travel_only_where_asked_and_an_unmeasurable_noise_is_null():
    unmeasurable = Stats(1.0, 1.0, 1.0, 1.0, 1, math.inf, False, "only 1 samples", [1.0])
    comparison = Comparison(unmeasurable, stats(2.0, [2.0, 2.1]), 0.5, 0.4, 0.6)
    assert "samples_ms" not in comparison.to_json()["student"]
    assert comparison.to_json()["student"]["rse"] is None
    reply = comparison.to_json(include_samples=True)
    assert reply["baseline"]["samples_ms"] == [2.0, 2.1]
    again = Comparison.from_json(reply)
    assert again == comparison and isinstance(again.student, Stats) and again.student.rse == math.inf
    # a result's series has no samples: it reads back as the figures it holds, which cannot be pooled
    assert isinstance(Comparison.from_json(comparison.to_json()).student, Series)


@pytest.mark.parametrize(
    "cls, data, words",
    [
        (Gate, {"status": "met", "passed": True, "message": "m", "speedup": "fast"}, "Gate: speedup: expected float"),
        (CopyTimed, {"bytes": 8, "median_ms": 0.5, "median": 1}, "CopyTimed: unknown key median"),
        (CopyTimed, {"bytes": 8}, "CopyTimed: the key 'median_ms' is missing"),
        (CopyTimed, {"bytes": True, "median_ms": 0.5}, "CopyTimed: bytes: expected int, got bool True"),
        (CopyTimed, [8, 0.5], "CopyTimed: expected a JSON object, got list"),
        (
            SpeedupTiming,
            {"kind": "speedup", "rows": 1, "prefix": 1, "comparison": {"speedup": 1.0}},
            "SpeedupTiming: comparison: Comparison: the key 'student' is missing",
        ),
        (
            PipelineTiming,
            {"kind": "pipeline", "rows": [{"T": "4"}]},
            "PipelineTiming: rows: PipelineRow: T: expected int, got str '4'",
        ),
    ],
    ids=["wrong type", "unknown key", "missing key", "bool for int", "not an object", "nested", "in a list"],
)
def test_json_that_is_not_the_record_is_refused_naming_the_record_and_the_key(cls, data, words):
    with pytest.raises(RecordError) as refused:
        from_json(cls, data)
    assert str(refused.value).startswith(words)


def test_the_keys_a_record_does_not_name_are_refused_but_a_gates_calibration_entry_takes_them():
    with pytest.raises(RecordError, match="unknown key"):
        Round.from_json({"speedup": 1.0, "sped_up": 2.0})
    gate = Gate.from_json({"status": "calibrated", "passed": True, "file": "g.json", "fraction": 0.5, "message": ""})
    assert gate.calibration == {"fraction": 0.5} and gate.file == "g.json"


def test_a_json_object_is_written_as_a_plain_copy():
    data = to_json(DeviceFacts.cpu())
    assert data == {"name": "CPU (attnlab's fiber backend)"}
    assert DeviceFacts.from_json(data) == DeviceFacts.cpu()
