"""Lab 3's timing: a paged batch of fresh values on a fixed seeded layout, bytes that must move, the
same run's device copy, and the gate as a fraction of that copy. The worker's real timing code runs
in process on the numpy stand-in for the GPU (its "kernel" is the decode oracle), every call 1 ms."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_standin import CountingTimer, InProcessWorker, NumpyGpu
from result_schema import timing_json

import labrunner.pipeline.timing_stage as benchmark
from labrunner.labs import get_lab
from labrunner.labs.definition import Lab
from labrunner.measure.gates import apply_bandwidth_gate
from labrunner.measure.sampling import TimingOptions
from labrunner.pipeline.timing_stage import Contender, Contenders, CpuReferences, Sampling, TimedShape, time_speedup
from labrunner.records.timing import Bandwidth
from labrunner.truth.paged_cache import bytes_to_move, timing_batch

LAB = get_lab("lab3")
ROWS, LONGEST = 3, 40
SOLUTION = LAB.constants({"attnlab_partition_tokens": 16, "attnlab_heads_per_block": 4, "attnlab_partial_threads": 128})
STARTER = LAB.constants({})
COPY_BYTES = 1 << 20  # past half of what the test shape moves, so the copy is this size


@pytest.fixture
def in_process(monkeypatch):
    import labrunner.measure.gpu_timer
    import labrunner.measure.input_pool as input_pool

    monkeypatch.setattr(labrunner.measure.gpu_timer, "CupyTimer", CountingTimer)
    monkeypatch.setattr(input_pool, "CudaSets", input_pool.NumpySets)
    monkeypatch.setattr(benchmark, "MIN_COPY_BYTES", COPY_BYTES)


def timed(worker, rounds=1):
    return timing_json(
        time_speedup(
            LAB,
            worker,
            Contenders(Contender("solution.cu", SOLUTION), Contender("starter.cu", STARTER)),
            TimedShape(ROWS, LONGEST),
            Sampling(
                seed=3,
                options=TimingOptions(rounds=rounds, seed=3, min_samples=6, budget_s=0.05),
                references=CpuReferences(),
            ),
        )
    )


def test_the_timing_layout_is_seeded_with_one_sequence_of_the_longest_length():
    lengths, table = timing_batch(64, 32768, seed=20261129)
    again, same_table = timing_batch(64, 32768, seed=20261129)
    assert lengths == again and np.array_equal(table, same_table)
    assert lengths[0] == 32768 and len(lengths) == 64 and min(lengths) >= 1 and max(lengths) == 32768
    used = table[table >= 0]
    pages = sum(-(-n // 16) for n in lengths)
    assert sorted(used.tolist()) == list(range(pages))  # every page used once, none spare
    assert table.shape == (64, 2049) and (table[:, -1] == -1).all()
    # about 4.3 GB of K and V at the timing shape, far beyond any L2
    assert 3.0e9 < bytes_to_move(lengths, 32, 8, 64) < 5.6e9


def test_bytes_that_must_move_count_k_and_v_once_per_kv_head_and_nothing_partial():
    # 17 + 1 keys: K and V of 8 heads x 64 dims; q and out of 2 x 32 x 64; 2 + 1 table entries; 2 lengths
    assert bytes_to_move([17, 1], 32, 8, 64) == 4 * (2 * 18 * 8 * 64 + 2 * 2 * 32 * 64 + 3 + 2)


def test_a_decode_round_reports_bandwidth_against_the_same_runs_copy(in_process):
    worker = InProcessWorker(NumpyGpu())
    timing, failure = timed(worker)
    assert failure is None
    layout = LAB.timing_layout(ROWS, LONGEST, 3)
    moved = bytes_to_move(layout["fixed"]["seqLens"].tolist(), 32, 8, 64)
    # every call, the copy's too, takes the counting timer's 1 ms
    assert timing["bandwidth"] == {
        "bytes": moved,
        "student_tb_s": moved / 1e-3 / 1e12,
        "baseline_tb_s": moved / 1e-3 / 1e12,
        "copy_tb_s": 2 * COPY_BYTES / 1e-3 / 1e12,
        "copy_fraction": moved / (2 * COPY_BYTES),
        "copy": [{"bytes": COPY_BYTES, "median_ms": 1.0}],
    }
    assert timing["gflop"] == 4 * 64 * 32 * sum(layout["fixed"]["seqLens"].tolist()) / 1e9
    assert timing["verified_calls"]["student"] >= 2 and timing["speedup"] == 1.0


def test_each_contender_gets_a_workspace_of_its_own_geometry_and_the_sets_carry_the_layout(in_process):
    requests = []
    worker = InProcessWorker(NumpyGpu())
    original = worker.time
    worker.time = lambda request, timeout_s: requests.append(request) or original(request, timeout_s)
    timed(worker)
    request = requests[0]
    parts = -(-LONGEST // 16)
    assert request["student_workspace"] == {
        "partOut": ROWS * 32 * parts * 64,
        "partMax": ROWS * 32 * parts,
        "partSum": ROWS * 32 * parts,
    }
    assert request["baseline_workspace"] == {"partOut": ROWS * 32 * 64, "partMax": ROWS * 32, "partSum": ROWS * 32}
    sets = request["sets"]
    assert sets["pages"] == sum(-(-n // 16) for n in sets["fixed"]["seqLens"].tolist())
    assert sets["fixed"]["blockTable"].dtype == np.int32 and request["copy_bytes"] == COPY_BYTES
    # every timed call saw pages of its own: no two calls' K the same
    seen_k = [k for _, k, _ in worker.device.seen]
    # two launches a call (partial and combine), and the baseline runs on the set its student just ran on
    assert len(set(seen_k)) == len(seen_k) // 4


def test_a_decode_kernel_that_stops_computing_gets_no_time(in_process):
    timing, failure = timed(InProcessWorker(NumpyGpu(skip_after=10)))
    assert timing is None
    assert failure.status == "never-written"
    assert "a timed call on fresh input set" in failure.message and "no time is reported" in failure.message


@pytest.mark.parametrize(
    "reached, status, words",
    [
        (
            0.93,
            "met",
            "met: 0.93 of the device copy's bandwidth (3.72 of 4.00 TB/s, timed in the same run on NVIDIA "
            "H200) against the 0.8 required",
        ),
        (
            0.5,
            "missed",
            "missed: 0.50 of the device copy's bandwidth (2.00 of 4.00 TB/s, timed in the same run on "
            "NVIDIA H200) against the 0.8 required",
        ),
    ],
)
def test_the_bandwidth_gate_is_a_fraction_of_the_same_runs_copy(reached, status, words):
    gate = apply_bandwidth_gate(
        Bandwidth(0, student_tb_s=4.0 * reached, baseline_tb_s=0.0, copy_tb_s=4.0, copy=[], required_fraction=0.8),
        "NVIDIA H200",
    ).to_json()
    assert (gate["status"], gate["passed"], gate["message"]) == (status, status == "met", words)


# --- `attnlab grade lab3` end to end on the stand-in GPU ------------------------------------------


def small_catalogue(copy_fraction: float):
    from labrunner.truth.cases import Case, Catalogue

    return Catalogue(
        lab="lab3",
        cases=(Case("small", rows=0, lengths=(1, 17, "p+3")),),
        timing={"rows": ROWS, "prefix": LONGEST, "copy_fraction": copy_fraction},
    )


@pytest.fixture
def standin_gpu(monkeypatch, tmp_path, in_process):
    from labrunner.measure import device_state
    from labrunner.measure.device_state import DeviceState
    from labrunner.pipeline import backend as backend_module
    from labrunner.pipeline import bench as bench_pipeline
    from labrunner.pipeline import grade as grade_pipeline

    device = NumpyGpu()
    monkeypatch.setattr(backend_module, "gpu_status", lambda: (True, "NVIDIA H200"))
    monkeypatch.setattr(grade_pipeline, "Worker", lambda backend: InProcessWorker(device))
    monkeypatch.setattr(bench_pipeline, "Worker", lambda backend: InProcessWorker(device))
    monkeypatch.setattr(
        device_state, "read_device_state", lambda index=0: DeviceState(name="NVIDIA H200", sm_clock_mhz=1980)
    )
    monkeypatch.setattr(benchmark, "gpu_references", CpuReferences)
    monkeypatch.chdir(tmp_path)

    def grade(copy_fraction: float):
        import json
        from pathlib import Path

        from click.testing import CliRunner

        from labrunner.cli import main

        monkeypatch.setattr(Lab, "catalogue", property(lambda lab: small_catalogue(copy_fraction)))
        result = CliRunner(env={"COLUMNS": "200"}).invoke(
            main, ["grade", "lab3", str(LAB.solution_path), "--device", "gpu", "--budget", "0.05", "--json", "r.json"]
        )
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
        return result, json.loads(Path("r.json").read_text())

    return grade


# The stand-in moves about 0.22 of its copy's bytes in the same 1 ms: a gate at 0.1 is met, one at 0.5 missed.
@pytest.mark.parametrize("copy_fraction, verdict, exit_code", [(0.1, "pass", 0), (0.5, "speed-gate", 5)])
def test_grade_lab3_prints_bandwidth_and_gates_on_the_copy_fraction(standin_gpu, copy_fraction, verdict, exit_code):
    result, data = standin_gpu(copy_fraction)
    bandwidth = data["timing"]["bandwidth"]
    fraction = bandwidth["copy_fraction"]
    assert (data["verdict"], result.exit_code) == (verdict, exit_code)
    assert data["gate"]["status"] == ("met" if verdict == "pass" else "missed")
    assert data["gate"]["required_fraction"] == copy_fraction
    assert fraction == bandwidth["bytes"] / (2 * COPY_BYTES)
    assert f"B = 3 sequences, the longest 40 keys ({bandwidth['bytes'] / 1e9:.2f} GB must move)" in result.stdout
    assert (
        f"device copy in the same run: {bandwidth['copy_tb_s']:.2f} TB/s; {data['timing']['student_label']} reaches "
        f"{fraction:.2f} of it ({bandwidth['student_tb_s']:.2f} TB/s)"
    ) in result.stdout
    assert "SPEEDUP 1.00x" in result.stdout
    assert f"timing {data['timing']['student_label']} against" in result.stderr
    assert "at B = 3, longest 40, interleaved" in result.stderr


@pytest.mark.slow
def test_bench_lab3_checks_its_longest_decode_case_then_times_bandwidth(standin_gpu, monkeypatch):
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from labrunner.cli import main
    from labrunner.pipeline import bench as bench_pipeline

    standin_gpu(0.1)  # the catalogue patched in; this grade's own report is not read
    monkeypatch.setattr(bench_pipeline, "refuse_bench_without_gpu", lambda device: None)
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["bench", "lab3", "--device", "gpu", "--budget", "0.05", "--json", "b.json"]
    )
    data = json.loads(Path("b.json").read_text())
    assert result.exit_code == 0, result.stdout
    assert [(c["name"], c["rows"], c["prefix"], c["status"]) for c in data["cases"]] == [
        ("small", 3, 1027, "pass")
    ]  # p + 3 at the solution's p = 1024
    assert data["timing"]["bandwidth"]["bytes"] > 0 and "device copy in the same run" in result.stdout


def test_profile_lab3_no_longer_refuses_it_asks_for_the_gpu(monkeypatch):
    from click.testing import CliRunner

    from labrunner.cli import main
    from labrunner.pipeline import backend as backend_module

    monkeypatch.setattr(backend_module, "gpu_status", lambda: (False, "no GPU found"))
    result = CliRunner().invoke(main, ["profile", "lab3", str(LAB.solution_path)])
    assert result.exit_code == 6
    assert result.stderr == (
        "error: profile needs a GPU: no GPU found; check correctness on the CPU with "
        f"`attnlab grade lab3 {LAB.solution_path}`\n"
    )
