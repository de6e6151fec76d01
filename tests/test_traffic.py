"""`attnlab traffic`: the lesson's HBM traffic model, to the digit, and the contract's shapes by default."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from labrunner.cli import main
from labrunner.measure.traffic import traffic
from labrunner.records.traffic import TrafficShape

LESSON_TABLE = [
    "N=  1024: naive=    8.91 MB  flash=  0.52 MB  naive/flash= 17.0x",
    "N=  4096: naive=  136.31 MB  flash=  2.10 MB  naive/flash= 65.0x",
    "N= 16384: naive= 2155.87 MB  flash=  8.39 MB  naive/flash=257.0x",
]


def traffic_cli(*args: str):
    return CliRunner(env={"COLUMNS": "80"}).invoke(main, ["traffic", *args])


def test_the_lessons_assumptions_reproduce_its_table_line_for_line():
    result = traffic_cli("--seq", "1024,4096,16384", "--heads", "1", "--d-head", "64", "--dtype-bytes", "2")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "HBM traffic model: 1 query head, 1 KV head, d_head 64, 2-byte elements (MB = 10^6 bytes)"
    assert lines[1:4] == LESSON_TABLE
    assert len(lines) == 5  # one head: no grouping to explain
    assert result.stderr == ""


def test_the_defaults_are_the_contract_32_query_heads_8_kv_heads_float32_at_lab1s_sizes():
    result = traffic_cli()
    assert result.exit_code == 0
    assert result.stdout.splitlines()[:4] == [
        "HBM traffic model: 32 query heads, 8 KV heads, d_head 64, 4-byte elements (MB = 10^6 bytes)",
        "N=   512: naive=  144.70 MB  flash= 10.49 MB  naive/flash= 13.8x",
        "N=  1024: naive=  557.84 MB  flash= 20.97 MB  naive/flash= 26.6x",
        "N=  2048: naive= 2189.43 MB  flash= 41.94 MB  naive/flash= 52.2x",
    ]
    assert result.stdout.splitlines()[5] == (
        "grouped-query attention: each of the 8 KV heads serves 4 query heads, so K and V are 1/4 of Q's size; flash "
        "counts each KV head read once for its whole group (a kernel that reads it once per query head relies on L2 "
        "for the rest)"
    )


def test_grouped_query_heads_shrink_only_k_and_v():
    # 2048 tokens, float32: Q and the output are 16 MiB each; K and V are 4 MiB each with 8 KV heads
    # and would be 16 MiB each with 32; the 32 score matrices (512 MiB each way) do not change.
    gqa = traffic(TrafficShape(2048, 2048, 32, 8))
    mha = traffic(TrafficShape(2048, 2048, 32, 32))
    assert (gqa.q_bytes, gqa.kv_bytes, gqa.out_bytes) == (16 * 2**20, 8 * 2**20, 16 * 2**20)
    assert mha.kv_bytes == 32 * 2**20
    assert gqa.matrix_bytes == mha.matrix_bytes == 512 * 2**20
    assert mha.flash_bytes - gqa.flash_bytes == mha.naive_bytes - gqa.naive_bytes == 24 * 2**20
    assert gqa.flash_bytes == 40 * 2**20


def test_lab2s_chunk_reads_its_whole_prefix_of_keys():
    model = traffic(TrafficShape(rows=2048, keys=4096))  # C = P = 2048
    assert model.kv_bytes == 2 * 4096 * 8 * 64 * 4
    assert model.matrix_bytes == 32 * 2048 * 4096 * 4
    assert model.flash_bytes == 50_331_648 and model.naive_bytes == 4_345_298_944


def test_kv_heads_that_do_not_divide_the_query_heads_are_a_usage_error():
    result = traffic_cli("--heads", "32", "--kv-heads", "5")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --kv-heads 5 must divide --heads 32 (each KV head serves the same number of query heads)\n"
    )


@pytest.mark.parametrize("seq", ["1,x", "0,4"])
def test_a_bad_sequence_list_is_a_usage_error(seq):
    result = traffic_cli("--seq", seq)
    assert result.exit_code == 2
    assert "Invalid value for '--seq'" in result.stderr
