"""A boxed process's life: how it starts, what it sets on itself first, and how it ends.

What a boxed process can reach is decided by its box (`labrunner/box.py`, made by bubblewrap: its
own namespaces, a read-only toolchain, one private tmpfs at /job, a cleared environment, death with
its parent). This module starts the process in it and adds, inside, what a box cannot say from
outside, modelled on ioi/isolate's checklist (environment, directories, limits):

- its own session and process group, so it can be ended as a group, and it is made a child
  subreaper, so what it forks and orphans stays in its tree, where the driver finds it;
- the environment: only the names in `ENV_ALLOWED` pass (what the CUDA driver, CuPy and the C++
  compiler need), HOME, TMPDIR and the caches point into the private directory, and nothing else
  of the grader's (no `ATTNLAB_SEED`, no tokens) is there to read;
- resource limits (`Limits`), set by the process itself first thing, before any student code;
- for processes that run student host code (the CPU backend): root's capabilities dropped for
  good, and where the kernel offers Landlock, a ruleset that lets it write only inside its
  private directory (and /dev/null) and signal no process outside its own box; the driver makes
  itself non-dumpable, so its /proc files are out of reach even of a process it did not box;
- when it ends, however it ends, every process in its tree and its group gets SIGKILL
  (`Sandbox.kill`), so no process it started outlives the grade.

Where no box can be made (`box.availability()` says why), a process starts as before the box
existed: in a private host folder, with the same environment, limits and confinements, and, where
the kernel allows it, as the first process of a PID namespace of its own. The CPU backend then
refuses to grade unless `--unsafe-cpu` (see `pipeline/backend.py`); the GPU path says it runs unboxed.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import labrunner
from labrunner import box as boxes
from labrunner.compile.backend import Backend

ENV_ALLOWED = (
    "PATH",
    "LD_LIBRARY_PATH",  # the Python, the compiler, libcuda
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",  # which GPU the grade may use
    "CUDA_HOME",
    "CUDA_PATH",  # where CuPy finds the CUDA headers and NVRTC
    "ATTNLAB_CPU_STACK_KB",  # the CPU shim's fiber stack size
)
PACKAGE_ROOT = str(Path(labrunner.__file__).resolve().parent.parent)
GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """Resource limits, set by the boxed process on itself (soft and hard alike), before student code.

    cpu_s: CPU seconds for the process's whole life: a backstop, far above a real grade (the
        driver's wall-clock timeouts stop a hang long before), that ends an orphan spinning forever.
    data_bytes: RLIMIT_DATA, the heap and private writable mappings. CPU: 4 GiB holds lab 2's
        largest case, 1024 fiber stacks (132 MiB), Python with numpy and g++'s cc1plus (which
        inherits it). GPU: none, because RLIMIT_AS and RLIMIT_DATA break the CUDA driver's large
        virtual reservations, and a GPU worker runs no student host code: its host memory is
        what the driver sends it.
    file_bytes: RLIMIT_FSIZE, the largest file it may write: the CPU build's objects and shared
        library and CuPy's cubin cache are a few MiB. Kernel output goes to a pipe, not a file,
        so it is not bounded by this (the driver keeps the first 64 KiB of it).
    open_files: RLIMIT_NOFILE: CUDA opens a few dozen device and event descriptors.
    extra_processes: RLIMIT_NPROC is per user, so the limit is the user's task count at start plus
        this many (g++ needs four, CUDA a few threads). The kernel ignores it for root.
    """

    cpu_s: int = 3600
    data_bytes: int | None = 4 * GIB
    file_bytes: int = 64 * MIB
    open_files: int = 1024
    extra_processes: int = 512
    host_code: bool = True


CPU_LIMITS = Limits()
# A GPU worker and the crash replay run no student host code (NVRTC builds device code only), so
# the two confinements that exist against host code, Landlock's write rules and dropping root's
# capabilities, are not applied there: the CUDA driver, CuPy's compiler cache and
# compute-sanitizer never meet them.
GPU_LIMITS = Limits(data_bytes=None, host_code=False)
REPLAY_LIMITS = GPU_LIMITS


def limits_for(backend: str) -> Limits:
    return GPU_LIMITS if backend == Backend.GPU else CPU_LIMITS


def scrubbed_environment(private: Path, host_code: bool = True, boxed: bool = False) -> dict[str, str]:
    """The whole environment of a boxed process: the allow-list, and everything else pointing inside.

    One exception: a process that runs no student host code (a GPU worker, the crash replay) keeps
    the grader's CuPy kernel cache, as it always had. Only CuPy writes there (each cubin it built,
    keyed by the hash of its source and options), and a cold cache would cost every worker, and
    every timing round, seconds of compiling CuPy's own kernels again."""
    env = {name: os.environ[name] for name in ENV_ALLOWED if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    tmp = private / "tmp"
    if not boxed:  # a box makes its own /job/tmp
        tmp.mkdir(exist_ok=True)
    env.update(
        {
            "HOME": str(private),
            "TMPDIR": str(tmp),
            "CUPY_CACHE_DIR": str(private / "cupy"),
            "CUDA_CACHE_PATH": str(private / "nv"),
            "XDG_CACHE_HOME": str(private / "cache"),
            "LC_ALL": "C.UTF-8",
            # A box has no passwd: a library that asks who runs it (getpass.getuser(), as PyTorch does
            # when it names its caches) reads these first and would otherwise fail on getpwuid().
            "USER": "attnlab",
            "LOGNAME": "attnlab",
            # one thread for numpy's BLAS: the worker never multiplies matrices, and fewer tasks count
            # against the process limit
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
    )
    if not host_code and not boxed:
        env["CUPY_CACHE_DIR"] = grader_cupy_cache()
    return env


def grader_cupy_cache() -> str:
    """The driver's own CuPy kernel cache (only trusted processes write it)."""
    return os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache")


# A boxed GPU process starts with a copy of the grader's CuPy cache in its private folder (CuPy
# compiles its own elementwise kernels, such as the poison fill, on first use, and a cold cache costs
# every worker seconds); the copy is private, so nothing a box writes reaches the grader's cache.
# Bounded, so that a cache grown large costs a box start no more than this.
CUPY_CACHE_COPY_BYTES = 256 * MIB


# The first thing a boxed Python runs: its limits, then the module it was started for. `-I` keeps
# out PYTHON* variables, the user's site folder and the working folder from the import path.
_BOOTSTRAP = (
    "import sys; sys.path.insert(0, sys.argv[1]); from labrunner.run.sandbox import enter; "
    "enter(sys.argv[2], sys.argv[3], sys.argv[4:])"
)


def python_command(module: str, limits: Limits, private: Path, *args: str, boxed: bool = False) -> list[str]:
    return [
        sys.executable,
        "-I",
        "-c",
        _BOOTSTRAP,
        PACKAGE_ROOT,
        json.dumps({**asdict(limits), "private": str(private), "boxed": boxed}),
        module,
        *args,
    ]


class Sandbox:
    """One boxed process: its box, its process, and the way to end all of it.

    `private` is the private folder as the process sees it: /job inside a box (a tmpfs that goes
    with the box), else a host folder removed by `kill`."""

    def __init__(self, purpose: boxes.Purpose = boxes.CPU_RUN, prefix: str = "attnlab-worker-"):
        keep_driver_private()
        self.purpose = purpose
        self.boxed = boxes.boxed()
        self._host_private = None if self.boxed else Path(tempfile.mkdtemp(prefix=prefix))
        self.private = Path(boxes.PRIVATE) if self._host_private is None else self._host_private
        self.process: subprocess.Popen[bytes] | None = None
        self._data: dict[str, int] = {}

    def python_command(self, module: str, limits: Limits, *args: str) -> list[str]:
        """`python -m module args` as the box starts it: limits and confinements first (`enter`)."""
        return python_command(module, limits, self.private, *args, boxed=self.boxed)

    def add_file(self, name: str, data: bytes) -> Path:
        """A read-only file the process finds in its private folder: in a box it comes through a
        memory file (nothing on disk), else it is written into the host folder."""
        if not self.boxed:
            (self.private / name).write_bytes(data)
            return self.private / name
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        self._data[str(self.private / name)] = fd
        return self.private / name

    def start(
        self,
        command: list[str],
        stdout: int,
        pass_fds: tuple[int, ...] = (),
        host_code: bool = True,
        readable: tuple[str, ...] = (),
        environment: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start `command` boxed, its stdout and stderr both to `stdout`. `host_code`: whether it
        runs a student's host code (the CPU backend), for the environment's caches. `readable`:
        more read-only paths for the box (the tests' probe, the grader's shared CPU parts);
        `environment`: variables set inside besides the scrubbed ones (where those parts lie)."""
        env = {**scrubbed_environment(self.private, host_code, self.boxed), **(environment or {})}
        if self.boxed:
            if not host_code and os.path.isdir(grader_cupy_cache()):
                readable = (*readable, grader_cupy_cache())
                env["ATTNLAB_CUPY_CACHE_SOURCE"] = grader_cupy_cache()
            command = boxes.wrap(self.purpose, command, env, readable, self._data)
            pass_fds = (*pass_fds, *self._data.values())
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stdout,
            pass_fds=pass_fds,
            env=env,
            cwd=self.private if not self.boxed else "/",
            start_new_session=True,
            close_fds=True,
        )
        for fd in self._data.values():  # the box has read them by the time it runs anything
            os.close(fd)
        self._data.clear()
        return self.process

    def kill(self) -> None:
        """SIGKILL to every process in the tree and in the group, then the host folder goes."""
        if self.process is not None:
            end_process_tree(self.process.pid)
            self.process.wait()
            self.process = None
        for fd in self._data.values():
            os.close(fd)
        self._data.clear()
        if self._host_private is not None:
            shutil.rmtree(self._host_private, ignore_errors=True)


def keep_driver_private() -> None:
    """Make the driver non-dumpable: a process of the same user then needs CAP_SYS_PTRACE to read
    its /proc files, its initial environment (where `ATTNLAB_SEED` lives) and its memory among
    them, and a boxed process never has it (see `drop_capabilities`). Debuggers need root to
    attach to the driver from then on."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def forget_environment_variable(name: str) -> str | None:
    """Take `name` out of this process's environment, and out of the copy the kernel shows in
    /proc/self/environ too: that file reads the block the process started with, which unsetenv never
    touches, so the value's bytes there are overwritten in place. Returns the value it had."""
    value = os.environ.pop(name, None)
    if value is None:
        return None
    try:
        with open("/proc/self/stat", "rb") as handle:
            stat = handle.read()
        env_start = int(stat[stat.rfind(b")") + 2 :].split()[47])  # field 50 of proc(5), env_start
        with open("/proc/self/environ", "rb") as handle:
            block = handle.read()
    except (OSError, ValueError, IndexError):
        return value
    key = name.encode() + b"="
    position = 0
    for entry in block.split(b"\0"):
        if entry.startswith(key):
            ctypes.memset(env_start + position + len(key), ord("x"), len(entry) - len(key))
        position += len(entry) + 1
    return value


def end_process_tree(root: int) -> None:
    """Stop the root, kill every descendant it has (it is their subreaper, so orphans are still
    its own), then the root's process group, then the root. Repeated until nothing is left, because
    a process may fork while it is being found."""
    _signal(lambda: os.killpg(root, signal.SIGSTOP))
    for _ in range(20):
        found = descendants(root)
        if not found:
            break
        for pid in found:
            _signal(partial(os.kill, pid, signal.SIGKILL))
            _signal(partial(os.killpg, pid, signal.SIGKILL))  # a leader of a group of its own
        time.sleep(0.01)
    _signal(lambda: os.killpg(root, signal.SIGKILL))
    _signal(lambda: os.kill(root, signal.SIGKILL))


def descendants(root: int) -> list[int]:
    """Every living process below `root`, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def _signal(send: Callable[[], object]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        send()


# -- inside the boxed process --------------------------------------------------------------------
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
LANDLOCK_ABI = 0  # in a boxed process: the Landlock version its writes are confined with (0: none)
PID_NAMESPACE = False  # in a boxed process: whether it is the first process of a PID namespace of its own
CLONE_NEWUSER, CLONE_NEWPID = 0x10000000, 0x20000000


def enter(settings: str, module: str, args: list[str]) -> None:
    """Run in the boxed process before anything else: limits, subreaper, Landlock, then the module."""
    import runpy

    global LANDLOCK_ABI, PID_NAMESPACE
    config = json.loads(settings)
    private = config.pop("private")
    boxed = config.pop("boxed", False)
    limits = Limits(**config)
    apply_limits(limits)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if boxed:
        PID_NAMESPACE = True  # the box's own, made by bubblewrap
        copy_cupy_cache(os.environ.pop("ATTNLAB_CUPY_CACHE_SOURCE", None), os.environ.get("CUPY_CACHE_DIR"))
    if limits.host_code:
        if not boxed:
            PID_NAMESPACE = enter_pid_namespace()
        drop_capabilities()
        LANDLOCK_ABI = confine_writes([private, "/dev/null"])
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def copy_cupy_cache(source: str | None, destination: str | None) -> None:
    """The grader's CuPy cache, read-only in the box, copied into the private folder (up to
    `CUPY_CACHE_COPY_BYTES`), before any student code: CuPy then finds its own kernels built."""
    if not source or not destination or not os.path.isdir(source):
        return
    os.makedirs(destination, exist_ok=True)
    budget = CUPY_CACHE_COPY_BYTES
    for entry in sorted(os.scandir(source), key=lambda e: e.name):
        if not entry.is_file(follow_symlinks=False):
            continue
        size = entry.stat(follow_symlinks=False).st_size
        if size > budget:
            continue
        shutil.copyfile(entry.path, os.path.join(destination, entry.name), follow_symlinks=False)
        budget -= size


def apply_limits(limits: Limits) -> None:
    def both(which: int, value: int) -> None:
        resource.setrlimit(which, (value, value))

    both(resource.RLIMIT_CPU, limits.cpu_s)
    if limits.data_bytes is not None:
        both(resource.RLIMIT_DATA, limits.data_bytes)
    both(resource.RLIMIT_FSIZE, limits.file_bytes)
    both(resource.RLIMIT_NOFILE, min(limits.open_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    both(resource.RLIMIT_CORE, 0)
    both(resource.RLIMIT_NPROC, user_tasks() + limits.extra_processes)


def enter_pid_namespace() -> bool:
    """Where the kernel allows it (root, or unprivileged user namespaces), continue as the first
    process of a new PID namespace: when it dies, however it dies, the kernel kills every process
    in the namespace, one that left its session included. The process the driver started stays
    outside, holding none of the worker's pipes, and ends as the worker ended (same status, same
    signal), so the driver sees nothing else change. Returns False (and nothing changes) where the
    kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWPID) != 0 and libc.unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0:
        return False
    child = os.fork()
    if child == 0:
        return True
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def drop_capabilities() -> None:
    """Nothing of root's power, for good: the bounding set emptied (so no program it runs gets any
    back), then every capability it holds. A process of an ordinary user has none to drop."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for capability in range(64):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() == 22:
            break  # EINVAL: past the last capability this kernel knows
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    libc.capset(header, (ctypes.c_uint32 * 6)())  # effective, permitted, inheritable: all empty


def user_tasks() -> int:
    """How many tasks (processes and threads) this user runs now: what RLIMIT_NPROC counts."""
    uid, count = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                continue
    return count


# Landlock (Linux 5.13+): an unprivileged process restricts itself and everything it starts.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_RULE_PATH_BENEATH = 1
_FS_WRITE_FILE = 1 << 1
_FS_WRITES_V1 = (1 << 1) | 0x1FF0  # write file; remove dir, file; make char, dir, reg, sock, fifo, block, sym
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The kernel's Landlock version, 0 where there is none (not built in, or not enabled)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(0, int(version))


def confine_writes(writable: list[str]) -> int:
    """Allow writing only beneath `writable`; from ABI 6 also refuse signals and abstract unix
    sockets to processes outside. Returns the ABI used, 0 when the kernel has no Landlock (then
    nothing is confined this way)."""
    abi = landlock_abi()
    if abi < 1:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    handled = _FS_WRITES_V1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16 if abi >= 4 else 8
    attr = _RulesetAttr(handled, 0, (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return 0
    try:
        for path in writable:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            is_dir = os.path.isdir(path)
            rule = _PathBeneath(handled if is_dir else (_FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0)), fd)
            libc.syscall(
                _SYS_ADD_RULE,
                ctypes.c_int(ruleset),
                ctypes.c_int(_RULE_PATH_BENEATH),
                ctypes.byref(rule),
                ctypes.c_uint32(0),
            )
            os.close(fd)
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return 0
    finally:
        os.close(ruleset)
    return abi
