"""After a crash on the GPU: the same case once more under compute-sanitizer, to name the line.

A sticky CUDA error says only what went wrong (cudaErrorIllegalAddress), not where. Where
NVIDIA's compute-sanitizer is installed, the driver replays the one crashing case in a fresh
process under its memcheck tool (the module is built with -lineinfo) and shows the kernel, the
source line and the offending thread it reports.
"""

from __future__ import annotations

import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SANITIZER = "compute-sanitizer"
_KEEP = re.compile(r"Invalid __\w+__ \w+|Misaligned|Out-of-range|Illegal|^\s+at |by thread|Address 0x|is out of bounds")


def sanitizer_path() -> str | None:
    return shutil.which(SANITIZER)


def replay_under_sanitizer(payload: dict, timeout_s: float) -> str | None:
    """The sanitizer's report on one case (a few lines), or None when there is no sanitizer or no report."""
    tool = sanitizer_path()
    if tool is None:
        return None
    with tempfile.TemporaryDirectory(prefix="attnlab-diagnose-") as scratch:
        case_file = Path(scratch) / "case.pkl"
        case_file.write_bytes(pickle.dumps(payload))
        command = [tool, "--tool", "memcheck", "--print-limit", "3", sys.executable, "-m", "labrunner.run.replay",
                   str(case_file)]
        try:
            completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return f"{SANITIZER} did not finish within {timeout_s:g} s"
    reported = [line.removeprefix("=========").rstrip() for line in completed.stdout.splitlines()
                if line.startswith("=========")]
    lines = [line for line in reported if _KEEP.search(line)]
    return "\n".join(lines[:8]) or None
