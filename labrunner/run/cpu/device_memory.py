"""The CPU backend's device memory: every buffer a kernel is handed in a mapping of its own, with
inaccessible guards around it.

On a GPU a read or write outside every allocation is an illegal address (the launch dies), and one
just past an allocation reads or writes whatever the allocator put there. On the CPU the buffers
used to be numpy arrays on the heap, so a wild access landed wherever the heap's layout of that
run put it: on another array (a wrong value), on a fiber stack's guard (a "stack overflow"), on
nothing (a crash), differently from run to run. Here every buffer's bytes end against
`GUARD_BYTES` of address space that is mapped but inaccessible, and as much lies before them, so
a kernel's access up to 32 GiB past either end of any buffer (any int index of a float4) faults,
on every run, at the same element; the fault names the buffer and the byte
(`out_of_bounds_message`). An inaccessible mapping costs address space only: no memory, and
nothing against the worker's RLIMIT_DATA, which counts writable mappings.

A buffer's bytes are the last of its pages but for the rounding to 256 bytes (the alignment
cudaMalloc gives), so an access within those few bytes after the end reads zeros or writes
unseen; a writable buffer's canary bands (truth/poison.py) catch those writes, as on the GPU.
"""

from __future__ import annotations

import ctypes
import mmap

import numpy as np
from numpy.typing import DTypeLike

GUARD_BYTES = 32 << 30
ALIGNMENT = 256
_PAGE = mmap.PAGESIZE
_PROT_NONE, _PROT_READ_WRITE = 0, 3
_MAP_PRIVATE_ANONYMOUS_NORESERVE = 0x02 | 0x20 | 0x4000
_MAP_FAILED = ctypes.c_void_p(-1).value

# The C library's own calls (already loaded: this opens no file, so it works in a sealed worker).
_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_mprotect = _libc.mprotect
_mprotect.restype = ctypes.c_int
_mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_munmap = _libc.munmap
_munmap.restype = ctypes.c_int
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


class GuardedMapping:
    """`nbytes` of zeroed memory, readable and writable, between two inaccessible guards; numpy
    reads it through `__array_interface__`, and the mapping lives as long as an array over it."""

    def __init__(self, nbytes: int):
        span = _round_up(max(nbytes, 1), ALIGNMENT)
        opened = _round_up(span, _PAGE)
        total = GUARD_BYTES + opened + GUARD_BYTES
        base = _mmap(None, total, _PROT_NONE, _MAP_PRIVATE_ANONYMOUS_NORESERVE, -1, 0)
        if base is None or base == _MAP_FAILED:
            raise MemoryError(f"the CPU backend cannot reserve {total} bytes of address space for a buffer")
        self.base: int = base
        self.total = total
        if _mprotect(base + GUARD_BYTES, opened, _PROT_READ_WRITE) != 0:
            _munmap(base, total)
            raise MemoryError(f"the CPU backend cannot map {opened} bytes for a buffer")
        self.start = base + GUARD_BYTES + opened - span
        self.nbytes = nbytes
        self.__array_interface__ = {
            "data": (self.start, False),
            "shape": (nbytes,),
            "typestr": "|u1",
            "version": 3,
        }

    def holds(self, address: int) -> bool:
        """The address is in this mapping: its bytes, or its guards."""
        return self.base <= address < self.base + self.total

    def __del__(self) -> None:
        _munmap(self.base, self.total)


def guarded_array(shape: tuple[int, ...] | int, dtype: DTypeLike) -> np.ndarray:
    """A zeroed array of this shape and dtype in a guarded mapping of its own."""
    element = np.dtype(dtype)
    count = int(np.prod(shape))
    raw = np.asarray(GuardedMapping(count * element.itemsize))
    return raw.view(element).reshape(shape)


def mapping_of(array: np.ndarray) -> GuardedMapping | None:
    """The guarded mapping an array (or a view of one) lives in, or None."""
    base: object = array
    while isinstance(base, np.ndarray):
        base = base.base
    return base if isinstance(base, GuardedMapping) else None


def out_of_bounds_message(address: int, write: bool, where: str, buffers: dict[str, np.ndarray]) -> str | None:
    """The fault at `address`, in words, where it lies in a guard of one of the launch's buffers
    (name -> the array the kernel was handed): which buffer, which byte of it. None elsewhere."""
    for name, array in buffers.items():
        mapping = mapping_of(array) if isinstance(array, np.ndarray) else None
        if mapping is None or not mapping.holds(address):
            continue
        at = address - array.ctypes.data
        if 0 <= at < array.nbytes:
            continue  # inside this view: a guard of another buffer in the same mapping, never the case here
        side = "before the start of" if at < 0 else "past the end of"
        element = at // array.itemsize
        return (
            f"out-of-bounds {'write to' if write else 'read of'} {name} in {where}: its byte {at} (element "
            f"{element}), {side} its {array.nbytes} bytes ({array.size} elements of {array.dtype}); on a GPU "
            f"such an access reads or writes another allocation's memory, or faults"
        )
    return None
