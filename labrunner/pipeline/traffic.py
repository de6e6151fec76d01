"""`attnlab traffic`: the lesson's HBM traffic model as a table, no GPU needed (the model: `measure/traffic.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from labrunner.exit_codes import usage_error
from labrunner.measure.traffic import check_heads, default_kv_heads, lesson_line, traffic
from labrunner.records.traffic import TrafficShape
from labrunner.report.reporter import Reporter


@dataclass(frozen=True)
class TrafficAsk:
    """`attnlab traffic`'s options: the sequence lengths, the heads (KV heads: one per 4 query heads by
    default), the head size and the bytes of one element."""

    seq: tuple[int, ...]
    heads: int
    kv_heads: int | None
    d_head: int
    dtype_bytes: int


def show_traffic(ask: TrafficAsk, reporter: Reporter) -> None:
    seq, heads, d_head, dtype_bytes = ask.seq, ask.heads, ask.d_head, ask.dtype_bytes
    kv = ask.kv_heads or default_kv_heads(heads)
    problem = check_heads(heads, kv)
    if problem:
        raise usage_error(problem)
    reporter.lines(
        [
            f"HBM traffic model: {heads} query head{'s' if heads > 1 else ''}, {kv} KV head"
            f"{'s' if kv > 1 else ''}, d_head {d_head}, {dtype_bytes}-byte elements (MB = 10^6 bytes)"
        ]
    )
    reporter.lines([lesson_line(n, traffic(TrafficShape(n, n, heads, kv, d_head, dtype_bytes))) for n in seq])
    reporter.lines(
        [
            "naive: Q, K, V read, the N x N scores written and read back, the probabilities written and "
            "read back, the output written; flash: Q, K, V read once, the output written once"
        ]
    )
    if kv < heads:
        reporter.lines(
            [
                f"grouped-query attention: each of the {kv} KV heads serves {heads // kv} query heads, so K "
                f"and V are 1/{heads // kv} of Q's size; flash counts each KV head read once for its whole "
                "group (a kernel that reads it once per query head relies on L2 for the rest)"
            ]
        )
