"""The include attacks, graded through the real command line: compile-error, and not one line of the
file they name anywhere (terminal, JSON, JUnit).

Each fixture names /proc/self/environ, so a leak would print the grader's environment: the test
plants a secret seed and a marker there and looks for them in every output. The exact refusal
is checked too, since the environment is only one of the walls (see test_compiler_process.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HOSTILE = REPO / "tests/fixtures/lab2/hostile"
SECRET_SEED = "987654321987"
MARKER = "attnlab-marker-7d2e41"
ALLOWED = "the driver's headers (<attnlab/...>), <cuda_runtime.h>, <cfloat>, <cmath>, <cstdint>, <math_constants.h>"
ENVIRON = (
    f'`#include "/proc/self/environ"` is refused: a submission may include only {ALLOWED}; '
    "paste what you need into the file itself"
)

EXPECTED = {
    "include_digit_separator.cu": f"include_digit_separator.cu(5): error: {ENVIRON}",
    "include_raw_string.cu": f"include_raw_string.cu(5): error: {ENVIRON}",
    "include_line_splice.cu": f"include_line_splice.cu(3): error: {ENVIRON}",
    "include_ucn.cu": (
        "include_ucn.cu(4): error: \\u0069 names a basic or control character outside a literal, "
        "which C++ does not allow (g++ reads `#\\u0069nclude` as #include); write the character itself"
    ),
    "has_include.cu": (
        f"has_include.cu(3): error: `__has_include` is refused: a submission may not probe for files; "
        f"it may include only {ALLOWED}"
    ),
    "include_dotdot.cu": (
        "include_dotdot.cu(3): error: `#include <attnlab/../../../../../../../../proc/self/environ>` "
        "is refused: a header name may not contain `..`; include the driver's headers by their own "
        "names, as <attnlab/prelude.cuh>"
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.slow
def test_an_include_attack_is_a_compile_error_and_leaks_nothing(tmp_path, name):
    report, junit = tmp_path / "result.json", tmp_path / "result.xml"
    env = {**os.environ, "ATTNLAB_SEED": SECRET_SEED, "ATTNLAB_TEST_MARKER": MARKER}
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "labrunner",
            "grade",
            "lab2",
            name,
            "--device",
            "cpu",
            "--no-timing",
            "--json",
            str(report),
            "--junit",
            str(junit),
        ],
        cwd=HOSTILE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    result = json.loads(report.read_text())
    assert (completed.returncode, result["verdict"], result["exit_code"]) == (3, "compile-error", 3)
    assert result["error"] == EXPECTED[name]
    assert completed.stderr == EXPECTED[name] + "\n"
    for output in (completed.stdout, completed.stderr, report.read_text(), junit.read_text()):
        assert MARKER not in output
        assert SECRET_SEED not in output
        assert "PATH=" not in output
