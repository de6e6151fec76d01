"""The worker process: a restart gives a fresh process that has the modules again; close leaves nothing behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from labrunner.compile.gate import load_submission
from labrunner.labs import get_lab
from labrunner.run.cpu.module import cpu_compiler_available
from labrunner.run.worker import Worker
from labrunner.truth import oracle
from labrunner.truth.cases import random_inputs
from labrunner.truth.checker import check_output
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(cpu_compiler_available() is not None, reason="no C++ compiler for the CPU backend"),
]

LAB = get_lab("lab2")
STARTER = load_submission(LAB, LAB.starter_path, "starter.cu")
ROWS, PREFIX = 2, 31
FIXTURES = Path(__file__).parent / "fixtures" / "lab2" / "hostile"


def run_starter(worker: Worker, inputs) -> np.ndarray:
    launches = LAB.plan_launches(STARTER.constants, ROWS, PREFIX)
    given = {"q": inputs.q, "k": inputs.k, "v": inputs.v}
    run = worker.run_case("student", launches, given, {"out": ROWS * QUERY_HEADS * HEAD_DIM}, ("out",), 60.0)
    return run.outputs["out"].reshape(ROWS, QUERY_HEADS, HEAD_DIM)


def test_a_restarted_worker_is_a_new_process_with_the_module_loaded_again():
    inputs = random_inputs(np.random.default_rng(3), ROWS, PREFIX)
    reference = oracle.attention(inputs.q, inputs.k, inputs.v, prefix=PREFIX)
    with Worker("cpu") as worker:
        worker.load("student", STARTER.module.composed_source, "starter.cu", LAB.entry_point_types())
        first = run_starter(worker, inputs)
        first_pid = worker.pid
        worker.restart()
        assert worker.pid is None
        second = run_starter(worker, inputs)
        assert worker.pid != first_pid
    assert check_output(first, reference).passed
    np.testing.assert_array_equal(first, second)


def test_close_ends_the_process_and_leaves_nothing_on_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    worker = Worker("cpu")
    worker.load("student", STARTER.module.composed_source, "starter.cu", LAB.entry_point_types())
    private, pid = worker._sandbox.private, worker.pid
    # in a box its private folder is a tmpfs of the box's own (/job): nothing on the host's disk at all
    assert (private == Path("/job") and list(tmp_path.iterdir()) == []) if worker._sandbox.boxed else private.is_dir()
    worker.close()
    assert list(tmp_path.iterdir()) == []
    assert not os.path.exists(f"/proc/{pid}")
    assert worker.kernel_output() == []


def test_a_case_reply_brings_back_only_the_inputs_the_kernels_changed():
    inputs = random_inputs(np.random.default_rng(5), ROWS, PREFIX)
    mutating = load_submission(LAB, FIXTURES / "input_mutation.cu", "input_mutation.cu")
    launches = LAB.plan_launches(mutating.constants, ROWS, PREFIX)
    given = {"q": inputs.q, "k": inputs.k, "v": inputs.v}
    out = {"out": ROWS * QUERY_HEADS * HEAD_DIM}
    with Worker("cpu") as worker:
        worker.load("student", STARTER.module.composed_source, "starter.cu", LAB.entry_point_types())
        untouched = worker.run_case(
            "student", LAB.plan_launches(STARTER.constants, ROWS, PREFIX), given, out, ("out",), 60.0
        )
    assert untouched.inputs_after == {}
    with Worker("cpu") as worker:  # a CPU worker loads one module
        worker.load("student", mutating.module.composed_source, "input_mutation.cu", LAB.entry_point_types())
        scribbled = worker.run_case("student", launches, given, out, ("out",), 60.0)
    assert list(scribbled.inputs_after) == ["k"]
    changed = np.flatnonzero(scribbled.inputs_after["k"] != inputs.k)
    assert changed.tolist() == list(range(32))  # the first 32 of key 0 of KV head 0, zeroed by one warp
