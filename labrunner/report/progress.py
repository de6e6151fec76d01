"""Progress: the callbacks long work reports through, so the work never imports the display."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Progress:
    """Callbacks the CLI's progress display implements; the default does nothing."""

    start: Callable[[str, int], None] = lambda description, total: None
    advance: Callable[[str], None] = lambda description: None
    done: Callable[[], None] = lambda: None
