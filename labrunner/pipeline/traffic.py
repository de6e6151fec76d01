"""`attnlab traffic`: the lesson's HBM traffic model as a table, no GPU needed (the model: `measure/traffic.py`)."""

from __future__ import annotations

from labrunner.exit_codes import usage_error
from labrunner.measure.traffic import check_heads, default_kv_heads, lesson_line, traffic
from labrunner.records.traffic import TrafficShape
from labrunner.report import terminal


def show_traffic(seq: tuple[int, ...], heads: int, kv_heads: int | None, d_head: int, dtype_bytes: int) -> None:
    kv = kv_heads or default_kv_heads(heads)
    problem = check_heads(heads, kv)
    if problem:
        raise usage_error(problem)
    terminal.plain_lines(
        [
            f"HBM traffic model: {heads} query head{'s' if heads > 1 else ''}, {kv} KV head"
            f"{'s' if kv > 1 else ''}, d_head {d_head}, {dtype_bytes}-byte elements (MB = 10^6 bytes)"
        ]
    )
    terminal.plain_lines([lesson_line(n, traffic(TrafficShape(n, n, heads, kv, d_head, dtype_bytes))) for n in seq])
    terminal.plain_lines(
        [
            "naive: Q, K, V read, the N x N scores written and read back, the probabilities written and "
            "read back, the output written; flash: Q, K, V read once, the output written once"
        ]
    )
    if kv < heads:
        terminal.plain_lines(
            [
                f"grouped-query attention: each of the {kv} KV heads serves {heads // kv} query heads, so K "
                f"and V are 1/{heads // kv} of Q's size; flash counts each KV head read once for its whole "
                "group (a kernel that reads it once per query head relies on L2 for the rest)"
            ]
        )
