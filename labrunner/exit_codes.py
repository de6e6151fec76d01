"""Every exit code attnlab returns, in one place, and the error type that carries one.

A CI job branches on these numbers, so they never change meaning. README.md lists them too.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from types import FrameType
from typing import Any


class ExitCode(enum.IntEnum):
    PASS = 0  # every case correct (and the speed gate met, where one applies)
    WRONG_ANSWER = 1  # a value outside the pass rule, or an element never written
    USAGE = 2  # unknown lab, missing or unreadable file, bad option
    COMPILE_ERROR = 3  # the compiler rejected the file, or an entry point is missing or wrong
    MISBEHAVED = 4  # crash, timeout, out-of-bounds write, mutated input, race
    SPEED_GATE = 5  # correct, but slower than this GPU's calibrated gate
    ENVIRONMENT = 6  # no GPU, driver, CuPy, NVRTC or C++ compiler for the chosen backend
    INTERRUPTED = 130  # stopped by SIGINT (Ctrl-C): 128 + 2, as shells report it; the cases so far are kept
    TERMINATED = 143  # stopped by SIGTERM (a cancelled CI job): 128 + 15; the cases so far are kept


class AttnlabError(Exception):
    """An error the user can act on: one clear line (what, where, how to fix) and its exit code."""

    def __init__(self, message: str, exit_code: ExitCode):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def usage_error(message: str) -> AttnlabError:
    return AttnlabError(message, ExitCode.USAGE)


def environment_error(message: str) -> AttnlabError:
    return AttnlabError(message, ExitCode.ENVIRONMENT)


class Terminated(BaseException):
    """SIGTERM, raised where the driver is, so a cancelled run unwinds as Ctrl-C does: the worker is
    closed, the cases finished so far are reported. A BaseException, like KeyboardInterrupt, so that
    no `except Exception` on the way up mistakes it for an error of its own."""


# A signal's disposition as `signal.signal` takes and returns it: a handler, SIG_DFL or SIG_IGN (ints), or
# None (one not set from Python). How a command and a batch put back the handlers they replaced while they ran.
SignalHandler = Callable[[int, FrameType | None], Any] | int | None
