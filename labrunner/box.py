"""The box: what a process that reads a student's bytes can see, stated as data, made by bubblewrap.

Every process that touches a submission starts inside one: the NVRTC child that compiles it, each
worker that runs it (CPU and GPU; the CPU worker's g++ and assembler run inside the worker's box),
and each compute-sanitizer replay. What such a process can reach is decided here, by what the box
holds, not by what a lexer, an object check or a system-call filter foresaw (those stay, inside, as
defence in depth). Modelled on ioi/isolate's checklist and built with bubblewrap (`bwrap`, the
sandbox Flatpak builds its apps' boxes with), a box holds:

- its own mount, PID, IPC, UTS, network, user and cgroup namespaces: no other process is visible
  or signalable, no socket reaches beyond it (not even loopback), and it holds no capability;
- a root made of read-only toolchain paths only (`READ_ONLY_ROOTS`, the Python that runs the grader
  and the folders it imports from, the attnlab package, the C++ compiler for the CPU backend, the
  dynamic linker's folders where the CUDA driver lives, and for a GPU purpose the /dev/nvidia* nodes),
  a /proc of its own PID namespace, a minimal /dev, and one private writable tmpfs, `/job`, of
  bounded size: nothing else (no host /home, /root, /tmp, no other submission, no report path);
- a cleared environment: only the names the caller sets;
- a session of its own, and death with its parent: SIGKILL of the driver takes the whole box with
  it, and because /job is a tmpfs nothing of it is left on disk.

What it cannot promise: the toolchain paths are readable (so nothing secret may live in them); the
GPU is shared with the driver's own context (a kernel can still read device memory that the driver
never cleared; the driver's own buffers are allocated in a separate CUDA context); and where no box
can be made (no bubblewrap, or a kernel that refuses user namespaces), `availability()` says why and
each caller decides: the CPU backend refuses to grade, the GPU path says it runs unboxed and
`--require-box` makes that an error.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from labrunner.exit_codes import environment_error

# The tool that makes the box; `ATTNLAB_BWRAP` names another copy of it (an unpacked .deb, say).
BWRAP_VARIABLE = "ATTNLAB_BWRAP"
INSIDE_VARIABLE = "ATTNLAB_BOX"  # set inside every box to its purpose's name
PRIVATE = "/job"  # the one writable folder inside every box, a tmpfs
MIB = 1 << 20

# Folders every box maps in read-only: the system's programs and libraries (on merged-/usr systems
# /bin, /lib and /lib64 are links into /usr and are recreated as links), and the dynamic linker's
# cache and configuration, so that libraries resolve inside as they do outside. Nothing under /etc
# but these: no passwd, no hosts, no keys.
READ_ONLY_ROOTS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
)
# Device nodes a GPU purpose maps in (the driver's control node, the GPUs, unified memory, the
# capability nodes of MIG): nothing else of the host's /dev.
GPU_DEVICE_PATTERNS = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/renderD*")
# The driver's record of each GPU: its UUID and the minor number of its /dev/nvidiaN.
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
# One GPU's own nodes: a box given one GPU maps that GPU's alone, beside the driver's shared ones.
_ONE_GPU_NODE = re.compile(r"/nvidia(\d+)$")


@dataclass(frozen=True)
class Purpose:
    """What a box is for, as data: whether it reaches the GPU, how large its private tmpfs may grow,
    and which other read-only paths it needs beyond the toolchain."""

    name: str
    gpu: bool
    private_bytes: int
    needs: tuple[str, ...] = field(default=())  # "compiler" (g++'s prefix), "sanitizer", "profiler"
    # Whether /job is a host folder the caller made (bound in), for a tool whose files the caller
    # reads back after the box has ended (ncu's CSV); else a tmpfs that goes with the box.
    host_private: bool = False
    # Whether the box has a /tmp of its own (a tmpfs): NVIDIA's tools keep lock files and the pipes
    # between their front end and the program they watch there, whatever TMPDIR says.
    own_tmp: bool = False


# NVRTC writes nothing of size; the CPU worker holds g++'s temporary files and the built module
# (RLIMIT_FSIZE caps each at 64 MiB); a GPU worker holds CuPy's cache copy and the driver's JIT cache.
COMPILE = Purpose("compile", gpu=False, private_bytes=64 * MIB)
# A Triton file's compile: its Python, Triton's caches, LLVM's and ptxas's files for a few kernels.
TRITON_COMPILE = Purpose("triton-compile", gpu=False, private_bytes=256 * MIB)
CPU_RUN = Purpose("cpu-run", gpu=False, private_bytes=512 * MIB, needs=("compiler",))
GPU_RUN = Purpose("gpu-run", gpu=True, private_bytes=1024 * MIB)
REPLAY = Purpose("replay", gpu=True, private_bytes=1024 * MIB, needs=("sanitizer",), own_tmp=True)
# Nsight Compute over the Range pass's target: its report file and the GPU's facts come back through
# the host folder bound at /job, and ncu keeps its lock file in /tmp (a tmpfs of the box's own).
PROFILE = Purpose("profile", gpu=True, private_bytes=64 * MIB, needs=("profiler",), host_private=True, own_tmp=True)


def bwrap_path() -> str | None:
    return os.environ.get(BWRAP_VARIABLE) or shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def bwrap_help() -> str:
    tool = bwrap_path()
    if tool is None:
        return ""
    try:
        return subprocess.run([tool, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


@functools.lru_cache(maxsize=1)
def availability() -> str | None:
    """None where a box can be made here, else one line saying what is missing and how to get it.
    Asked once per process: an empty box runs `true`."""
    if os.environ.get(INSIDE_VARIABLE):
        # A process in a box (the CPU worker asking NVRTC about its macros) starts its children in the same
        # box: a box cannot be made inside one (no user namespace may be made there), and need not be.
        return f"already inside a {os.environ[INSIDE_VARIABLE]} box"
    tool = bwrap_path()
    if tool is None:
        return "bubblewrap is not installed (apt-get install bubblewrap, or set ATTNLAB_BWRAP to a bwrap binary)"
    probe = wrap(COMPILE, ["/bin/true"], {})
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap ({tool}) could not start: {exc}"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"bubblewrap ({tool}) cannot make a box here: {said} (user namespaces may be disabled)"
    return None


# --require-box for the run in progress (`required`): then a process that would start unboxed is refused.
REQUIRED = False


@contextmanager
def required(asked: bool) -> Iterator[None]:
    """For one run: whether a process that cannot be boxed is refused. The run's request says so; every
    place a process starts reads it (`boxed`), so it is set for the run and put back after it."""
    global REQUIRED
    before, REQUIRED = REQUIRED, asked
    try:
        yield
    finally:
        REQUIRED = before


def boxed() -> bool:
    """Whether the next process starts in a box; with `REQUIRED`, no box is an environment error (exit 6)."""
    reason = availability()
    if reason is not None and REQUIRED:
        raise environment_error(f"--require-box: no box can be made here: {reason}")
    return reason is None


def describe() -> str:
    """One line for `attnlab doctor`: which tool made the box, and its version."""
    tool = bwrap_path()
    version = "bubblewrap"  # what it says where bwrap is missing, or does not answer
    if tool is not None:
        with suppress(OSError, subprocess.SubprocessError):
            version = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    return f"{version} ({tool}): mount, PID, IPC, UTS, network and user namespaces, read-only toolchain, /job tmpfs"


def wrap(
    purpose: Purpose,
    command: list[str],
    environment: dict[str, str],
    readable: tuple[str, ...] = (),
    data: dict[str, int] | None = None,
    private_source: str | None = None,
) -> list[str]:
    """The bwrap command line that runs `command` in a box for `purpose`.

    environment: the whole environment inside (the box starts from an empty one).
    readable: more paths mapped read-only (the tests' probe module; never a submission or a report).
    data: files to create inside, read-only, each from a file descriptor the caller passes
        (`--ro-bind-data`): how the driver hands a box its inputs without a folder on disk.
    private_source: for a purpose with `host_private`, the host folder that becomes /job.
    """
    tool = bwrap_path() or "bwrap"
    options = bwrap_help()
    line = [
        tool,
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
    ]
    if "--disable-userns" in options:
        line.append("--disable-userns")  # nothing inside may make a user namespace of its own
    for name, value in sorted({**environment, INSIDE_VARIABLE: purpose.name}.items()):
        line += ["--setenv", name, value]
    if purpose.own_tmp:
        line += ["--tmpfs", "/tmp"]  # first, so that a path the root maps below /tmp stays visible
    line += _root(purpose, readable)
    line += ["--proc", "/proc", "--dev", "/dev"]
    if purpose.gpu:
        for node in gpu_device_nodes(environment.get("CUDA_VISIBLE_DEVICES")):
            line += ["--dev-bind", node, node]
    if purpose.host_private:
        if private_source is None:
            raise ValueError(f"a {purpose.name} box needs the host folder that becomes {PRIVATE}")
        line += ["--bind", private_source, PRIVATE]
    else:
        if "--size" in options:
            line += ["--size", str(purpose.private_bytes)]
        line += ["--perms", "0700", "--tmpfs", PRIVATE, "--dir", f"{PRIVATE}/tmp"]
    for destination, fd in sorted((data or {}).items()):
        line += ["--ro-bind-data", str(fd), destination]
    # The root itself is a tmpfs bubblewrap made to hold the mounts: read-only, so that nothing inside can
    # fill the host's memory with files there (only /job is writable, and it has its --size).
    line += ["--remount-ro", "/", "--chdir", PRIVATE, "--", *command]
    return line


def gpu_device_nodes(visible: str | None) -> list[str]:
    """The device nodes a GPU box maps. Given one GPU by its UUID (`CUDA_VISIBLE_DEVICES=GPU-...`, as a
    batch over several GPUs gives each grading process its own), that GPU's /dev/nvidiaN alone beside the
    driver's shared nodes (nvidiactl, nvidia-uvm, the capability nodes), and no render node: the box
    cannot open another GPU. Otherwise, or where the driver does not list that UUID, every GPU's."""
    nodes = sorted({node for pattern in GPU_DEVICE_PATTERNS for node in glob.glob(pattern)})
    minor = gpu_minor(visible) if visible and visible.startswith("GPU-") and "," not in visible else None
    if minor is None:
        return nodes
    return [
        node
        for node in nodes
        if Path(node).parent.name != "dri"
        and ((own := _ONE_GPU_NODE.search(node)) is None or int(own.group(1)) == minor)
    ]


def gpu_minor(uuid: str) -> int | None:
    """The minor number of the GPU with this UUID, from the driver's record (/proc/driver/nvidia/gpus)."""
    for fields in _gpu_records():
        if fields.get("GPU UUID", "").lower() == uuid.lower():
            with suppress(KeyError, ValueError):
                return int(fields["Device Minor"])
    return None


def gpu_uuid_at(pci_bus_id: str) -> str | None:
    """The UUID of the GPU at this PCI bus id (as CUDA gives it: 0000:19:00.0), from the driver's record."""
    for fields in _gpu_records():
        if fields.get("Bus Location", "").lower() == pci_bus_id.lower() and fields.get("GPU UUID"):
            return fields["GPU UUID"]
    return None


def _gpu_records() -> Iterator[dict[str, str]]:
    for record in sorted(NVIDIA_GPUS.glob("*/information")):
        with suppress(OSError, ValueError):
            lines = record.read_text().splitlines()
            yield {name.strip(): value.strip() for name, value in (line.split(":", 1) for line in lines if ":" in line)}


def _root(purpose: Purpose, readable: tuple[str, ...]) -> list[str]:
    """The read-only part of the box's root, parents before children, each path once."""
    paths = [*READ_ONLY_ROOTS, *python_paths(), str(package_folder()), *readable]
    paths += linker_folders()
    if purpose.gpu:
        paths += cuda_paths()
    if "compiler" in purpose.needs:
        paths += compiler_paths()
    if "sanitizer" in purpose.needs:
        paths += sanitizer_paths()
    if "profiler" in purpose.needs:  # ncu on PATH is often a script that runs the copy NVIDIA installs in /opt
        paths += [*tool_paths("ncu"), "/opt/nvidia"]
    line: list[str] = []
    kept: list[str] = []
    for path in sorted({os.path.normpath(p) for p in paths if p}, key=lambda p: (p.count("/"), p)):
        if not os.path.lexists(path) or any(path == k or path.startswith(k + "/") for k in kept):
            continue
        if os.path.islink(path) and os.path.dirname(path) == "/":
            line += ["--symlink", os.readlink(path), path]  # /lib -> usr/lib, kept a link
        else:
            line += ["--ro-bind", os.path.realpath(path), path]
        kept.append(path)
    return line


def package_folder() -> Path:
    """The attnlab package itself (its Python, its headers, the CPU shim), wherever it is installed."""
    return Path(__file__).resolve().parent


def python_paths() -> list[str]:
    """The Python running the grader and every folder it imports packages from: its prefixes (a
    virtual environment's and the base installation's) and the import path's site folders. Never a
    working folder that the import path happens to hold (where a course keeps its submissions)."""
    prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix]
    paths = [*prefixes, os.path.dirname(os.path.realpath(sys.executable))]
    for entry in sys.path:
        if not (entry and os.path.isabs(entry) and os.path.exists(entry)):
            continue
        under_prefix = any(entry == p or entry.startswith(p.rstrip("/") + "/") for p in prefixes)
        if under_prefix or os.path.basename(entry) in ("site-packages", "dist-packages"):
            paths.append(entry)
    return paths


