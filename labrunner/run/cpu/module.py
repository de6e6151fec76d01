"""Run a CUDA kernel file on the CPU: compile it as C++ with g++ and a shim
header (shim.h, fiber.h), load it with ctypes, and launch kernels with CUDA
semantics (threads as cooperative fibers, exact barriers and warp ops).

See README.md in this directory for how it works and what it does not do.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from labrunner.compile.attributes import refuse_in_preprocessed
from labrunner.compile.nvrtc import DEFAULT_ARCH, NVRTC_STANDARD_HEADERS
from labrunner.compile.nvrtc import INCLUDE_DIR as _INCLUDE
from labrunner.exit_codes import AttnlabError
from labrunner.grader_cache import CPU_PARTS_VARIABLE
from labrunner.run.cpu.linkage import brace_linkage
from labrunner.run.cpu.nvrtc_view import STUDENT_PREPROCESS_FLAGS, nvrtc_view_header
from labrunner.run.cpu.object_check import ElfFacts, ObjectRefused, check_object, read_elf
from labrunner.run.cpu.ptx_asm import AsmRefused, rewrite_inline_asm

__all__ = ["CpuModule", "CpuKernelError", "CpuOutOfBounds", "CpuFault", "cpu_compiler_available"]

_HERE = Path(__file__).resolve().parent
_SHIM = _HERE / "shim.h"
# The macros the student's file sees (besides NVRTC's), and the standard headers it may include as
# the CPU build serves them: see "How it works" in README.md.
_MACROS = _HERE / "cuda_macros.h"
_STUDENT_INCLUDE = _HERE / "include"
# Every header of the runtime, fiber.h's parts (fiber_*.h) among them: the build caches are keyed on
# their bytes, so an edit to any of them rebuilds the runtime's text, the baseline and every module.
_RUNTIME_FILES = (
    _HERE / "shim.h",
    _HERE / "fiber.h",
    *sorted(_HERE.glob("fiber_*.h")),
    _HERE / "ptx.h",
    _HERE / "cuda_macros.h",
)

SHARED_LIMIT = 227 * 1024
# What attnlab_last_fault says a failed launch's fault was (FaultKind in fiber_state.h).
_FAULT_OUT_OF_BOUNDS = 1
_FAULT_ADDRESS = 2
# Launches run on the calling OS thread; a library loaded twice is one copy,
# so serialise them all.
_LAUNCH_LOCK = threading.Lock()
MAX_THREADS = 1024


def host_isa_flags(machine: str | None = None, cpuinfo: str | None = None) -> list[str]:
    """`-DATTNLAB_HOST_FMA` where this host is an x86-64 whose processor has FMA3 (and AVX, whose
    encoding it uses): the shim's fmaf and fma are then the fused multiply-add instruction, not a libm
    call (shim.h, `attnlab_fmaf`). The bits are the same, since both round once. Not -mfma: that makes
    the whole build AVX code, whose memory operands need no alignment, and a misaligned float4 would
    stop faulting as it does on a GPU. AArch64 has fused multiply-add in its base instruction set and
    g++ already emits it. Every build cache is keyed on the flags (`_runtime_digest`), so a cache
    shared between hosts never hands an object using the instruction to a host without it."""
    machine = machine if machine is not None else os.uname().machine
    if machine not in ("x86_64", "amd64", "AMD64"):
        return []
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
                cpuinfo = handle.read()
        except OSError:
            return []  # unknown: libm's fmaf, slower and the same bits
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    return ["-DATTNLAB_HOST_FMA"] if {"fma", "avx"} <= set(flags) else []


CXXFLAGS = [
    "-std=c++17",
    # -O1, not -O2: a default grade's time on the CPU is the build of the file and a few small cases, and
    # g++ at -O2 took a fifth of a second more to build each shipped solution than at -O1 (lab 2's 0.77 s
    # against 0.58 s on two cores) while running lab 2's and lab 3's cases no faster (lab 1's took 0.25 s
    # more at -O1, and its build 0.35 s less). The bits are the same at either level: no fast-math, no
    # contraction (below), so only the time differs.
    "-O1",
    "-fPIC",
    "-shared",
    # The GPU contracts a*b+c into FMAs; a host may have no FMA instruction
    # (host_isa_flags), so turn contraction off everywhere for the same result
    # on every host.  The difference to the GPU is far below the graders' tolerance.
    "-ffp-contract=off",
    # Kernels reinterpret float arrays as float4 and the like.
    "-fno-strict-aliasing",
    # Some distributions' g++ (Ubuntu's) guard stacks by default and so import __stack_chk_fail,
    # which the object check refuses: build the same object on every host. The guard would only
    # abort the worker on a smashed frame; the seccomp filter and the worker's box are what
    # contain a kernel that writes where it should not.
    "-fno-stack-protector",
    # errno is never read by kernels; lets sqrtf inline.  Results unchanged.
    "-fno-math-errno",
    # Every fiber of a launch runs on one OS thread, so a function-local static (the shim registers
    # each __shared__ array that way) needs no lock. Without this flag its guard calls libstdc++'s
    # __cxa_guard_acquire, and a g++ that links libstdc++ statically into the module then brings the
    # exception runtime and its load-time initialiser, which the object check refuses.
    "-fno-threadsafe-statics",
    # Fault handling longjmps off the fiber stacks; keep the unchecked longjmp.
    "-U_FORTIFY_SOURCE",
    # Probe every page of a large stack frame so a fiber that outgrows its
    # stack hits the guard page below it instead of a neighbour's stack.
    "-fstack-clash-protection",
    "-Wno-unknown-pragmas",
    "-fmax-errors=20",
    # g++ quotes the source line of each message by reading the file a line marker names, and a
    # kernel file's `#line 1 "/some/file"` names any file; only the messages are ever kept
    # (diagnostics.py), so the compiler need not open anything for them.
    "-fno-diagnostics-show-caret",
    *host_isa_flags(),
]


# The compiler runs in a child process of its own session with these limits; past either, the
# file is refused as a compile error (a file of nested macros can keep a compiler busy for
# minutes and most of a gigabyte).
BUILD_TIMEOUT_S = 20.0
BUILD_MEMORY_BYTES = 2 * 1024**3


class CpuKernelError(RuntimeError):
    """A kernel file failed to compile, or a launch failed (bad config,
    barrier/shuffle that cannot complete, fault, device assert)."""


class CpuOutOfBounds(CpuKernelError):
    """A launch read or wrote past the memory it was given: a guard of shared memory, or of a buffer
    the CPU device handed the kernel (run/cpu/device_memory.py). The verdict is out-of-bounds."""


class CpuFault(CpuKernelError):
    """A launch faulted at an address the runtime could not place: `address` and `write` say where
    and how, `where` names the kernel, block and thread; the CPU device looks the address up in its
    buffers' guards."""

    def __init__(self, message: str, address: int, write: bool, where: str):
        super().__init__(message)
        self.address = address
        self.write = write
        self.where = where


