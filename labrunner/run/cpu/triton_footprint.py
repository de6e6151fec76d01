"""The memory of a lockstep group of Triton programs: every access checked, every store undoable, and
any access that would make the group's result depend on the order of its programs found.

`triton_lockstep` runs a group of a launch's programs as one (a leading program axis on every value)
and, where their Python control flow parts, runs the parts one after another: the programs of a group
no longer run in the launch's order. That gives exactly what the one-program-at-a-time run gives as
long as no program of the group reads or writes what another program of the group writes, which is so
for a correct attention kernel (every program writes its own rows of `out` and reads only inputs).
`GroupMemory` stands in for Triton's `_interpreter` C++ module (its four memory functions, as
`_CheckedMemory` does for one program) while a group runs and keeps what settles that:

* the owner of every 4-byte word written in the group (a word two programs write, or one reads what
  another wrote, is a conflict);
* for every buffer the group reads, the lowest and highest word each program read (a program writing
  inside another's read range is a conflict: the range is conservative, so a kernel that reads and
  writes one buffer may be called conflicting where it is not, and then runs one program at a time);
* the old bytes under every store, so that the group's stores can be taken back.

Anything it cannot settle exactly abandons the group (`Abandoned`): an access outside the launch's
buffers (the one-program run then names it, program and element, as it always has), one access
spanning two buffers, an atomic (its result depends on the order of programs by definition), a
conflict. An abandoned group's stores are undone and its programs run again one at a time, in order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

WORD = 4  # bytes per tracked word: a word two programs touch, one of them writing, is a conflict
_NOBODY = -1
_NO_WORD = np.iinfo(np.int64).max
_NO_ADDRESS = np.iinfo(np.uint64).max
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class Abandoned(BaseException):
    """The group cannot give exactly what one program at a time gives, for `reason`: its stores are
    undone and its programs run alone. A BaseException, so that neither the interpreter (which wraps every
    Exception of a kernel's) nor a kernel's own `except Exception` stops it; `GroupMemory.abandoned`
    keeps the reason even where a kernel's bare `except:` did."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class GroupMemory:
    """Triton's `_interpreter` module for one launch's lockstep groups (see the module's docstring).

    `spans` are the launch's buffers as (first byte's address, size in bytes). Each group starts with
    `begin_group(size)`; each run of some of its programs as one with `begin_run(members)` (the group
    positions of the run's programs, in the order of its program axis); `mark` and `undo_to` take back
    one run's stores, `undo_all` the group's, `end_group` keeps them."""

    def __init__(self, raw: Any, buffers: list[np.ndarray]):
        self._raw = raw
        self.buffers = buffers  # 1-D, C-contiguous
        self.spans = [(int(a.ctypes.data), int(a.nbytes)) for a in buffers]
        self.abandoned: str | None = None
        self._members = np.zeros(0, dtype=np.int64)
        self._size = 0
        self._owners: dict[int, np.ndarray] = {}  # buffer -> the group position that wrote each word
        self._read_ranges: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # buffer -> per program lo, hi
        self._undo: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # pointers, old values, mask

    # ------------------------------------------------------------------------------------ the group

    def begin_group(self, size: int) -> None:
        self._size = size
        self._owners.clear()
        self._read_ranges.clear()
        self._undo.clear()
        self.abandoned = None

    def begin_run(self, members: np.ndarray) -> None:
        self._members = np.asarray(members, dtype=np.int64)

    def mark(self) -> int:
        return len(self._undo)

    def undo_to(self, mark: int) -> None:
        """The stores since `mark` taken back, newest first. What they were recorded as touching stays
        recorded: the programs that made them make them again, and a record too many can only call a
        group conflicting, never let a conflict through."""
        while len(self._undo) > mark:
            pointers, old, mask = self._undo.pop()
            self._raw.store(pointers, old, mask)

    def undo_all(self) -> None:
        self.undo_to(0)

    def end_group(self) -> None:
        self._undo.clear()

    def _abandon(self, reason: str) -> None:
        self.abandoned = self.abandoned or reason
        raise Abandoned(reason)

    # --------------------------------------------------------------------------- Triton's interface

    def load(self, pointers: np.ndarray, mask: np.ndarray, other: np.ndarray, dtype: Any) -> Any:
        dtype = np.dtype(dtype)
        tracked = self._track(pointers, mask, dtype.itemsize, write=False)
        gathered = None if tracked is None else self._gathered(tracked, other, dtype)
        return self._raw.load(pointers, mask, other, dtype) if gathered is None else gathered

    def _gathered(self, tracked: tuple[int, np.ndarray, np.ndarray | None], other: Any, dtype: np.dtype) -> Any:
        """The load as numpy gathers it, where every active lane is a whole element of its one buffer: the
        raw module's loop costs tens of nanoseconds an element, a group's loads millions of them. The bits
        are moved as unsigned integers of the element's size (a NaN's payload, the poison's, is kept); the
        masked lanes take `other`'s. None where numpy cannot do exactly that (the raw load then does)."""
        buffer, addresses, active = tracked
        unsigned = _UNSIGNED.get(dtype.itemsize)
        other = np.asarray(other)
        if unsigned is None or other.dtype != dtype or other.size != addresses.size:
            return None
        start, nbytes = self.spans[buffer]
        offsets = (addresses - np.uint64(start)).view(np.int64)
        if active is not None:
            offsets = np.where(active, offsets, 0)
        if (offsets % dtype.itemsize).any():
            return None
        whole = self.buffers[buffer].view(np.uint8)[: nbytes - nbytes % dtype.itemsize].view(unsigned)
        got = whole[offsets // dtype.itemsize]
        if active is not None:
            got = np.where(active, got, other.reshape(active.shape).view(unsigned))
        return got.view(dtype).reshape(other.shape)

    def store(self, pointers: np.ndarray, values: np.ndarray, mask: np.ndarray) -> Any:
        values = np.asarray(values)
        self._track(pointers, mask, values.itemsize, write=True)
        active = np.ascontiguousarray(np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(pointers)))
        old = self._raw.load(pointers, active, np.zeros(np.shape(pointers), dtype=values.dtype), values.dtype)
        self._undo.append((pointers, old, active))
        return self._raw.store(pointers, values, mask)

    def atomic_cas(self, *args: Any) -> Any:
        self._abandon("an atomic operation (its result depends on the order of the programs)")

    def atomic_rmw(self, *args: Any) -> Any:
        self._abandon("an atomic operation (its result depends on the order of the programs)")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    # ----------------------------------------------------------------------------------- the checks

    def _track(
        self, pointers: np.ndarray, mask: np.ndarray | None, itemsize: int, write: bool
    ) -> tuple[int, np.ndarray, np.ndarray | None] | None:
        """Check one access of the run's programs (the leading axis of `pointers`) and record it: its
        buffer, its addresses and its active lanes (None: all), a row per program; None where no lane is
        active."""
        addresses = np.asarray(pointers)
        if addresses.dtype != np.uint64:
            addresses = addresses.astype(np.uint64)
        programs = len(self._members)
        if addresses.ndim == 0 or addresses.shape[0] != programs:
            self._abandon("an access without the group's program axis")
        addresses = addresses.reshape(programs, -1)
        active: np.ndarray | None = None
        if mask is not None:
            try:
                given = np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(pointers)).reshape(programs, -1)
            except ValueError:
                self._abandon("a mask of another shape than its pointers")
            if not given.any():
                return None
            active = None if given.all() else given
        # Each program's lowest and highest address: the access lies in one buffer when they all do.
        touches: np.ndarray
        if active is None:
            lowest, highest = addresses.min(axis=1), addresses.max(axis=1)
            touches = np.ones(programs, dtype=bool)
        else:
            lowest = np.where(active, addresses, np.uint64(_NO_ADDRESS)).min(axis=1)
            highest = np.where(active, addresses, np.uint64(0)).max(axis=1)
            touches = np.asarray(active.any(axis=1))
        buffer = self._buffer_of(int(lowest[touches][0]), itemsize)
        start, nbytes = self.spans[buffer]
        last = start + nbytes - itemsize
        if (lowest[touches] < np.uint64(start)).any() or (highest[touches] > np.uint64(last)).any():
            self._abandon("an access outside one buffer")  # the one-program run names it
        if write or buffer in self._owners:  # word by word: what was written, or may have been
            offsets = (addresses - np.uint64(start)).view(np.int64)
            low = offsets // WORD
            high = (offsets + (itemsize - 1)) // WORD
            if write:
                self._written(buffer, nbytes, low, high, active)
            else:
                self._read_written(buffer, low, high, active)
        if not write:  # what the run's programs read, as a range of words each
            lo = ((lowest - np.uint64(start)).view(np.int64)) // WORD
            hi = ((highest - np.uint64(start)).view(np.int64) + (itemsize - 1)) // WORD
            self._read(buffer, np.where(touches, lo, _NO_WORD), np.where(touches, hi, -1))
        return buffer, addresses, active

    def _buffer_of(self, address: int, itemsize: int) -> int:
        for index, (start, nbytes) in enumerate(self.spans):
            if nbytes >= itemsize and start <= address <= start + nbytes - itemsize:
                return index
        self._abandon("an access outside the launch's buffers")  # the one-program run names it
        raise AssertionError  # unreachable: _abandon raises

    def _lanes(self, words: np.ndarray, active: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The active lanes' words, flat, and the group position of the program of each."""
        if active is None:
            return words.reshape(-1), np.repeat(self._members, words.shape[1])
        rows = np.nonzero(active)[0]
        return words[active], self._members[rows]

    def _ranges(self, low: np.ndarray, high: np.ndarray, active: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Each of the run's programs' lowest and highest word in this access (none: an empty range)."""
        if active is None:
            return low.min(axis=1), high.max(axis=1)
        return np.where(active, low, _NO_WORD).min(axis=1), np.where(active, high, -1).max(axis=1)

    def _read_written(self, buffer: int, low: np.ndarray, high: np.ndarray, active: np.ndarray | None) -> None:
        """A read of a buffer the group has written: no word of it another program of the group wrote."""
        owners = self._owners[buffer]
        for span in range(int((high - low).max()) + 1):
            words, programs = self._lanes(np.minimum(low + span, high), active)
            found = owners[words]
            if ((found != _NOBODY) & (found != programs)).any():
                self._abandon("a program reads what another program of its group writes")

    def _read(self, buffer: int, lo: np.ndarray, hi: np.ndarray) -> None:
        ranges = self._read_ranges.get(buffer)
        if ranges is None:
            ranges = self._read_ranges[buffer] = (
                np.full(self._size, _NO_WORD, dtype=np.int64),
                np.full(self._size, -1, dtype=np.int64),
            )
        members = self._members  # each program of a run once
        ranges[0][members] = np.minimum(ranges[0][members], lo)
        ranges[1][members] = np.maximum(ranges[1][members], hi)

    def _written(self, buffer: int, nbytes: int, low: np.ndarray, high: np.ndarray, active: np.ndarray | None) -> None:
        ranges = self._read_ranges.get(buffer)
        if ranges is not None:  # inside what another program of the group read
            lo, hi = self._ranges(low, high, active)
            overlap = (ranges[0][None, :] <= hi[:, None]) & (lo[:, None] <= ranges[1][None, :])
            overlap[np.arange(len(self._members)), self._members] = False  # a program's own reads
            if overlap.any():
                self._abandon("a program writes what another program of its group reads")
        owners = self._owners.get(buffer)
        if owners is None:
            owners = self._owners[buffer] = np.full(-(-nbytes // WORD), _NOBODY, dtype=np.int64)
        for span in range(int((high - low).max()) + 1):
            words, programs = self._lanes(np.minimum(low + span, high), active)
            found = owners[words]
            if ((found != _NOBODY) & (found != programs)).any():
                self._abandon("two programs of a group write the same word")
            owners[words] = programs
            if (owners[words] != programs).any():  # two programs' lanes of this one store
                self._abandon("two programs of a group write the same word")
