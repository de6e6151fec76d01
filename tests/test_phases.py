"""Where a grade's time goes (`--timings`, the JSON's `timings`), and what it now makes once or ahead:
the phase clock, the grader's cache and the CPU build's shared parts in it, the worker and the GPU
oracle started while the file compiles."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from test_cli import cpu_backend_ready

from labrunner import phases
from labrunner.grader_cache import CACHE_VARIABLE, grader_cache_dir
from labrunner.labs import get_lab
from labrunner.pipeline import oracle_ahead, worker_ahead
from labrunner.pipeline.correctness import resolved_cases
from labrunner.pipeline.oracle_ahead import OracleAhead
from labrunner.pipeline.worker_ahead import WorkerAhead
from labrunner.truth.cases import make_inputs

REPO = Path(__file__).resolve().parent.parent


def box_missing() -> bool:
    from labrunner import box as boxes

    return boxes.availability() is not None


SOLUTION = REPO / "kernels/lab2/solution.cu"


class Ticks:
    """perf_counter as a clock the test moves by hand."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ticks(monkeypatch) -> Ticks:
    clock = Ticks()
    monkeypatch.setattr(phases.time, "perf_counter", clock)
    monkeypatch.setattr(phases, "process_age_s", lambda: 0.75)
    return clock


def test_a_phase_inside_another_is_counted_once_in_itself_and_the_rest_is_other(ticks):
    clock = phases.PhaseClock()
    clock.start()
    with clock.phase("case C1"):
        ticks.now += 1.0
        with clock.phase("oracle"):
            ticks.now += 0.25
        ticks.now += 0.5
    with clock.phase("case C2"):
        ticks.now += 2.0
        with clock.phase("oracle"):
            ticks.now += 0.5
    ticks.now += 0.125  # covered by no phase
    assert clock.table() == [
        ("imports", 0.75),
        ("case C1", 1.5),
        ("oracle", 0.75),
        ("case C2", 2.0),
        ("other", 0.125),
    ]


def test_a_phase_timed_in_another_thread_is_named_ahead_and_left_out_of_the_sum(ticks):
    clock = phases.PhaseClock()
    clock.start()

    def ahead():
        with clock.phase("box start"):
            ticks.now += 3.0

    thread = threading.Thread(target=ahead)
    thread.start()
    thread.join()
    with clock.phase("compile student"):
        ticks.now += 1.0
    # 4 s passed in all; the main thread's phase took 1 of them (the other 3 overlapped nothing here,
    # and are still no phase of the main thread's)
    assert clock.table() == [("imports", 0.75), ("box start (ahead)", 3.0), ("compile student", 1.0), ("other", 3.0)]


def test_the_process_age_is_read_from_proc_and_is_positive():
    age = phases.process_age_s()
    assert age is not None and 0.0 <= age < 24 * 3600


