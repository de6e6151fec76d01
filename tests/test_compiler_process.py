"""The compiler in its own process: a clock, a memory ceiling, nothing of the grader's, nothing left behind.

And the walls behind the include policy, each tested on its own: the child's environment holds
no secret even if a file were opened, and the diagnostics filter drops every line about another
file even if a compiler quoted one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from labrunner import box as boxes
from labrunner.compile import compiler_process
from labrunner.compile.compiler_process import CompileLimits
from labrunner.compile.diagnostics import gcc_diagnostics, nvrtc_diagnostics
from labrunner.compile.gate import compile_gate
from labrunner.compile.nvrtc import compile_module, run_nvrtc
from labrunner.exit_codes import AttnlabError, ExitCode

REPO = Path(__file__).resolve().parent.parent
BOMB = (REPO / "tests/fixtures/lab2/hostile/macro_bomb.cu").read_text()
MARKER = "attnlab-marker-5f1c9e"


def compile_error(source: str, label: str, limits: CompileLimits = CompileLimits()) -> str:
    with pytest.raises(AttnlabError) as caught:
        compile_gate(source, label, limits=limits)
    assert caught.value.exit_code == ExitCode.COMPILE_ERROR == 3
    return caught.value.message


@pytest.fixture
def started(monkeypatch):
    """Every compiler process this test starts, so the test can look for what is left of them."""
    processes = []
    original = subprocess.Popen

    def recording(*args, **kwargs):
        process = original(*args, **kwargs)
        processes.append(process)
        return process

    monkeypatch.setattr(compiler_process.subprocess, "Popen", recording)
    return processes


# --- the clock and the memory ceiling ----------------------------------------------------------


@pytest.mark.slow
def test_the_macro_bomb_is_a_compile_error_when_the_clock_runs_out(started):
    began = time.monotonic()
    message = compile_error(BOMB, "macro_bomb.cu", CompileLimits(timeout_s=2))
    assert message == "macro_bomb.cu: error: the compiler did not finish in 2 s (--compile-timeout)"
    # Stopped at the limit, not minutes later when NVRTC would have given up on its own.
    assert time.monotonic() - began < 2 + 15
    (process,) = [p for p in started if sys.executable in p.args]
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)  # the compiler's whole process group is gone


@pytest.mark.slow
def test_the_macro_bomb_is_a_compile_error_when_memory_runs_out():
    message = compile_error(BOMB, "macro_bomb.cu", CompileLimits(timeout_s=120, memory_mib=300))
    assert message == "macro_bomb.cu: error: the compiler needed more than 300 MiB"


def test_the_default_limits_are_20_s_and_1024_mib():
    assert CompileLimits() == CompileLimits(timeout_s=20.0, memory_mib=1024)


def test_the_shipped_solution_compiles_well_inside_the_memory_ceiling():
    module = compile_gate(
        (REPO / "kernels/lab2/solution.cu").read_text(), "solution.cu", limits=CompileLimits(memory_mib=400)
    )
    assert "flash_prefill" in module.entry_points


# --- what the child gets, and what it leaves -------------------------------------------------


def test_the_childs_environment_holds_nothing_of_the_graders(monkeypatch):
    monkeypatch.setenv("ATTNLAB_SEED", MARKER)
    monkeypatch.setenv("SOME_CI_TOKEN", MARKER)
    # The include policy and the log filter are bypassed on purpose: this is the wall behind them.
    compiled, log, _ = run_nvrtc('#include "/proc/self/environ"\n', "t.cu", "sm_90", [])
    assert not compiled
    assert "/proc/self/environ(1): error" in log  # NVRTC did read the child's own environment
    assert MARKER not in log


def test_the_child_runs_in_an_empty_folder_that_is_removed_afterwards(monkeypatch, tmp_path, started):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled, log, _ = run_nvrtc('#include "."\n', "t.cu", "sm_90", [])  # a quoted include searches the working folder
    assert not compiled
    assert list(tmp_path.iterdir()) == []
    python = started[0].args.index(sys.executable)
    assert started[0].args[python + 1 : python + 3] == ["-I", "-S"]  # a fresh, isolated interpreter, no site-packages


@pytest.mark.skipif(boxes.availability() is not None, reason=f"no box here: {boxes.availability()}")
def test_the_child_is_boxed_a_file_the_grader_can_read_is_not_there(tmp_path):
    """Behind the include policy: even a path NVRTC is told to include does not exist in the box."""
    secret = tmp_path / "secret.h"
    secret.write_text(f"#error {MARKER}\n")
    compiled, log, _ = run_nvrtc(f'#include "{secret}"\n', "t.cu", "sm_90", [])
    assert not compiled
    assert MARKER not in log
    assert log.splitlines()[0] == f't.cu(1): catastrophic error: cannot open source file "{secret}"'


def test_a_reply_that_is_not_the_protocols_json_is_a_compile_error(monkeypatch, tmp_path):
    child = tmp_path / "child.py"
    child.write_text("import sys\nsys.stdout.buffer.write(b'\\x80\\x04\\x95 not json')\n")
    monkeypatch.setattr(compiler_process, "CHILD", child)
    message = compile_error("int x;\n", "a.cu")
    assert (
        message == "a.cu: error: the compiler stopped without an answer (exit status 0); the file could not be compiled"
    )


# --- the diagnostics filter ------------------------------------------------------------------

NVRTC_LOG = """\
/work/labrunner/include/attnlab/prelude.cuh(9): error: identifier "SECRET_IN_HEADER" is undefined
  static constexpr int HQ = SECRET_IN_HEADER;
                            ^

