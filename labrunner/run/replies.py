"""What the driver accepts back from a worker: the buffers each request implies, and nothing else.

A case's reply carries exactly the writable buffers asked for (`outputs/<name>`), both guard
bands of every writable buffer (`bands/<name>/0` and `/1`), and every input the kernels changed, as
they left it (`inputs_after/<name>`), each with the dtype and shape the driver sent or asked for. An
input the worker found bit for bit as sent is left out: lab 3's longest case would otherwise send
its 134 MiB of K and V straight back. The worker's word that an input is unchanged is worth what
its bytes would be: both come from the process that ran the kernels. A timing
reply carries its checked calls: their set numbers and their outputs, each output as long as
one the request names (`out_count`, or a size's `out_count` in a pipeline request). A new
kind of buffer in a timing reply needs its rule here, in `timing_reply`.

A timing reply's figures cross the wire as JSON; they are read into their records here, once
(`round_comparison`, `kernel_series`, `peer_row`), so the driver's timing works on records only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from labrunner.records.timing import Comparison, PeerRow, Series
from labrunner.run.wire import NO_BUFFERS, BufferSpec, Expected, Message
from labrunner.truth.poison import GUARD_ELEMENTS

TIMING_REPLY_LIMIT_BYTES = 8 << 30  # far above a timing run's verified outputs (16 MiB each at lab 2's shape)


def case_reply(inputs: dict[str, np.ndarray], writable: dict[str, int], returned: Iterable[str]) -> Expected:
    exact = {f"outputs/{name}": BufferSpec("float32", (writable[name],)) for name in returned}
    for name in writable:
        for side in (0, 1):
            exact[f"bands/{name}/{side}"] = BufferSpec("float32", (GUARD_ELEMENTS,))
    for name, array in inputs.items():
        exact[f"inputs_after/{name}"] = BufferSpec(array.dtype.name, tuple(array.shape))
    return Expected(exact=exact, optional=frozenset(f"inputs_after/{name}" for name in inputs))


def timing_reply(request: Message) -> Expected:
    """A timing reply's buffers: for each contender (or lab 1 size) the checked calls' set numbers,
    `int64 [n]`, and their outputs, `float32 [n][out_count]` with the request's own `out_count`."""
    lengths = {request["out_count"]} if "out_count" in request else set()
    lengths |= {size["out_count"] for size in request.get("sizes", [])}

    def fits(name: str, spec: BufferSpec) -> bool:
        # where a checked call's buffers stand is the timing code's business; their dtype and size are ours
        if name.endswith("/sets"):
            return spec.dtype == "int64" and len(spec.shape) == 1
        return (
            name.endswith("/outputs") and spec.dtype == "float32" and len(spec.shape) == 2 and spec.shape[1] in lengths
        )

    return Expected(fits=fits, max_bytes=TIMING_REPLY_LIMIT_BYTES)


def peer_check_reply(request: Message) -> Expected:
    """A peer's check before timing: its one output, `float32 [1][out_count]`, and that set's number; or
    no buffers at all where the peer cannot run here."""

    def fits(name: str, spec: BufferSpec) -> bool:
        if name == "checked/sets":
            return spec.dtype == "int64" and spec.shape == (1,)
        return name == "checked/outputs" and spec.dtype == "float32" and spec.shape == (1, request["out_count"])

    return Expected(fits=fits, max_bytes=TIMING_REPLY_LIMIT_BYTES)


def trace_reply(request: Message) -> Expected:
    """A trace reply is plain JSON (each kernel's start and end in nanoseconds): no buffers at all."""
    return NO_BUFFERS


def round_comparison(reply: dict[str, Any]) -> Comparison:
    """One round's comparison as its worker measured it, its raw samples kept for pooling."""
    return Comparison.from_json(reply["comparison"])


def kernel_series(stats: dict[str, dict[str, Any]]) -> dict[str, Series]:
    """Lab 1's series at one size, by kernel and "total", as the worker summarised them."""
    return {name: Series.from_json(figures) for name, figures in stats.items()}


def peer_row(versus: dict[str, Any]) -> PeerRow:
    """The peer interleaved with lab 1's whole call at one size: its series and SPEEDUP against it."""
    return PeerRow(
        Series.from_json(versus["stats"]), versus["speedup"], versus["ci_low"], versus["ci_high"], versus["enqueue"]
    )