def test_the_grader_cache_is_made_private_and_refused_where_others_can_write(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    folder = grader_cache_dir("cpu-parts")
    assert folder == tmp_path / "cache" / "cpu-parts"
    assert folder.stat().st_mode & 0o777 == 0o700
    os.chmod(tmp_path / "cache", 0o777)  # anyone may plant a file in it now
    assert grader_cache_dir("cpu-parts") is None


def test_no_gpu_oracle_is_started_where_no_gpu_driver_is(monkeypatch):
    monkeypatch.setattr(oracle_ahead, "gpu_may_be_here", lambda: False)
    ahead = OracleAhead("auto")
    assert (ahead.for_cases(), ahead.for_timing()) == (None, None)  # the cases' CPU oracle; the timing makes its own


def test_a_gpu_oracle_that_failed_leaves_the_cases_on_the_cpu_and_the_timing_says_why(monkeypatch):
    def fails(decode: bool):
        raise RuntimeError("cudaErrorDevicesUnavailable")

    monkeypatch.setattr(oracle_ahead, "gpu_may_be_here", lambda: True)
    monkeypatch.setattr(oracle_ahead, "proven_gpu_references", fails)
    monkeypatch.setattr(oracle_ahead, "GPU_CASE_SCORES", 100)  # C17-P31's 816 scores count as large here
    ahead = OracleAhead("gpu")
    inputs = make_inputs(case_named("lab2", "C17-P31"), 7)
    assert np.array_equal(ahead.for_cases()(inputs), inputs.reference())
    with pytest.raises(RuntimeError, match="cudaErrorDevicesUnavailable"):
        ahead.for_timing()


def case_named(lab_name: str, name: str):
    lab = get_lab(lab_name)
    (case,) = [c for c in resolved_cases(lab, lab.catalogue, None) if c.name == name]
    return case


def test_only_a_large_case_takes_the_gpu_oracle_and_by_its_size_alone(monkeypatch):
    class Marked:  # a proven oracle whose every reference is recognisable
        def __init__(self, decode: bool):
            self.decode = decode

        def case_reference(self, inputs):
            return np.full(inputs.q.shape, 7.0)

    monkeypatch.setattr(oracle_ahead, "gpu_may_be_here", lambda: True)
    monkeypatch.setattr(oracle_ahead, "proven_gpu_references", Marked)
    monkeypatch.setattr(oracle_ahead, "GPU_CASE_SCORES", 33 * (1000 + 33))  # C33-P1000 is large, C17-P1000 not
    monkeypatch.setattr(oracle_ahead, "GPU_CASE_KEYS", 4226)  # lab 3's skewed (4,226 keys) is large, key0 not
    reference = OracleAhead("gpu").for_cases()
    named = {n: make_inputs(case_named(lab, n), 7) for lab, n in [("lab2", "C33-P1000"), ("lab2", "C17-P1000")]}
    named.update({n: make_inputs(case_named("lab3", n), 7) for n in ("skewed", "planted-key0")})
    for large in ("C33-P1000", "skewed"):
        assert (reference(named[large]) == 7.0).all()
    for small in ("C17-P1000", "planted-key0"):
        assert np.array_equal(reference(named[small]), named[small].reference())


def test_the_gpu_oracle_answers_a_decode_case_as_the_cpu_oracle_does():
    from labrunner.measure.input_pool import NumpySets
    from labrunner.run.gpu_oracle import GpuOracle

    inputs = make_inputs(case_named("lab3", "skewed"), 7)
    on_numpy = GpuOracle(xp=np, sets=NumpySets)  # its logic with numpy as the array module: the same arithmetic
    assert on_numpy.proof["decode_cpu_gpu_max_difference"] == 0.0 and on_numpy.proof["checker_agrees"]
    assert np.array_equal(on_numpy.case_reference(inputs), inputs.reference())


class StartedWorker:
    def __init__(self, backend: str, made: list):
        self.backend, self.started, self.closed = backend, 0, 0
        made.append(self)

    def start(self):
        self.started += 1

    def close(self):
        self.closed += 1


@pytest.mark.parametrize(
    "device, gpu_here, guessed",
    [("cpu", True, "cpu"), ("gpu", False, "gpu"), ("auto", True, "gpu"), ("auto", False, "cpu")],
)
def test_the_worker_started_ahead_is_the_grade_s_where_the_backend_was_guessed_right(
    monkeypatch, device, gpu_here, guessed
):
    monkeypatch.setattr(worker_ahead, "gpu_may_be_here", lambda: gpu_here)
    made: list[StartedWorker] = []
    ahead = WorkerAhead(device, "sm_90", lambda backend: StartedWorker(backend, made))  # type: ignore[arg-type,return-value]
    taken = ahead.take(guessed)
    ahead.close()
    assert (len(made), taken is made[0], made[0].backend, made[0].started, made[0].closed) == (1, True, guessed, 1, 0)
    assert made[0].cpu_arch == "sm_90"  # type: ignore[attr-defined]


def test_a_worker_started_for_another_backend_is_closed_and_a_new_one_made(monkeypatch):
    monkeypatch.setattr(worker_ahead, "gpu_may_be_here", lambda: True)
    made: list[StartedWorker] = []
    ahead = WorkerAhead("auto", "sm_90", lambda backend: StartedWorker(backend, made))  # type: ignore[arg-type,return-value]
    taken = ahead.take("cpu")  # CuPy found no usable GPU after all
    ahead.close()
    assert [(w.backend, w.started, w.closed) for w in made] == [("gpu", 1, 1), ("cpu", 0, 0)]
    assert taken is made[1]


def test_a_worker_the_grade_never_took_is_closed_when_the_grade_ends(monkeypatch):
    monkeypatch.setattr(worker_ahead, "gpu_may_be_here", lambda: False)
    made: list[StartedWorker] = []
    ahead = WorkerAhead("cpu", "sm_90", lambda backend: StartedWorker(backend, made))  # type: ignore[arg-type,return-value]
    ahead.close()  # the compile gate refused the file
    assert [(w.started, w.closed) for w in made] == [(1, 1)]


@pytest.mark.skipif(not cpu_backend_ready(), reason="no C++ compiler for the CPU backend")
def test_a_cpu_grade_says_where_its_time_went_and_makes_the_shared_parts_once(tmp_path):
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", CACHE_VARIABLE: str(tmp_path / "cache")}
    environment.pop("ATTNLAB_SEED", None)

    def grade(report: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "labrunner", "grade", "lab2", str(SOLUTION), "--device", "cpu"]
        command += ["--case", "C1-P31", "--timings", "--json", report]
        return subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600)

    first = grade("first.json")
    folder = tmp_path / "cache" / "cpu-parts"
    made = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    second = grade("second.json")
    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    assert "where the time went" in second.stderr and second.stdout.splitlines()[-1].startswith("PASS")
    rows = json.loads((tmp_path / "second.json").read_text())["timings"]
    names = [row["phase"] for row in rows]
    assert names[0] == "imports" and names[-1] == "other"
    expected = (
        "golden proof",
        "compile student",
        "box start (ahead)",
        "load student (ahead)",
        "case C1-P31",
        "reports",
    )
    for name in expected:
        assert name in names
    # the CPU build ran beside the gate's compile, and the grade waited for what was left of it
    assert "waiting for the early load" in names and "load student" not in names
    assert all(row["seconds"] >= 0 for row in rows)
    kinds = sorted(name.split("_")[1] for name in made)
    assert (kinds.count("runtime"), kinds.count("baseline"), kinds.count("view")) == (1, 1, 1)
    # the second grade found them made and rewrote none
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == made


