"""Every fixture that makes sense on a CPU, graded through the CPU backend: this is how CI, which has
no GPU, checks the kernels' verdicts on every change. Same expectations as on the GPU."""

from __future__ import annotations

import importlib.util

import pytest
from conftest import ESCAPEE, LINGER, PWNED
from fixture_suite import grade, load_fixtures

# Triton files need the `triton` extra (CI installs it); without it their grades cannot compile.
NO_TRITON = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="the triton extra is not installed")

# Each fixture is a whole grade of seconds, so the sweep is slow; the fast set keeps one grade of lab 1 and
# of lab 3 (their shipped solutions; lab 2's starter is graded in test_cli.py) and a hostile file refused
# before it compiles, so that a broken pipeline still fails there.
FAST = {"kernels/lab1/solution.cu", "kernels/lab3/solution.cu", "lab1/hostile/ctor_shell.cu"}
# The attacks whose traces other tests look for machine-wide (a process's name, a file in /tmp) run in those
# tests' xdist group, never beside them.
MACHINE_WIDE = {
    "lab2/hostile/runtime_escape.cu": ESCAPEE,
    "lab2/hostile/constructor_escape.cu": ESCAPEE,
    "lab1/hostile/ctor_shell.cu": PWNED,
    "lab2/hostile/libc_syscalls.cu": PWNED,
    "lab2/hostile/py_forks_and_lingers.py": LINGER,
}


@pytest.mark.parametrize(
    "fixture",
    [
        pytest.param(
            f,
            id=f.name,
            marks=(() if f.name in FAST else (pytest.mark.slow,))
            + ((NO_TRITON,) if f.path.suffix == ".py" else ())
            + ((MACHINE_WIDE[f.name],) if f.name in MACHINE_WIDE else ()),
        )
        for f in load_fixtures()
        if f.runs_on("cpu")
    ],
)
def test_fixture_gets_its_verdict_on_the_cpu(fixture):
    outcome = grade(fixture, "cpu")
    assert outcome.mismatches == [], outcome.got["message"]
    assert outcome.got["json_exit_code"] == outcome.got["exit_code"]
