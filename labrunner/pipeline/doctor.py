"""`attnlab doctor`: what this machine can do, one line per piece."""

from __future__ import annotations

import os
import platform

from labrunner import box as boxes
from labrunner import syscall_filter
from labrunner.compile.backend import Backend
from labrunner.compile.compiler_process import CompileLimits, size_words
from labrunner.compile.nvrtc import nvrtc_version
from labrunner.compile.triton_build import triton_bounds, triton_installed
from labrunner.exit_codes import AttnlabError, ExitCode, environment_error
from labrunner.pipeline import backend
from labrunner.report.reporter import Reporter
from labrunner.report.results import RunResult
from labrunner.run import cpu_device
from labrunner.run.sandbox import CPU_LIMITS
from labrunner.truth.golden import prove_oracle


def diagnose() -> list[tuple[str, bool, str]]:
    rows: list[tuple[str, bool, str]] = []
    gpu_ok, words = backend.gpu_status()
    rows.append(("GPU and driver", gpu_ok, words if gpu_ok else f"{words}: grade with --device cpu (correctness only)"))
    try:
        import cupy

        rows.append(("CuPy", True, cupy.__version__))
    except ImportError:
        needed = backend.gpu_may_be_here()  # only the GPU backend uses CuPy: no advice where no GPU could use it
        words = "pip install 'attnlab[cuda13]' (or [cuda12])" if needed else "needed only where an NVIDIA GPU is"
        rows.append(("CuPy", False, f"not installed: {words}"))
    try:
        rows.append(("NVRTC (compile gate)", True, nvrtc_version()))
    except AttnlabError as exc:
        rows.append(("NVRTC (compile gate)", False, exc.message))
    cpu_ok, cpu_words = cpu_device.cpu_backend_status()
    rows.append(("C++ compiler (CPU backend)", cpu_ok, cpu_words))
    unboxed = boxes.availability()
    rows.append(
        (
            "box",
            unboxed is None,
            boxes.describe()
            if unboxed is None
            else f"{unboxed}: --device cpu refuses to grade, the GPU path runs unboxed (--require-box refuses)",
        )
    )
    rows.append(("box bounds", *box_bounds()))
    rows.append(("Triton (.py files)", *triton_status()))
    proof = prove_oracle()
    rows.append(("oracle golden proof", proof.passed, f"max error {proof.max_error:.1e} (must be <= 1e-12)"))
    rows.append(("Python", True, platform.python_version()))
    return rows


def require_backend(device: str, rows: list[tuple[str, bool, str]]) -> str:
    """The backend `--device` would grade on here; exit 6 naming the ones that work when it is unusable."""
    found = {name: (ok, words) for name, ok, words in rows}
    usable = {
        Backend.GPU: found["GPU and driver"][0] and found["CuPy"][0] and found["NVRTC (compile gate)"][0],
        Backend.CPU: found["C++ compiler (CPU backend)"][0] and found["NVRTC (compile gate)"][0] and found["box"][0],
    }
    working = [name for name, ok in usable.items() if ok]
    chosen = {"gpu": [Backend.GPU], "cpu": [Backend.CPU], "auto": [Backend.GPU, Backend.CPU]}[device]
    for candidate in chosen:
        if usable[candidate]:
            return candidate
    others = (
        f"usable here: {', '.join(working)} (grade with --device {working[0]})"
        if working
        else "no backend is usable here; see the rows above"
    )
    raise environment_error(
        f"--device {device}: {'no backend' if device == 'auto' else f'the {device} backend'} "
        f"is unusable on this machine; {others}"
    )


def doctor_machine(device: str, result: RunResult, reporter: Reporter, warm: bool = False) -> None:
    """The rows, the oracle's own proof, and exit 6 where the backend asked for is unusable here.
    `warm`: then build what a first grade would build (`pipeline/warm.py`), a row per step."""
    rows = diagnose()
    result.notes = [f"{name}: {'ok' if ok else 'missing'}: {words}" for name, ok, words in rows]
    result.oracle_proof = prove_oracle().to_json()
    reporter.doctor(rows)
    if not result.oracle_proof["passed"]:
        raise AttnlabError("the oracle failed its golden proof", ExitCode.ENVIRONMENT)
    chosen = require_backend(device, rows)
    if not warm:
        return
    from labrunner.pipeline.warm import warm_machine

    built = warm_machine(Backend(chosen))
    result.notes += [f"--warm: {name}: {'ok' if ok else 'failed'}: {words}" for name, ok, words in built]
    reporter.doctor(built)
    failed = [name for name, ok, _ in built if not ok]
    if failed:
        raise environment_error(f"--warm: {', '.join(failed)} failed (its row says why)")


# The system calls that would let a process outlive, multiply or leave its box: what a seal is judged by.
_ESCAPES = ("fork", "vfork", "clone", "execve", "socket")