@pytest.mark.parametrize(
    "cores, gpus, free_gib, expected",
    [
        (16, ["0"], [139], 8),  # an H200 host: half its 16 cores keep 8 grades busy, its memory holds 17
        (16, ["0"], [20], 2),  # a GPU with 20 GiB free holds two grades of 8 GiB
        (64, ["0", "1", "2", "3"], [139] * 4, 32),  # four GPUs: 8 per GPU
        (64, ["0", "1"], [139, 20], 18),  # two GPUs: 16 cores each keep 16 busy, the second's memory holds 2
        (2, ["0"], [139], 1),  # two cores: one grade at a time
        (2, [], [], 2),  # the CPU backend: one per core
    ],
)
def test_jobs_auto_follows_each_gpus_memory_and_the_cores(monkeypatch, cores, gpus, free_gib, expected):
    from labrunner.pipeline.batch import gpu_pool, local_executor

    monkeypatch.setattr(local_executor, "default_jobs", lambda backend: cores)
    monkeypatch.setattr(gpu_pool, "free_gpu_bytes", lambda index: free_gib[index] << 30)
    batch = gpu_pool.batch_gpus(gpus, gpus, measured=True)
    assert local_executor.auto_jobs("gpu" if gpus else "cpu", batch) == expected


def test_jobs_takes_a_number_or_auto_and_refuses_anything_else():
    from click.testing import CliRunner

    from labrunner.cli import main

    result = CliRunner().invoke(main, ["grade", "lab2", "a.cu", "b.cu", "--jobs", "0"])
    assert result.exit_code == 2
    assert "Invalid value for '--jobs': '0' is neither a whole number of at least 1 nor auto" in result.output
    result = CliRunner().invoke(main, ["grade", "lab2", "a.cu", "b.cu", "--jobs", "many"])
    assert "Invalid value for '--jobs': 'many' is neither a whole number of at least 1 nor auto" in result.output


@pytest.mark.skipif(not cpu_backend_ready(), reason="no C++ compiler for the CPU backend")
def test_a_batch_with_jobs_auto_grades_every_file(tmp_path):
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    environment.pop("ATTNLAB_SEED", None)
    starter = REPO / "kernels/lab2/starter.cu"
    command = [sys.executable, "-m", "labrunner", "grade", "lab2", str(SOLUTION), str(starter), "--jobs", "auto"]
    command += ["--device", "cpu", "--case", "C1-P31", "--csv", str(tmp_path / "grades.csv")]
    done = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    with (tmp_path / "grades.csv").open() as gradebook:
        assert [row["verdict"] for row in csv.DictReader(gradebook)] == ["pass", "pass"]


@pytest.mark.skipif(box_missing(), reason="no box here (bubblewrap, or user namespaces refused)")
def test_code_in_a_cpu_box_cannot_plant_anything_in_the_shared_parts(tmp_path):
    """The parts are mapped into every CPU box read-only: code that runs there (a student's) cannot write one."""
    from labrunner import box as boxes

    parts = tmp_path / "cache" / "cpu-parts"
    parts.mkdir(parents=True)
    (parts / "attnlab_runtime_x.ii").write_text("the grader's own")
    plant = (
        "import os, sys\n"
        "for name in ('attnlab_runtime_x.ii', 'attnlab_baseline_y.so'):\n"
        "    try:\n"
        "        open(os.path.join(sys.argv[1], name), 'w').write('planted')\n"
        "    except OSError as exc:\n"
        "        print(name, exc.errno)\n"
    )
    command = boxes.wrap(boxes.CPU_RUN, [sys.executable, "-I", "-c", plant, str(parts)], {}, (str(parts),))
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["attnlab_runtime_x.ii", "30", "attnlab_baseline_y.so", "30"]  # EROFS, both
    assert sorted(p.name for p in parts.iterdir()) == ["attnlab_runtime_x.ii"]
    assert (parts / "attnlab_runtime_x.ii").read_text() == "the grader's own"


