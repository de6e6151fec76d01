"""Poison and canaries: how the driver tells never-written, out-of-bounds and wrong apart.

Every buffer a kernel may write (output, workspace) is filled with the poison pattern and
framed by guard bands holding the canary pattern. Both are quiet NaNs with distinctive
payloads, so a value a kernel computed can never be mistaken for either, and an element that
still holds the poison bit for bit after the launches was never written.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

POISON_BITS = 0x7FEDBEEF  # quiet NaN, payload "edbeef": the output before the kernel ran
# A workspace gets a poison of its own: on a CPU a NaN keeps its payload through arithmetic, so
# an output computed from an unwritten workspace value must not look like an unwritten output.
WORKSPACE_POISON_BITS = 0x7FEDF00D
CANARY_BITS = 0x7FCA11ED  # quiet NaN, payload "ca11ed": the guard bands either side
# The CPU backend fills every block's shared memory with this at the block's start (run/cpu/fiber.h
# writes the same bits). A value computed from it keeps the payload on x86, so an output that
# carries it read shared memory that no thread had written: a missing __syncthreads(), nearly always.
SHARED_POISON_BITS = 0x7FF00BAD
GUARD_ELEMENTS = 4096  # 16 KiB of canaries before and after every writable buffer


def poison_for(buffer: str) -> int:
    return POISON_BITS if buffer == "out" else WORKSPACE_POISON_BITS


def filled(count: int, bits: int) -> np.ndarray:
    return np.full(count, bits, dtype=np.uint32).view(np.float32)


def poisoned(shape: tuple[int, ...]) -> np.ndarray:
    return filled(int(np.prod(shape)), POISON_BITS).reshape(shape)


def never_written(out: np.ndarray) -> np.ndarray:
    """True where the element still holds the poison pattern, bit for bit."""
    return carries(out, POISON_BITS)


def carries(values: np.ndarray, bits: int) -> np.ndarray:
    """True where a float32 holds exactly this NaN: a poison itself, or a value computed from it."""
    carried: np.ndarray = np.ascontiguousarray(values).view(np.uint32) == bits
    return carried


@dataclass
class GuardDamage:
    """Canaries overwritten around one buffer: how many, and how far past each end."""

    buffer: str
    before: int  # elements written in the band before the buffer
    after: int  # elements written in the band after the buffer
    farthest_before: int  # 1 = the element just before element 0
    farthest_after: int  # 1 = the element just past the last one

    def describe(self, length: int) -> str:
        parts = []
        if self.after:
            parts.append(
                f"{self.after} element(s) past its end (up to {self.farthest_after} past element {length - 1})"
            )
        if self.before:
            parts.append(f"{self.before} element(s) before its start (up to {self.farthest_before} before element 0)")
        return f"out-of-bounds write to {self.buffer}: " + " and ".join(parts)


def inspect_guards(buffer: str, before_band: np.ndarray, after_band: np.ndarray) -> GuardDamage | None:
    """Compares the two guard bands (read back after the launches) with the canary pattern."""
    hit_before = np.flatnonzero(before_band.view(np.uint32) != CANARY_BITS)
    hit_after = np.flatnonzero(after_band.view(np.uint32) != CANARY_BITS)
    if hit_before.size == 0 and hit_after.size == 0:
        return None
    return GuardDamage(
        buffer=buffer,
        before=int(hit_before.size),
        after=int(hit_after.size),
        farthest_before=int(before_band.size - hit_before.min()) if hit_before.size else 0,
        farthest_after=int(hit_after.max() + 1) if hit_after.size else 0,
    )