def _refused_by_the_worker_seal() -> list[str]:
    """Of `_ESCAPES` (and opening a file, and raising a limit), what the CPU worker's seal refuses (its
    first filter allows only `ALLOWED`; its second takes away the loader's open)."""
    calls = (*_ESCAPES, "openat", "prlimit64")
    allowed = set(syscall_filter.ALLOWED) - set(syscall_filter.RUN_STAGE_REFUSED)
    return [call for call in calls if call not in allowed]


def _refused_by_the_no_process_seal() -> list[str]:
    """Of `_ESCAPES`, what the Triton build's seal refuses (it allows by default; `clone` it refuses
    unless the call makes a thread, for LLVM's)."""
    refused = [call for call in _ESCAPES if call in syscall_filter.NO_PROCESS_REFUSED]
    return [*refused[:2], "clone (threads stay)", *refused[2:]] if "clone" not in refused else refused


def _job(purpose: boxes.Purpose) -> str:
    """The size of a box's private folder as this machine's bubblewrap makes it."""
    if boxes.availability() is not None:
        return "no /job (no box here)"
    if "--size" not in boxes.bwrap_help():
        return "/job unsized (this bubblewrap has no --size: a tmpfs of the kernel's default size)"
    return f"/job {size_words(purpose.private_bytes)}"


def box_bounds() -> tuple[bool, str]:
    """How each box that reads a student's bytes is bounded, read from the limits its process sets
    (`triton_build.triton_bounds`, `sandbox.CPU_LIMITS`, `CompileLimits`) and from the seccomp filters
    (`syscall_filter`): one line per box. A box is bounded as a whole where the one process that runs
    student code is sealed against starting another, so its own limits are the box's; that holds for
    root too, which RLIMIT_NPROC never binds. Not ok where seccomp is unavailable (then neither seal
    can be made)."""
    unsealable = syscall_filter.availability()
    triton = triton_bounds()
    compile_limits = CompileLimits()
    worker_data = "no data limit" if CPU_LIMITS.data_bytes is None else f"data {size_words(CPU_LIMITS.data_bytes)}"
    as_root = "; attnlab runs as root here" if os.geteuid() == 0 else ""
    seal = (
        f"student code runs only in processes sealed by seccomp (no {', '.join(_refused_by_the_worker_seal())}): "
        f"each one's limits bound its whole box, as root too (RLIMIT_NPROC never binds root{as_root})"
        if unsealable is None
        else f"seccomp is unavailable ({unsealable}): no process can be sealed, so the CPU backend grades only "
        "with --unsafe-cpu and Triton files are refused (exit 6)"
    )
    writes = size_words(triton.import_file_bytes) if triton.import_file_bytes else "none"
    lines = [
        seal,
        f"Triton import (a .py file's top level): sealed as the CPU worker is; address space "
        f"{triton.memory_mib} MiB, {triton.cpu_s} CPU s, file writes {writes}, "
        f"{_job(boxes.TRITON_COMPILE)}",
        f"Triton build (the kernels' constant Python): sealed against new processes (seccomp: no "
        f"{', '.join(_refused_by_the_no_process_seal())}); address space {triton.memory_mib} MiB, "
        f"{triton.cpu_s} CPU s, {_job(boxes.TRITON_COMPILE)}",
        f"ptxas (Triton's PTX, no student code): address space {triton.memory_mib} MiB, {triton.cpu_s} CPU s, "
        f"{_job(boxes.COMPILE)}",
        f"CPU worker (the kernel, native or interpreted): sealed before the kernel loads; {worker_data} (heap and "
        f"private mappings), {CPU_LIMITS.cpu_s} CPU s, files of {size_words(CPU_LIMITS.file_bytes)} at most, "
        f"{_job(boxes.CPU_RUN)}",
        f"NVRTC (reads a .cu file, runs none of it): address space {compile_limits.memory_mib} MiB, "
        f"{compile_limits.timeout_s:g} s (--compile-timeout), {_job(boxes.COMPILE)}",
    ]
    return unsealable is None, "\n".join(lines)


def triton_status() -> tuple[bool, str]:
    """Whether `.py` files can be graded here: Triton installed (its version, as the driver finds it),
    seccomp for the sealed import, and a box (a Triton file is never compiled unboxed but with --unsafe-cpu)."""
    try:
        version = triton_installed()
    except AttnlabError:
        return False, "not installed: pip install 'attnlab[triton]' to grade .py files (labs 2 and 3)"
    unsealable = syscall_filter.availability()
    if unsealable is not None:
        return (
            False,
            f"{version}, but its sealed import needs seccomp, unavailable here ({unsealable}): .py files "
            "are refused (exit 6)",
        )
    unboxed = boxes.availability()
    if unboxed is not None:
        return False, f"{version}, but no box can be made ({unboxed}): .py files compile only with --unsafe-cpu"
    return True, f"{version}: seccomp for the sealed import, a box for each step"