def linker_folders() -> list[str]:
    """The folders named by the dynamic linker's configuration and by LD_LIBRARY_PATH: where libcuda
    and the C++ runtime are found on machines that keep them outside /usr."""
    folders = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if os.path.isabs(p)]
    for conf in ["/etc/ld.so.conf", *sorted(glob.glob("/etc/ld.so.conf.d/*.conf"))]:
        try:
            lines = Path(conf).read_text().splitlines()
        except OSError:
            continue
        folders += [line.strip() for line in lines if line.strip().startswith("/")]
    return folders


def cuda_paths() -> list[str]:
    """The CUDA toolkit where one is installed beside the wheels (CUDA_HOME, /usr/local/cuda)."""
    return [p for p in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda") if p]


def compiler_paths() -> list[str]:
    """The C++ compiler's installation (g++ may live in /opt/gcc rather than /usr)."""
    found = shutil.which(os.environ.get("CXX") or "g++")
    if found is None:
        return []
    return [str(Path(os.path.realpath(found)).parent.parent)]


def sanitizer_paths() -> list[str]:
    """compute-sanitizer's folder (it ships its own libraries beside the binary)."""
    return tool_paths("compute-sanitizer")


def tool_paths(name: str) -> list[str]:
    """The folder of an NVIDIA tool found on PATH, as found and as its links resolve (`ncu` on PATH is
    often a link or a script beside the real install, which ships its libraries with it)."""
    found = shutil.which(name)
    if found is None:
        return []
    return [str(Path(found).parent), str(Path(os.path.realpath(found)).parent)]


def command_status(returncode: int | None) -> int | None:
    """The boxed command's own status, as `subprocess` states it: bubblewrap exits with 128 + N for a
    command killed by signal N, which is given back as -N (its exit codes below 129 pass as they are)."""
    if returncode is not None and 128 < returncode < 128 + 65:
        return -(returncode - 128)
    return returncode
