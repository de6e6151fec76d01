"""What a worker printed (device printf, a compiler's words, a Python traceback), kept bounded.

The worker's stdout and stderr are one pipe that a thread in the driver drains as fast as the
worker writes, so the worker never blocks on it and no file grows on disk. The first
`KEEP_BYTES` are kept; the rest is counted and said ("... 89,412,000 more bytes not shown"), so
90 MB of printf costs the driver 64 KiB. What is kept is shown escaped (`untrusted_text.shown`):
it is read by people, never parsed.
"""

from __future__ import annotations

import os
import threading

from labrunner.run.untrusted_text import shown_lines

KEEP_BYTES = 64 * 1024


class CappedOutput:
    """Everything a worker (and any restart of it) wrote to stdout and stderr, first 64 KiB kept."""

    def __init__(self, keep: int = KEEP_BYTES):
        self.keep = keep
        self._kept = bytearray()
        self.dropped = 0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def pipe(self) -> int:
        """A new pipe whose read end is drained here; returns the write end for the worker's stdout."""
        read_end, write_end = os.pipe()
        thread = threading.Thread(target=self._drain, args=(read_end,), daemon=True, name="attnlab-kernel-output")
        thread.start()
        self._threads.append(thread)
        return write_end

    def _drain(self, fd: int) -> None:
        try:
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return
                with self._lock:
                    room = max(0, self.keep - len(self._kept))
                    self._kept += chunk[:room]
                    self.dropped += len(chunk) - min(room, len(chunk))
        finally:
            os.close(fd)

    def finish(self, timeout_s: float = 5.0) -> None:
        """Wait for the drains whose writers have all closed (the worker and all it started are gone)."""
        for thread in self._threads:
            thread.join(timeout_s)
        self._threads = [t for t in self._threads if t.is_alive()]

    def lines(self, limit: int = 20) -> list[str]:
        """At most `limit` lines, escaped, then what was left out."""
        with self._lock:
            text = self._kept.decode(errors="replace")
            dropped = self.dropped
        if not text and not dropped:
            return []
        lines = shown_lines(text.removesuffix("\n"))
        shown = lines[:limit]
        if len(lines) > limit:
            shown.append(f"... and {len(lines) - limit} more lines")
        if dropped:
            kept = f"{self.keep // 1024} KiB" if self.keep % 1024 == 0 else f"{self.keep} bytes"
            shown.append(f"... {dropped:,} more bytes not shown (the first {kept} are kept)")
        return shown
