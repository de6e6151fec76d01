"""`attnlab doctor`: what this machine can do, one line per piece."""

from __future__ import annotations

import platform


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
    proof = prove_oracle()
    rows.append(("oracle golden proof", proof.passed, f"max error {proof.max_error:.1e} (must be <= 1e-12)"))
    rows.append(("Python", True, platform.python_version()))
    return rows
