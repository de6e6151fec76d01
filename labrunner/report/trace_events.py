"""The Trace timeline as a file Perfetto's UI (ui.perfetto.dev) and chrome://tracing open.

The Chrome trace-event format, JSON object form: `{"traceEvents": [...]}`. Each kernel launch is
one complete event (`"ph": "X"`) with `ts` (start) and `dur` in microseconds; `pid` is the GPU and
`tid` the CUDA stream, so each stream is one track, named by a metadata event (`"ph": "M"`).
`args` carries what a reader asks first about a launch: the shape and call it belongs to, its grid
and block, its shared memory and its registers per thread.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GPU_PID = 0


def trace_events(slices: list[dict[str, Any]], gpu_name: str, source: str) -> dict[str, Any]:
    """The whole trace as a JSON-ready object, from the slices as the profile's JSON holds them."""
    streams = sorted({s["stream"] for s in slices})
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": GPU_PID, "tid": 0, "args": {"name": f"{gpu_name} ({source})"}}
    ]
    events += [
        {"ph": "M", "name": "thread_name", "pid": GPU_PID, "tid": stream, "args": {"name": f"stream {stream}"}}
        for stream in streams
    ]
    for s in slices:
        args = {
            "shape": s["shape"],
            "call": s["call"] + 1,
            "grid": list(s["grid"]),
            "block": list(s["block"]),
            "dynamic shared memory (bytes)": s["dynamic_shared_bytes"],
            "static shared memory (bytes)": s["static_shared_bytes"],
            "registers per thread": s["registers"],
        }
        events.append(
            {
                "name": s["kernel"],
                "cat": "kernel",
                "ph": "X",
                "ts": s["start_ns"] / 1e3,
                "dur": (s["end_ns"] - s["start_ns"]) / 1e3,
                "pid": GPU_PID,
                "tid": s["stream"],
                "args": args,
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"producer": "attnlab profile", "timestamps": source},
    }


def write_trace(slices: list[dict[str, Any]], gpu_name: str, source: str, path: Path) -> None:
    path.write_text(json.dumps(trace_events(slices, gpu_name, source), indent=1, allow_nan=False) + "\n")
