"""`attnlab doctor`: what this machine can do, one line per piece."""

from __future__ import annotations

import platform

from labrunner import box as boxes
from labrunner.build.nvrtc import nvrtc_version
from labrunner.exit_codes import AttnlabError, ExitCode, environment_error
from labrunner.pipeline import backend
from labrunner.report import terminal
from labrunner.report.results import RunResult
from labrunner.run import cpu_device
from labrunner.truth.golden import prove_oracle


def diagnose() -> list[tuple[str, bool, str]]:
    rows: list[tuple[str, bool, str]] = []
    gpu_ok, words = backend.gpu_status()
    rows.append(("GPU and driver", gpu_ok, words if gpu_ok else f"{words}: grade with --device cpu (correctness only)"))
    try:
        import cupy

        rows.append(("CuPy", True, cupy.__version__))
    except ImportError:
        rows.append(("CuPy", False, "not installed: pip install 'attnlab[cuda13]' (or [cuda12])"))
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
    proof = prove_oracle()
    rows.append(("oracle golden proof", proof.passed, f"max error {proof.max_error:.1e} (must be <= 1e-12)"))
    rows.append(("Python", True, platform.python_version()))
    return rows


def require_backend(device: str, rows: list[tuple[str, bool, str]]) -> str:
    """The backend `--device` would grade on here; exit 6 naming the ones that work when it is unusable."""
    found = {name: (ok, words) for name, ok, words in rows}
    usable = {
        "gpu": found["GPU and driver"][0] and found["CuPy"][0] and found["NVRTC (compile gate)"][0],
        "cpu": found["C++ compiler (CPU backend)"][0] and found["NVRTC (compile gate)"][0] and found["box"][0],
    }
    working = [name for name, ok in usable.items() if ok]
    chosen = {"gpu": ["gpu"], "cpu": ["cpu"], "auto": ["gpu", "cpu"]}[device]
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


def doctor_machine(device: str, result: RunResult) -> None:
    """The rows, the oracle's own proof, and exit 6 where the backend asked for is unusable here."""
    rows = diagnose()
    result.notes = [f"{name}: {'ok' if ok else 'missing'}: {words}" for name, ok, words in rows]
    result.oracle_proof = prove_oracle().to_json()
    terminal.doctor_report(rows)
    if not result.oracle_proof["passed"]:
        raise AttnlabError("the oracle failed its golden proof", ExitCode.ENVIRONMENT)
    require_backend(device, rows)
