"""When a batch stops before its end: Ctrl-C (SIGINT), a cancelled CI job or cluster allocation
(SIGTERM), or its own deadline (--batch-timeout).

A course's batch is stopped for ordinary reasons, and what it graded so far is worth keeping. So a
stop is a flag, not an exception: the driver sets it from its signal handler (or finds the deadline
passed), each executor reads it, starts nothing new, ends what is running (the local processes it
started; the cluster jobs it submitted) and reports every unfinished submission `interrupted`. The
reports of what finished are then written as on any other day, and the batch exits 130 or 143.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from labrunner.exit_codes import ExitCode, SignalHandler


class BatchStop:
    """The batch's stop flag: set by a signal, or by the deadline passing."""

    def __init__(self, deadline_s: float | None = None):
        self._event = threading.Event()
        self.signal_name: str | None = None
        self.deadline_s = deadline_s
        self._ends_at = None if deadline_s is None else time.monotonic() + deadline_s

    def set(self, signal_name: str) -> None:
        if not self._event.is_set():
            self.signal_name = signal_name
            self._event.set()

    def is_set(self) -> bool:
        if not self._event.is_set() and self._ends_at is not None and time.monotonic() >= self._ends_at:
            self.set("deadline")
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleeps up to `seconds`, waking at once when the batch is stopped; True when it is."""
        if self._ends_at is not None:
            seconds = max(0.0, min(seconds, self._ends_at - time.monotonic()))
        self._event.wait(seconds)
        return self.is_set()

    @property
    def exit_code(self) -> ExitCode:
        """130 for Ctrl-C; 143 for SIGTERM and for the deadline (a batch ended from outside, as `timeout` ends one)."""
        return ExitCode.INTERRUPTED if self.signal_name == "SIGINT" else ExitCode.TERMINATED

    @property
    def reason(self) -> str:
        """Why an unfinished submission has no verdict, in its row's words."""
        if self.signal_name == "deadline":
            return f"not graded: the batch's deadline (--batch-timeout {self.deadline_s:g} s) passed first"
        return f"not graded: the batch was interrupted by {self.signal_name}"


@contextmanager
def stopped_by_signals(stop: BatchStop) -> Iterator[BatchStop]:
    """SIGINT and SIGTERM set `stop` while the batch runs (the handlers before are put back after). Only the
    main thread may install handlers; a batch driven from another thread is stopped by its deadline alone."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set(signal.Signals(signum).name)

    previous: dict[signal.Signals, SignalHandler] = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, handler)
    except ValueError:
        pass
    try:
        yield stop
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)
