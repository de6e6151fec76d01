"""The wire between the driver and a process that runs student code: a JSON header and raw numbers.

The driver never unpickles or evaluates anything a worker sends: a process that loaded a
student's file may have had its memory rewritten by it, so every byte it writes back is read as
hostile. A message is

    cookie (16 bytes; replies only) | header length (4 bytes, big-endian) | header (JSON) | buffers

The header is `{"body": ..., "buffers": [{"name", "dtype", "shape"}, ...]}`. The body is plain
JSON (dicts, lists, strings, numbers, booleans, null); wherever an array stands in it there is a
placeholder `{"$buffer": NAME}`, and NAME is the placeholder's own path in the body
(`outputs/out`, `bands/out/0`, `verified/student/3/2`), so a buffer cannot be declared in one
place and used in another. The buffers' bytes follow the header in the order declared, each
`prod(shape) * itemsize` bytes, C order, native byte order.

Before reading a single byte of a buffer the receiver checks the header: its size (at most
`HEADER_LIMIT`), every dtype against a short allow-list, and every buffer against what the driver
asked for (an `Expected`: the exact set of names with their dtypes and shapes for a case; a rule
for timing). Anything else is refused with a `WireError` that names the violation, so a reply
that claims a 100 GB buffer costs the driver nothing. Every read has a deadline.

The cookie is a random token the driver gives each worker when it starts. A reply starts with it,
and bytes before it are skipped (counted, up to `SKIP_LIMIT`): code that writes blindly into
the worker's file descriptors cannot inject a reply. Code that reads the cookie out of the
worker's memory can forge one, and gains nothing a kernel could not do: a reply only carries
numbers, which the driver checks against its own oracle.

Requests (driver to worker) use the same format; launches travel as tagged records
(`{"$launch": {...}}`) that only the worker's side turns back into `Launch` objects.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import struct
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from labrunner.labs.definition import Launch

DTYPES = ("float32", "float64", "int32", "uint32", "int64")
HEADER_LIMIT = 1 << 20  # bytes of JSON header: replies carry numbers as buffers, not as text
SKIP_LIMIT = 1 << 20  # bytes of junk skipped before a reply's cookie before the channel is refused
TEXT_LIMIT = 64 * 1024  # characters of any one string in a reply (an error's detail)
_LENGTH = struct.Struct(">I")

# A message's body: JSON (objects, lists, strings, numbers, booleans, null) with arrays standing in it.
# Its shape is each request's and reply's own (worker.py, worker_main.py): what crosses here is checked
# against the protocol, and the reader of each field checks the rest, so the type stops at JSON.
Message = dict[str, Any]
# One part of an encoded message: the header's bytes, or a buffer's array.
Part = bytes | np.ndarray
_CHUNK = 1 << 20


class WireError(Exception):
    """A message that breaks the protocol; the words name the violation."""


class WireClosed(WireError):
    """The other end closed the channel (the process died)."""


class WireTimeout(WireError):
    """No complete message before the deadline."""


@dataclass(frozen=True)
class BufferSpec:
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


@dataclass
class Expected:
    """What the receiver accepts: an exact table of buffers, or a test each buffer must pass.

    `exact`: every name in it must be declared with that dtype and shape, and no other name. A
    message with no buffers at all passes too (a failure reply carries none); the receiver then
    checks the body says it failed.
    `optional`: names of `exact` a message may leave out (an input the worker found unchanged).
    `fits`: for messages whose buffers vary (timing): called with each name and spec, True to accept.
    `max_bytes`, `max_buffers`: caps on the whole message.
    """

    exact: dict[str, BufferSpec] | None = None
    optional: frozenset[str] = frozenset()
    fits: Callable[[str, BufferSpec], bool] | None = None
    max_bytes: int = 1 << 34
    max_buffers: int = 4096

    def check(self, declared: dict[str, BufferSpec]) -> None:
        if len(declared) > self.max_buffers:
            raise WireError(f"{len(declared)} buffers declared, at most {self.max_buffers} expected")
        for name, spec in declared.items():
            if self.exact is not None:
                want = self.exact.get(name)
                if want is None:
                    raise WireError(f"buffer {name!r} was not asked for")
                if spec != want:
                    raise WireError(f"buffer {name!r} is {_said(spec)}, expected {_said(want)}")
            elif self.fits is None or not self.fits(name, spec):
                raise WireError(f"buffer {name!r} ({_said(spec)}) is not one this request asks for")
        if self.exact is not None and declared:
            missing = sorted(set(self.exact) - self.optional - set(declared))
            if missing:
                raise WireError(f"buffer {missing[0]!r} is missing from the reply")
        total = sum(spec.nbytes for spec in declared.values())
        if total > self.max_bytes:
            raise WireError(f"{total} bytes of buffers declared, at most {self.max_bytes} expected")


def _said(spec: BufferSpec) -> str:
    return f"{spec.dtype}{list(spec.shape)}"


NO_BUFFERS = Expected(exact={})
ANY_BUFFERS = Expected(fits=lambda name, spec: True)  # the worker's side: requests come from the driver


# -- encoding ----------------------------------------------------------------------------------
def encode(body: object, cookie: bytes = b"") -> list[Part]:
    """The message as a list of byte strings and arrays, ready for `write_message`."""
    buffers: list[tuple[str, np.ndarray]] = []
    tree = _to_tree(body, "", buffers)
    header = {"body": tree, "buffers": [{"name": n, "dtype": a.dtype.name, "shape": list(a.shape)} for n, a in buffers]}
    text = json.dumps(header, allow_nan=True, separators=(",", ":")).encode()
    if len(text) > HEADER_LIMIT:
        raise WireError(f"header of {len(text)} bytes exceeds the {HEADER_LIMIT}-byte limit")
    return [cookie + _LENGTH.pack(len(text)) + text, *(a for _, a in buffers)]


def _to_tree(value: object, path: str, buffers: list[tuple[str, np.ndarray]]) -> Any:
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        if array.dtype.name not in DTYPES:
            raise WireError(f"{path or 'the message'}: dtype {array.dtype.name} is not one of {', '.join(DTYPES)}")
        buffers.append((path, array))
        return {"$buffer": path}
    if isinstance(value, Launch):
        return {"$launch": _to_tree(asdict(value), path, buffers)}
    if isinstance(value, dict):
        tree: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str) or "/" in key or key.startswith("$"):
                raise WireError(
                    f"{path or 'the message'}: key {key!r} cannot travel (a string without '/' or a leading '$')"
                )
            tree[key] = _to_tree(item, f"{path}/{key}" if path else key, buffers)
        return tree
    if isinstance(value, (list, tuple)):
        return [_to_tree(item, f"{path}/{i}" if path else str(i), buffers) for i, item in enumerate(value)]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise WireError(f"{path or 'the message'}: a {type(value).__name__} cannot travel on the wire")


def write_message(fd: int, parts: list[Part], deadline: float | None = None) -> None:
    """Write every part; with a deadline the fd must be non-blocking and the write gives up at it."""
    for part in parts:
        view = part.data.cast("B") if isinstance(part, np.ndarray) else memoryview(part)
        while len(view):
            if deadline is not None:
                _wait(fd, select.POLLOUT, deadline, "sending a request")
            try:
                written = os.write(fd, view[:_CHUNK])
            except BlockingIOError:
                continue
            except BrokenPipeError:
                raise WireClosed("the other end closed the channel") from None
            view = view[written:]


# -- decoding ----------------------------------------------------------------------------------
class Reader:
    """The receiving end of a channel: the bytes read so far and where to wait for more."""

    def __init__(self, fd: int, cookie: bytes = b"", alive: Callable[[], bool] | None = None) -> None:
        self.fd = fd
        self.cookie = cookie
        # Whether the writer still runs: a process it started may hold the pipe open after it died,
        # and the death must not wait for the deadline to be seen.
        self.alive = alive
        self._pending = bytearray()
        self.skipped = 0  # bytes before a cookie, over the channel's life

    def read(self, expected: Expected, deadline: float | None, records: bool = False) -> Any:
        """One message's body, its buffers in place; raises WireError (or a subclass) on anything else."""
        if self.cookie:
            self._sync(deadline)
        (length,) = _LENGTH.unpack(self._take(_LENGTH.size, deadline))
        if length > HEADER_LIMIT:
            raise WireError(f"a header of {length} bytes was announced, at most {HEADER_LIMIT} are accepted")
        try:
            header = json.loads(self._take(length, deadline), object_pairs_hook=_no_duplicates)
        except (ValueError, UnicodeDecodeError) as exc:
            raise WireError(f"the header is not JSON ({exc})") from None
        except RecursionError:  # nested past the parser's depth: a worker that ran student code can send it
            raise WireError("the header is not JSON (nested too deep)") from None
        if (
            not isinstance(header, dict)
            or set(header) != {"body", "buffers"}
            or not isinstance(header["buffers"], list)
        ):
            raise WireError("the header is not {body, buffers}")
        declared: dict[str, BufferSpec] = {}
        for entry in header["buffers"]:
            name, spec = _buffer_spec(entry)
            if name in declared:
                raise WireError(f"buffer {name!r} is declared twice")
            declared[name] = spec
        expected.check(declared)
        arrays: dict[str, np.ndarray] = {}
        for name, spec in declared.items():
            array = np.empty(spec.shape, dtype=spec.dtype)
            self._fill(array.reshape(-1).view(np.uint8).data, deadline)
            arrays[name] = array
        used: set[str] = set()
        body = _from_tree(header["body"], "", arrays, used, records)
        if used != set(arrays):
            raise WireError(f"buffer {sorted(set(arrays) - used)[0]!r} is declared but stands nowhere in the body")
        return body

    def _sync(self, deadline: float | None) -> None:
        while True:
            at = self._pending.find(self.cookie)
            if at >= 0:
                self.skipped += at
                del self._pending[: at + len(self.cookie)]
                return
            keep = len(self.cookie) - 1  # a cookie may straddle two reads
            junk = max(0, len(self._pending) - keep)
            self.skipped += junk
            del self._pending[:junk]
            if self.skipped > SKIP_LIMIT:
                raise WireError(f"{self.skipped} bytes arrived that were not a reply")
            self._more(deadline)

    def _take(self, count: int, deadline: float | None) -> bytes:
        while len(self._pending) < count:
            self._more(deadline)
        taken = bytes(self._pending[:count])
        del self._pending[:count]
        return taken

    def _fill(self, view: memoryview, deadline: float | None) -> None:
        start = min(len(view), len(self._pending))
        view[:start] = self._pending[:start]
        del self._pending[:start]
        while start < len(view):
            self._wait(deadline)
            got = os.readv(self.fd, [view[start : start + _CHUNK]])
            if got == 0:
                raise WireClosed("the channel closed in the middle of a message")
            start += got

    def _wait(self, deadline: float | None) -> None:
        while self.alive is not None:
            slice_end = time.monotonic() + 0.25
            try:
                _wait(
                    self.fd,
                    select.POLLIN,
                    slice_end if deadline is None else min(deadline, slice_end),
                    "waiting for a reply",
                )
                return
            except WireTimeout:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                if not self.alive() and not select.select([self.fd], [], [], 0)[0]:
                    raise WireClosed("the process ended without closing the channel") from None
        _wait(self.fd, select.POLLIN, deadline, "waiting for a reply")

    def _more(self, deadline: float | None) -> None:
        self._wait(deadline)
        chunk = os.read(self.fd, 65536)
        if not chunk:
            raise WireClosed("the channel closed")
        self._pending += chunk


