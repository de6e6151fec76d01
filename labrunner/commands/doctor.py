"""`attnlab doctor`: what this machine can do, one line per piece."""

from __future__ import annotations

import platform

from labrunner import box as boxes


def diagnose() -> list[tuple[str, bool, str]]:
    from labrunner.build.nvrtc import nvrtc_version
    from labrunner.commands.grade import gpu_status
    from labrunner.exit_codes import AttnlabError
    from labrunner.truth.golden import prove_oracle

    rows: list[tuple[str, bool, str]] = []
    gpu_ok, words = gpu_status()
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
    from labrunner.run.cpu_device import cpu_backend_status

    cpu_ok, cpu_words = cpu_backend_status()
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
    from labrunner.exit_codes import environment_error

    found = {name: (ok, words) for name, ok, words in rows}
    usable = {
        "gpu": found["GPU and driver"][0] and found["CuPy"][0] and found["NVRTC (compile gate)"][0],
        "cpu": found["C++ compiler (CPU backend)"][0] and found["NVRTC (compile gate)"][0] and found["box"][0],
    }
    working = [name for name, ok in usable.items() if ok]
    chosen = {"gpu": ["gpu"], "cpu": ["cpu"], "auto": ["gpu", "cpu"]}[device]
    for backend in chosen:
        if usable[backend]:
            return backend
    others = (
        f"usable here: {', '.join(working)} (grade with --device {working[0]})"
        if working
        else "no backend is usable here; see the rows above"
    )
    raise environment_error(
        f"--device {device}: {'no backend' if device == 'auto' else f'the {device} backend'} "
        f"is unusable on this machine; {others}"
    )
