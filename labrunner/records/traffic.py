"""The lesson's HBM traffic model as a record: the shape of one attention call and the bytes it moves.

The model's arithmetic is the measuring stage's (`measure.traffic.traffic`); the profile's record holds
its result, and writes it with the shape's fields among its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labrunner.records.serialize import JsonRecord, key


@dataclass(frozen=True)
class TrafficShape(JsonRecord):
    """What the model needs: the shape of one attention call and the size of an element."""

    rows: int  # queries (N in the lesson; T in lab 1; C in lab 2)
    keys: int  # keys every query may see at most (N; T; P + C)
    query_heads: int = 32
    kv_heads: int = 8
    d_head: int = 64
    dtype_bytes: int = 4


@dataclass(frozen=True)
class Traffic(JsonRecord):
    shape: TrafficShape = field(metadata=key(inline=True))
    q_bytes: int
    kv_bytes: int  # K and V together
    out_bytes: int
    matrix_bytes: int  # one [heads][rows][keys] score matrix
    naive_bytes: int
    flash_bytes: int

    json_layout = ("shape", "q_bytes", "kv_bytes", "out_bytes", "matrix_bytes", "naive_bytes", "flash_bytes",
                   "naive_over_flash")  # fmt: skip

    @property
    def ratio(self) -> float:
        return self.naive_bytes / self.flash_bytes

    @property
    def naive_over_flash(self) -> float:
        return self.ratio
