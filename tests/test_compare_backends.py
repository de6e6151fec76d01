"""scripts/compare_backends.py, which gpu_check runs on the GPU, kept working where there is none:
the same path with the CPU backend on both sides."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from labrunner.compile.gate import load_submission
from labrunner.labs import LABS
from labrunner.pipeline.correctness import resolved_cases
from labrunner.run.cpu.module import cpu_compiler_available
from labrunner.truth.cases import load_catalogue

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
CPU = cpu_compiler_available() is None


@pytest.mark.skipif(not CPU, reason="no C++ compiler for the CPU backend")
def test_the_backend_comparison_runs_every_shipped_solution_on_every_default_cpu_case():
    completed = subprocess.run(
        [sys.executable, "scripts/compare_backends.py", "cpu", "cpu"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0].split() == ["solution", "case", "max", "|cpu", "-", "cpu|"]
    expected = []
    for lab in LABS.values():
        submission = load_submission(lab, lab.solution_path)
        constants = submission.constants
        expected += [
            (f"kernels/{lab.name}/solution.cu", case.name)
            for case in resolved_cases(lab, load_catalogue(lab.name), constants)
            if case.cpu
        ]
    assert [tuple(line.split()[:2]) for line in lines[1:-1]] == expected
    assert all(line.split()[2] == "0.000e+00" for line in lines[1:-1])
    assert lines[-1] == "cpu and cpu outputs agree: largest difference 0.000e+00 (bound 1e-05)"
