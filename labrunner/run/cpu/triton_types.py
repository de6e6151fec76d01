"""Triton's type objects made once per shape while its interpreter runs a launch.

The interpreter runs a kernel's body as Python once per program, and every operation of it builds
new type objects through Triton's front end: a `tl.tensor` (whose shape is a `tl.tuple` of
`constexpr`s, each with a `constexpr_type`, and a `tuple_type` naming them all), a `block_type`
(its shape unwrapped, checked to be powers of two, and formatted into a name) and the numpy dtype of
each scalar type (`_get_np_dtype` builds a dict of twelve entries at every call). On a lab-3 starter's
case those constructors were a third of the run, for shapes that a kernel uses a handful of: the same
few answers computed hundreds of thousands of times.

`memoized_types` stands in for the three while a launch runs, giving objects equal attribute for
attribute to the ones the originals make: a shape met before takes its parts from a table, anything
else (a shape whose entries are not plain ints, a shape Triton refuses) goes to the original, which
raises as before. The tables live for one launch, with the patch.
"""

from __future__ import annotations

import builtins
import contextlib
import math
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def memoized_types(core: Any, interpreter: Any) -> Iterator[None]:
    """`core` is triton.language.core, `interpreter` triton.runtime.interpreter."""
    block_type, tensor, tl_tuple = core.block_type, core.tensor, core.tuple
    original_block_init, original_tensor_init = block_type.__init__, tensor.__init__
    original_np_dtype = interpreter._get_np_dtype
    blocks: dict[tuple[tuple[int, ...], str], tuple[tuple[list[Any], Any], int, str]] = {}
    shapes: dict[tuple[int, ...], tuple[list[Any], Any, Any]] = {}
    np_dtypes: dict[Any, Any] = {}

    def ints(shape: Any) -> tuple[int, ...] | None:
        # Only shapes of plain ints are memoized (a constexpr's __eq__ is not a value's). Triton's own
        # shapes are `tl.tuple`s: core.py's `tuple` is its class, not the builtin.
        values = shape.values if type(shape) is tl_tuple else shape
        if type(values) not in (builtins.list, builtins.tuple):
            return None
        key = builtins.tuple(values)
        return key if all(type(s) is int for s in key) else None

    def fresh(parts: tuple[list[Any], Any]) -> Any:
        # a new tl.tuple as tl.tuple(values) makes it (values copied, its type computed once)
        made = tl_tuple.__new__(tl_tuple)
        made.values = builtins.list(parts[0])
        made.type = parts[1]
        return made

    def block_init(self: Any, element_ty: Any, shape: Any) -> None:
        key = ints(shape)
        made = None if key is None else blocks.get((key, str(element_ty)))
        if made is None:
            original_block_init(self, element_ty, shape)
            if key is not None:
                blocks[(key, str(element_ty))] = ((self.shape.values, self.shape.type), self.numel, self.name)
            return
        self.element_ty = element_ty
        self.shape = fresh(made[0])
        self.numel, self.name = made[1], made[2]

    def tensor_init(self: Any, handle: Any, type: Any) -> None:  # Triton's own parameter name
        key = ints(type.shape) if type.is_block() else ()
        if key is None:
            original_tensor_init(self, handle, type)
            return
        parts = shapes.get(key)
        if parts is None:
            values = [core.constexpr(s) for s in key]
            parts = shapes[key] = (values, tl_tuple(values).type, core.constexpr(math.prod(key)))
        self.handle = handle
        self.type = type
        self.dtype = type.scalar
        self.numel = parts[2]
        self.shape = fresh((parts[0], parts[1]))

    def np_dtype(tt_dtype: Any) -> Any:
        if type(tt_dtype) is not core.dtype:  # pointers and blocks (unhashable) as before
            return original_np_dtype(tt_dtype)
        found = np_dtypes.get(tt_dtype)
        if found is None:
            found = np_dtypes[tt_dtype] = original_np_dtype(tt_dtype)
        return found

    block_type.__init__, tensor.__init__ = block_init, tensor_init
    interpreter._get_np_dtype = np_dtype
    try:
        yield
    finally:
        block_type.__init__, tensor.__init__ = original_block_init, original_tensor_init
        interpreter._get_np_dtype = original_np_dtype
