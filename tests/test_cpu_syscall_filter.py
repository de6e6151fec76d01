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

from labrunner.syscall_filter import availability

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(availability() is not None, reason=f"no seccomp here: {availability()}")

CHILD = textwrap.dedent("""
    import json, os, socket, sys
    import numpy as np
    from labrunner.compile.nvrtc import compose_source
    from labrunner.run.cpu_device import CpuDevice

    import ctypes
    from labrunner.syscall_filter import _library

    scratch, sandboxed = sys.argv[1], sys.argv[2] == "sealed"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    number = lambda name: _library().seccomp_syscall_resolve_name(name.encode())
    device = CpuDevice()
    source = compose_source(
        'extern "C" __global__ void twice(float* o) { o[threadIdx.x] = 2.0f * threadIdx.x; '
        'if (threadIdx.x == 0) printf("printed by a kernel after the seal\\\\n"); }',
        "attention.cu",
    )
    module = device.compile(source, "attention.cu", {"twice": ["float*"]}, sandboxed=sandboxed)
    out = np.zeros(4, np.float32)
    module.launch("twice", (1, 1, 1), (4, 1, 1), 0, [out])
    seen = {"launch": out.tolist()}

    def raw(name, *args):  # a system call made directly, as a kernel can through the C library's syscall()
        buf = ctypes.create_string_buffer(512)
        args = [buf if a is None else a for a in args]
        ctypes.set_errno(0)
        result = libc.syscall(ctypes.c_long(number(name)), *args)
        seen[name] = "allowed" if result >= 0 else os.strerror(ctypes.get_errno())

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
    attempt("stat a path", lambda: os.stat("/"))
    AT_FDCWD, AT_EMPTY_PATH = ctypes.c_long(-100), ctypes.c_long(0x1000)
    raw("newfstatat", AT_FDCWD, b"/", None, AT_EMPTY_PATH)          # a stat of "/", which seccomp cannot see
    raw("statx", AT_FDCWD, b"/", AT_EMPTY_PATH, ctypes.c_long(0x7ff), None)
    raw("readlinkat", AT_FDCWD, b"/proc/self/exe", None, ctypes.c_long(512))
    raw("faccessat", AT_FDCWD, b"/", ctypes.c_long(0))
    raw("fstat", ctypes.c_long(1), None)                           # a descriptor's own stat takes no path
    try:
        device.compile(source, "attention.cu", {"twice": ["float*"]}, sandboxed=sandboxed)
        seen["second compile"] = "allowed"
    except Exception as exc:
        seen["second compile"] = str(exc)
    print(json.dumps(seen))
""")


def run_child(tmp_path: Path, mode: str) -> dict:
    (tmp_path / "keep").write_text("still here")
    completed = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), mode], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    # The kernel's printf reached stdout, sealed or not (C's stdout got its buffer before the seal).
    assert completed.stdout.splitlines()[:-1] == ["printed by a kernel after the seal"]
    return json.loads(completed.stdout.splitlines()[-1])


@pytest.mark.slow
def test_a_sealed_worker_runs_kernels_and_nothing_else(tmp_path):
    seen = run_child(tmp_path, "sealed")
    refused = "Operation not permitted"
    assert seen == {
        "launch": [0.0, 2.0, 4.0, 6.0],
        "create a file": refused,
        "read a file": refused,
        "fork": refused,
        "socket": refused,
        "exec": refused,
        "signal the parent": refused,
        "unlink": refused,
        "mkdir": refused,
        "aim SIGIO at the parent": refused,
        "read the fd flags": "allowed",
        "stat a path": refused,
        "newfstatat": refused,
        "statx": refused,
        "readlinkat": refused,
        "faccessat": refused,
        "fstat": "allowed",
        "second compile": "this CPU worker already loaded a module and sealed itself; each module needs a fresh worker",
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]


def test_unsafe_cpu_skips_the_filter(tmp_path):
    seen = run_child(tmp_path, "unsealed")
    assert (seen["launch"], seen["create a file"], seen["mkdir"], seen["second compile"], seen["newfstatat"]) == (
        [0.0, 2.0, 4.0, 6.0],
        "allowed",
        "allowed",
        "allowed",
        "allowed",
    )


# System calls whose arguments include a path (x86-64 and AArch64 names): none may be on the list
# the first filter allows, and the one it allows for the loader must be taken away by the second.
PATH_CALLS = (
    "open",
    "openat",
    "openat2",
    "creat",
    "stat",
    "lstat",
    "newfstatat",
    "fstatat64",
    "statx",
    "statfs",
    "access",
    "faccessat",
    "faccessat2",
    "readlink",
    "readlinkat",
    "chdir",
    "chroot",
    "execve",
    "execveat",
    "mkdir",
    "mkdirat",
    "rmdir",
    "unlink",
    "unlinkat",
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "chmod",
    "fchmodat",
    "chown",
    "lchown",
    "fchownat",
    "truncate",
    "utime",
    "utimes",
    "utimensat",
    "futimesat",
    "mknod",
    "mknodat",
    "getxattr",
    "lgetxattr",
    "listxattr",
    "llistxattr",
    "setxattr",
    "removexattr",
    "name_to_handle_at",
    "inotify_add_watch",
    "fanotify_mark",
    "mount",
    "umount2",
    "pivot_root",
    "swapon",
    "acct",
    "uselib",
    "quotactl",
    "open_tree",
    "move_mount",
    "fsopen",
    "fspick",
    "mount_setattr",
)


def test_no_system_call_that_takes_a_path_survives_the_seal():
    from labrunner.syscall_filter import ALLOWED, RUN_STAGE_REFUSED

    assert set(PATH_CALLS) & set(ALLOWED) == set()
    assert {"openat", "newfstatat"} <= set(RUN_STAGE_REFUSED)
