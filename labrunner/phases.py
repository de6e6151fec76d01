"""Where one command's wall-clock time goes: named phases, measured in the driver, each counted once.

A grade is a chain of steps that each cost a process start, a compile or a few kernel runs; to make
it fast one has to know which. `phase("compile student")` around a step adds its seconds to that
name. Phases nest (a case's explanation runs inside the case), and a phase's own time excludes the
phases inside it, so the rows add up to the whole without counting a second twice: what no phase
covers is reported as `other`. `imports` is the time from the process's start (the kernel's record
of it, so the interpreter's own start-up is in it) to the moment the command's body began.

Work the driver starts ahead in a thread of its own (the worker's box while the file compiles, the
GPU oracle) is timed there too, under its name with "(ahead)" after it; it overlaps the phases of the
main thread, so it is left out of their sum: the main thread's rows and `other` add up to the whole.

Every figure is the driver's own clock: a worker or a compiler is timed from outside (the time to
start its box, the time its answer took), never by what it says of itself.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field


@dataclass
class PhaseClock:
    seconds: dict[str, float] = field(default_factory=dict)  # phase name -> its own seconds, in first-seen order
    started: float | None = None  # perf_counter at the command's start
    imports_s: float | None = None
    ahead: set[str] = field(default_factory=set)  # names timed in a thread other than the main one
    _local: threading.local = field(default_factory=threading.local)  # per thread: its open phases

    def start(self) -> None:
        """The command's body begins: the clock restarts and `imports` is read off the process's age."""
        self.seconds.clear()
        self.ahead.clear()
        self._open.clear()
        self.started = time.perf_counter()
        self.imports_s = process_age_s()

    @property
    def _open(self) -> list[list[float]]:
        """This thread's open phases, each [start, seconds of the phases inside it]."""
        if not hasattr(self._local, "open"):
            self._local.open = []
        opened: list[list[float]] = self._local.open
        return opened

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            name = f"{name} (ahead)"
            self.ahead.add(name)
        self.seconds.setdefault(name, 0.0)  # the table lists phases in the order they began
        frame = [time.perf_counter(), 0.0]
        self._open.append(frame)
        try:
            yield
        finally:
            self._open.pop()
            took = time.perf_counter() - frame[0]
            self.seconds[name] = self.seconds.get(name, 0.0) + took - frame[1]
            if self._open:
                self._open[-1][1] += took

    def table(self) -> list[tuple[str, float]]:
        """(phase, seconds) rows: imports, each phase in the order it first ran, then what none covered."""
        rows = [("imports", self.imports_s)] if self.imports_s is not None else []
        rows += list(self.seconds.items())
        if self.started is not None:
            covered = sum(s for name, s in self.seconds.items() if name not in self.ahead)
            rows.append(("other", max(0.0, time.perf_counter() - self.started - covered)))
        return [(name, round(seconds, 4)) for name, seconds in rows]


CLOCK = PhaseClock()  # one command per process: the grade that runs here


def phase(name: str) -> AbstractContextManager[None]:
    """`with phase("golden proof"):` adds the step's own seconds to the command's table."""
    return CLOCK.phase(name)


def process_age_s() -> float | None:
    """Seconds since this process started, from /proc (None where there is no /proc): the interpreter's
    start and every import before the command ran."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        with open("/proc/uptime", "rb") as uptime:
            now = float(uptime.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat: starttime, counted after the ")"
    return max(0.0, now - started)