/proc/self/environ(1): error: this declaration has no storage class or type specifier
  ATTNLAB_SEED=12345
  ^

attention.cu(20): error: expected an expression
   int x = ;
           ^

attention.cu.bak(3): error: not the student's file
attention.cu(2): warning #177-D: variable "unused" was declared but never referenced
          detected during instantiation of "f<T>" at line 3 of "/etc/secret"
attention.cu(7): remark: #pragma message: "hello"

3 errors detected in the compilation of "attention.cu".
2 errors detected in the compilation of "other.cu".
"""


def test_only_lines_about_the_students_file_and_the_count_pass():
    assert nvrtc_diagnostics(NVRTC_LOG, "attention.cu") == [
        "attention.cu(20): error: expected an expression",
        'attention.cu(2): warning #177-D: variable "unused" was declared but never referenced',
        'attention.cu(7): remark: #pragma message: "hello"',
        '3 errors detected in the compilation of "attention.cu".',
    ]


def test_a_catastrophic_count_line_passes():
    log = ' and 1 catastrophic error detected in the compilation of "a.cu".\nCompilation terminated.\n'
    assert nvrtc_diagnostics(log, "a.cu") == ['and 1 catastrophic error detected in the compilation of "a.cu".']


GCC_LOG = """\
attention.cu.cpp: In function 'void flash_prefill(const float*, float*)':
attention.cu.cpp:20:13: error: expected primary-expression before ';' token
   20 |     int x = ;
      |             ^
