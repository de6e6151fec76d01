"""Runs each Triton box step of one file by hand, in its box, and prints what the step wrote to stderr:
for a host where a Triton grade says a step "stopped without an answer". It reads no reply as the
grader does and trusts nothing; it is a diagnostic for the grader's own host, run on a file you trust.

    python3 scripts/triton_box_probe.py lab2 kernels/lab2/solution.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from labrunner import box as boxes
from labrunner.compile import triton_build
from labrunner.compile.compiler_process import CompileLimits
from labrunner.labs import get_lab


def main() -> int:
    lab, path = get_lab(sys.argv[1]), Path(sys.argv[2])
    limits = CompileLimits()
    bounds = triton_build.triton_bounds(limits)
    request = {
        "source": path.read_text(),
        "filename": path.name,
        "kernels": list(lab.entry_point_types()),
        "constants": sorted(lab.launch_defaults),
    }
    workdir = boxes.PRIVATE if boxes.boxed() else "/tmp"
    command = [
        sys.executable, "-I", str(triton_build.IMPORT_CHILD),
        str(bounds.memory_mib), str(bounds.cpu_s), str(bounds.import_file_bytes),
    ]  # fmt: skip
    environment = triton_build.triton_environment(workdir)
    if boxes.boxed():
        command = boxes.wrap(boxes.TRITON_COMPILE, command, environment)
    print("command:", " ".join(command))
    done = subprocess.run(
        command, input=json.dumps(request).encode(), capture_output=True, env=environment, cwd="/", timeout=300
    )
    print("exit status:", done.returncode)
    print("stdout (first 2000 bytes):", done.stdout[:2000].decode(errors="replace"))
    print("stderr (last 6000 bytes):", done.stderr[-6000:].decode(errors="replace"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
