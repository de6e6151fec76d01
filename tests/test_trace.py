"""The Trace timeline without a GPU: the worker's real trace code on a numpy stand-in for the GPU, with a
stand-in `cupti` module (its activity API as cupti-python exposes it) or CUDA events; then the Perfetto file
and the bars on the terminal.

The stand-in GPU runs every launch on a clock of its own: attn_scores takes 30 us, attn_softmax 10 us,
attn_weighted_sum 20 us, and each launch starts 2 us after the one before it. CuPy's own kernels (the fills
that poison a buffer) run on it too, as they would under CUPTI, and must never reach the trace.
"""

from __future__ import annotations

import io
import json
import sys
import types

import numpy as np
import pytest
from rich.console import Console

from labrunner.labs import get_lab
from labrunner.measure.trace import CUPTI_MISSING, run_trace, slices_from_reply
from labrunner.records.profile import Trace
from labrunner.report import terminal
from labrunner.report.trace_events import trace_events, write_trace

LAB1 = get_lab("lab1")
DURATION_NS = {"attn_scores": 30_000, "attn_softmax": 10_000, "attn_weighted_sum": 20_000, "cupy_fill": 1_000}
GAP_NS = 2_000


class FakeCupti:
    """cupti-python's activity API, as far as the trace uses it: records delivered on flush."""

    class ActivityKind:
        CONCURRENT_KERNEL = 10
        MEMSET = 2

    def __init__(self, drop_one: bool = False, bytes_names: bool = False):
        self.bytes_names = bytes_names  # a binding that hands names back as bytes
        self.enabled = False
        self.pending: list = []
        self.drop_one = drop_one
        self.requested = self.completed = None

    def activity_register_callbacks(self, requested, completed):
        self.requested, self.completed = requested, completed

    def activity_enable(self, kind):
        assert kind == self.ActivityKind.CONCURRENT_KERNEL
        self.enabled = True

    def activity_disable(self, kind):
        self.enabled = False

    def activity_flush_all(self, flag):
        assert self.requested() == (8 * 1024 * 1024, 0)
        records, self.pending = self.pending, []
        if self.drop_one:  # the last kernel record goes missing
            last = max(i for i, r in enumerate(records) if r.kind == self.ActivityKind.CONCURRENT_KERNEL)
            records = records[:last] + records[last + 1 :]
        self.completed(records)

    def record(self, name: str, start: int, end: int):
        if self.enabled:
            self.pending.append(
                types.SimpleNamespace(
                    kind=self.ActivityKind.CONCURRENT_KERNEL,
                    name=name.encode() if self.bytes_names else name,
                    start=start,
                    end=end,
                    correlation_id=len(self.pending),
                    static_shared_memory=2048 if name == "attn_scores" else 0,
                    registers_per_thread=40,
                    stream_id=7,
                    dynamic_shared_memory=0,
                )
            )
            self.pending.append(types.SimpleNamespace(kind=self.ActivityKind.MEMSET, name=None, start=0, end=0))


class ClockGpu:
    """Just enough of GpuDevice for `run_trace`: numpy buffers and a clock that launches advance."""

    name = "gpu"

    def __init__(self, cupti: FakeCupti | None = None):
        self.now = 1_000_000_000  # CUPTI's clock does not start at zero
        self.cupti = cupti
        self.launched: list[str] = []
        gpu = self

        class Event:
            def record(self):
                self.at = gpu.now

            def synchronize(self):
                pass

        self.xp = types.SimpleNamespace(
            cuda=types.SimpleNamespace(Event=Event, get_elapsed_time=lambda a, b: (b.at - a.at) / 1e6)
        )

    def run(self, name: str) -> None:
        self.now += GAP_NS
        start = self.now
        self.now += DURATION_NS[name]
        if self.cupti:
            self.cupti.record(name, start, self.now)

    def upload(self, array):
        return array.copy()

    def guarded(self, count, fill_bits=None):
        self.run("cupy_fill")
        return types.SimpleNamespace(inner=np.zeros(count, dtype=np.float32))

    def launch(self, kernels, launch, buffers):
        self.launched.append(launch.kernel)
        self.run(launch.kernel)

    def synchronize(self):
        pass


