"""The worker's side of the timing sets: a few buffer slots, each refilled with a fresh set before every call.

The sets themselves are defined in `labrunner.truth.timing_sets`: set n of a round is made from
the round's secret key and n, so only the key crosses the pipe and the driver can make the same
set to check a call against. Here they are made on the GPU, by that module's CUDA twin, straight
into the buffers the kernel reads (about 8 million normals at lab 2's timing shape, some tens of
floating-point operations each), queued before the cache flush so the timed call finds none of
them in L2. It is never inside the timing events.

Sets are numbered in the order they are drawn, so no two calls of a round ever see the same one.
A comparison's baseline runs on the set its student just ran on (`refill`): made again from its
number, so whatever the student's kernel did to its inputs, the baseline reads the set itself.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from labrunner.measure.device import Device, DeviceArray, device_zeros
from labrunner.truth.timing_sets import CUDA_KERNEL, CUDA_SOURCE, check_key, make_set, set_shapes

if TYPE_CHECKING:
    import cupy

THREADS = 256
MAX_BLOCKS = 4096  # a grid-stride loop covers the rest
# A slot's buffers by the names the launches use (q, k, v, and a paged cache's blockTable and seqLens).
Slot = dict[str, DeviceArray]


class CudaSets:
    """Makes set n on the GPU, in place, with the CUDA twin of the numpy definition."""

    def __init__(self, device: Device | None, key: tuple[int, int], rows: int, prefix: int, pages: int | None = None):
        check_key(key)
        self.key = key
        self.rows, self.prefix = rows, prefix
        self._kernel = timing_set_kernel()

    def fill(self, buffers: Slot, number: int) -> None:
        q_count, kv_count = buffers["q"].size, buffers["k"].size
        blocks = (q_count + 2 * kv_count) // 4
        grid = min(MAX_BLOCKS, -(-blocks // THREADS))
        self._kernel(
            (grid,),
            (THREADS,),
            (
                buffers["q"],
                buffers["k"],
                buffers["v"],
                np.uint64(q_count),
                np.uint64(kv_count),
                np.uint64(self.key[0]),
                np.uint64(self.key[1]),
                np.uint64(number),
            ),
        )


@cache
def timing_set_kernel() -> cupy.RawKernel:
    import cupy

    # --fmad=false as well as the intrinsics: no multiply and add may become one FMA
    return cupy.RawKernel(CUDA_SOURCE, CUDA_KERNEL, options=("--std=c++17", "--fmad=false"))


class NumpySets:
    """The definition itself, for a device whose buffers are numpy arrays (the tests' stand-in GPU)."""

    def __init__(self, device: Device | None, key: tuple[int, int], rows: int, prefix: int, pages: int | None = None):
        check_key(key)
        self.key = key
        self.rows, self.prefix, self.pages = rows, prefix, pages

    def fill(self, buffers: Slot, number: int) -> None:
        for name, values in make_set(self.key, number, self.rows, self.prefix, self.pages).items():
            buffers[name][...] = values


class InputPool:
    """`slots` buffer sets on the device and which numbered set each holds now.

    A request may name `pages` (a decode batch: K and V are that many pages of 16 rows) and `fixed`
    inputs (its block table and lengths): uploaded once and shared by every slot. They are the
    shape of the work, not its values: the values in the pages are every call's own."""

    def __init__(self, device: Device, request: dict[str, Any], slots: int):
        rows, prefix, pages = request["rows"], request["prefix"], request.get("pages")
        self.maker: CudaSets | NumpySets = CudaSets(device, tuple(request["key"]), rows, prefix, pages)
        fixed = {name: device.upload(array) for name, array in request.get("fixed", {}).items()}
        self.slots: list[Slot] = [
            {
                **{name: device_zeros(device, shape) for name, shape in set_shapes(rows, prefix, pages).items()},
                **fixed,
            }
            for _ in range(slots)
        ]
        self.holds: list[int | None] = [None] * slots
        self.drawn = 0

    def draw(self, slot: int) -> int:
        """A set no call has seen, into `slot`; returns its number."""
        number = self.drawn
        self.drawn += 1
        self.maker.fill(self.slots[slot], number)
        self.holds[slot] = number
        return number

    def refill(self, slot: int) -> None:
        """The set `slot` holds, made again: what a kernel changed in it is undone."""
        number = self.holds[slot]
        assert number is not None, "a slot is refilled only after a set was drawn into it"
        self.maker.fill(self.slots[slot], number)


def first_set(device: Device, request: dict[str, Any]) -> Slot:
    """Set 0 of a request, alone, on the device: the inputs of a run that is traced or profiled, not
    timed against a pool (the fill is the timing sets' generator, not a lab kernel)."""
    pool = InputPool(device, request, 1)
    pool.draw(0)
    return dict(pool.slots[0])
