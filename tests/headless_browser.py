"""Headless Chromium driven over the DevTools protocol on a pipe, with nothing but the standard library.

`--remote-debugging-pipe` makes Chromium read protocol commands from its fd 3 and write replies and
events to its fd 4, each message JSON ended by a NUL byte. No port is opened, so nothing else on the
machine can talk to it, and the test sees every event the page raises: an uncaught exception
(`Runtime.exceptionThrown`), a `console.error`, a Content-Security-Policy violation or any other error
the browser logs (`Log.entryAdded`), every request the page makes (`Network.requestWillBeSent`), and a
dialog an injected `alert()` would open (`Page.javascriptDialogOpening`).

The flags keep a headless run on a machine without a display, a GPU, a sandbox or a network quiet and
self-contained: no first-run work, no background fetches, a fresh profile folder every time.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
)
TIMEOUT_S = 20.0


def chromium_path() -> str | None:
    return shutil.which("chromium")


class Browser:
    """One Chromium and one page in it; `events` holds every event the page has raised so far."""

    def __init__(self, binary: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="attnlab-chromium-")
        to_browser, self._commands = os.pipe()
        self._replies, from_browser = os.pipe()
        # Moved up past 10 first, so placing them at 3 and 4 in the child cannot overwrite one another.
        high_in = fcntl.fcntl(to_browser, fcntl.F_DUPFD_CLOEXEC, 10)
        high_out = fcntl.fcntl(from_browser, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_browser)
        os.close(from_browser)

        def devtools_pipe() -> None:  # in the child, before exec: dup2 leaves 3 and 4 open across it
            os.dup2(high_in, 3)
            os.dup2(high_out, 4)

        self.process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=devtools_pipe,
            close_fds=False,
        )
        os.close(high_in)
        os.close(high_out)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)[
            "sessionId"
        ]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(f"{domain}.enable")

    # --- the protocol ---

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer over the DevTools pipe in time")
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                raise RuntimeError(f"Chromium closed the DevTools pipe (exit {self.process.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict[str, Any] | None = None, session: bool = True) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_for(self, method: str) -> dict[str, Any]:
        """The first event `method` not yet waited for (events seen meanwhile are kept)."""
        deadline = time.monotonic() + TIMEOUT_S
        for event in self.events:
            if event["method"] == method and not event.get("_seen"):
                event["_seen"] = True
                return event
        while True:
            event = self._message(deadline)
            if "method" in event:
                self.events.append(event)
                if event["method"] == method:
                    event["_seen"] = True
                    return event

    # --- what a test asks ---

    def open(self, path: Path) -> str:
        url = Path(path).resolve().as_uri()
        self.send("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")
        return url

    def evaluate(self, expression: str) -> Any:
        reply = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in reply:
            raise AssertionError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def errors(self) -> list[str]:
        """Every uncaught exception, console error and browser-logged error the page has raised."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                found.append(f"Uncaught {details.get('exception', {}).get('description') or details.get('text')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append("console.error: " + " ".join(str(a.get("value")) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(f"logged: {params['entry'].get('text')}")
            elif method == "Page.javascriptDialogOpening":
                found.append(f"a dialog opened: {params.get('message')}")
        return found

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def screenshot(self, path: Path, width: int = 1280) -> Path:
        """The whole page, `width` wide and as tall as it is, as a PNG at `path`."""
        self.evaluate("window.scrollTo(0, 0)")
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
        self.send("Emulation.setDeviceMetricsOverride", metrics)
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close", session=False)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._commands, self._replies):
            os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)
