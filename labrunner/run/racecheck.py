"""`--race-check` on the GPU: the small cases under compute-sanitizer's racecheck and synccheck.

A GPU runs a block's warps in whatever order its scheduler picks, so a missing `__syncthreads()`
may give the right answer on every run the driver makes. NVIDIA's racecheck tool watches every
shared-memory access instead and reports two accesses from different threads with no barrier
between them; synccheck reports barriers that not every thread of a block reaches. The case runs
once more under each tool, boxed and bounded exactly as the crash replay is (`diagnose.py`'s
`sanitizer_replay`), and the first hazard is reported with its kernel and source line. A check that
could not be completed is said so (`race-check-inconclusive`), never read as "no hazard".
"""

from __future__ import annotations

import re

from labrunner.run.diagnose import REPLAY_FACTOR, SANITIZER, ReplayPayload, sanitizer_replay

TOOLS = ("racecheck", "synccheck")
_LOCATION = re.compile(r"in (?:\S*/)?([^/\s:]+):(\d+)(?::(\w+)\()?")
_KERNEL_AT = re.compile(r"at (?:0x[0-9a-f]+ in )?(\w+)\+0x")
_ACCESS = re.compile(r"(Read|Write) access")
# The line each tool ends its report with once it has watched the whole run: racecheck's own summary
# ("RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)", as the H200's 2025 tool writes it,
# with no error summary after it), the others' "ERROR SUMMARY: 0 errors".
_SUMMARY = re.compile(r"\s*[A-Z]+ SUMMARY:")


def find_hazard(payload: ReplayPayload, case_timeout_s: float) -> tuple[str | None, str | None]:
    """(hazard, inconclusive): the first hazard racecheck or synccheck reports on one case, in one
    line, or the reason the check could not be made.

    It fails closed: a replay that did not finish in time, a tool that ended without its closing
    summary (it watched only part of the run), or no compute-sanitizer at all is inconclusive, never
    "no hazard"."""
    for name in TOOLS:
        replayed = sanitizer_replay(payload, case_timeout_s, name, print_limit=10)
        if replayed is None:
            return None, f"{SANITIZER} is not installed, so the GPU's race check could not run"
        reported, finished = replayed
        if not finished:
            return None, (
                f"{SANITIZER} --tool {name} did not finish within {REPLAY_FACTOR * case_timeout_s:g} s "
                f"({REPLAY_FACTOR} times the case's {case_timeout_s:g} s), so the kernel was not "
                "checked for races"
            )
        hazard = parse_hazard(name, "\n".join("=========" + line for line in reported))
        if hazard:
            return hazard, None
        if not any(_SUMMARY.match(line) for line in reported):
            return None, (
                f"{SANITIZER} --tool {name} ended without its error summary, so it did not watch the whole run"
            )
    return None, None


def parse_hazard(tool: str, report: str) -> str | None:
    """compute-sanitizer's output, reduced to the first hazard: what, which kernel, which lines."""
    lines = [line.removeprefix("=========").strip() for line in report.splitlines() if line.startswith("=========")]
    for index, line in enumerate(lines):
        if tool == "racecheck" and "Race reported" in line:
            accesses = [line] + [more for more in lines[index + 1 : index + 4] if more.startswith("and ")]
            where = [_where(access) for access in accesses[:2]]
            kinds = [
                (found.group(1).lower() if (found := _ACCESS.search(access)) else "access") for access in accesses[:2]
            ]
            kernel: str | None = next((k for _, k in where if k), "?")
            sites = " and ".join(f"a {kind} at {site}" for kind, (site, _) in zip(kinds, where) if site)
            return f"racecheck: shared-memory race in kernel {kernel} between {sites}: a missing __syncthreads()?"
        if tool == "synccheck" and ("Barrier error" in line or "barrier" in line.lower() and "error" in line.lower()):
            detail = line.split("detected.", 1)[-1].strip().rstrip(".") or line
            site, kernel = next(
                ((s, k) for s, k in (_where(more) for more in lines[index : index + 4]) if s), (None, None)
            )
            at = f" at {site}" if site else ""
            return f"synccheck: barrier error in kernel {kernel or '?'}{at}: {detail}"
    return None


def _where(line: str) -> tuple[str | None, str | None]:
    """(`file:line`, kernel) named in one line of a sanitizer report, as far as it names them."""
    location = _LOCATION.search(line)
    kernel_at = _KERNEL_AT.search(line)
    site = f"{location.group(1)}:{location.group(2)}" if location else None
    kernel = (location.group(3) if location and location.group(3) else None) or (
        kernel_at.group(1) if kernel_at else None
    )
    return site, kernel


__all__ = ["SANITIZER", "TOOLS", "find_hazard", "parse_hazard"]
