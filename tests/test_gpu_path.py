"""The GPU path's plain logic, on a CPU: `attnlab grade` end to end on a numpy stand-in for the GPU.

Everything but the kernel and the clock is the real code: the CLI, the oracle proof, the compile
gate (NVRTC runs here), the worker's request handlers, the guard bands over numpy, timing's
sampling loop and verified calls, the speed gate and the verdict with its exit code. The stand-in's
"kernel" is the oracle (see `gpu_standin.py`); every timed call takes 1 ms, so SPEEDUP is exactly
1.00x and a gate decides on numbers known in advance.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gpu_standin import CountingTimer, InProcessWorker, NumpyGpu, WritesPastTheEnd

from labrunner.cli import main
from labrunner.exit_codes import ExitCode
from labrunner.labs.definition import Lab
from labrunner.measure import device_state
from labrunner.measure.device_state import DeviceState
from labrunner.pipeline import backend as backend_module
from labrunner.pipeline import bench as bench_pipeline
from labrunner.pipeline import grade as grade_pipeline
from labrunner.run.gpu_device import GuardedBuffer
from labrunner.truth.cases import Case, Catalogue
from labrunner.truth.poison import CANARY_BITS, GUARD_ELEMENTS, POISON_BITS, inspect_guards

REPO = Path(__file__).resolve().parent.parent
SOLUTION = REPO / "kernels/lab2/solution.cu"
GPU = "NVIDIA H200"
# One small case and a small timed shape: the stand-in's kernel is the float64 oracle.
SMALL = Catalogue(lab="lab2", cases=(Case("C3-P31", 3, 31),), timing={"rows": 3, "prefix": 31})


class StandinGpu:
    """What `--device gpu` finds: a GPU named NVIDIA H200, whose worker runs on `device`."""

    def __init__(self):
        self.device = NumpyGpu()

    def worker(self, backend: str) -> InProcessWorker:
        assert backend == "gpu"
        return InProcessWorker(self.device)


@pytest.fixture
def standin_gpu(monkeypatch, tmp_path) -> StandinGpu:
    gpu = StandinGpu()
    monkeypatch.setattr(backend_module, "gpu_status", lambda: (True, GPU))
    monkeypatch.setattr(grade_pipeline, "Worker", gpu.worker)
    monkeypatch.setattr(bench_pipeline, "Worker", gpu.worker)
    monkeypatch.setattr(Lab, "catalogue", property(lambda lab: SMALL))
    monkeypatch.setattr(device_state, "read_device_state", lambda index=0: DeviceState(name=GPU, sm_clock_mhz=1980))
    import labrunner.measure.gpu_timer
    import labrunner.measure.input_pool as input_pool
    import labrunner.pipeline.timing_stage as benchmark

    monkeypatch.setattr(labrunner.measure.gpu_timer, "CupyTimer", CountingTimer)
    monkeypatch.setattr(input_pool, "CudaSets", input_pool.NumpySets)  # the sets' definition, in numpy
    monkeypatch.setattr(benchmark, "gpu_references", benchmark.CpuReferences)  # the oracle's, in numpy
    monkeypatch.setattr(benchmark, "MIN_COPY_BYTES", 1 << 20)  # the device copy every run times, kept small here
    monkeypatch.chdir(tmp_path)
    return gpu


def gates(tmp_path: Path, fraction: float, solution_speedup: float = 13.0) -> Path:
    path = tmp_path / "gates.json"
    path.write_text(
        json.dumps(
            {"schema": "attnlab.gates/1", "lab2": {GPU: {"fraction": fraction, "solution_speedup": solution_speedup}}}
        )
    )
    return path


def grade(*extra: str):
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["grade", "lab2", str(SOLUTION), "--device", "gpu", "--budget", "0.05", "--json", "result.json", *extra]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result, json.loads(Path("result.json").read_text())


@pytest.mark.slow
def test_a_missed_speed_gate_is_exit_5_with_both_numbers(standin_gpu, tmp_path):
    result, report = grade("--gates", str(gates(tmp_path, fraction=0.5)))
    assert result.exit_code == ExitCode.SPEED_GATE == 5
    assert (report["verdict"], report["exit_code"], report["decisive_case"]) == ("speed-gate", 5, None)
    assert [c["status"] for c in report["cases"]] == ["pass"]
    assert report["timing"]["speedup"] == 1.0
    assert report["gate"] == {
        "status": "missed",
        "passed": False,
        "required_speedup": 6.5,
        "speedup": 1.0,
        "message": "missed: SPEEDUP 1.00x against the 6.50x required on NVIDIA H200 "
        "(0.5 of the solution's calibrated 13.00x)",
    }
    assert "speed gate: missed: SPEEDUP 1.00x against the 6.50x required on NVIDIA H200" in result.output
    assert result.output.rstrip().endswith("SPEED-GATE on the GPU (exit 5)")


@pytest.mark.slow
def test_a_gate_met_exactly_is_a_pass(standin_gpu, tmp_path):
    # 0.125 * 8 = 1.0 exactly: a student at the bar passes it
    result, report = grade("--gates", str(gates(tmp_path, fraction=0.125, solution_speedup=8.0)))
    assert result.exit_code == 0
    assert (report["verdict"], report["exit_code"]) == ("pass", 0)
    assert report["gate"]["status"] == "met"
    assert report["gate"]["message"] == (
        "met: SPEEDUP 1.00x against the 1.00x required on NVIDIA H200 (0.125 of the solution's calibrated 8.00x)"
    )
    assert result.output.rstrip().endswith("PASS on the GPU (exit 0)")


@pytest.mark.slow
def test_a_gate_for_another_gpu_says_so_and_passes(standin_gpu, tmp_path):
    path = tmp_path / "gates.json"
    path.write_text(
        json.dumps(
            {
                "schema": "attnlab.gates/1",
                "lab2": {"NVIDIA A100-SXM4-80GB": {"fraction": 0.5, "solution_speedup": 13.0}},
            }
        )
    )
    result, report = grade("--gates", str(path))
    assert result.exit_code == 0
    assert report["gate"] == {"status": "none", "passed": True, "message": "no speed gate for NVIDIA H200"}


@pytest.mark.slow
def test_a_wrong_answer_outranks_a_missed_gate_and_is_never_timed(standin_gpu, tmp_path):
    standin_gpu.device = WrongInLastColumn()
    result, report = grade("--gates", str(gates(tmp_path, fraction=0.5)))
    assert result.exit_code == ExitCode.WRONG_ANSWER
    assert (report["verdict"], report["decisive_case"], report["timing"], report["gate"]) == (
        "wrong",
        "C3-P31",
        None,
        None,
    )
    assert report["cases"][0]["message"].startswith("row 0, head 0, col 63: got ")


class WrongInLastColumn(NumpyGpu):
    def compute(self, buffers):
        super().compute(buffers)
        buffers["out"].reshape(-1, 64)[:, 63] += 1.0


# --- guard bands, through the same code the GPU runs, on numpy ------------------------------


def test_a_guarded_buffer_is_canaries_then_poison_then_canaries():
    buffer = GuardedBuffer(np, 10, POISON_BITS)
    bits = buffer.full.view(np.uint32)
    assert buffer.full.size == GUARD_ELEMENTS + 10 + GUARD_ELEMENTS
    assert (bits[:GUARD_ELEMENTS] == CANARY_BITS).all() and (bits[GUARD_ELEMENTS + 10 :] == CANARY_BITS).all()
    assert (bits[GUARD_ELEMENTS : GUARD_ELEMENTS + 10] == POISON_BITS).all()
    assert buffer.inner.size == 10
    assert buffer.inner.__array_interface__["data"][0] == buffer.full[GUARD_ELEMENTS:].__array_interface__["data"][0]
    before, after = buffer.bands(np.copy)
    assert (before.size, after.size) == (GUARD_ELEMENTS, GUARD_ELEMENTS)
    assert inspect_guards("out", before, after) is None


def test_repoisoning_touches_the_buffer_and_never_its_bands():
    buffer = GuardedBuffer(np, 10, 0x7FEDF00D)
    buffer.inner[:] = 1.0
    buffer.repoison()
    bits = buffer.full.view(np.uint32)
    assert (bits[GUARD_ELEMENTS : GUARD_ELEMENTS + 10] == 0x7FEDF00D).all()
    assert (bits[GUARD_ELEMENTS - 1], bits[GUARD_ELEMENTS + 10]) == (CANARY_BITS, CANARY_BITS)


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (10, "out-of-bounds write to out: 1 element(s) past its end (up to 1 past element 9)"),
        (-1, "out-of-bounds write to out: 1 element(s) before its start (up to 1 before element 0)"),
        (
            10 + GUARD_ELEMENTS - 1,
            f"out-of-bounds write to out: 1 element(s) past its end (up to {GUARD_ELEMENTS} past element 9)",
        ),
        (
            -GUARD_ELEMENTS,
            f"out-of-bounds write to out: 1 element(s) before its start (up to {GUARD_ELEMENTS} before element 0)",
        ),
    ],
)
def test_one_element_either_side_is_caught_and_measured(index, expected):
    buffer = GuardedBuffer(np, 10, POISON_BITS)
    buffer.full[GUARD_ELEMENTS + index] = 0.0  # where out[index] lies, as a kernel's pointer reaches it
    damage = inspect_guards("out", *buffer.bands(np.copy))
    assert damage.describe(10) == expected


def test_writing_every_element_and_no_more_is_clean():
    buffer = GuardedBuffer(np, 10, POISON_BITS)
    buffer.inner[:] = 0.0
    assert inspect_guards("out", *buffer.bands(np.copy)) is None


@pytest.mark.parametrize(
    ("past", "before", "expected"),
    [
        (1, 0, "out-of-bounds write to out: 1 element(s) past its end (up to 1 past element 6143)"),
        (0, 1, "out-of-bounds write to out: 1 element(s) before its start (up to 1 before element 0)"),
        (
            3,
            2,
            "out-of-bounds write to out: 3 element(s) past its end (up to 3 past element 6143) and "
            "2 element(s) before its start (up to 2 before element 0)",
        ),
    ],
)
@pytest.mark.slow
def test_grading_on_the_gpu_path_names_an_out_of_bounds_write(standin_gpu, past, before, expected):
    standin_gpu.device = WritesPastTheEnd(past=past, before=before)
    result, report = grade("--no-timing")
    assert result.exit_code == ExitCode.MISBEHAVED
    assert (report["verdict"], report["cases"][0]["message"]) == ("out-of-bounds", expected)