def request(calls: int = 5) -> dict:
    shapes = []
    for t in (4, 8):
        inputs = {
            "q": np.zeros((t, 32, 64), np.float32),
            "k": np.zeros((t, 8, 64), np.float32),
            "v": np.zeros((t, 8, 64), np.float32),
        }
        shapes.append(
            {
                "label": f"T = {t}",
                "inputs": inputs,
                "launches": LAB1.plan_launches(LAB1.constants({}), t, 0),
                "workspace": LAB1.workspace({}, t, 0),
                "out_count": t * 32 * 64,
            }
        )
    return {"calls": calls, "use_cupti": True, "shapes": shapes}


def trace(gpu: ClockGpu, cupti: FakeCupti | None, monkeypatch, calls: int = 5) -> dict:
    flushes = []
    if cupti is None:
        monkeypatch.setitem(sys.modules, "cupti", None)  # `from cupti import cupti` raises ImportError
    else:
        monkeypatch.setitem(sys.modules, "cupti", types.SimpleNamespace(cupti=cupti))
    reply = run_trace(gpu, {"student": {}}, request(calls), flush=lambda: flushes.append(gpu.now))
    reply["flushes"] = len(flushes)
    return reply


KERNELS = ["attn_scores", "attn_softmax", "attn_weighted_sum"]


def test_cupti_records_give_three_kernels_for_every_call_at_every_size(monkeypatch):
    cupti = FakeCupti()
    gpu = ClockGpu(cupti)
    reply = trace(gpu, cupti, monkeypatch)
    assert (reply["source"], reply["why_not_cupti"]) == ("cupti", None)
    slices = slices_from_reply(reply, set(KERNELS))
    assert len(slices) == 2 * 5 * 3
    assert [(s.shape, s.call, s.kernel) for s in slices[:6]] == [("T = 4", 0, k) for k in KERNELS] + [
        ("T = 4", 1, k) for k in KERNELS
    ]
    assert {(s.shape, s.call) for s in slices} == {(f"T = {t}", c) for t in (4, 8) for c in range(5)}
    assert [s.duration_ms for s in slices[:3]] == [0.03, 0.01, 0.02]
    assert slices[0].start_ns == 0.0 and slices[1].start_ns == 32_000.0  # 30 us, then a 2 us gap
    assert (slices[0].registers, slices[0].static_shared_bytes, slices[1].static_shared_bytes) == (40, 2048, 0)
    assert {s.stream for s in slices} == {7}
    assert slices[0].grid == (1, 1, 32) and slices[0].block == (16, 16, 1)
    assert reply["flushes"] == 10  # the L2 flushed before every call
    # one untraced warm-up call per size, then five traced calls
    assert gpu.launched == (KERNELS * 6) * 2


def test_kernel_names_handed_back_as_bytes_are_read_as_text(monkeypatch):
    cupti = FakeCupti(bytes_names=True)
    reply = trace(ClockGpu(cupti), cupti, monkeypatch, calls=1)
    assert reply["source"] == "cupti"
    assert [s["kernel"] for s in reply["slices"][:3]] == KERNELS


def test_without_cupti_python_the_trace_comes_from_events_and_says_why(monkeypatch):
    gpu = ClockGpu()
    reply = trace(gpu, None, monkeypatch, calls=2)
    assert (reply["source"], reply["why_not_cupti"]) == ("events", CUPTI_MISSING)
    assert CUPTI_MISSING == "cupti-python is not installed (pip install 'attnlab[profile]')"
    slices = slices_from_reply(reply, set(KERNELS))
    assert len(slices) == 2 * 2 * 3
    # the events sit on the same clock: the fills between sizes show up as a longer gap, never in a kernel
    assert [round(s.duration_ms, 6) for s in slices[:3]] == [0.032, 0.012, 0.022]  # each event pair holds its gap
    assert slices[0].registers is None and slices[0].stream == 0


def test_cupti_records_that_do_not_match_the_launches_are_abandoned_for_events(monkeypatch):
    cupti = FakeCupti(drop_one=True)
    reply = trace(ClockGpu(cupti), cupti, monkeypatch, calls=1)
    assert reply["source"] == "events"
    assert (
        reply["why_not_cupti"]
        == "CUPTI returned 11 kernel records for 12 launches; the trace was taken again with events"
    )
    assert len(reply["slices"]) == 2 * 3


