"""The sandbox: what a boxed process sees, and that a hostile file's code leaves no trace: no secret
in any output, no process left, no file outside its private directory, and the true verdict."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import xml.dom.minidom
from pathlib import Path

import pytest
from box_paths import tmp_entries_of
from conftest import ESCAPEE

from labrunner.box import CPU_RUN, GPU_RUN
from labrunner.run.cpu.module import cpu_compiler_available
from labrunner.run.sandbox import CPU_LIMITS, GIB, GPU_LIMITS, MIB, Sandbox, landlock_abi
from labrunner.syscall_filter import availability

REPO = Path(__file__).resolve().parent.parent
HOSTILE = REPO / "tests" / "fixtures" / "lab2" / "hostile"
needs_gxx = pytest.mark.skipif(cpu_compiler_available() is not None, reason="no C++ compiler for the CPU backend")
needs_seccomp = pytest.mark.skipif(availability() is not None, reason=f"no seccomp here: {availability()}")
# runtime_escape.cu's escapee, and its files at fixed paths in /tmp, are looked for machine-wide (and ended
# by runtime_escape below): no other test's escape may run meanwhile
pytestmark = ESCAPEE


def probe(limits, monkeypatch) -> dict:
    monkeypatch.setenv("ATTNLAB_SEED", "31337")
    monkeypatch.setenv("GRADER_TOKEN", "hunter2")
    monkeypatch.setenv("CUPY_CACHE_DIR", "/graders/cupy-cache")
    box = Sandbox(GPU_RUN if limits is GPU_LIMITS else CPU_RUN)
    read_end, write_end = os.pipe()
    try:
        box.start(
            box.python_command("tests.sandbox_probe", limits),
            stdout=write_end,
            host_code=limits.host_code,
            readable=(str(REPO / "tests"),),
        )
        # Asked from outside: inside a PID namespace the session's leader is out of sight (getsid gives 0)
        session_leader_outside = os.getsid(box.process.pid) == box.process.pid
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            text = pipe.read()
        assert box.process.wait(30) == 0, text
        private = box.private
    finally:
        box.kill()
    assert not private.exists()
    return json.loads(text) | {"private": str(private), "session_leader_outside": session_leader_outside}


def test_a_cpu_box_has_the_allowed_environment_its_own_session_directory_and_limits(monkeypatch):
    seen = probe(CPU_LIMITS, monkeypatch)
    assert seen["seed"] is None
    assert "GRADER_TOKEN" not in seen["environment"]
    assert set(seen["environment"]) <= {
        "PATH",
        "LD_LIBRARY_PATH",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUDA_HOME",
        "CUDA_PATH",
        "ATTNLAB_CPU_STACK_KB",
        "HOME",
        "TMPDIR",
        "CUPY_CACHE_DIR",
        "CUDA_CACHE_PATH",
        "XDG_CACHE_HOME",
        "LC_ALL",
        "USER",
        "LOGNAME",
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "PWD",  # bubblewrap sets it to the box's private folder
        "ATTNLAB_BOX",
    }  # the box's purpose, so that nothing inside tries to make one
    assert seen["cwd"] == seen["private"] and seen["cwd_entries"] == ["tmp"]
    assert seen["session_leader_outside"] is True  # its own session, so it ends as a group
    assert seen["limits"] == {
        "RLIMIT_CPU": 3600,
        "RLIMIT_DATA": 4 * GIB,
        "RLIMIT_FSIZE": 64 * MIB,
        "RLIMIT_NOFILE": 1024,
        "RLIMIT_CORE": 0,
    }
    assert seen["capabilities"] == 0
    assert seen["landlock"] == landlock_abi()
    assert seen["pid_namespace"] is True and seen["processes"] == [1, seen["pid"]]  # bubblewrap's init, and itself
    assert seen["cupy_cache"] == str(Path(seen["private"]) / "cupy")  # its own: it runs student host code


def test_a_gpu_box_has_no_data_limit_and_no_host_code_confinement(monkeypatch):
    seen = probe(GPU_LIMITS, monkeypatch)
    assert seen["seed"] is None
    assert seen["session_leader_outside"] is True
    assert seen["limits"]["RLIMIT_DATA"] == -1  # RLIM_INFINITY: the CUDA driver's reservations need it
    assert seen["limits"]["RLIMIT_FSIZE"] == 64 * MIB
    assert seen["landlock"] == 0
    assert seen["pid_namespace"] is True  # the box's, though it runs no student host code
    assert seen["cupy_cache"] == "/job/cupy"  # a copy of the grader's, made inside: nothing written reaches it
    assert seen["writable_outside"] == []  # no Landlock here: the read-only root is what refuses


def test_a_box_holds_the_toolchain_its_private_folder_and_nothing_else_of_the_host(monkeypatch, tmp_path):
    """The root is read-only toolchain paths, a /proc of its own, a minimal /dev and /job: no host /tmp
    (where other submissions' folders live), no /home, nothing of /etc but the dynamic linker's files,
    no process of the host, and no network, not even a server listening on the host's loopback."""
    secret = tmp_path / "classmate.cu"
    secret.write_text("// a classmate's kernel")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("PROBE_PORT", str(server.getsockname()[1]))
        with patch_allowed("PROBE_PORT"):
            seen = probe(CPU_LIMITS, monkeypatch)
    assert set(seen["root_entries"]) <= {
        "bin",
        "dev",
        "etc",
        "job",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "proc",
        "sbin",
        "usr",
        *ROOT_OF_PYTHON_AND_PACKAGE,
    }
    assert (seen["tmp_entries"] or []) == tmp_entries_of()  # only the way to what it maps, if that lies in /tmp
    assert seen["home_exists"] is False
    assert set(seen["etc_entries"]) <= {"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives"}
    assert seen["processes"] == [1, seen["pid"]]
    assert seen["loopback_reachable"] is False
    assert seen["network"] in (None, ["lo"])
    assert seen["writable_outside"] == []


# The top folders the box adds for the Python and the package it runs (a virtual environment in the
# repository, a pyenv under /root, a system Python under /usr).
ROOT_OF_PYTHON_AND_PACKAGE = {Path(p).parts[1] for p in (sys.prefix, sys.base_prefix, str(REPO))}


@contextlib.contextmanager
def patch_allowed(name: str):
    """One more variable let into the box, for the probe's own use."""
    from labrunner.run import sandbox

    saved = sandbox.ENV_ALLOWED
    sandbox.ENV_ALLOWED = (*saved, name)
    try:
        yield
    finally:
        sandbox.ENV_ALLOWED = saved


def living(name: str) -> list[int]:
    """Processes (not zombies) whose name is `name`."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                comm = Path(f"/proc/{entry.name}/comm").read_text().strip()
                state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if comm == name and state not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def grade_hostile(
    tmp_path: Path, name: str, seed: str, *extra: str
) -> tuple[subprocess.CompletedProcess, dict, str, Path]:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    reports = tmp_path / "reports"
    reports.mkdir()
    env = {**os.environ, "ATTNLAB_SEED": seed, "TMPDIR": str(scratch)}
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "labrunner",
            "grade",
            "lab2",
            str(HOSTILE / name),
            "--device",
            "cpu",
            "--no-timing",
            "--json",
            str(reports / "r.json"),
            "--junit",
            str(reports / "r.xml"),
            *extra,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return completed, json.loads((reports / "r.json").read_text()), (reports / "r.xml").read_text(), scratch


@needs_gxx
@pytest.mark.slow
def test_code_outside_any_kernel_is_refused_before_it_runs_and_leaves_no_trace(tmp_path):
    """The gate refuses the constructor's attribute before any compiler runs; nothing of it ran."""
    seed = str(secrets.randbelow(10**12) + 10**12)
    completed, result, junit, scratch = grade_hostile(tmp_path, "constructor_escape.cu", seed)
    assert (completed.returncode, result["verdict"]) == (3, "compile-error")
    assert "__attribute__((constructor)) is not allowed in a kernel file" in result["error"]
    for text in (completed.stdout, completed.stderr, json.dumps(result), junit):
        assert seed not in text
    assert living("attnlab-escapee") == []
    time.sleep(2.5)
    assert json.loads((tmp_path / "reports" / "r.json").read_text()) == result
    assert list(scratch.iterdir()) == []


# runtime_escape.cu makes the constructor's attack from inside its kernel, on the first call, through
# the C library's symbol table: the object check sees nothing to refuse. With --unsafe-cpu (no seccomp
# filter) only the box stands between it and the grader, so these tests prove the box itself.
ESCAPE_TARGETS = (Path("/tmp/attnlab-hostile-escape"), Path("/tmp/attnlab-escaped-next-to-private"))
FORGED_REPLY = '\\x00\\x00\\x00+{"body":{"ok":true,"verdict":"pass"}'


@pytest.fixture
def runtime_escape():
    """Nothing of the attack stays on this machine, whatever a test found: its escapee (should the box
    have failed to end it) and its files at fixed paths (the second is where it lands when the
    fixture suite grades it, whose private directories are in /tmp)."""
    for path in ESCAPE_TARGETS:
        path.unlink(missing_ok=True)
    yield
    for pid in living("attnlab-escapee"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for path in ESCAPE_TARGETS:
        path.unlink(missing_ok=True)


def first_bad_row(result: dict) -> int:
    """The first wrong row of the decisive case."""
    return next(c for c in result["cases"] if c["name"] == result["decisive_case"])["first_bad"]["row"]


@needs_gxx
@pytest.mark.slow
def test_code_inside_a_kernel_without_the_syscall_filter_is_held_by_the_box_and_leaves_no_trace(
    tmp_path, runtime_escape
):
    seed = str(secrets.randbelow(10**12) + 10**12)
    completed, result, junit, scratch = grade_hostile(tmp_path, "runtime_escape.cu", seed, "--unsafe-cpu")
    assert (completed.returncode, result["verdict"], result["decisive_case"]) == (1, "wrong", "C1-P31")
    assert first_bad_row(result) == 0
    output = result["kernel_output"]
    # the attack was real: it found the C library and started its escapee; but in the box there is no
    # driver to find (its own PID namespace), so no report to rewrite
    assert "report to rewrite: not found" in output
    assert "escapee: running, in a session of its own, named attnlab-escapee" in output
    # the secret: not in its environment, not readable from the driver's, in no output
    assert "my ATTNLAB_SEED: (not set)" in output
    assert "parent environment: refused" in output
    for text in (completed.stdout, completed.stderr, json.dumps(result), junit):
        assert seed not in text
    # nothing of what it started is left to rewrite the report, and its private directory is gone
    # (with nothing beside it where Landlock confines its writes: the next test)
    assert living("attnlab-escapee") == []
    time.sleep(2.5)
    assert json.loads((tmp_path / "reports" / "r.json").read_text()) == result
    assert [p.name for p in scratch.iterdir()] == ([] if landlock_abi() else ["attnlab-escaped-next-to-private"])
    # its forged replies were skipped, and shown as kernel output, escaped
    assert any(line.startswith(FORGED_REPLY) for line in output)
    assert "\x1b" not in completed.stdout + completed.stderr


@needs_gxx
@pytest.mark.skipif(landlock_abi() == 0, reason="this kernel has no Landlock: writes outside are not confined")
@pytest.mark.slow
def test_code_inside_a_kernel_without_the_syscall_filter_cannot_write_outside_its_private_directory(
    tmp_path, runtime_escape
):
    completed, result, _, scratch = grade_hostile(tmp_path, "runtime_escape.cu", "1", "--unsafe-cpu")
    assert (completed.returncode, result["verdict"]) == (1, "wrong")
    assert "could not write ../attnlab-escaped-next-to-private" in result["kernel_output"]
    assert "could not write /tmp/attnlab-hostile-escape" in result["kernel_output"]
    assert not Path("/tmp/attnlab-hostile-escape").exists()
    assert list(scratch.iterdir()) == []


@needs_gxx
@needs_seccomp
@pytest.mark.slow
def test_code_inside_a_kernel_under_the_syscall_filter_reaches_nothing_and_the_true_verdict_stands(
    tmp_path, runtime_escape
):
    """The same attack with the filter on: every call that reaches outside the process fails, so it
    cannot even look for its driver, and it says so; only writes to descriptors it has go through."""
    seed = str(secrets.randbelow(10**12) + 10**12)
    completed, result, junit, scratch = grade_hostile(tmp_path, "runtime_escape.cu", seed)
    assert (completed.returncode, result["verdict"], result["decisive_case"]) == (1, "wrong", "C1-P31")
    assert first_bad_row(result) == 0
    output = result["kernel_output"]
    assert output[:6] == [
        "my ATTNLAB_SEED: (not set)",
        "parent environment: refused",
        "report to rewrite: not found",
        "fork failed",
        "could not write ../attnlab-escaped-next-to-private",
        "could not write /tmp/attnlab-hostile-escape",
    ]
    assert output[6].startswith(FORGED_REPLY) and len(output) == 7
    for text in (completed.stdout, completed.stderr, json.dumps(result), junit):
        assert seed not in text
    assert living("attnlab-escapee") == []
    assert list(scratch.iterdir()) == []
    assert not Path("/tmp/attnlab-hostile-escape").exists()


@needs_gxx
@pytest.mark.slow
def test_kernel_output_shows_controls_escaped_everywhere_and_junit_stays_xml(tmp_path):
    completed, result, junit, _ = grade_hostile(tmp_path, "printf_controls.cu", "1")
    assert (completed.returncode, result["verdict"]) == (1, "wrong")
    assert result["kernel_output"] == [
        "\\x1b[2K\\x1b[1A\\x1b[1;32mPASS\\x1b[0m (exit 0)\\x0d\\x07",
        "xml: \\x01\\x0b\\x0c\\x1f end",
        "bidi: \\u202e dellorts",
    ]
    assert "  | \\x1b[2K\\x1b[1A\\x1b[1;32mPASS\\x1b[0m (exit 0)\\x0d\\x07" in completed.stderr
    assert not any(c in completed.stdout + completed.stderr for c in "\x1b\r\x07\x01\u202e")
    system_out = xml.dom.minidom.parseString(junit).getElementsByTagName("system-out")[0].firstChild.data
    assert system_out.splitlines() == result["kernel_output"]


@needs_gxx
@pytest.mark.slow
def test_ninety_megabytes_of_printf_are_cut_to_the_first_64_kib_and_counted(tmp_path):
    completed, result, junit, _ = grade_hostile(tmp_path, "printf_flood.cu", "1")
    assert (completed.returncode, result["verdict"]) == (1, "wrong")
    kept = result["kernel_output"]
    assert kept[0] == "000000000" + " flood" * 15
    assert kept[-2:] == ["... and 636 more lines", "... 89,934,464 more bytes not shown (the first 64 KiB are kept)"]
    assert len(kept) == 22
    xml.dom.minidom.parseString(junit)


@needs_gxx
@pytest.mark.parametrize(
    "name, verdict, code, words",
    [
        ("constructor_crash.cu", "compile-error", 3, "__attribute__((constructor)) is not allowed in a kernel file"),
        ("constructor_exit.cu", "compile-error", 3, "__attribute__((constructor)) is not allowed in a kernel file"),
        ("cpu_build_error.cu", "compile-error", 3, "the CPU build (g++) failed: C++ compile failed:"),
    ],
)
@pytest.mark.slow
def test_a_worker_that_fails_while_loading_gives_a_verdict_and_both_reports(tmp_path, name, verdict, code, words):
    completed, result, junit, _ = grade_hostile(tmp_path, name, "1")
    assert (completed.returncode, result["verdict"], result["exit_code"]) == (code, verdict, code)
    assert words in result["error"]
    assert "Traceback" not in completed.stderr
    failure = xml.dom.minidom.parseString(junit).getElementsByTagName("failure")[0]
    assert failure.getAttribute("type") == verdict