In file included from attention.cu.cpp:3:
/proc/self/environ:1:1: error: 'ATTNLAB_SEED' does not name a type
attention.cu.cpp:31: warning: unused variable 'y'
attention.cu.cpp:9:5: note: in expansion of macro 'SECRET'
<command-line>: error: something else
"""


def test_gccs_lines_about_the_students_file_are_rewritten_as_nvrtc_writes_them():
    assert gcc_diagnostics(GCC_LOG, "attention.cu.cpp", "attention.cu") == [
        "attention.cu(20): error: expected primary-expression before ';' token",
        "attention.cu(31): warning: unused variable 'y'",
        "attention.cu(9): note: in expansion of macro 'SECRET'",
    ]


def test_an_error_inside_a_header_is_reported_without_the_headers_lines(tmp_path, monkeypatch):
    """The third wall: even a compile that opened another file shows none of its lines (the box, which
    would not hold the file at all, is taken away for this test)."""
    monkeypatch.setattr(boxes, "availability", lambda: "no box, for this test")
    secret = tmp_path / "secret.h"
    secret.write_text(f"int {MARKER.replace('-', '_')} = ;\n")
    # compile_module skips the include policy on purpose: this is the wall behind it.
    with pytest.raises(AttnlabError) as caught:
        compile_module(f'#include "{secret}"\n', "attention.cu")
    assert caught.value.message == (
        "attention.cu: error: NVRTC rejected the file, but every message was about one of the driver's headers "
        "(not shown); check the macros defined before each #include"
    )
    assert MARKER.replace("-", "_") not in caught.value.message


def test_a_compiler_message_names_the_students_line_once():
    with pytest.raises(AttnlabError) as caught:
        compile_gate("// one\n__device__ int int x;\n", "attention.cu")
    assert caught.value.message.splitlines() == [
        "attention.cu(2): error: invalid combination of type specifiers",
        '1 error detected in the compilation of "attention.cu".',
    ]


# --- the option, through the command line --------------------------------------------------


@pytest.mark.parametrize("command", ["check", "grade"])  # bench needs a GPU, and says so before it compiles
@pytest.mark.slow
def test_compile_timeout_is_an_option_of_each_command_that_compiles(tmp_path, command):
    report = tmp_path / "result.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "labrunner",
            command,
            "lab2",
            "macro_bomb.cu",
            "--compile-timeout",
            "2",
            "--json",
            str(report),
        ],
        cwd=REPO / "tests/fixtures/lab2/hostile",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 3
    assert completed.stderr == "macro_bomb.cu: error: the compiler did not finish in 2 s (--compile-timeout)\n"
    assert json.loads(report.read_text())["verdict"] == "compile-error"


def test_a_reply_nested_past_the_parsers_depth_is_no_reply():
    # the compiler child's stdout is read as hostile data: deep nesting is refused like any other non-reply
    assert compiler_process._parse(b'{"status": "done", "result": ' + b"[" * 200_000) is None
    assert compiler_process._parse(b'{"status": "done", "result": "r", "log": "", "ptx": "p"}') == {
        "status": "done",
        "result": "r",
        "log": "",
        "ptx": "p",
    }


def test_a_yielding_compiler_runs_under_nice_and_its_children_inherit_it(tmp_path):
    # the command as run_limited_child starts it: `nice -n 10` before the box, so bwrap and the compiler both yield
    probe = [sys.executable, "-c", "import os; print(os.nice(0))"]
    assert compiler_process.yielding(probe, 0) == probe
    yielding = compiler_process.yielding(probe, 10)
    assert yielding[1:3] == ["-n", "10"] and yielding[3:] == probe
    before = os.nice(0)
    niceness = subprocess.run(yielding, capture_output=True, text=True, check=True).stdout.strip()
    assert int(niceness) == min(before + 10, 19)


def test_on_the_cpu_the_gate_yields_to_the_worker_s_build_and_nowhere_else(monkeypatch):
    from labrunner.pipeline import prepare as preparing
    from labrunner.pipeline.requests import GradeRequest
    from labrunner.report.reporter import silent
    from labrunner.report.results import RunResult

    seen: list[int] = []

    def gate(lab, path, label, arch, limits, target, policy_passed):  # type: ignore[no-untyped-def]
        seen.append(limits.niceness)
        raise AttnlabError("stop here", ExitCode.COMPILE_ERROR)

    monkeypatch.setattr(preparing, "load_submission", gate)
    request = GradeRequest(lab="lab2", file=Path("kernels/lab2/solution.cu"), device="cpu")
    for early in (lambda source, label: None, None):
        with pytest.raises(AttnlabError):
            preparing.prepare(request, request.file, RunResult("grade"), silent(), early)
    assert seen == [preparing.GATE_NICENESS, 0]
