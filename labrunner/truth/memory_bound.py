"""The memory bound: the largest buffer the driver may build from what a student's file chose.

A submission's launch constants size things the driver allocates. Lab 3's partition size p writes
its cases' lengths (`"8p+3"` keys), so it sizes the K and V pages the driver fills and the partial
buffers it poisons; a tile size adds a case of `2 * tile + 1` rows (and, in lab 1, a `[32][T][T]`
workspace of that T). A constant near 2^31 would ask for terabytes. Each constant has an upper bound
of its own (`labrunner.labs`), and behind those stands this one, fixed before any file is read:
no buffer sized from a file's constants may hold more than `MAX_BUFFER_BYTES`.

Why 1 GiB: it is the most any file within its constants' bounds can ask for. The largest such buffer
is lab 3's partial output at the timing shape with the smallest partition (16 keys): `[64][32][2048][64]`
float32, exactly 1 GiB, on a GPU of 141 GB. Everything a case builds is smaller (at lab 3's largest
partition, 32,768 keys, its longest case holds 262,147 keys: 537 MB of K pages), so the CPU worker's
4 GiB data limit (`labrunner.run.sandbox`) holds a case's few buffers. The timed K and V of lab 3
(4.8 GB) are not sized by the file: they are the catalogue's shape, filled on the GPU.
"""

from __future__ import annotations

from labrunner.exit_codes import AttnlabError, ExitCode

MAX_BUFFER_BYTES = 1 << 30


class OverBound(AttnlabError):
    """A buffer sized from a file's constants past `MAX_BUFFER_BYTES`: the file asked for it, so the
    verdict is the compile gate's (exit 3). `what` names the buffer and where it is built."""

    def __init__(self, what: str, nbytes: int):
        super().__init__(
            f"{what} would hold {nbytes:,} bytes ({shown_bytes(nbytes)}), above the "
            f"{MAX_BUFFER_BYTES:,}-byte ({shown_bytes(MAX_BUFFER_BYTES)}) bound on any buffer "
            "a file's launch constants size",
            ExitCode.COMPILE_ERROR,
        )
        self.what = what
        self.nbytes = nbytes


def check_buffers(where: str, sizes: dict[str, int]) -> None:
    """Refuse (OverBound) the first of `sizes` (buffer name -> bytes) past the bound, before it is built."""
    for name, nbytes in sizes.items():
        if nbytes > MAX_BUFFER_BYTES:
            raise OverBound(f"{where}: buffer {name}", nbytes)


def shown_bytes(nbytes: int) -> str:
    """1073741824 -> "1.0 GiB": binary units, as memory is counted."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    value, unit = float(nbytes), 0
    while value >= 1024 and unit < len(units) - 1:
        value, unit = value / 1024, unit + 1
    return f"{nbytes} B" if unit == 0 else f"{value:.1f} {units[unit]}"