class CpuCompileError(CpuKernelError):
    """The file cannot become a module: g++ refused it, ran past its limits, or the object check
    refused what it built. The verdict is compile-error, never a kernel's fault."""


def _cxx() -> str:
    return os.environ.get("CXX") or "g++"


@functools.cache
def _compiler_identity(cxx: str) -> str | None:
    path = shutil.which(cxx)
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return path + "\n" + out.stdout.strip()


def cpu_compiler_available() -> str | None:
    """None if the CPU backend can be used here, else a one-line reason."""
    if not sys.platform.startswith("linux"):
        return f"the CPU backend needs Linux (this is {sys.platform})"
    cxx = _cxx()
    if _compiler_identity(cxx) is None:
        return "no C++ compiler: install g++ (apt-get install g++)" + (
            f" or fix CXX={cxx}" if os.environ.get("CXX") else ""
        )
    return None


# ----------------------------------------------------------- source rewrite

_KEYWORDS = {
    "const",
    "volatile",
    "unsigned",
    "signed",
    "int",
    "float",
    "double",
    "char",
    "short",
    "long",
    "bool",
    "void",
    "static",
    "struct",
    "typename",
    "auto",
    "__restrict__",
    "__align__",
    "alignas",
    "__attribute__",
}


def _mask_code(src: str) -> str:
    """src with comments, string and char literals blanked (newlines kept), so
    that regexes see only code and offsets stay the same."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == "/" and i + 1 < n and src[i + 1] == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif c == "/" and i + 1 < n and src[i + 1] == "*":
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            # Raw strings are rare in kernels; treat R"( ... )" simply.
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            for k in range(i + 1, j - 1):
                out[k] = " "
            i = j
        else:
            i += 1
    return "".join(out)


_ALIGN_RE = re.compile(r"\b(?:__align__|alignas)\s*\([^()]*\)|__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)")
_EXTERN_SHARED_RE = re.compile(r"\bextern\s+__shared__\b([^;{}\[\]]*?)\b([A-Za-z_]\w*)\s*\[\s*\]\s*;")
_SHARED_RE = re.compile(r"\b__shared__\b")
_IDENT_RE = re.compile(r"[A-Za-z_]\w*")


def _split_top(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _declarator_name(piece: str) -> str | None:
    piece = piece.split("=", 1)[0]
    piece = piece.split("[", 1)[0]
    names = [m for m in _IDENT_RE.findall(piece) if m not in _KEYWORDS]
    return names[-1] if names else None


def rewrite_source(src: str) -> str:
    """Rewrite shared-memory declarations; keeps every line where it was."""
    # 1. extern __shared__ T name[];  ->  T* const name = <the launch's dynamic shared memory>;
    #    The runtime places each launch's dynamic shared memory anew (exactly its bytes, against a
    #    guard: fiber_shared.h), so its address is read from ::attnlab::g_dyn_shared: in a function
    #    at the declaration, at file scope at every use, through a reference (a file-scope pointer
    #    initialised from a variable would be code run at load time, which the object check refuses).
    masked = _mask_code(src)
    pieces, last = [], 0
    for m in _EXTERN_SHARED_RE.finditer(masked):
        typ = _ALIGN_RE.sub(" ", src[m.start(1) : m.end(1)]).strip() or "unsigned char"
        name = m.group(2)
        nl = src.count("\n", m.start(), m.end())
        pieces.append(src[last : m.start()])
        if masked.count("{", 0, m.start()) == masked.count("}", 0, m.start()):
            declared = f"{typ}* const& {name} = reinterpret_cast<{typ}* const&>(::attnlab::g_dyn_shared);"
        else:
            declared = f"{typ}* const {name} = reinterpret_cast<{typ}*>(::attnlab::g_dyn_shared);"
        pieces.append(declared + "\n" * nl)
        last = m.end()
    pieces.append(src[last:])
    src = "".join(pieces)

    # 2. __shared__ T a[..], b;  ->  static T attnlab_shared_0[..], attnlab_shared_1; followed by one
    #    reference per name to the place the runtime gives it, its end against a guard (fiber_shared.h):
    #    `static auto& a = ::attnlab::placed(attnlab_shared_0, __alignof__(attnlab_shared_0), "a");`,
    #    written out here (the file sees none of the runtime's macros). The shadow gives the type,
    #    size and alignment; every use of `a` reaches the placed bytes, registered and poisoned.
    masked = _mask_code(src)
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement)
    registered = 0
    for m in _SHARED_RE.finditer(masked):
        line_start = masked.rfind("\n", 0, m.start()) + 1
        if masked[line_start : m.start()].lstrip().startswith("#"):
            continue  # inside a macro definition: leave it to the plain `static`
        if re.search(r"\bextern\s+$", masked[max(0, m.start() - 40) : m.start()]):
            continue  # an extern __shared__ declaration not rewritten above: the compiler will say
        # a `static` next to __shared__ would make `static static`
        before = re.search(r"\bstatic\s+$", masked[max(0, m.start() - 40) : m.start()])
        if before:
            s0 = m.start() - len(before.group(0))
            edits.append((s0, s0 + 6, "      "))
        after = re.match(r"\s+static\b", masked[m.end() : m.end() + 40])
        if after:
            s0 = m.end() + after.group(0).index("static")
            edits.append((s0, s0 + 6, "      "))
        # find the end of the declaration
        depth, j, end = 0, m.end(), None
        while j < len(masked) and j - m.end() < 4000:
            c = masked[j]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif c in "{}":
                break
            elif c == ";" and depth == 0:
                end = j
                break
            elif c == "\n" and masked[j + 1 :].lstrip(" \t").startswith("#"):
                break
            j += 1
        if end is None:
            continue
        # alignment attributes blanked to spaces of their own length, so that offsets still hold
        decl = _ALIGN_RE.sub(lambda a: " " * len(a.group(0)), masked[m.end() : end])
        pieces = _split_top(decl)
        names = [_declarator_name(p) for p in pieces]
        if not names or any(n is None for n in names):
            continue
        if masked.count("{", 0, m.start()) == masked.count("}", 0, m.start()):
            # At file scope a placement would be a global's dynamic initialiser, code that runs
            # when the module loads, which the object check refuses: such arrays stay unpoisoned.
            continue
        regs, at = "", m.end()
        for piece, n in zip(pieces, names):
            # the declarator's own name becomes the shadow's; `n` is then a reference to the placed bytes
            head = piece.split("=", 1)[0].split("[", 1)[0]
            spot = [w for w in _IDENT_RE.finditer(head) if w.group(0) == n][-1]
            shadow = f"attnlab_shared_{registered}"
            edits.append((at + spot.start(), at + spot.end(), shadow))
            regs += f' static auto& {n} = ::attnlab::placed({shadow}, __alignof__({shadow}), "{n}");'
            registered += 1
            at += len(piece) + 1
        edits.append((end + 1, end + 1, regs))
    for s0, e0, rep in sorted(edits, reverse=True):
        src = src[:s0] + rep + src[e0:]
    return src


# ----------------------------------------------------------- launch wrappers

# A scalar parameter's C type -> (its kind, the ctypes cell that carries it).
_SCALARS: dict[str, tuple[str, type[ctypes._SimpleCData[Any]]]] = {
    "int": ("int", ctypes.c_int),
    "int32_t": ("int", ctypes.c_int),
    "unsigned": ("unsigned", ctypes.c_uint),
    "unsigned int": ("unsigned", ctypes.c_uint),
    "uint32_t": ("unsigned", ctypes.c_uint),
    "long long": ("long long", ctypes.c_longlong),
    "int64_t": ("long long", ctypes.c_longlong),
    "size_t": ("unsigned long long", ctypes.c_ulonglong),
    "float": ("float", ctypes.c_float),
    "double": ("double", ctypes.c_double),
}

_IDENT_FULL = re.compile(r"[A-Za-z_]\w*\Z")


def _param_kind(t: str) -> str:
    t = " ".join(t.split())
    if t.endswith("*"):
        return "ptr"
    if t in _SCALARS:
        return t
    raise CpuKernelError(f"unsupported kernel parameter type {t!r} (use a pointer type, int, unsigned or float)")


def _wrappers(entry_points: dict[str, list[str]]) -> str:
    lines = [
        "",
        '# 1 "<attnlab launch wrappers>"',  # a line marker: the wrappers are compiled preprocessed
        "namespace attnlab_gen {",
        "struct AnyPtr { void* p; template <class T> operator T*() const { return static_cast<T*>(p); } };",
        "}",
    ]
    for i, (name, types) in enumerate(entry_points.items()):
        if not _IDENT_FULL.match(name):
            raise CpuKernelError(f"bad kernel name {name!r}")
        args = []
        for k, t in enumerate(types):
            kind = _param_kind(t)
            if kind == "ptr":
                args.append(f"attnlab_gen::AnyPtr{{*static_cast<void**>(a[{k}])}}")
            else:
                args.append(f"*static_cast<{_SCALARS[kind][0]}*>(a[{k}])")
        lines.append(f"static void attnlab_thunk_{i}(void** a) {{ (void)a; ::{name}({', '.join(args)}); }}")
        lines.append(
            f'extern "C" __attribute__((visibility("default"))) int attnlab_launch_{i}(void** a, const int* g, '
            f"const int* b, long long shm, int rev, char* err, int errlen) {{ return ::attnlab::launch("
            f'"{name}", &attnlab_thunk_{i}, a, g, b, shm, rev, err, errlen); }}'
        )
    return "\n".join(lines) + "\n"


def _default_cache_dir() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    d = Path(tempfile.gettempdir()) / f"attnlab-cpu-{uid}"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Built modules and headers from here are compiled in and loaded: a folder someone else owns
    # or can write to (planted in the shared temp folder first) is not used.
    st = d.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022:
        raise CpuKernelError(f"the CPU backend's cache {d} is not a private folder of this user; remove it")
    return d


def _dim3(v: Iterable[int], what: str) -> tuple[int, int, int]:
    t = tuple(int(x) for x in v)
    if len(t) == 1:
        t = (t[0], 1, 1)
    elif len(t) == 2:
        t = (t[0], t[1], 1)
    if len(t) != 3:
        raise CpuKernelError(f"{what} must have 1 to 3 dimensions, got {v!r}")
    return t


# ------------------------------------------------------------------ build

# The compiler child: its own session (so one kill reaches cc1plus and as too), a memory limit
# on every process it starts, a CPU-time limit and a parent-death signal (so a compiler whose
# worker was killed does not run on unsupervised), then exec. Written as a small program rather
# than a preexec_fn, which is unsafe in a process that has threads (numpy's BLAS may have some).
_LIMITED_EXEC = (
    "import ctypes, os, resource, signal, sys\n"
    "def limit(kind, value):  # never above a hard limit the worker itself runs under\n"
    "    hard = resource.getrlimit(kind)[1]\n"
    "    value = value if hard == resource.RLIM_INFINITY else min(value, hard)\n"
    "    resource.setrlimit(kind, (value, value))\n"
    "limit(resource.RLIMIT_AS, int(sys.argv[1]))\n"
    "limit(resource.RLIMIT_CPU, int(sys.argv[2]))\n"
    "limit(resource.RLIMIT_CORE, 0)\n"
    "ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG\n"
    "os.execvp(sys.argv[3], sys.argv[3:])\n"
)
_OUT_OF_MEMORY = (
    "virtual memory exhausted",
    "out of memory",
    "cannot allocate memory",
    "std::bad_alloc",
    "failed to map segment",
)


def run_compiler(
    cmd: list[str], cwd: str, timeout_s: float, memory_bytes: int, label: str = "attention.cu"
) -> subprocess.CompletedProcess[str]:
    """Run a compiler command under the wall-clock and memory limits; CpuCompileError past either."""
    too_slow = f"{label}: error: the compiler did not finish in {timeout_s:g} s (the CPU build)"
    cpu_s = int(timeout_s) + 5
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _LIMITED_EXEC, str(memory_bytes), str(cpu_s), *cmd],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise CpuCompileError(too_slow) from None
    except BaseException:
        _kill_group(proc)
        raise
    said = (err + out).lower()
    if proc.returncode != 0 and ("cpu time limit exceeded" in said or proc.returncode == -signal.SIGXCPU):
        raise CpuCompileError(too_slow)
    if proc.returncode != 0 and any(words in said for words in _OUT_OF_MEMORY):
        raise CpuCompileError(
            f"{label}: error: the compiler needed more than {memory_bytes // 1024**2} MiB (the CPU build)"
        )
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill the compiler's whole session. Called before the leader is reaped, so its id (the group's)
    cannot have been given to another process yet."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def _runtime_digest(cxx: str, extra: str) -> str:
    h = hashlib.sha256()
    h.update(extra.encode())
    h.update(_compiler_identity(cxx).encode())  # type: ignore[union-attr]
    h.update(" ".join(CXXFLAGS).encode())
    for f in _RUNTIME_FILES:
        h.update(f.read_bytes())
    for folder in (_INCLUDE, _STUDENT_INCLUDE):
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:24]


def build_object(
    source: str,
    filename: str,
    entry_points: dict[str, list[str]],
    cache_dir: Path | None = None,
    arch: str = DEFAULT_ARCH,
    timeout_s: float = BUILD_TIMEOUT_S,
    memory_bytes: int = BUILD_MEMORY_BYTES,
) -> Path:
    """Compile a kernel file into a shared object (content-hashed, reused); nothing is loaded.

    Two texts make one translation unit, each preprocessed on its own: the runtime (shim.h and the
    headers it includes, with g++'s macros; the same for every file, so kept in the cache), and the
    student's file, which sees only NVRTC's predefined macros (nvrtc_view.py), cuda_macros.h and the
    headers it includes (-undef, -nostdinc). The student's preprocessed text is read for what it may
    not ask of the linker (labrunner/compile/attributes.py: what macros built is plain there) before
    g++ compiles the two texts and the launch wrappers, already preprocessed, as one file."""
    reason = cpu_compiler_available()
    if reason is not None:
        raise CpuKernelError(reason)
    cxx = _cxx()
    cache = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    view = _nvrtc_view(arch, cxx, cache)
    try:
        # Inline PTX first, on the file as written: its refusals name the student's lines.
        source = rewrite_inline_asm(source, filename)
    except AsmRefused as refused:
        raise CpuCompileError(str(refused)) from None
    # `extern "C" __constant__ int attnlab_x = N;` braced, so that g++ takes it as the definition it is
    # without a warning about each constant on every failed compile (linkage.py says why).
    source = brace_linkage(source)
    code = rewrite_source(source)
    wrappers = _wrappers(entry_points)
    so_path = cache / f"attnlab_cpu_{_runtime_digest(cxx, view + code + wrappers)}.so"
    if so_path.exists():
        return so_path
    runtime = _runtime_text(cxx, cache)
    with tempfile.TemporaryDirectory(prefix="attnlab-cpu-build-") as tmp:
        # A fixed name: messages name the file by its label (the `#line` the composed source carries),
        # and a student's file name, escaped, can be longer than a file name may be.
        src_path = Path(tmp) / "submission.cu.cpp"
        src_path.write_text(code, encoding="utf-8")
        view_path = Path(tmp) / "attnlab_nvrtc_view.h"
        view_path.write_text(view)
        student_path = Path(tmp) / "student.ii"
        cmd = [
            cxx,
            *CXXFLAGS,
            *STUDENT_PREPROCESS_FLAGS,
            "-E",
            "-I",
            str(_STUDENT_INCLUDE),
            "-I",
            str(_INCLUDE),
            "-I",
            str(NVRTC_STANDARD_HEADERS),
            "-include",
            str(view_path),
            "-include",
            str(_MACROS),
            "-x",
            "c++",
            str(src_path),
            "-o",
            str(student_path),
        ]
        res = run_compiler(cmd, tmp, timeout_s, memory_bytes, filename)
        if res.returncode != 0:
            raise _compile_failed(res, tmp, filename)
        student = student_path.read_text(encoding="utf-8", errors="replace")
        try:
            refuse_in_preprocessed(student, filename)
        except AttnlabError as refused:
            raise CpuCompileError(refused.message) from None
        unit_path = Path(tmp) / "kernel.ii"
        unit_path.write_text(runtime + "\n" + student + "\n" + wrappers, encoding="utf-8")
        out_tmp = Path(tmp) / "kernel.so"
        cmd = [cxx, *CXXFLAGS, "-x", "c++-cpp-output", str(unit_path), "-o", str(out_tmp)]
        res = run_compiler(cmd, tmp, timeout_s, memory_bytes, filename)
        if res.returncode != 0:
            raise _compile_failed(res, tmp, filename)
        part = cache / f".{so_path.name}.{os.getpid()}.{threading.get_ident()}"
        shutil.copyfile(out_tmp, part)
        os.replace(part, so_path)
    return so_path


def _compile_failed(res: subprocess.CompletedProcess[str], tmp: str, filename: str) -> CpuCompileError:
    """The composed source names the file by its label (`#line 1`), so g++'s lines about it read
    `label:20:5: error: ...`: kept and written as NVRTC writes them, everything else (other files,
    notes about the runtime) dropped, exactly as for NVRTC's log."""
    from labrunner.compile.diagnostics import compiler_error_message, gcc_diagnostics

    kept = gcc_diagnostics((res.stderr + res.stdout).replace(tmp + os.sep, ""), filename, filename)
    return CpuCompileError("C++ compile failed:\n" + compiler_error_message(kept, filename, "g++"))


def shared_part(name: str) -> Path | None:
    """The driver's ready-made part of this name, where the driver made one: the parts every build shares
    (the runtime's text, the NVRTC view, the baseline object), made before the box starts (`parts.py`)
    and mapped into it read-only, so that a worker reads them instead of making them again."""
    folder = os.environ.get(CPU_PARTS_VARIABLE)
    if not folder:
        return None
    path = Path(folder) / name
    return path if path.is_file() else None


def _runtime_text(cxx: str, cache: Path) -> str:
    """shim.h preprocessed with g++'s own macros and headers (the first half of every build), kept on
    disk per compiler, flags and runtime: the same text for every kernel file."""
    path = cache / f"attnlab_runtime_{_runtime_digest(cxx, 'runtime ' + str(_SHIM))}.ii"
    path = shared_part(path.name) or path
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        pass
    try:
        with tempfile.TemporaryDirectory(prefix="attnlab-cpu-runtime-") as tmp:
            # An empty main file of this name: the unit's first line marker (and the name g++ derives
            # the runtime's own initialiser symbols from) reads `attnlab-runtime.cpp`.
            (Path(tmp) / "attnlab-runtime.cpp").write_text("")
            done = subprocess.run(
                [cxx, *CXXFLAGS, "-E", "-include", str(_SHIM), "-x", "c++", "attnlab-runtime.cpp"],
                cwd=tmp,
                capture_output=True,
                text=True,
                encoding="utf-8",
                timeout=120,
            )
    except (OSError, subprocess.SubprocessError) as exc:
        raise CpuKernelError(f"the CPU backend's runtime could not be preprocessed with {cxx} ({exc})") from None
    if done.returncode != 0:
        raise CpuKernelError(f"the CPU backend's runtime does not preprocess with {cxx}: {done.stderr.strip()[-500:]}")
    part = cache / f".{path.name}.{os.getpid()}.{threading.get_ident()}"
    part.write_text(done.stdout, encoding="utf-8")
    os.replace(part, path)
    return done.stdout


def _nvrtc_view(arch: str, cxx: str, cache: Path) -> str:
    """nvrtc_view_header, kept on disk per NVRTC version, arch and compiler (probing NVRTC takes a
    good fraction of a second, and every worker is a fresh process)."""
    from labrunner.compile.nvrtc import nvrtc_version

    key = _runtime_digest(cxx, f"view {arch} {nvrtc_version()} " + (_HERE / "nvrtc_view.py").read_text())
    path = cache / f"nvrtc_view_{key}.h"
    path = shared_part(path.name) or path
    try:
        return path.read_text()
    except OSError:
        pass
    view = nvrtc_view_header(arch, cxx, tuple(CXXFLAGS))
    part = cache / f".{path.name}.{os.getpid()}.{threading.get_ident()}"
    part.write_text(view)
    os.replace(part, path)
    return view


@functools.cache
def _baseline_facts(cache_key: str, cache_dir: str | None, timeout_s: float) -> ElfFacts:
    shared = shared_part(baseline_name(cache_key))
    if shared is not None:
        return read_elf(shared)
    so_path = build_object(
        "", "attnlab-empty.cu", {}, Path(cache_dir) if cache_dir else None, timeout_s=max(timeout_s, 60.0)
    )
    return read_elf(so_path)


def baseline_name(cache_key: str) -> str:
    return f"attnlab_baseline_{cache_key}.so"


def build_baseline(folder: Path, timeout_s: float = 120.0) -> Path:
    """The baseline object (an empty file built with the runtime) as `folder`'s shared part."""
    path = folder / baseline_name(_runtime_digest(_cxx(), "baseline"))
    if not path.is_file():
        built = build_object("", "attnlab-empty.cu", {}, folder, timeout_s=timeout_s)
        part = folder / f".{path.name}.{os.getpid()}.{threading.get_ident()}"
        shutil.copyfile(built, part)
        os.replace(part, path)
    return path


def baseline_facts(cache_dir: Path | None = None, timeout_s: float = BUILD_TIMEOUT_S) -> ElfFacts:
    """The ELF facts of an empty file built with the shim: what the object check allows."""
    cxx = _cxx()
    return _baseline_facts(_runtime_digest(cxx, "baseline"), str(cache_dir) if cache_dir else None, timeout_s)


def check_built_object(
    so_path: Path, filename: str, cache_dir: Path | None = None, timeout_s: float = BUILD_TIMEOUT_S
) -> None:
    """The object check (object_check.py) against the shim's baseline; CpuCompileError when refused."""
    try:
        check_object(so_path, baseline_facts(cache_dir, timeout_s), filename)
    except ObjectRefused as refused:
        raise CpuCompileError(str(refused)) from None


class CpuModule:
    """One compiled kernel file.  Build with CpuModule.build()."""

    def __init__(self, lib: ctypes.CDLL, so_path: Path, filename: str, entry_points: dict[str, list[str]]):
        self._lib = lib
        self.so_path = so_path
        self.filename = filename
        self.entry_points = {k: list(v) for k, v in entry_points.items()}
        self._kinds = {k: [_param_kind(t) for t in v] for k, v in entry_points.items()}
        self._fns = {}
        for i, name in enumerate(entry_points):
            fn = getattr(lib, f"attnlab_launch_{i}")
            fn.restype = ctypes.c_int
            fn.argtypes = [
                ctypes.POINTER(ctypes.c_void_p),
                ctypes.POINTER(ctypes.c_int),
                ctypes.POINTER(ctypes.c_int),
                ctypes.c_longlong,
                ctypes.c_int,
                ctypes.c_char_p,
                ctypes.c_int,
            ]
            self._fns[name] = fn
        self._static_shared = lib.attnlab_static_shared_bytes
        self._static_shared.restype = ctypes.c_longlong
        self._set_options = lib.attnlab_set_options
        self._set_options.restype = None
        self._set_options.argtypes = [ctypes.c_longlong, ctypes.c_int]
        self._last_fault = lib.attnlab_last_fault
        self._last_fault.restype = ctypes.c_int
        self._last_fault.argtypes = [
            ctypes.POINTER(ctypes.c_ulonglong),
            ctypes.POINTER(ctypes.c_int),
            ctypes.c_char_p,
            ctypes.c_int,
        ]

    # ------------------------------------------------------------------ build
    @classmethod
    def build(
        cls,
        source: str,
        filename: str,
        entry_points: dict[str, list[str]],
        cache_dir: Path | None = None,
        arch: str = DEFAULT_ARCH,
        timeout_s: float = BUILD_TIMEOUT_S,
    ) -> CpuModule:
        """Build, check and load in this process (tests and tools; the worker seals itself in between,
        see `labrunner.run.cpu_device.CpuDevice.compile`)."""
        so_path = build_object(source, filename, entry_points, cache_dir, arch, timeout_s)
        check_built_object(so_path, filename, cache_dir, timeout_s)
        return cls.load(so_path, filename, entry_points)

    @classmethod
    def load(cls, so_path: Path, filename: str, entry_points: dict[str, list[str]]) -> CpuModule:
        """dlopen a built and checked module. Its loading runs no code of the file's (the object check
        saw to that); the worker calls this with its syscall filter already in place."""
        try:
            lib = ctypes.CDLL(str(so_path))
        except OSError as e:
            raise CpuKernelError(f"cannot load compiled kernel module {so_path.name}: {e}") from None
        return cls(lib, so_path, filename, entry_points)

    # ----------------------------------------------------------------- launch
    def static_shared_bytes(self) -> int:
        """Bytes of static __shared__ memory seen so far (grows as kernels first run)."""
        return int(self._static_shared())

    def launch(
        self,
        name: str,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        args: list[np.ndarray | int],
        reverse_threads: int = False,  # the schedule number: threads and blocks, fiber_launch.h (schedule_launch)
    ) -> None:
        fn = self._fns.get(name)
        if fn is None:
            known = ", ".join(sorted(self._fns)) or "none"
            raise CpuKernelError(f"unknown kernel {name!r} in {self.filename} (kernels built: {known})")
        g = _dim3(grid, "grid")
        b = _dim3(block, "block")
        nthreads = b[0] * b[1] * b[2]
        if min(g) < 1 or min(b) < 1:
            raise CpuKernelError(f"bad launch config for kernel {name}: grid {g}, block {b} (dimensions must be >= 1)")
        if nthreads > MAX_THREADS or b[0] > 1024 or b[1] > 1024 or b[2] > 64:
            raise CpuKernelError(
                f"bad launch config for kernel {name}: block {b} has {nthreads} threads "
                f"(at most {MAX_THREADS}, z at most 64)"
            )
        if g[0] > 2**31 - 1 or g[1] > 65535 or g[2] > 65535:
            raise CpuKernelError(f"bad launch config for kernel {name}: grid {g} too large")
        shared_bytes = int(shared_bytes)
        static = self.static_shared_bytes()
        if shared_bytes < 0 or shared_bytes + static > SHARED_LIMIT:
            raise CpuKernelError(
                f"bad launch config for kernel {name}: {shared_bytes} bytes of dynamic plus {static} bytes of "
                f"static shared memory exceed the {SHARED_LIMIT}-byte (227 KiB) limit"
            )
        kinds = self._kinds[name]
        if len(args) != len(kinds):
            raise CpuKernelError(f"kernel {name} takes {len(kinds)} arguments, got {len(args)}")
        keep = []
        ptrs = (ctypes.c_void_p * max(1, len(args)))()
        for k, (kind, a) in enumerate(zip(kinds, args)):
            cell: ctypes._SimpleCData[Any]
            if kind == "ptr":
                if isinstance(a, np.ndarray):
                    addr = a.ctypes.data
                elif a is None:
                    addr = 0
                elif isinstance(a, (int, np.integer)) and not isinstance(a, bool):
                    addr = int(a)
                else:
                    raise CpuKernelError(f"kernel {name} argument {k}: expected a numpy array, got {type(a).__name__}")
                cell = ctypes.c_void_p(addr)
            else:
                ctype = _SCALARS[kind][1]
                if isinstance(a, (np.ndarray, bool)):
                    raise CpuKernelError(f"kernel {name} argument {k}: expected {kind}, got {type(a).__name__}")
                cell = ctype(a)
                if kind in ("int", "unsigned", "long long") and cell.value != int(a):
                    raise CpuKernelError(f"kernel {name} argument {k}: {a} does not fit in {kind}")
            keep.append(cell)
            ptrs[k] = ctypes.cast(ctypes.pointer(cell), ctypes.c_void_p)
        gi = (ctypes.c_int * 3)(*g)
        bi = (ctypes.c_int * 3)(*b)
        err = ctypes.create_string_buffer(1024)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        stack_kb = os.environ.get("ATTNLAB_CPU_STACK_KB", "")
        with _LAUNCH_LOCK:
            self._set_options(
                int(stack_kb) if stack_kb.isdigit() else 128,
                1 if os.environ.get("ATTNLAB_CPU_FIBERS") == "ucontext" else 0,
            )
            # reverse_threads is the schedule: False/0 in order, True/1 reversed, 2 and up seeded random orders
            # (of the threads and the blocks); -1 and below reorder the blocks alone
            rc = fn(ptrs, gi, bi, shared_bytes, int(reverse_threads), err, len(err))
            if rc != 0:
                address, write, where = ctypes.c_ulonglong(0), ctypes.c_int(0), ctypes.create_string_buffer(160)
                fault = self._last_fault(ctypes.byref(address), ctypes.byref(write), where, len(where))
        del keep
        if rc != 0:
            message = err.value.decode(errors="replace")
            if fault == _FAULT_OUT_OF_BOUNDS:
                raise CpuOutOfBounds(message)
            if fault == _FAULT_ADDRESS:
                raise CpuFault(message, int(address.value), bool(write.value), where.value.decode(errors="replace"))
            raise CpuKernelError(message)

    # ---------------------------------------------------------------- globals
    def read_int_global(self, name: str) -> int | None:
        """Value of an `extern "C" __constant__ int name = ...;` in the file, or None."""
        try:
            return int(ctypes.c_int.in_dll(self._lib, name).value)
        except ValueError:
            return None
