"""Progress: the callbacks long work reports through, so the work never imports the display."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass
class Progress:
    """Callbacks the CLI's progress display implements; the default does nothing."""

    start: Callable[[str, int], None] = lambda description, total: None
    advance: Callable[[str], None] = lambda description: None
    done: Callable[[], None] = lambda: None
