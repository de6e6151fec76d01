"""`--race-check` on the GPU: the small cases under compute-sanitizer's racecheck and synccheck.

A GPU runs a block's warps in whatever order its scheduler picks, so a missing `__syncthreads()`
may give the right answer on every run the driver makes. NVIDIA's racecheck tool watches every
shared-memory access instead and reports two accesses from different threads with no barrier
between them; synccheck reports barriers that not every thread of a block reaches. The case runs
once more in a fresh process under each tool (through `labrunner.run.replay`, as the crash replay
in `diagnose.py` does), and the first hazard is reported with its kernel and source line.
"""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from labrunner.run.diagnose import SANITIZER, sanitizer_path

TOOLS = ("racecheck", "synccheck")
_LOCATION = re.compile(r"in (?:\S*/)?([^/\s:]+):(\d+)(?::(\w+)\()?")
_KERNEL_AT = re.compile(r"at (?:0x[0-9a-f]+ in )?(\w+)\+0x")
_ACCESS = re.compile(r"(Read|Write) access")


def find_hazard(payload: dict, timeout_s: float) -> str | None:
    """The first hazard racecheck or synccheck reports on one case, in one line; None when neither
    reports one or compute-sanitizer is not installed."""
    tool = sanitizer_path()
    if tool is None:
        return None
    with tempfile.TemporaryDirectory(prefix="attnlab-racecheck-") as scratch:
        case_file = Path(scratch) / "case.pkl"
        case_file.write_bytes(pickle.dumps(payload))
        for name in TOOLS:
            command = [tool, "--tool", name, "--print-limit", "10", sys.executable, "-m", "labrunner.run.replay",
                       str(case_file)]
            try:
                completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return None  # no hazard seen is not a hazard: the verdict stays what the run gave
            hazard = parse_hazard(name, completed.stdout)
            if hazard:
                return hazard
    return None


def parse_hazard(tool: str, report: str) -> str | None:
    """compute-sanitizer's output, reduced to the first hazard: what, which kernel, which lines."""
    lines = [line.removeprefix("=========").strip() for line in report.splitlines() if line.startswith("=========")]
    for index, line in enumerate(lines):
        if tool == "racecheck" and "Race reported" in line:
            accesses = [line] + [more for more in lines[index + 1:index + 4] if more.startswith("and ")]
            where = [_where(access) for access in accesses[:2]]
            kinds = [(_ACCESS.search(access).group(1).lower() if _ACCESS.search(access) else "access")
                     for access in accesses[:2]]
            kernel = next((k for _, k in where if k), "?")
            sites = " and ".join(f"a {kind} at {site}" for kind, (site, _) in zip(kinds, where) if site)
            return (f"racecheck: shared-memory race in kernel {kernel} between {sites}: "
                    "a missing __syncthreads()?")
        if tool == "synccheck" and ("Barrier error" in line or "barrier" in line.lower() and "error" in line.lower()):
            detail = line.split("detected.", 1)[-1].strip().rstrip(".") or line
            site, kernel = next(((s, k) for s, k in (_where(more) for more in lines[index:index + 4]) if s),
                                (None, None))
            at = f" at {site}" if site else ""
            return f"synccheck: barrier error in kernel {kernel or '?'}{at}: {detail}"
    return None


def _where(line: str) -> tuple[str | None, str | None]:
    """(`file:line`, kernel) named in one line of a sanitizer report, as far as it names them."""
    location = _LOCATION.search(line)
    kernel_at = _KERNEL_AT.search(line)
    site = f"{location.group(1)}:{location.group(2)}" if location else None
    kernel = (location.group(3) if location and location.group(3) else None) or (kernel_at.group(1) if kernel_at else None)
    return site, kernel


__all__ = ["SANITIZER", "TOOLS", "find_hazard", "parse_hazard"]
