"""`attnlab doctor` says how each box is bounded, from the limits the boxes' processes set themselves, and
whether Triton files can be graded here (`labrunner/pipeline/doctor.py`)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from labrunner import box as boxes
from labrunner import syscall_filter
from labrunner.cli.main import main
from labrunner.compile import triton_build
from labrunner.compile.compiler_process import CompileLimits
from labrunner.exit_codes import AttnlabError
from labrunner.labs import get_lab
from labrunner.pipeline import doctor

NO_SECCOMP = "libseccomp is not installed (apt-get install libseccomp2)"


@pytest.fixture
def a_boxed_machine(monkeypatch):
    """A machine where a sized box and both seals can be made, as root."""
    monkeypatch.setattr(boxes, "availability", lambda: None)
    monkeypatch.setattr(boxes, "bwrap_help", lambda: "--size BYTES  Set size of next tmpfs")
    monkeypatch.setattr(syscall_filter, "availability", lambda: None)
    monkeypatch.setattr(doctor.os, "geteuid", lambda: 0)


def test_box_bounds_name_each_box_its_seal_and_its_limits(a_boxed_machine):
    assert doctor.box_bounds() == (
        True,
        "student code runs only in processes sealed by seccomp (no fork, vfork, clone, execve, socket, openat, "
        "prlimit64): each one's limits bound its whole box, as root too (RLIMIT_NPROC never binds root; attnlab "
        "runs as root here)\n"
        "Triton import (a .py file's top level): sealed as the CPU worker is; address space 4096 MiB, 120 CPU s, "
        "file writes none, /job 256 MiB\n"
        "Triton build (the kernels' constant Python): sealed against new processes (seccomp: no fork, vfork, "
        "clone (threads stay), execve, socket); address space 4096 MiB, 120 CPU s, /job 256 MiB\n"
        "ptxas (Triton's PTX, no student code): address space 4096 MiB, 120 CPU s, /job 64 MiB\n"
        "CPU worker (the kernel, native or interpreted): sealed before the kernel loads; data 4096 MiB (heap and "
        "private mappings), 3600 CPU s, files of 64 MiB at most, /job 512 MiB\n"
        "NVRTC (reads a .cu file, runs none of it): address space 1024 MiB, 20 s (--compile-timeout), /job 64 MiB",
    )


def test_box_bounds_are_read_from_the_limits_not_restated(a_boxed_machine, monkeypatch):
    # a limit changed where the boxes read it is a limit changed in doctor's words
    monkeypatch.setattr(doctor, "triton_bounds", lambda: triton_build.TritonBounds(memory_mib=512, cpu_s=30))
    monkeypatch.setattr(boxes, "TRITON_COMPILE", boxes.Purpose("triton-compile", gpu=False, private_bytes=8 << 20))
    monkeypatch.setattr(syscall_filter, "ALLOWED", (*syscall_filter.ALLOWED, "socket"))
    lines = doctor.box_bounds()[1].splitlines()
    assert lines[0].startswith("student code runs only in processes sealed by seccomp (no fork, vfork, clone, execve, ")
    assert lines[0].split(":")[0].endswith("(no fork, vfork, clone, execve, openat, prlimit64)")
    assert lines[1] == (
        "Triton import (a .py file's top level): sealed as the CPU worker is; address space 512 MiB, 30 CPU s, "
        "file writes none, /job 8 MiB"
    )


def test_box_bounds_say_where_seccomp_is_missing_and_what_it_costs(a_boxed_machine, monkeypatch):
    monkeypatch.setattr(syscall_filter, "availability", lambda: NO_SECCOMP)
    ok, words = doctor.box_bounds()
    assert not ok
    assert words.splitlines()[0] == (
        f"seccomp is unavailable ({NO_SECCOMP}): no process can be sealed, so the CPU backend grades only with "
        "--unsafe-cpu and Triton files are refused (exit 6)"
    )


@pytest.mark.parametrize(
    ("help_text", "unboxed", "said"),
    [
        ("", None, "/job unsized (this bubblewrap has no --size: a tmpfs of the kernel's default size)"),
        ("--size", "bubblewrap is not installed", "no /job (no box here)"),
    ],
)
def test_box_bounds_say_when_job_has_no_size(a_boxed_machine, monkeypatch, help_text, unboxed, said):
    monkeypatch.setattr(boxes, "bwrap_help", lambda: help_text)
    monkeypatch.setattr(boxes, "availability", lambda: unboxed)
    assert doctor.box_bounds()[1].splitlines()[3] == (
        f"ptxas (Triton's PTX, no student code): address space 4096 MiB, 120 CPU s, {said}"
    )


def test_an_ordinary_user_is_not_told_it_runs_as_root(a_boxed_machine, monkeypatch):
    monkeypatch.setattr(doctor.os, "geteuid", lambda: 1000)
    assert doctor.box_bounds()[1].splitlines()[0].endswith("as root too (RLIMIT_NPROC never binds root)")


def test_triton_row_names_the_version_the_driver_finds(a_boxed_machine, monkeypatch):
    monkeypatch.setattr(triton_build.importlib.metadata, "version", lambda name: "3.6.0")
    assert doctor.triton_status() == (True, "3.6.0: seccomp for the sealed import, a box for each step")


def test_triton_row_without_triton_says_how_to_install_it(a_boxed_machine, monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(triton_build.importlib.metadata, "version", missing)
    assert doctor.triton_status() == (
        False,
        "not installed: pip install 'attnlab[triton]' to grade .py files (labs 2 and 3)",
    )


def test_triton_row_without_seccomp_says_py_files_are_refused(a_boxed_machine, monkeypatch):
    monkeypatch.setattr(triton_build.importlib.metadata, "version", lambda name: "3.6.0")
    monkeypatch.setattr(syscall_filter, "availability", lambda: NO_SECCOMP)
    assert doctor.triton_status() == (
        False,
        f"3.6.0, but its sealed import needs seccomp, unavailable here ({NO_SECCOMP}): .py files are refused (exit 6)",
    )


def test_triton_row_without_a_box_says_only_unsafe_cpu_compiles(a_boxed_machine, monkeypatch):
    monkeypatch.setattr(triton_build.importlib.metadata, "version", lambda name: "3.6.0")
    monkeypatch.setattr(boxes, "availability", lambda: "bubblewrap is not installed")
    assert doctor.triton_status() == (
        False,
        "3.6.0, but no box can be made (bubblewrap is not installed): .py files compile only with --unsafe-cpu",
    )


@pytest.mark.slow
def test_doctor_json_carries_both_rows(a_boxed_machine, monkeypatch, tmp_path):
    monkeypatch.setattr(triton_build.importlib.metadata, "version", lambda name: "3.6.0")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["doctor", "--device", "auto", "--json", "d.json"])
    notes = json.loads(Path(tmp_path / "d.json").read_text())["notes"]
    rows = {note.split(": ")[0]: note for note in notes}
    assert (
        rows["Triton (.py files)"]
        == "Triton (.py files): ok: 3.6.0: seccomp for the sealed import, a box for each step"
    )
    assert rows["box bounds"] == f"box bounds: ok: {doctor.box_bounds()[1]}"
    assert "│ box bounds" in result.output


def test_the_import_box_is_started_with_the_limits_doctor_states(monkeypatch):
    started = []

    def run(command_in, *args, **kwargs):
        started.append(command_in("/job"))
        return b'{"status": "error", "detail": "stop here"}', 0

    monkeypatch.setattr(triton_build, "run_limited_child", run)
    with pytest.raises(AttnlabError):
        triton_build.import_kernels(get_lab("lab2"), "x = 1\n", "sub.py", CompileLimits(), triton_build.triton_bounds())
    bounds = triton_build.triton_bounds()
    assert started[0][2:] == [
        str(triton_build.IMPORT_CHILD),
        str(bounds.memory_mib),
        str(bounds.cpu_s),
        str(bounds.import_file_bytes),
    ]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="the triton extra is not installed")
def test_the_import_box_cannot_raise_its_limits(tmp_path):
    # prlimit64 is refused by the seal (doctor's first line): not even root raises the box's bounds (Python
    # words the refusal, EPERM, as a limit it may not raise)
    path = tmp_path / "sub.py"
    path.write_text("import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))\n")
    with pytest.raises(AttnlabError) as caught:
        triton_build.compile_triton(get_lab("lab2"), path, "sub.py", "sm_90", CompileLimits())
    assert caught.value.message == "sub.py(2): error: ValueError: not allowed to raise maximum limit"