def _buffer_spec(entry: object) -> tuple[str, BufferSpec]:
    if not isinstance(entry, dict) or set(entry) != {"name", "dtype", "shape"}:
        raise WireError("a buffer entry is not {name, dtype, shape}")
    name, dtype, shape = entry["name"], entry["dtype"], entry["shape"]
    if not isinstance(name, str) or len(name) > 256:
        raise WireError("a buffer's name is not a short string")
    if dtype not in DTYPES:
        raise WireError(f"buffer {name!r}: dtype {str(dtype)[:40]!r} is not one of {', '.join(DTYPES)}")
    if (
        not isinstance(shape, list)
        or len(shape) > 8
        or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 40 for n in shape)
    ):
        raise WireError(f"buffer {name!r}: shape is not a list of at most 8 sizes")
    return name, BufferSpec(dtype, tuple(shape))


def _from_tree(value: Any, path: str, arrays: dict[str, np.ndarray], used: set[str], records: bool) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$buffer"}:
            name = value["$buffer"]
            if name != path or name not in arrays or name in used:
                raise WireError(f"{path or 'the body'}: a buffer placeholder that is not this place's own")
            used.add(name)
            return arrays[name]
        if set(value) == {"$launch"} and records:
            fields = _from_tree(value["$launch"], path, arrays, used, records)
            return Launch(
                fields["kernel"],
                tuple(fields["grid"]),
                tuple(fields["block"]),
                fields["shared_bytes"],
                tuple(fields["args"]),
            )
        if any(key.startswith("$") or "/" in key for key in value):
            raise WireError(f"{path or 'the body'}: a key that no message has")
        return {
            key: _from_tree(item, f"{path}/{key}" if path else key, arrays, used, records)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [
            _from_tree(item, f"{path}/{i}" if path else str(i), arrays, used, records) for i, item in enumerate(value)
        ]
    if isinstance(value, str) and len(value) > TEXT_LIMIT:
        return value[:TEXT_LIMIT] + f" ... ({len(value) - TEXT_LIMIT} more characters not shown)"
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key appears twice")
    return dict(pairs)


def _wait(fd: int, event: int, deadline: float | None, doing: str) -> None:
    poller = select.poll()
    poller.register(fd, event)
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if poller.poll(None if left is None else int(math.ceil(left * 1000))):
            return
        if deadline is not None and time.monotonic() >= deadline:
            raise WireTimeout(f"no progress {doing} before the deadline")


@dataclass
class Channel:
    """A driver's two ends to one process: requests out, replies in."""

    request_fd: int
    reply_fd: int
    cookie: bytes
    alive: Callable[[], bool] | None = None
    reader: Reader = field(init=False)

    def __post_init__(self) -> None:
        os.set_blocking(self.request_fd, False)
        self.reader = Reader(self.reply_fd, self.cookie, self.alive)

    def send(self, body: Message, deadline: float) -> None:
        write_message(self.request_fd, encode(body), deadline)

    def receive(self, expected: Expected, deadline: float) -> Any:
        return self.reader.read(expected, deadline)

    def close(self) -> None:
        for fd in (self.request_fd, self.reply_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
