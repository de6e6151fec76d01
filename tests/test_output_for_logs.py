"""Output fit for CI logs: no wrapped case rows when piped, COLUMNS honoured, ASCII where the stream or
the locale asks for it (with the right exit code), messages never eaten as markup, and one clear
answer from doctor and bench about the backend."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from labrunner.cli import main
from labrunner.pipeline import backend as backend_module

REPO = Path(__file__).resolve().parent.parent
SOLUTION = REPO / "kernels/lab2/solution.cu"
PREFIX_IGNORED = REPO / "tests/fixtures/lab2/wrong/prefix_ignored.cu"
BENCH_REFUSED = "error: bench needs a GPU: {why}; check correctness on the CPU with `attnlab grade lab2 FILE`\n"


def cpu_backend_ready() -> bool:
    from labrunner.run.cpu_device import cpu_backend_status

    return cpu_backend_status()[0]


needs_cpu_backend = pytest.mark.skipif(not cpu_backend_ready(), reason="no C++ compiler for the CPU backend")


def piped(*args: str, **env: str) -> subprocess.CompletedProcess:
    """attnlab as a CI job runs it: stdout and stderr are pipes, and only the given variables are changed."""
    environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LC_ALL", "LANG", "ATTNLAB_SEED")}
    environment.update({"PYTHONPATH": str(REPO), **env})
    return subprocess.run(
        [sys.executable, "-m", "labrunner", *args], cwd=REPO, env=environment, capture_output=True, timeout=300
    )


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(backend_module, "gpu_status", lambda: (False, "no GPU found"))


@needs_cpu_backend
@pytest.mark.slow
def test_a_correct_solution_graded_with_an_ascii_stream_exits_0_in_ascii():
    completed = piped("grade", "lab2", str(SOLUTION), "--device", "cpu", PYTHONIOENCODING="ascii")
    assert completed.returncode == 0, completed.stderr[-1000:]
    text = completed.stdout.decode("ascii")  # raises if a byte is not ASCII
    completed.stderr.decode("ascii")
    assert text.rstrip().endswith("PASS (3 cases skipped on the CPU backend; --full runs them) (exit 0)")
    assert f"lab2 - {SOLUTION} - cpu (CPU (attnlab's fiber backend))" in text
    assert re.search(r"^\| C1-P31 +\| +1 \| +31 \| pass ", text, re.MULTILINE)


@needs_cpu_backend
@pytest.mark.slow
def test_the_c_locale_gives_ascii_too():
    completed = piped("grade", "lab2", str(SOLUTION), "--device", "cpu", "--case", "C1-P31", LANG="C")
    assert completed.returncode == 0
    assert completed.stdout.decode("ascii").rstrip().endswith("PASS on the CPU backend (exit 0)")


@needs_cpu_backend
@pytest.mark.slow
def test_piped_case_rows_never_wrap_and_fold_after_the_first_two_failures():
    completed = piped("grade", "lab2", str(PREFIX_IGNORED), "--device", "cpu", "--no-timing")
    assert completed.returncode == 1
    rows = [line for line in completed.stdout.decode().splitlines() if re.match(r"│ \S", line)]
    assert [row.split("│")[1].strip() for row in rows] == [
        "C1-P31",
        "C17-P31",
        "C33-P31",
        "C1-P1000",
        "C17-P1000",
        "C33-P1000",
        "planted-C33-P31",
        "lastkey-C17-P31",
        "geometry-C129-P31",
        "planted-C33-P1000",
        "lastkey-C33-P1000",
        "C2048-P2048",
    ]
    # the first two failures' messages whole, the other seven folded to their first clause, each on its own row
    assert all(re.search(r"; rows? [-0-9, ]+ fails? \(\d+ of \d+\) +│$", row) for row in rows[:2]), rows
    assert all(re.search(r"got \S+, expected \S+ \(\|err\| > 1e-4 \+ 1e-3\*\|ref\|\) +│$", row) for row in rows[2:9]), (
        rows
    )
    assert all(re.search(r"outside the CPU backend's time budget; --full runs it +│$", row) for row in rows[9:])
    assert (
        "7 more failing cases folded to one line each; --verbose shows every message in full"
        in completed.stdout.decode()
    )
    # heading, 4 rules, header, 12 rows, the folded count, a hint, verdict
    assert len(completed.stdout.decode().splitlines()) == 20


@pytest.mark.slow
def test_columns_is_honoured_for_what_fits():
    completed = piped("labs", COLUMNS="60")
    assert completed.returncode == 0
    lines = completed.stdout.decode().splitlines()
    assert max(len(line) for line in lines) == 60


@pytest.mark.slow
def test_a_message_with_brackets_keeps_them(runner_no_gpu):
    runner, monkeypatch = runner_no_gpu
    message = "CuPy is not installed: pip install 'attnlab[cuda13]' (or [cuda12] for a CUDA 12 driver)"
    monkeypatch.setattr(backend_module, "gpu_status", lambda: (False, message))
    result = runner.invoke(main, ["grade", "lab2", str(SOLUTION), "--device", "gpu"])
    assert result.exit_code == 6
    assert result.stderr == (
        f"error: {message}. --device gpu grades on a GPU only; leave --device out (auto, the default: the GPU "
        "where there is one, else the CPU) or give --device cpu to grade on the CPU (correctness only)\n"
    )


@pytest.fixture
def runner_no_gpu(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return CliRunner(env={"COLUMNS": "200"}), monkeypatch


def test_doctor_exits_6_when_the_gpu_is_asked_for_and_names_what_works(runner_no_gpu, no_gpu):
    runner, _ = runner_no_gpu
    result = runner.invoke(main, ["doctor", "--device", "gpu"])
    assert result.exit_code == 6
    assert result.stderr == (
        "error: --device gpu: the gpu backend is unusable on this machine; usable here: cpu (grade with --device cpu)\n"
    )
    assert re.search(r"│ GPU and driver +│ missing │ no GPU found", result.stdout)


@needs_cpu_backend
@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_doctor_passes_for_a_usable_backend(runner_no_gpu, no_gpu, device):
    runner, _ = runner_no_gpu
    result = runner.invoke(main, ["doctor", "--device", device])
    assert (result.exit_code, result.stderr) == (0, "")


@pytest.mark.parametrize(
    "device, why", [("cpu", "--device cpu chose the CPU backend, which takes no timings"), ("auto", "no GPU found")]
)
def test_bench_on_the_cpu_is_refused_in_one_message(runner_no_gpu, no_gpu, device, why):
    runner, _ = runner_no_gpu
    result = runner.invoke(main, ["bench", "lab2", "--device", device])
    assert result.exit_code == 6
    assert result.stderr == BENCH_REFUSED.format(why=why)  # no note about falling back first
    assert result.stdout == ""


def test_no_cupy_advice_where_no_nvidia_driver_is(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # its import fails, as on a CPU-only runner
    monkeypatch.setattr(backend_module, "gpu_may_be_here", lambda: False)
    assert backend_module.gpu_status() == (False, "no GPU found (no NVIDIA driver on this machine)")
    monkeypatch.setattr(backend_module, "gpu_may_be_here", lambda: True)
    assert backend_module.gpu_status() == (
        False,
        "CuPy is not installed: pip install 'attnlab[cuda13]' (or [cuda12] for a CUDA 12 driver)",
    )


def test_doctor_gives_no_cupy_advice_where_no_gpu_could_use_it(monkeypatch):
    from labrunner.pipeline import doctor

    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setattr(backend_module, "gpu_may_be_here", lambda: False)
    monkeypatch.setattr(doctor, "prove_oracle", lambda: SimpleNamespace(passed=True, max_error=0.0))
    rows = {name: (ok, words) for name, ok, words in doctor.diagnose()}
    assert rows["CuPy"] == (False, "not installed: needed only where an NVIDIA GPU is")


def test_a_missing_gates_file_is_named_missing_where_no_gate_applies(tmp_path):
    from labrunner.pipeline.grade import gates_not_applied

    (tmp_path / "gates.json").write_text("{}")
    assert gates_not_applied(tmp_path / "gates.json", "cpu") == (
        f"--gates {tmp_path / 'gates.json'}: not applied on the cpu backend, which takes no timings"
    )
    assert gates_not_applied("no/gates.json", "cpu") == (
        "--gates no/gates.json: no such file (on a GPU the grade refuses it; `attnlab calibrate LAB -o "
        "no/gates.json` writes one); not applied on the cpu backend, which takes no timings"
    )


def test_doctor_names_its_columns_and_keeps_within_columns():
    completed = piped("doctor", "--device", "cpu", COLUMNS="70")
    lines = completed.stdout.decode().splitlines()
    assert re.match(r"┃ check +┃ status +┃ details +┃$", lines[2]), lines[:4]
    assert max(len(line) for line in lines) <= 70


@needs_cpu_backend
@pytest.mark.slow
def test_with_columns_set_every_line_of_a_failing_grade_keeps_within_it():
    completed = piped("grade", "lab2", str(PREFIX_IGNORED), "--device", "cpu", "--no-timing", COLUMNS="70")
    assert completed.returncode == 1
    out, err = completed.stdout.decode(), completed.stderr.decode()
    assert max(len(line) for line in (out + err).splitlines()) <= 70
    # each case a line, its message wrapped under it; the hint and the verdict wrapped at spaces
    assert "C1-P31 (1 row, prefix 31) wrong, max |err| 3.82e+00" in out.splitlines()
    assert out.splitlines()[-2:] == [
        "WRONG (3 cases skipped on the CPU backend; --full runs them) in case ",
        "C1-P31 (exit 1)",
    ]