@pytest.mark.parametrize(
    "change, message",
    [
        ({"kernel": "printf_kernel"}, "the trace names a kernel the lab never launched: 'printf_kernel'"),
        ({"end_ns": -1.0}, "the trace gives attn_scores an impossible time (0.0 to -1.0 ns)"),
        ({"start_ns": float("nan")}, "the trace gives attn_scores an impossible time (nan to 30000.0 ns)"),
    ],
)
def test_a_reply_with_an_unknown_kernel_or_an_impossible_time_is_refused(monkeypatch, change, message):
    cupti = FakeCupti()
    reply = trace(ClockGpu(cupti), cupti, monkeypatch, calls=1)
    reply["slices"][0].update(change)
    with pytest.raises(ValueError, match="the trace") as caught:
        slices_from_reply(reply, set(KERNELS))
    assert str(caught.value) == message


def test_the_trace_file_is_chrome_trace_event_json_one_slice_per_kernel_one_track_per_stream(monkeypatch, tmp_path):
    cupti = FakeCupti()
    reply = trace(ClockGpu(cupti), cupti, monkeypatch, calls=5)
    path = tmp_path / "trace.json"
    write_trace(reply["slices"], "NVIDIA H200", "CUPTI activity records", path)
    document = json.loads(path.read_text())
    assert set(document) == {"traceEvents", "displayTimeUnit", "otherData"}
    events = document["traceEvents"]
    metadata = [e for e in events if e["ph"] == "M"]
    assert metadata == [
        {
            "ph": "M",
            "name": "process_name",
            "pid": 0,
            "tid": 0,
            "args": {"name": "NVIDIA H200 (CUPTI activity records)"},
        },
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
    ]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == 30 and len(events) == 32
    first = slices[0]
    assert first == {
        "name": "attn_scores",
        "cat": "kernel",
        "ph": "X",
        "ts": 0.0,
        "dur": 30.0,
        "pid": 0,
        "tid": 7,
        "args": {
            "shape": "T = 4",
            "call": 1,
            "grid": [1, 1, 32],
            "block": [16, 16, 1],
            "dynamic shared memory (bytes)": 0,
            "static shared memory (bytes)": 2048,
            "registers per thread": 40,
        },
    }
    assert slices[1]["ts"] == 32.0 and slices[1]["dur"] == 10.0  # microseconds
    assert all(isinstance(e["ts"], float) and e["dur"] > 0 for e in slices)
    assert [e["ts"] for e in slices] == sorted(e["ts"] for e in slices)


def test_trace_events_accepts_any_stream_numbers_as_tracks():
    slices = [
        {
            "shape": "C = 1, P = 0",
            "call": 0,
            "kernel": "flash_prefill",
            "start_ns": 0.0,
            "end_ns": 1500.0,
            "grid": [1, 32, 1],
            "block": [256, 1, 1],
            "dynamic_shared_bytes": 0,
            "static_shared_bytes": None,
            "registers": None,
            "stream": s,
        }
        for s in (13, 7)
    ]
    tracks = [
        e
        for e in trace_events(slices, "GPU", "CUDA events around each launch")["traceEvents"]
        if e["name"] == "thread_name"
    ]
    assert [(t["tid"], t["args"]["name"]) for t in tracks] == [(7, "stream 7"), (13, "stream 13")]


def test_the_terminal_draws_one_line_per_call_with_a_bar_per_kernel(monkeypatch):
    cupti = FakeCupti()
    reply = trace(ClockGpu(cupti), cupti, monkeypatch, calls=2)
    printed = io.StringIO()
    monkeypatch.setattr(terminal, "stdout", Console(file=printed, width=200, highlight=False, color_system=None))
    terminal.trace_report(
        Trace.from_json(
            {
                "source": "cupti",
                "why_not_cupti": None,
                "cupti_version": "13.4.0",
                "calls": 2,
                "shapes": ["T = 4", "T = 8"],
                "slices": reply["slices"],
            }
        )
    )
    lines = printed.getvalue().splitlines()
    assert lines[0] == (
        "Trace timeline: 2 calls per shape, GPU start and end of every kernel from CUPTI activity records "
        "(cupti-python 13.4.0)"
    )
    assert lines[1] == "T = 4 (a full bar is 0.060 ms)"
    # 30 + 10 + 20 us of a 60 us call: 30, 10 and 20 of the 60 characters
    assert lines[2] == (
        "  call 1  " + "█" * 60 + "  scores 0.030 · softmax 0.010 · weighted_sum 0.020 = 0.060 ms "
        "(first start to last end 0.064 ms)"
    )
    assert len(lines) == 7 and lines[4] == "T = 8 (a full bar is 0.060 ms)"
