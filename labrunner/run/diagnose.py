"""After a crash on the GPU: the same case once more under compute-sanitizer, to name the line.

A sticky CUDA error says only what went wrong (cudaErrorIllegalAddress), not where. Where
NVIDIA's compute-sanitizer is installed, the driver replays the one crashing case in a fresh
process under its memcheck tool (the module is built with -lineinfo) and shows the kernel, the
source line and the offending thread it reports.

The replay is boxed like a worker (`sandbox.py`: its own session, scrubbed environment, private
directory, limits, the whole tree killed at the end) and bounded: `REPLAY_FACTOR` times the
case's own time limit, the sanitizer's start and the module's compile included (a sanitized run
is slower than a plain one, but a case that needs more than three times its limit under the
tool was a hang anyway). The case travels as JSON and `.npy` files that the driver writes and
the replay reads (never pickle), and all that comes back is the tool's report, read from a pipe
with a deadline and a cap.
"""

from __future__ import annotations

import io
import json
import os
import re
import select
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TypedDict

import numpy as np

from labrunner import box as boxes
from labrunner.run.sandbox import REPLAY_LIMITS, Sandbox
from labrunner.run.untrusted_text import shown
from labrunner.run.wire import Message


class ReplayPayload(TypedDict, total=False):
    """One case as a replay runs it: the composed source, its file name, the entry points' parameter
    types, and the run request (`worker_main.run_case`'s: launches, inputs, writable, returned)."""

    source: str
    filename: str
    entry_types: dict[str, list[str]]
    request: Message


SANITIZER = "compute-sanitizer"
REPLAY_FACTOR = 3
REPORT_LINES = 200  # the tool's own lines kept while reading; only a few survive the filter
# A tool's closing line, printed once it has watched the whole run (racecheck's own summary, or the
# error summary of the others): kept past the line cap, since a report without it is unfinished.
SUMMARY = re.compile(rb"=========\s*[A-Z]+ SUMMARY:")
_KEEP = re.compile(r"Invalid __\w+__ \w+|Misaligned|Out-of-range|Illegal|^\s+at |by thread|Address 0x|is out of bounds")


def sanitizer_path() -> str | None:
    return shutil.which(SANITIZER)


def case_files(payload: ReplayPayload) -> dict[str, bytes]:
    """`payload` as case.json plus one .npy per input: the files `replay.py` reads."""
    request = payload.get("request", {})
    inputs = request.get("inputs", {})
    files: dict[str, bytes] = {}
    for name, array in inputs.items():
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
        files[f"{name}.npy"] = buffer.getvalue()
    case = {
        "source": payload.get("source", ""),
        "filename": payload.get("filename", ""),
        "entry_types": payload.get("entry_types", {}),
        "launches": [asdict(launch) for launch in request.get("launches", [])],
        "writable": request.get("writable", {}),
        "returned": list(request.get("returned", ())),
        "reverse_threads": bool(request.get("reverse_threads", False)),
        "inputs": list(inputs),
    }
    files["case.json"] = json.dumps(case).encode()
    return files


def write_case(folder: Path, payload: ReplayPayload) -> None:
    """The case's files written into `folder` (for a replay started by hand)."""
    for name, data in case_files(payload).items():
        (folder / name).write_bytes(data)


def replay_under_sanitizer(payload: ReplayPayload, case_timeout_s: float) -> str | None:
    """The sanitizer's report on one case (a few lines), or None when there is no sanitizer or no report."""
    replayed = sanitizer_replay(payload, case_timeout_s, "memcheck", print_limit=3)
    if replayed is None:
        return None
    reported, finished = replayed
    if not finished:
        return (
            f"{SANITIZER} did not finish within {REPLAY_FACTOR * case_timeout_s:g} s "
            f"({REPLAY_FACTOR} times the case's {case_timeout_s:g} s)"
        )
    lines = [shown(line) for line in reported if _KEEP.search(line)]
    return "\n".join(lines[:8]) or None


def sanitizer_replay(
    payload: ReplayPayload, case_timeout_s: float, tool_name: str, print_limit: int
) -> tuple[list[str], bool] | None:
    """One case replayed in a box under one of compute-sanitizer's tools (memcheck here, racecheck and
    synccheck for `racecheck.py`): the tool's own lines and whether it finished in time; None when
    the sanitizer is not installed.

    The tool writes its report to a pipe of its own (`--log-file`), never to the kernel's stdout:
    whatever the kernel prints (device printf) goes nowhere, so no amount of it can push the report
    out of what is kept, nor forge a line of it."""
    tool = sanitizer_path()
    if tool is None:
        return None
    limit_s = REPLAY_FACTOR * case_timeout_s
    box = Sandbox(boxes.REPLAY, prefix="attnlab-diagnose-")
    try:
        for name, data in case_files(payload).items():
            box.add_file(name, data)
        read_end, write_end = os.pipe()
        try:
            process = box.start(
                [
                    tool,
                    "--tool",
                    tool_name,
                    "--print-limit",
                    str(print_limit),
                    "--log-file",
                    f"/proc/self/fd/{write_end}",
                    *box.python_command("labrunner.run.replay", REPLAY_LIMITS, str(box.private)),
                ],
                stdout=subprocess.DEVNULL,
                pass_fds=(write_end,),
                host_code=False,
            )
        finally:
            os.close(write_end)
        try:
            return read_report(read_end, time.monotonic() + limit_s, lambda: process.poll() is not None)
        finally:
            os.close(read_end)
    finally:
        box.kill()


def read_report(fd: int, deadline: float, exited: Callable[[], bool] = lambda: False) -> tuple[list[str], bool]:
    """The tool's own lines (`=========` prefix removed) until the pipe closes, the tool has exited
    (something it started may hold the pipe open) or the deadline passes. Everything else (the
    kernel's printf) is read and dropped, so no amount of it costs memory."""
    kept: list[str] = []
    partial = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return kept, False
        ended = exited()
        if not select.select([fd], [], [], 0 if ended else min(left, 0.2))[0]:
            if ended:
                break
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        lines = (partial + chunk).split(b"\n")
        partial = lines.pop()[-4096:]
        kept += [
            _own(line)
            for line in lines
            if line.startswith(b"=========") and (len(kept) < REPORT_LINES or SUMMARY.match(line))
        ][: REPORT_LINES + 1 - len(kept)]
    if partial.startswith(b"=========") and (len(kept) < REPORT_LINES or SUMMARY.match(partial)):
        kept.append(_own(partial))
    return kept, True


def _own(line: bytes) -> str:
    return line.decode(errors="replace").removeprefix("=========").rstrip()
