"""The CPU worker's seccomp filter: once it is on, the process can compute, allocate memory and talk
over the file descriptors it already has, and nothing else.

The CPU backend runs a student's code as native code in the worker process, so the operating
system is the only thing that can stop it. A seccomp filter is a list, checked by the kernel at
every system call, of what this process may still ask for. It can never be removed and is
inherited by every thread. We install it (through libseccomp, which assembles the BPF program and
checks the architecture so that 32-bit system call numbers cannot slip past) after everything the
worker needs is imported and built, and before the student's module is loaded:

* allowed: read, write and fstat on descriptors already open (the request pipe, the kernel-output
  log), memory (mmap, munmap, mprotect, mremap, brk, madvise), futex, clocks and sleeps,
  signals within the process (the fiber runtime catches SIGSEGV on an alternate stack; abort
  signals itself), getpid and friends, exit; and, narrowed by their arguments, kill and tgkill
  of this process only, fcntl for descriptor and status flags only (not F_SETOWN), ioctl for
  isatty only, prctl for PR_SET_NO_NEW_PRIVS, and seccomp (adding a filter only takes away);
* refused with EPERM, which the C library hands back as an ordinary error: everything else,
  among it fork, vfork and clone (no threads either: the runtime needs none), execve, socket and
  connect, open, openat, creat, unlink, rename, mkdir, ptrace, every call that takes a path
  (stat, statx, access, readlink ...), and kill of any other process.
  `clone3` answers ENOSYS, so that the C library falls back to `clone`, whose flags a filter can
  read (clone3 passes them behind a pointer).

Loading the module needs one `openat` (the dynamic loader opens the file) and one `newfstatat`
(the loader's fstat of it, which current C libraries make as `newfstatat(fd, "", buf,
AT_EMPTY_PATH)`), so sealing is two steps: `install(stage="load")` allows openat read-only and
newfstatat with AT_EMPTY_PATH, the loader opens the module, and `install(stage="run")` adds a
second filter that refuses both. Filters stack and the strictest answer wins, so the second step
can only take permissions away. Nothing of the student's file runs between the two steps: the
object check has refused any module whose loading would run its code.

Seccomp sees a system call's arguments as numbers, never the strings a pointer points to, so the
load step cannot name the one file it lets the loader open: for those few microseconds any file
this process may read could be opened read-only, and with AT_EMPTY_PATH set and a path given,
newfstatat looks that path up as stat() does. That is why the second step matters most: from then
on no system call that takes a path is allowed at all (open, openat, openat2 and newfstatat are
refused by the second filter; stat, lstat, statx, access, faccessat, readlink and every other
call with a path argument were never allowed by the first). fstat(2) itself, which takes only a
descriptor, stays; the C library's fstat() does not use it, so once sealed it fails, and the
worker sets up stdout's buffer before sealing (`prepare_stdout`), when that fstat still works, so
that a kernel's first printf needs none.

libseccomp is reached through ctypes (six of its functions). Its official Python bindings are not
published on PyPI; the ctypes package that is (pyseccomp 0.1.2) has had no release since 2021,
and the maintained pure-Python one (seccompy) assembles the BPF itself instead of using
libseccomp. The C library is in every Debian and Ubuntu image (libseccomp2).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import sys
from collections.abc import Sequence

# libseccomp's constants (seccomp.h, stable across 2.x).
_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_FLTATR_CTL_TSYNC = 4
_SCMP_CMP_NE = 1
_SCMP_CMP_EQ = 4
_SCMP_CMP_MASKED_EQ = 7


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


# Everything below is allowed without conditions: none of it reaches outside the process.
ALLOWED = (
    # descriptors already open
    "read",
    "readv",
    "pread64",
    "preadv",
    "preadv2",
    "write",
    "writev",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "lseek",
    "fstat",
    "close",
    "dup",
    "poll",
    "ppoll",
    "select",
    "pselect6",
    "epoll_wait",
    "epoll_pwait",
    # memory
    "mmap",
    "munmap",
    "mremap",
    "mprotect",
    "brk",
    "madvise",
    "membarrier",
    # time and waiting
    "futex",
    "clock_gettime",
    "clock_getres",
    "gettimeofday",
    "time",
    "nanosleep",
    "clock_nanosleep",
    "sched_yield",
    "getrusage",
    "times",
    # signals within the process (the fiber runtime's fault handler; Python's own)
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "sigaltstack",
    "rt_sigsuspend",
    # who am I
    "getpid",
    "gettid",
    "getppid",
    "getuid",
    "geteuid",
    "getgid",
    "getegid",
    "getrandom",
    # more filters (the second step; a filter can only take permissions away)
    "seccomp",
    # leaving
    "exit",
    "exit_group",
    "restart_syscall",
)

# Conditional rules: (argument index, comparison, datum_a, datum_b) as libseccomp takes them:
# for EQ datum_a is the value; for MASKED_EQ datum_a is the mask and datum_b the value.
_TCGETS = 0x5401  # isatty(): the C library asks once before buffering stdout
_AT_EMPTY_PATH = 0x1000
_PR_SET_NO_NEW_PRIVS = 38


# What the second filter takes away: everything of the first's that accepts a path.
RUN_STAGE_REFUSED = ("openat", "open", "openat2", "newfstatat", "fstatat64")

# The "no-processes" filter, for Triton's compiler over a kernel package (`labrunner/compile/triton_child.py`):
# that compiler reads files (its own libraries, LLVM's libdevice) and runs threads, and a kernel's body
# can reach Python while it is traced, so the filter allows by default and takes away what would let
# that Python outlive or leave the process: a new process (fork, vfork, a clone that is not a thread),
# a new program (execve), the network, and reaching into other processes or namespaces.
NO_PROCESS_REFUSED = (
    "fork",
    "vfork",
    "execve",
    "execveat",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "socket",
    "socketpair",
    "connect",
    "bind",
    "listen",
    "accept",
    "accept4",
    "setns",
    "unshare",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "kexec_load",
    "init_module",
    "finit_module",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
)
_CLONE_THREAD = 0x00010000


def _own_pid_rules(pid: int) -> list[tuple[str, list[tuple[int, int, int, int]]]]:
    return [
        ("kill", [(0, _SCMP_CMP_EQ, pid, 0)]),  # a signal to ourselves (abort, raise)
        ("tgkill", [(0, _SCMP_CMP_EQ, pid, 0)]),
        ("ioctl", [(1, _SCMP_CMP_EQ, _TCGETS, 0)]),  # isatty()
        ("prctl", [(0, _SCMP_CMP_EQ, _PR_SET_NO_NEW_PRIVS, 0)]),  # libseccomp, before the second filter
        # descriptor and status flags only: F_SETOWN would aim SIGIO at another process
        *[("fcntl", [(1, _SCMP_CMP_EQ, command, 0)]) for command in (1, 2, 3, 4)],  # F_GETFD .. F_SETFL
    ]


def _other_pid_rules(pid: int) -> list[tuple[str, list[tuple[int, int, int, int]]]]:
    """kill and tgkill aimed at any process but this one (refused)."""
    return [(name, [(0, _SCMP_CMP_NE, pid, 0)]) for name in ("kill", "tgkill")]


class SyscallFilterUnavailable(RuntimeError):
    """This machine cannot filter system calls (not Linux, no libseccomp, or the kernel refused)."""


@functools.cache
def _library() -> ctypes.CDLL:
    if not sys.platform.startswith("linux"):
        raise SyscallFilterUnavailable(f"seccomp needs Linux (this is {sys.platform})")
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        raise SyscallFilterUnavailable("libseccomp is not installed (apt-get install libseccomp2)") from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    return lib


def availability() -> str | None:
    """None if a filter can be installed here, else a one-line reason."""
    try:
        _library()
    except SyscallFilterUnavailable as exc:
        return str(exc)
    try:
        with open("/proc/self/status") as status:
            if not any(line.startswith("Seccomp:") for line in status):
                return "this Linux kernel has no seccomp (CONFIG_SECCOMP_FILTER is off)"
    except OSError:
        return "cannot read /proc/self/status to see whether the kernel offers seccomp"
    return None


def _add(
    lib: ctypes.CDLL,
    ctx: int,
    action: int,
    name: str,
    conditions: Sequence[tuple[int, int, int, int]] = (),
) -> None:
    number = lib.seccomp_syscall_resolve_name(name.encode())
    if number < 0:  # not a system call on this architecture (e.g. `time` on AArch64)
        return
    array = (_ArgCmp * max(1, len(conditions)))(*[_ArgCmp(*condition) for condition in conditions])
    rc = lib.seccomp_rule_add_array(ctx, action, number, len(conditions), array)
    if rc < 0:
        raise SyscallFilterUnavailable(f"libseccomp refused the rule for {name} ({os.strerror(-rc)})")


def _load(stage: str) -> None:
    lib = _library()
    ctx = None
    try:
        # The first filter refuses by default; the second allows by default and refuses openat; the
        # no-processes filter allows by default and refuses what makes or reaches another process.
        ctx = lib.seccomp_init(_errno_action(errno.EPERM) if stage == "load" else _SCMP_ACT_ALLOW)
        if not ctx:
            raise SyscallFilterUnavailable("libseccomp could not start a filter")
        # Every thread of the process (numpy's BLAS may have started some) gets the filter too.
        if lib.seccomp_attr_set(ctx, _SCMP_FLTATR_CTL_TSYNC, 1) < 0:
            raise SyscallFilterUnavailable("the kernel cannot apply a filter to every thread (TSYNC)")
        if stage == "load":
            for name in ALLOWED:
                _add(lib, ctx, _SCMP_ACT_ALLOW, name)
            for name, conditions in _own_pid_rules(os.getpid()):
                _add(lib, ctx, _SCMP_ACT_ALLOW, name, conditions)
            _add(lib, ctx, _errno_action(errno.ENOSYS), "clone3")
            # The loader's one openat, read-only (O_ACCMODE clear, no O_CREAT): the second
            # filter takes even that away once the module is loaded.
            read_only = os.O_ACCMODE | os.O_CREAT | os.O_TRUNC | getattr(os, "O_TMPFILE", 0)
            _add(lib, ctx, _SCMP_ACT_ALLOW, "openat", [(2, _SCMP_CMP_MASKED_EQ, read_only, 0)])
            # The loader's fstat(), which is newfstatat(fd, "", AT_EMPTY_PATH) in current C libraries
            # (with a path given it is a stat of that path: the second filter refuses it too).
            _add(lib, ctx, _SCMP_ACT_ALLOW, "newfstatat", [(3, _SCMP_CMP_MASKED_EQ, _AT_EMPTY_PATH, _AT_EMPTY_PATH)])
        elif stage == "run":
            for name in RUN_STAGE_REFUSED:
                _add(lib, ctx, _errno_action(errno.EPERM), name)
        else:
            for name in NO_PROCESS_REFUSED:
                _add(lib, ctx, _errno_action(errno.EPERM), name)
            # a clone without CLONE_THREAD is a new process; a thread (which the compiler's LLVM starts) is not
            _add(lib, ctx, _errno_action(errno.EPERM), "clone", [(0, _SCMP_CMP_MASKED_EQ, _CLONE_THREAD, 0)])
            _add(lib, ctx, _errno_action(errno.ENOSYS), "clone3")  # its flags lie behind a pointer
            for name, conditions in _other_pid_rules(os.getpid()):
                _add(lib, ctx, _errno_action(errno.EPERM), name, conditions)
        rc = lib.seccomp_load(ctx)
        if rc < 0:
            raise SyscallFilterUnavailable(f"the kernel refused the seccomp filter ({os.strerror(-rc)})")
    finally:
        if ctx:
            lib.seccomp_release(ctx)


def prepare_stdout() -> None:
    """Give C's stdout its buffer now, while the C library's fstat() still works (it decides the
    buffer's size from it); after `install("run")` the first printf would otherwise find fstat
    refused. Fully buffered, as a pipe's stdout already is by default."""
    libc = ctypes.CDLL(None)
    stdout = ctypes.c_void_p.in_dll(libc, "stdout")
    libc.setvbuf.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    libc.setvbuf(stdout, None, 0, 0)  # _IOFBF with no buffer of ours: the C library allocates one now


def install(stage: str) -> None:
    """Seal this process, for good. stage "load": everything but the loader's read-only open and its
    fstat is refused; stage "run" (after the module is loaded): no system call that takes a path;
    stage "no-processes": no new process or program, no network, no other process reached."""
    if stage not in ("load", "run", "no-processes"):
        raise ValueError(f"unknown stage {stage!r}")
    _load(stage)
