"""How long one case may run before its kernel is stopped, and the words that say where that limit came from.

A hang should be named in seconds, and a slow but correct kernel never cut. A fixed limit cannot do
both on the CPU backend, where a correct kernel finishes a small case in a tenth of a second and
lab 3's longest in several: so the limit of a case is derived from what the shipped solution needs
for it on this machine, times a generous factor, plus a fixed allowance for a worker that starts
slowly on a busy machine.

What the solution needs is estimated, not run (running it would cost a second g++ build on every first grade):
each lab's cost per unit of work was measured on a two-core reference machine (`Lab.cpu_seconds_per_unit`, on
each lab's definition), a case's work is counted from its size (`case_work`), and a short loop timed here says
how much slower than the reference machine this one is (`machine_factor`; never taken as faster, so a limit is
never shorter than on the reference machine), and the load average how many processes share each core now
(`contention`). The factor of 20 covers the starters, which are up to 8 times slower than the solutions on the
CPU, twice over. An explicit `--timeout` always wins; the GPU keeps its fixed limit (its kernels take
milliseconds; what it may wait on is a compile or a sanitizer).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from functools import lru_cache

from labrunner.compile.backend import Backend
from labrunner.labs.definition import Lab
from labrunner.truth.catalogue import Case

GPU_LIMIT_S = 20.0
FACTOR = 20
START_ALLOWANCE_S = 3.0  # a worker descheduled on a busy machine, the first touch of a case's buffers
UNKNOWN_LAB_LIMIT_S = 120.0
SETS = " (--timeout sets it)"  # a lab defined elsewhere, whose solution's cost attnlab never measured

# The reference machine: two cores of an AMD EPYC, where each lab's `cpu_seconds_per_unit` was measured (the
# default case set graded with --full, while the machine was busy); the time of one `_speed_loop` there (the
# best of many) is `REFERENCE_LOOP_S`. A Triton file on the CPU runs in Triton's interpreter, whose every
# operation is a numpy call over a whole tile: its starters were up to 25 times slower per unit than the .cu
# solution's, so a lab's `interpreted_seconds_per_unit` starts from that price.
FIXED_SECONDS = 0.05  # what a case costs whatever its size: its buffers poisoned, sent and read back
REFERENCE_LOOP_S = 0.00089
TILE = 64  # the solutions' tile over rows and keys: a case of 1 row costs what one of 64 does
PAGE = 16  # a decode key is read a page at a time


def case_work(case: Case) -> int:
    """The work a case asks of the solution, in the unit `Lab.cpu_seconds_per_unit` prices.

    A prefill (labs 1 and 2): the query rows times the keys each sees, both padded to a whole tile,
    since the solutions compute whole tiles. A decode batch (lab 3): every sequence's keys, padded to a
    whole page, plus a page's worth for each sequence's own block."""
    if case.lengths:
        return sum(PAGE * math.ceil(int(n) / PAGE) + TILE for n in case.lengths)

    def padded(n: int) -> int:
        return TILE * math.ceil(n / TILE)

    return padded(case.rows) * padded(case.keys)


def _speed_loop(iterations: int = 10_000) -> int:
    total = 0
    for i in range(iterations):
        total += (i * i) % 7
    return total


@lru_cache(maxsize=1)
def machine_factor() -> float:
    """How many times slower than the reference machine this one runs the loop (at least 1): the best of
    40 runs of about a millisecond there (50 ms in all), each short enough that some run is likely to
    finish between two of the scheduler's time slices, so other work on the machine does not make it
    look slower; the factor of 20 is what covers that work."""
    best = math.inf
    for _ in range(40):
        started = time.perf_counter()
        _speed_loop()
        best = min(best, time.perf_counter() - started)
    return max(1.0, best / REFERENCE_LOOP_S)


def contention() -> float:
    """How many runnable processes share each core now (the last minute's load average over the cores), at
    least 1: a worker on a machine loaded five times over gets a fifth of a core, and its limit grows to
    match, so a correct kernel is not cut because others are busy. An idle machine names a hang soonest."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform: taken as idle
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


@dataclass(frozen=True)
class CaseLimit:
    """The seconds a case may take (`seconds`, what the worker is given) and why that many."""

    seconds: float
    case: str
    source: str  # "option", "gpu", "reference" or "unknown-lab"
    reference_s: float = 0.0

    def timed_out(self, running: str | None = None) -> str:
        """The timeout's message: the limit, where it came from, and the kernel that was running where the
        worker said which of the case's launches it was in (`running`: `attn_softmax (launch 2 of 3)`)."""
        said = f"no result in {self.seconds:.1f} s, "
        stopped = f"{running} was running, and was stopped" if running else "the kernel was stopped"
        if self.source == "option":
            return said + f"the limit --timeout set; {stopped}"
        if self.source == "gpu":
            return said + f"the GPU's limit for one case; {stopped}" + SETS
        if self.source == "unknown-lab":
            return said + f"the CPU's limit for a lab whose solution was never measured; {stopped}" + SETS
        return (
            said + f"the limit for case {self.case} on this machine: {FACTOR} x the reference solution's "
            f"{self.reference_s:.2f} s plus {START_ALLOWANCE_S:g} s to start; {stopped}" + SETS
        )


def case_limit(lab: Lab, backend: Backend, case: Case, given_s: float | None, interpreted: bool = False) -> CaseLimit:
    """The limit of one case: `--timeout` where given, else the GPU's fixed one, else the CPU's derived one
    (`interpreted`: a Triton file's, priced as Triton's interpreter runs it)."""
    if given_s is not None:
        return CaseLimit(given_s, case.name, "option")
    if backend != Backend.CPU:
        return CaseLimit(GPU_LIMIT_S, case.name, "gpu")
    per_unit = lab.interpreted_seconds_per_unit if interpreted else lab.cpu_seconds_per_unit
    if per_unit is None:
        return CaseLimit(UNKNOWN_LAB_LIMIT_S, case.name, "unknown-lab")
    reference = (FIXED_SECONDS + per_unit * case_work(case)) * machine_factor() * contention()
    return CaseLimit(FACTOR * reference + START_ALLOWANCE_S, case.name, "reference", reference)
