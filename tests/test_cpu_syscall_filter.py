"""The CPU worker seals itself with seccomp before it loads a student's module.

A filter can never be removed, so every seal happens in a child Python process that reports
what it saw as JSON on stdout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from labrunner.run.cpu.syscall_filter import availability

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(availability() is not None, reason=f"no seccomp here: {availability()}")

CHILD = textwrap.dedent("""
    import json, os, socket, sys
    import numpy as np
    from labrunner.build.nvrtc import compose_source
    from labrunner.run.cpu_device import CpuDevice

    scratch, sandboxed = sys.argv[1], sys.argv[2] == "sealed"
    device = CpuDevice()
    source = compose_source('extern "C" __global__ void twice(float* o) { o[threadIdx.x] = 2.0f * threadIdx.x; }',
                            "attention.cu")
    module = device.compile(source, "attention.cu", {"twice": ["float*"]}, sandboxed=sandboxed)
    out = np.zeros(4, np.float32)
    module.launch("twice", (1, 1, 1), (4, 1, 1), 0, [out])
    seen = {"launch": out.tolist()}

    def attempt(name, action):
        try:
            result = action()
        except OSError as exc:
            seen[name] = exc.strerror
        else:
            seen[name] = "allowed"
            if name == "fork" and result == 0:  # the forked child
                os._exit(0)

    attempt("create a file", lambda: os.open(os.path.join(scratch, "created"), os.O_CREAT | os.O_WRONLY, 0o600))
    attempt("read a file", lambda: open("/etc/hostname").read())
    attempt("fork", os.fork)
    attempt("socket", socket.socket)
    if sandboxed:  # unsealed, exec would replace this process
        attempt("exec", lambda: os.execv("/bin/true", ["true"]))
    attempt("signal the parent", lambda: os.kill(os.getppid(), 0))
    attempt("unlink", lambda: os.unlink(os.path.join(scratch, "keep")))
    attempt("mkdir", lambda: os.mkdir(os.path.join(scratch, "made")))
    import fcntl
    attempt("aim SIGIO at the parent", lambda: fcntl.fcntl(1, fcntl.F_SETOWN, os.getppid()))
    attempt("read the fd flags", lambda: fcntl.fcntl(1, fcntl.F_GETFL))
    try:
        device.compile(source, "attention.cu", {"twice": ["float*"]}, sandboxed=sandboxed)
        seen["second compile"] = "allowed"
    except Exception as exc:
        seen["second compile"] = str(exc)
    print(json.dumps(seen))
""")


def run_child(tmp_path: Path, mode: str) -> dict:
    (tmp_path / "keep").write_text("still here")
    completed = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), mode], cwd=REPO, capture_output=True,
                               text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    return json.loads(completed.stdout.splitlines()[-1])


def test_a_sealed_worker_runs_kernels_and_nothing_else(tmp_path):
    seen = run_child(tmp_path, "sealed")
    refused = "Operation not permitted"
    assert seen == {
        "launch": [0.0, 2.0, 4.0, 6.0],
        "create a file": refused, "read a file": refused, "fork": refused, "socket": refused, "exec": refused,
        "signal the parent": refused, "unlink": refused, "mkdir": refused, "aim SIGIO at the parent": refused,
        "read the fd flags": "allowed",
        "second compile": "this CPU worker already loaded a module and sealed itself; each module needs a fresh worker",
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]


def test_unsafe_cpu_skips_the_filter(tmp_path):
    seen = run_child(tmp_path, "unsealed")
    assert (seen["launch"], seen["create a file"], seen["mkdir"], seen["second compile"]) == (
        [0.0, 2.0, 4.0, 6.0], "allowed", "allowed", "allowed")