def test_on_the_cpu_the_file_s_build_starts_in_the_early_worker_and_its_failure_is_raised_where_the_load_is(
    monkeypatch,
):
    monkeypatch.setattr(worker_ahead, "gpu_may_be_here", lambda: False)
    made: list[StartedWorker] = []
    ahead = WorkerAhead("cpu", "sm_90", lambda backend: StartedWorker(backend, made))  # type: ignore[arg-type,return-value]
    loads: list[object] = []

    def refused(worker: object) -> None:
        loads.append(worker)
        raise RuntimeError("g++ refused the file")

    ahead.load_ahead(refused)  # as the gate's NVRTC compile starts
    taken = ahead.take("cpu")
    with pytest.raises(RuntimeError, match="g\\+\\+ refused the file"):
        ahead.loaded(taken, lambda: loads.append("loaded again"))  # type: ignore[arg-type]
    ahead.close()
    assert loads == [made[0]] and (made[0].started, made[0].closed) == (1, 0)


def test_on_a_gpu_nothing_loads_early_and_the_grade_loads_the_gate_s_machine_code(monkeypatch):
    monkeypatch.setattr(worker_ahead, "gpu_may_be_here", lambda: True)
    made: list[StartedWorker] = []
    ahead = WorkerAhead("gpu", "sm_90", lambda backend: StartedWorker(backend, made))  # type: ignore[arg-type,return-value]
    loads: list[str] = []
    ahead.load_ahead(lambda worker: loads.append("early"))
    taken = ahead.take("gpu")
    ahead.loaded(taken, lambda: loads.append("after the gate"))  # type: ignore[arg-type]
    ahead.close()
    assert loads == ["after the gate"]


def test_an_early_load_of_a_file_the_gate_then_refused_is_waited_for_and_its_worker_closed(monkeypatch):
    monkeypatch.setattr(worker_ahead, "gpu_may_be_here", lambda: False)
    made: list[StartedWorker] = []
    ahead = WorkerAhead("cpu", "sm_90", lambda backend: StartedWorker(backend, made))  # type: ignore[arg-type,return-value]
    building = threading.Event()
    finished: list[str] = []

    def slow_build(worker: object) -> None:
        building.set()
        time.sleep(0.2)
        finished.append("built")

    ahead.load_ahead(slow_build)
    assert building.wait(5)
    ahead.close()  # NVRTC refused the file: the grade never takes the worker
    # the build's thread ended before close returned, and the worker was closed again after it, so a box
    # the load started after the first close is gone too
    assert finished == ["built"] and made[0].closed == 2


BLAS_PROBE = """
import ctypes, glob, os, sys
import labrunner.cli
from labrunner.cli.blas import BLAS_THREAD_VARIABLES
import numpy
# pip's numpy bundles OpenBLAS: the threads it took, which only an environment set before it loaded decides
found = glob.glob(os.path.join(os.path.dirname(numpy.__file__), os.pardir, "numpy.libs", "libscipy_openblas*.so"))
threads = ctypes.CDLL(found[0]).scipy_openblas_get_num_threads64_() if found else "unknown"
print(threads, *(os.environ.get(name) for name in BLAS_THREAD_VARIABLES))
"""


def test_the_command_runs_numpy_on_one_blas_thread_unless_the_user_set_another_number():
    """Set as the command line is imported, before numpy loads: a grading process of a batch inherits it."""
    environment = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    environment["PYTHONPATH"] = str(REPO)
    plain = subprocess.run(
        [sys.executable, "-c", BLAS_PROBE], env=environment, capture_output=True, text=True, timeout=60
    )
    assert plain.stdout.split()[1:] == ["1", "1", "1"], plain.stderr
    assert plain.stdout.split()[0] in ("1", "unknown")  # OpenBLAS started one thread, where it says
    chosen = subprocess.run(
        [sys.executable, "-c", BLAS_PROBE],
        env={**environment, "MKL_NUM_THREADS": "7", "OPENBLAS_NUM_THREADS": "2"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert chosen.stdout.split()[1:] == ["2", "1", "7"], chosen.stderr  # the user's own numbers are kept
    assert chosen.stdout.split()[0] in ("2", "unknown")
