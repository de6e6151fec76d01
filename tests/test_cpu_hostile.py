"""Hostile kernel files on the CPU backend leave no trace: no file, no process, no secret in any report.

The verdicts themselves are checked with every other fixture (test_fixtures_cpu.py); here each
attack is graded through the real command line with a secret seed in the environment and a
marker variable, and the machine is inspected afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PWNED

from labrunner.cli import main
from labrunner.pipeline import backend as backend_module
from labrunner.run.sandbox import landlock_abi
from labrunner.syscall_filter import availability

REPO = Path(__file__).resolve().parent.parent
HOSTILE = REPO / "tests" / "fixtures"
STARTER = REPO / "kernels" / "lab2" / "starter.cu"
SECRET = "731946028"

needs_seccomp = pytest.mark.skipif(availability() is not None, reason=f"no seccomp here: {availability()}")
# clean_tmp looks for /tmp/attnlab-pwned-* around every test here: no other test's attack may write them meanwhile
pytestmark = PWNED


def survivors(marker: str) -> list[int]:
    """Processes still alive whose environment carries the marker: anything a grade left running."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if marker.encode() not in environ.read():
                    continue
            with open(f"/proc/{entry}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry))
        except OSError:
            continue
    return found


def grade_hostile(lab: str, relative: str, tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    marker = f"ATTNLAB_TEST_MARK={uuid.uuid4().hex}"
    name, value = marker.split("=")
    env = {**os.environ, "ATTNLAB_SEED": SECRET, name: value}
    report = tmp_path / "result.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "labrunner",
            "grade",
            lab,
            str(HOSTILE / lab / relative),
            "--device",
            "cpu",
            "--no-timing",
            "--case",
            "C1-P31" if lab == "lab2" else "T1",
            "--json",
            str(report),
            *extra,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert survivors(marker) == []
    return completed, json.loads(report.read_text())


def pwned_files() -> list[str]:
    return sorted(p.name for p in Path("/tmp").glob("attnlab-pwned-*"))


@pytest.fixture(autouse=True)
def clean_tmp():
    for path in Path("/tmp").glob("attnlab-pwned-*"):
        path.unlink()
    yield
    assert pwned_files() == []


AT_LOAD = " is not allowed in a kernel file (it runs code when the module loads or unloads, outside any kernel)"
SECTION = " is not allowed in a kernel file (it places code or data where the loader runs it)"


@needs_seccomp
@pytest.mark.parametrize(
    "lab, relative, line",
    [
        ("lab1", "hostile/ctor_shell.cu", 7),
        ("lab1", "hostile/ctor_getenv.cu", 6),
        ("lab2", "hostile/ctor_fork.cu", 6),
    ],
)
def test_a_constructor_is_refused_before_any_compiler_runs(lab, relative, line, tmp_path):
    """The gate reads the attribute (labrunner/compile/attributes.py), on both backends alike; no
    compiler, and no worker, ever sees the file."""
    completed, result = grade_hostile(lab, relative, tmp_path)
    message = f"{HOSTILE / lab / relative}({line}): error: __attribute__((constructor))" + AT_LOAD
    assert (completed.returncode, result["verdict"], result["backend"], result["error"]) == (
        3,
        "compile-error",
        None,
        message,
    )
    assert completed.stderr.endswith(message + "\n")
    assert SECRET not in completed.stdout + completed.stderr + json.dumps(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


@needs_seccomp
@pytest.mark.slow
def test_the_object_check_stands_under_unsafe_cpu_too(tmp_path):
    """A load-time initialiser the gate cannot see (an object with a constructor; NVRTC takes it, the
    constructor being empty) is refused by the object check, with or without the filter."""
    relative = "hostile/global_initializer.cu"
    completed, result = grade_hostile("lab2", relative, tmp_path, "--unsafe-cpu")
    assert (completed.returncode, result["verdict"], result["backend"], result["error"]) == (
        3,
        "compile-error",
        "cpu",
        f"{HOSTILE / 'lab2' / relative}: the CPU build refuses this file: the dynamic initialiser of a namespace-scope "
        "variable (like `int x = f();`) would run when the module loads, outside any kernel (a constructor or a "
        "global's initialiser); kernels run only when launched, so remove it",
    )


def first_line_of(path: str) -> str:
    try:
        return Path(path).read_text().splitlines()[0]
    except (OSError, IndexError):
        return "attnlab: no such file here"


@needs_seccomp
@pytest.mark.parametrize(
    "relative, line",
    [
        ("hostile/tm_clone_table.cu", 75),
        ("hostile/section_asm_injection.cu", 10),
        ("hostile/incbin_section.cu", 8),
    ],
)
def test_what_a_section_attribute_would_do_is_refused_before_any_compiler_runs(relative, line, tmp_path):
    """Load-time code through g++'s own start-up code, x86 assembly and `.incbin` through the text of a
    section: the gate names the attribute's line, so neither compiler, nor the assembler, sees the
    file, and the file the incbin names appears in nothing the grade prints or writes."""
    completed, result = grade_hostile("lab2", relative, tmp_path)
    message = f"{HOSTILE / 'lab2' / relative}({line}): error: __attribute__((section))" + SECTION
    assert (completed.returncode, result["verdict"], result["backend"], result["error"]) == (
        3,
        "compile-error",
        None,
        message,
    )
    assert completed.stderr.endswith(message + "\n")
    assert first_line_of("/etc/passwd") not in completed.stdout + completed.stderr + json.dumps(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


@needs_seccomp
@pytest.mark.slow
def test_a_kernel_learns_nothing_of_other_files_by_stat(tmp_path):
    """fstat() is newfstatat(fd, "", AT_EMPTY_PATH), and with a path it is a stat() of that path; the
    run-stage filter refuses every system call that takes a path, so the probe learns nothing and
    prints nothing, and the kernel keeps its true verdict."""
    completed, result = grade_hostile("lab2", "hostile/fstatat_probe.cu", tmp_path)
    assert (completed.returncode, result["verdict"], result["backend"], result["kernel_output"]) == (
        0,
        "pass",
        "cpu",
        [],
    )
    assert "attnlab-leak" not in completed.stdout + completed.stderr + json.dumps(result)


@pytest.mark.slow
def test_the_stat_probe_is_real_without_the_filter(tmp_path):
    """The control for the test above: unsealed, the same kernel learns the metadata of / (it exists
    in every box) and says so, and its output is poisoned."""
    completed, result = grade_hostile("lab2", "hostile/fstatat_probe.cu", tmp_path, "--unsafe-cpu")
    assert (completed.returncode, result["verdict"]) == (1, "wrong")
    assert result["kernel_output"][0].startswith("attnlab-leak /: stat 1 statx 1 size=")


@needs_seccomp
@pytest.mark.slow
def test_the_runtimes_macros_are_invisible_to_a_kernel_file(tmp_path):
    """A file that would poison its output on seeing any macro of the runtime, its headers or g++
    gets the GPU's verdict: pass."""
    completed, result = grade_hostile("lab2", "hostile/shim_macro_probe.cu", tmp_path)
    assert (completed.returncode, result["verdict"], result["backend"]) == (0, "pass", "cpu")


@needs_seccomp
@pytest.mark.slow
def test_system_calls_from_inside_a_kernel_are_refused_and_the_true_verdict_stands(tmp_path):
    """The kernel finds fork, open, socket and system in the C library's symbol table and calls them;
    had any succeeded it would have poisoned its own output (and left a file or a process)."""
    completed, result = grade_hostile("lab2", "hostile/libc_syscalls.cu", tmp_path)
    assert (completed.returncode, result["verdict"], result["backend"]) == (0, "pass", "cpu")
    assert completed.stdout.rstrip().endswith("PASS on the CPU backend (exit 0)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


@pytest.mark.slow
def test_the_libc_attack_is_real_without_the_filter(tmp_path):
    """The control for the test above: with --unsafe-cpu the same kernel's calls go through (it
    finds the C library, and a call that succeeds poisons its output: wrong), so its pass under the
    filter is not an accident of a symbol walk that found nothing. Its files land only where the
    worker's box lets it write: where the kernel has Landlock, nowhere outside its private folder."""
    completed, result = grade_hostile("lab2", "hostile/libc_syscalls.cu", tmp_path, "--unsafe-cpu")
    assert (completed.returncode, result["verdict"]) == (1, "wrong")
    confined = landlock_abi() > 0
    assert pwned_files() == ([] if confined else ["attnlab-pwned-kernel-open", "attnlab-pwned-kernel-system"])
    for path in Path("/tmp").glob("attnlab-pwned-*"):
        path.unlink()


# ----------------------------------------------------------------- where seccomp is missing


@pytest.fixture
def no_seccomp(monkeypatch, tmp_path):
    import labrunner.run.cpu_device as cpu_device

    monkeypatch.setattr(
        cpu_device, "cpu_sandbox_status", lambda: "libseccomp is not installed (apt-get install libseccomp2)"
    )
    monkeypatch.setattr(backend_module, "gpu_status", lambda: (False, "no GPU found"))
    monkeypatch.chdir(tmp_path)
    return CliRunner(env={"COLUMNS": "200"})


NO_SECCOMP = (
    "error: the CPU backend cannot seal its worker here: libseccomp is not installed (apt-get install "
    "libseccomp2). It runs the file as native code, so it does not grade; use a GPU, or --unsafe-cpu for "
    "a file you wrote yourself\n"
)


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_without_seccomp_the_cpu_backend_refuses_to_grade(no_seccomp, device):
    result = no_seccomp.invoke(main, ["grade", "lab2", str(STARTER), "--device", device, "--json", "out.json"])
    assert result.exit_code == 6
    assert result.stderr == NO_SECCOMP
    data = json.loads(Path("out.json").read_text())
    assert (data["verdict"], data["exit_code"], data["cases"]) == ("environment-missing", 6, [])


@pytest.mark.slow
def test_unsafe_cpu_grades_without_seccomp_and_says_so(no_seccomp):
    result = no_seccomp.invoke(
        main,
        ["grade", "lab2", str(STARTER), "--device", "cpu", "--unsafe-cpu", "--case", "C1-P31", "--json", "out.json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(Path("out.json").read_text())
    assert data["notes"][0] == (
        "--unsafe-cpu: the CPU worker runs this file's code without a syscall filter; grade only files you trust"
    )
    assert result.stdout.rstrip().endswith("PASS on the CPU backend (exit 0)")
