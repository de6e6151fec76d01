"""A launch's Triton programs run in lockstep groups: many programs as one, on a leading program axis.

Triton's interpreter runs a kernel's Python once per program, and that Python, not the arithmetic, is
most of a CPU grade: every `+` of a lab-2 starter goes through Triton's front end (type checks,
broadcasting, a new tensor and its type) for a 16 x 64 tile. The programs of a launch run the same
Python, so a group of them can run it once, each value a numpy array with one row per program: the
front end's work is paid once per group instead of once per program, and numpy does the rows together.

How a group runs (`run_grid`):

* Groups are consecutive programs in the launch's order (x slowest, z fastest, as the interpreter
  runs them), so groups run in that order and a group need only be exact within itself.
* The builder's operations take the program axis (`_ops`): elementwise ones as they are, the shape
  operations (splat, reshape, broadcast, expand_dims, trans, cat, join, split, reductions, scans) with
  their axes moved by one, `tl.dot` one program's matrices at a time (the same BLAS call on the same
  layout as alone), `tl.program_id` one value per row, block pointers spread per program. An operation
  this module does not make for a group (tensor descriptors, gathers, histograms) makes a plain handle,
  and a plain handle made during a group abandons it: nothing is guessed.
* Where the programs' Python parts (a loop bound, an `if`, anything that asks a tensor for one Python
  value) and their values differ, the run stops (`_Parted`), its stores are undone, and each set of
  programs that agreed runs again from the start as a group of its own; so a part can part again.
* Memory is `GroupMemory` (triton_footprint.py): every access checked against the launch's buffers,
  every store undoable, any access that would make the group depend on its programs' order (two
  programs touching one word, one of them writing) found.
* Anything that only one program at a time does exactly abandons the group and undoes its stores. An
  atomic, a print, a conflict or an operation the groups do not make: the group's programs, and the
  rest of the launch's (the same thing would abandon every group), run one at a time, in order,
  through the interpreter's own path. An error or an access outside the buffers: the group's first
  program runs alone, the rest in halves, first half first, down to the one program that fails, which
  runs alone and raises as it always has, naming the same program and element, after every program
  before it ran exactly as in order.

What a group gives is bit for bit what the programs give alone (tests/test_triton_lockstep.py holds the
two paths together): elementwise numpy is exact per element whatever the layout, a reduction along an
axis adds in the same order for each row, and a dot's matrices meet BLAS one program at a time.
What it does not repeat per program is the kernel's Python itself: Python that keeps state between
programs (a kernel mutating a module it can reach) sees one run per group.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import dataclasses
import operator
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import numpy as np

from labrunner.run.cpu.triton_footprint import Abandoned, GroupMemory

__all__ = ["Abandoned", "Lockstep", "LockstepStats", "lanes", "matmul", "run_grid"]

MOST_PROGRAMS = 1024  # programs in one group at most
# Elements of one value across a group (16 MiB of float32): a group's size is this over the largest
# per-program value its launch has made so far (a launch's first group, before any is known, is the
# largest), and a run whose value reaches twice this parts in two halves there.
GROUP_ELEMENTS = 1 << 22


@dataclasses.dataclass
class LockstepStats:
    """How a module's launches ran: programs in lockstep groups, programs alone, and why groups were
    abandoned (for tests and for a person reading why a kernel is slow on the CPU)."""

    grouped: int = 0
    alone: int = 0
    runs: int = 0
    abandoned: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


class _Parted(BaseException):
    """The run's programs asked one Python value of a tensor and got different ones: `keys` holds each
    program's (a row per program of the run)."""

    def __init__(self, keys: np.ndarray):
        super().__init__("the programs' values part")
        self.keys = keys


@dataclasses.dataclass
class _Run:
    """One run of some of a group's programs as one."""

    ids: np.ndarray  # (programs, 3): each program's grid index
    plain: int = 0  # > 0 while this module's own code makes plain TensorHandles on purpose
    parted: np.ndarray | None = None  # the keys of a parting, kept where a kernel caught _Parted
    abandoned: str | None = None  # why the run cannot stand, kept where a kernel caught Abandoned
    biggest: int = 1  # the most elements of one value of one program seen in this run

    @property
    def size(self) -> int:
        return int(self.ids.shape[0])


_active: list[_Run] = []  # the run in progress, if any (a list: set and cleared without `global`)


def lanes() -> int | None:
    """The number of programs of the lockstep run in progress, or None where one program runs alone."""
    return _active[0].size if _active else None


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`np.matmul(a, b, dtype=float32)`; in a lockstep run one program's matrices at a time, so that each
    product is the very BLAS call, on the same layout, that the program alone makes."""
    if not _active:
        product: np.ndarray = np.matmul(a, b, dtype=np.float32)
        return product
    return np.stack([np.matmul(a[g], b[g], dtype=np.float32) for g in range(a.shape[0])])


def _refuse(reason: str) -> NoReturn:
    if _active:  # kept, where a kernel's bare `except:` stops the exception
        _active[0].abandoned = _active[0].abandoned or reason
    raise Abandoned(reason)


# ------------------------------------------------------------------------------------------ the values


class _Machinery:
    """Triton's interpreter pieces the runs use, found once per process (the interpreter module is
    untyped here, as in triton_module)."""

    def __init__(self, interpreter: Any):
        self.interpreter = interpreter
        self.builder = interpreter.interpreter_builder
        self.tl = interpreter.tl
        handle = interpreter.TensorHandle

        class Lanes(handle):  # type: ignore[misc, valid-type]
            """A value of every program of a run: data[g] is program g's data as it would be alone."""

            def clone(self) -> Any:
                return Lanes(self.data.copy(), self.dtype)

        self.Lanes = Lanes
        self.handle = handle
        self.reduce_ops, self.scan_ops = _reductions(interpreter, self)
        self.block_pointers_alone = interpreter.BlockPointerHandle.materialize_pointers

    def lanes(self, data: np.ndarray, dtype: Any) -> Any:
        run = _active[0]
        if data.size > run.biggest * run.size:
            run.biggest = data.size // run.size
            if data.size >= 2 * GROUP_ELEMENTS and run.size > 1:  # too large a group for this kernel: halves
                _agreed(np.arange(run.size) >= run.size // 2)
        return self.Lanes(data, dtype)

    def stacked(self, data: np.ndarray, dtype: Any) -> Any:
        """One program's value as every program's, each row a contiguous copy (as it would be alone)."""
        size = _active[0].size
        return self.lanes(np.ascontiguousarray(np.broadcast_to(data, (size, *data.shape))), dtype)


@contextlib.contextmanager
def _plain() -> Iterator[None]:
    """Plain handles made by the interpreter's own operations on purpose (wrapped as lanes after)."""
    run = _active[0]
    run.plain += 1
    try:
        yield
    finally:
        run.plain -= 1


def _reductions(interpreter: Any, m: _Machinery) -> tuple[type, type]:
    """ReduceOps and ScanOps for lanes: the interpreter's own numpy reductions with the axis moved past
    the program axis; a reduction with a combine function of its own (run element by element by the
    interpreter) abandons the group."""
    tl = interpreter.tl

    def as_tensor(ret: np.ndarray, dtype: Any) -> Any:
        np_dtype = interpreter._get_np_dtype(dtype)
        shape = tuple(ret.shape[1:])
        if shape:
            return tl.core.tensor(m.lanes(ret.astype(np_dtype), dtype.scalar), tl.block_type(dtype, list(shape)))
        return tl.core.tensor(m.lanes(np.asarray(ret).astype(np_dtype).reshape(-1, 1), dtype.scalar), dtype)

    def moved(axis: int) -> int:
        return axis + 1 if axis >= 0 else axis

    class LanesReduce(interpreter.ReduceOps):
        def to_tensor(self, ret: Any, dtype: Any) -> Any:
            return as_tensor(ret, dtype)

        def _reduced(self, data: np.ndarray, op: Callable[..., Any], flat_only: bool) -> Any:
            if self.axis is None:
                if flat_only:  # argmin, argmax: an index into the flattened block
                    found = op(data.reshape(data.shape[0], -1), axis=1)
                    return found.reshape((-1,) + (1,) * (data.ndim - 1)) if self.keep_dims else found
                return op(data, axis=tuple(range(1, data.ndim)), keepdims=self.keep_dims)
            return op(data, axis=moved(self.axis), keepdims=self.keep_dims)

        def min_max(self, input: Any, val_reduce_op: Any, idx_reduce_op: Any = None) -> Any:
            input = input[0] if isinstance(input, tuple) else input
            data = input.handle.data
            value = index = None
            if val_reduce_op:
                value = self.to_tensor(self._reduced(data, val_reduce_op, False), input.dtype)
            if idx_reduce_op:
                index = self.to_tensor(self._reduced(data, idx_reduce_op, True), tl.int32)
            if value is not None and index is not None:
                return value, index
            return value if value is not None else index

        def sum(self, input: Any) -> Any:
            return self.to_tensor(self._reduced(input.handle.data, np.sum, False), input.dtype)

        def generic_reduce(self, input: Any) -> Any:
            return _refuse("a reduction with a combine function of its own")

    class LanesScan(interpreter.ScanOps):
        def to_tensor(self, ret: Any, dtype: Any) -> Any:
            return as_tensor(ret, dtype)

        def apply_impl(self, input: Any) -> Any:
            scan: Callable[..., np.ndarray]
            if self.combine_fn == tl.standard._sum_combine:
                scan = np.cumsum
            elif self.combine_fn == tl.standard._prod_combine:
                scan = np.cumprod
            else:
                return _refuse("a scan with a combine function of its own")
            axis = moved(self.axis)
            arg = input[0]
            if self.reverse:
                arg = self.to_tensor(np.flip(arg.handle.data, axis=axis), arg.dtype)
            result = self.to_tensor(scan(arg.handle.data, axis=axis), dtype=arg.dtype)
            if self.reverse:
                result.handle.data = np.flip(result.handle.data, axis=axis)
            return [result]

    return LanesReduce, LanesScan


# --------------------------------------------------------------------------------------- the operations


# Complex by design: a table of the interpreter's operations, built once.
def _ops(m: _Machinery) -> dict[str, Callable[..., Any]]:  # noqa: C901
    """The builder's operations for a lockstep run, by name (set on the builder instance for the run)."""
    builder, interpreter, tl = m.builder, m.interpreter, m.tl
    cls = type(builder)
    ops: dict[str, Callable[..., Any]] = {}

    def wrapped(name: str) -> Callable[..., Any]:
        # Operations that work on each element whatever the shape: the interpreter's own, on lanes whose
        # per-program shapes have one rank (as Triton's front end makes them), the result taken as lanes.
        original = getattr(cls, name)

        def run(*args: Any) -> Any:
            ranks = {a.data.ndim for a in args if isinstance(a, m.handle)}
            if len(ranks) > 1:
                _refuse(f"operands of different ranks in {name}")
            with _plain():
                result = original(builder, *args)
            if type(result) is m.handle:
                result.__class__ = m.Lanes
                m.lanes(result.data, result.dtype)  # counted toward the group's size
            return result

        return run

    for name in (
        "binary_op", "ternary_op", "unary_op", "cast_impl", "create_fp_to_fp", "create_bitcast",
        "create_int_to_ptr", "create_ptr_to_int", "create_idiv", "create_ashr", "create_umulhi", "create_fma",
        "create_fabs", "create_erf", "create_rsqrt", "create_addptr", "create_masked_load", "create_masked_store",
        "create_join", "create_dot", "create_tensor_pointer_load", "create_tensor_pointer_store",
    ):  # fmt: skip
        ops[name] = wrapped(name)

    def uniform(name: str) -> Callable[..., Any]:
        # Values every program has alike (constants, ranges, the grid's size): one row per program.
        original = getattr(cls, name)

        def run(*args: Any) -> Any:
            with _plain():
                made = original(builder, *args)
            return m.stacked(made.data, made.dtype)

        return run

    for name in ("get_null_value", "get_all_ones_value", "create_make_range", "create_get_num_programs"):
        ops[name] = uniform(name)
    for kind in ("int1", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64"):
        ops[f"get_{kind}"] = uniform(f"get_{kind}")
    for kind in ("fp16", "fp32", "fp64"):
        ops[f"get_{kind}"] = uniform(f"get_{kind}")

    def program_id(axis: int) -> Any:
        return m.lanes(np.ascontiguousarray(_active[0].ids[:, axis : axis + 1], dtype=np.int32), tl.int32)

    def load(ptr: Any, _0: Any, _1: Any, is_volatile: Any) -> Any:
        mask = m.lanes(np.ones_like(ptr.data, dtype=bool), tl.int1)
        return builder.create_masked_load(ptr, mask, None, _0, _1, is_volatile)

    def store(ptr: Any, val: Any, _0: Any, _1: Any) -> Any:
        mask = m.lanes(np.ones_like(ptr.data, dtype=bool), tl.int1)
        return builder.create_masked_store(ptr, val, mask, None, None)

    def splat(ret_ty: Any, arg: Any) -> Any:
        # np.full(shape, value, dtype) for each program: copyto with unsafe casting, as np.full does
        shape = tuple(ret_ty.shape)
        rows = arg.data.reshape(arg.data.shape[0], -1)[:, :1]
        made = np.empty((rows.shape[0], *shape), dtype=interpreter._get_np_dtype(arg.dtype))
        np.copyto(made, rows.reshape((-1,) + (1,) * len(shape)), casting="unsafe")
        return m.lanes(made, arg.dtype.scalar)

    def unsplat(arg: Any) -> Any:
        rows = arg.data.reshape(arg.data.shape[0], -1)[:, :1]
        made = np.empty(rows.shape, dtype=interpreter._get_np_dtype(arg.dtype))
        np.copyto(made, rows, casting="unsafe")
        return m.lanes(made, arg.dtype.scalar)

    def reshape(arg: Any, shape: Any, allow_reorder: Any) -> Any:
        return m.lanes(arg.data.reshape((arg.data.shape[0], *shape)), arg.dtype.scalar)

    def trans(arg: Any, perm: Any) -> Any:
        return m.lanes(np.transpose(arg.data, (0, *(p + 1 for p in perm))), arg.dtype.scalar)

    def expand_dims(arg: Any, axis: int) -> Any:
        return m.lanes(np.expand_dims(arg.data, axis + 1 if axis >= 0 else axis), arg.dtype.scalar)

    def broadcast(arg: Any, shape: Any) -> Any:
        if arg.data.ndim != len(shape) + 1:
            _refuse("a broadcast across ranks")
        return m.lanes(np.broadcast_to(arg.data, (arg.data.shape[0], *shape)), arg.dtype.scalar)

    def cat(lhs: Any, rhs: Any) -> Any:
        return m.lanes(np.concatenate([lhs.data, rhs.data], axis=1), lhs.dtype.scalar)

    def split(val: Any) -> Any:
        return (m.lanes(val.data[..., 0], val.dtype.scalar), m.lanes(val.data[..., 1], val.dtype.scalar))

    def refused(what: str) -> Callable[..., Any]:
        return lambda *args, **kwargs: _refuse(what)

    ops.update(
        create_get_program_id=program_id,
        create_load=load,
        create_store=store,
        create_splat=splat,
        create_unsplat=unsplat,
        create_reshape=reshape,
        create_trans=trans,
        create_expand_dims=expand_dims,
        create_broadcast=broadcast,
        create_cat=cat,
        create_split=split,
        create_print=refused("a print (each program prints its own line, in order)"),
        create_atomic_cas=refused("an atomic operation (its result depends on the order of the programs)"),
        create_atomic_rmw=refused("an atomic operation (its result depends on the order of the programs)"),
    )
    return ops


def _block_pointers(pointer: Any, boundary_check: Any) -> tuple[Any, np.ndarray]:
    """BlockPointerHandle.materialize_pointers for a run: each program's base, offsets, strides and shape
    (a row each) spread over its block, step for step as the interpreter does for one program."""
    m = _machinery[0]
    base = pointer.base.data
    programs, block = base.shape[0], tuple(pointer.block_shape)
    per_row = (programs,) + (1,) * len(block)  # a program's scalar, against its block
    itemsize = pointer.base.get_element_ty().primitive_bitwidth // 8
    pointers = np.broadcast_to(base.reshape(per_row), (programs, *block))
    masks = np.ones((programs, *block), dtype=bool)
    for dim in range(len(block)):
        spread = [programs] + [1] * len(block)
        spread[dim + 1] = block[dim]
        offsets = (pointer.offsets[dim].data.reshape(programs, 1) + np.arange(block[dim])).reshape(spread)
        pointers = pointers + (itemsize * offsets * pointer.strides[dim].data.reshape(per_row)).astype(np.uint64)
        if dim in boundary_check:
            masks = masks & (offsets < pointer.shape[dim].data.reshape(per_row)) & (offsets >= 0)
    return m.handle(pointers, pointer.base.dtype.scalar), masks


# ---------------------------------------------------------------------- Python values asked of tensors


def _one_value(tensor: Any) -> np.ndarray:
    """Each program's one element (a row per program), for a scalar tensor."""
    data = np.asarray(tensor.handle.data)
    return data.reshape(data.shape[0], -1)


def _agreed(keys: np.ndarray) -> Any:
    """The programs' common value, or a parting of the run where they differ."""
    if keys.shape[0] > 1 and not (keys == keys[0]).all():
        run = _active[0]
        run.parted = keys
        raise _Parted(keys)
    return keys[0]


def tensor_index(tensor: Any, alone: Callable[[Any], int]) -> int:
    """`tensor.__index__` (a loop's bound): one program's as `alone` makes it, else the run's common one."""
    if not _active:
        return alone(tensor)
    values = _one_value(tensor)
    if values.shape[1] != 1:
        shape = np.asarray(tensor.handle.data).shape[1:]
        raise TypeError(f"a tensor of shape {shape} cannot be an index; only a scalar can")
    return operator.index(_agreed(values[:, 0]))


def tensor_bool(tensor: Any, alone: Callable[[Any], bool]) -> bool:
    """`tensor.__bool__` (an `if`, a `while`): as the interpreter has it (a block is True), per program."""
    if not _active:
        return alone(tensor)
    values = _one_value(tensor)
    if values.shape[1] != 1:
        return True
    return bool(_agreed(values[:, 0].astype(bool)))


def tensor_text(tensor: Any, alone: Callable[[Any], str]) -> str:
    """`str` and `repr` of a tensor: one program's text; a run has no one text to give."""
    if not _active:
        return alone(tensor)
    return _refuse("a tensor shown as text (each program shows its own)")


def tensor_transposed(tensor: Any, alone: Callable[[Any], Any]) -> Any:
    """`tensor.T`: the interpreter reverses the axes of the data; for a run, of each program's."""
    if not _active:
        return alone(tensor)
    m = _machinery[0]
    data = tensor.handle.data
    handle = m.lanes(np.transpose(data, (0, *reversed(range(1, data.ndim)))), tensor.handle.dtype)
    shape = list(tensor.type.shape)
    shape[-1], shape[-2] = shape[-2], shape[-1]
    return m.tl.core.tensor(handle, m.tl.core.block_type(tensor.dtype, shape))


# ------------------------------------------------------------------------------------------- the runs

_machinery: list[_Machinery] = []


def _machinery_for(interpreter: Any) -> _Machinery:
    if not _machinery or _machinery[0].interpreter is not interpreter:
        _machinery[:] = [_Machinery(interpreter)]
    return _machinery[0]


@dataclasses.dataclass
class Lockstep:
    """What `run_grid` needs of a launch: Triton's interpreter module, the group memory for the launch's
    buffers, and the stats to count in."""

    interpreter: Any
    memory: GroupMemory
    stats: LockstepStats
    biggest: int = 1  # the most elements of one value of one program the launch's groups have made
    ops: dict[str, Callable[..., Any]] = dataclasses.field(default_factory=dict)  # made at the first run


@contextlib.contextmanager
def _running(lock: Lockstep, run: _Run) -> Iterator[None]:
    """The builder, the memory, the reductions and print made for lanes, for one run; all put back."""
    m = _machinery_for(lock.interpreter)
    interpreter, builder, tl = m.interpreter, m.builder, m.tl
    if not lock.ops:  # once per launch: the builder's class carries the launch's own dot
        lock.ops = _ops(m)
    post_init = m.handle.__post_init__

    def checked_post_init(handle: Any) -> None:
        if type(handle) is not m.Lanes and _active and _active[0].plain == 0:
            _refuse("an operation the lockstep groups do not make")
        post_init(handle)

    def no_print(*args: Any, **kwargs: Any) -> None:
        _refuse("a print (each program prints its own line, in order)")

    saved = {
        (interpreter.BlockPointerHandle, "materialize_pointers"): m.block_pointers_alone,
        (interpreter, "_interpreter"): interpreter._interpreter,
        (interpreter, "ReduceOps"): interpreter.ReduceOps,
        (interpreter, "ScanOps"): interpreter.ScanOps,
        (m.handle, "__post_init__"): post_init,
        (builtins, "print"): builtins.print,
    }
    for lang in (tl, tl.core):
        if hasattr(lang, "static_print"):
            saved[(lang, "static_print")] = lang.static_print
    for name, op in lock.ops.items():
        setattr(builder, name, op)
    interpreter._interpreter = lock.memory
    interpreter.BlockPointerHandle.materialize_pointers = _block_pointers
    interpreter.ReduceOps, interpreter.ScanOps = m.reduce_ops, m.scan_ops
    m.handle.__post_init__ = checked_post_init
    builtins.print = no_print
    for lang in (tl, tl.core):
        if (lang, "static_print") in saved:
            lang.static_print = no_print
    _active[:] = [run]
    try:
        yield
    finally:
        _active.clear()
        for name in lock.ops:
            with contextlib.suppress(AttributeError):
                delattr(builder, name)
        for (owner, name), value in saved.items():
            setattr(owner, name, value)


def _holds_tensor(value: Any, tensor: type) -> bool:
    if isinstance(value, tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_holds_tensor(v, tensor) for v in value)
    return False


def _lanes_of(args: dict[str, Any], m: _Machinery, size: int) -> dict[str, Any] | None:
    """The kernel's arguments with a row per program for its tensors (the lab's pointers and ints; the
    rest, constexprs, are the one object every program is given), or None where a tensor comes in a
    form the runs do not take."""
    made = {}
    for name, value in args.items():
        if isinstance(value, m.tl.core.tensor) and type(value.handle) is m.handle:
            data = np.ascontiguousarray(np.broadcast_to(value.handle.data, (size, *value.handle.data.shape)))
            made[name] = m.tl.core.tensor(m.Lanes(data, value.handle.dtype), value.type)
        elif _holds_tensor(value, m.tl.core.tensor):
            return None
        else:
            made[name] = value
    return made


def _parts(keys: np.ndarray, members: np.ndarray) -> list[np.ndarray]:
    """The run's programs grouped by their key, each group in the run's order, groups by first program."""
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    return [members[inverse == label] for label in np.argsort(first, kind="stable")]


def _run_group(lock: Lockstep, fn: Callable[..., Any], args: dict[str, Any], ids: np.ndarray) -> str | None:
    """The programs `ids` (consecutive in the launch's order) as lockstep runs; None when they ran, else
    why not (their stores then undone, every one)."""
    m = _machinery_for(lock.interpreter)
    memory = lock.memory
    memory.begin_group(len(ids))
    pending: collections.deque[np.ndarray] = collections.deque([np.arange(len(ids))])
    while pending:
        members = pending.popleft()
        arguments = _lanes_of(args, m, len(members))
        if arguments is None:
            memory.undo_all()
            return "an argument of a kind the lockstep groups do not take"
        run = _Run(ids[members])
        memory.begin_run(members)
        mark = memory.mark()
        failure: str | None = None
        lock.stats.runs += 1
        with _running(lock, run):
            try:
                fn(**arguments)
            except _Parted:
                pass
            except Abandoned as abandoned:
                failure = abandoned.reason
            except BaseException as error:  # one program at a time raises it as it should
                failure = f"an error ({type(error).__name__}): one program at a time names it"
        failure = run.abandoned or memory.abandoned or failure
        if failure is not None:
            memory.undo_all()
            return failure
        lock.biggest = max(lock.biggest, run.biggest)
        if run.parted is not None:
            memory.undo_to(mark)
            pending.extendleft(reversed(_parts(run.parted, members)))
    memory.end_group()
    return None


# Abandoned for one of these, every group of the launch would be: the rest runs one program at a time.
_FOR_THE_LAUNCH = (
    "an atomic",
    "a print",
    "a tensor shown",
    "two programs",
    "a program reads",
    "a program writes",
    "an operation the lockstep",
    "an argument of a kind",
)


def _run_range(
    lock: Lockstep, fn: Callable[..., Any], args: dict[str, Any], grid: tuple[int, int, int], first: int, count: int
) -> bool:
    """Programs first .. first + count - 1 of the launch, in order; False where a reason that holds for the
    whole launch stopped the groups (the programs then ran alone). A group that fails (an error, an access
    outside the buffers) runs its first program alone, then the rest in halves, first half first, down to
    the one program that fails alone: every program before it ran, exactly, as in order, so the
    interpreter's own path then raises its error, naming the same program and element as ever, after a
    few groups' time and not after every program's."""
    if count == 0:
        return True
    _, ny, nz = grid
    index = np.arange(first, first + count, dtype=np.int64)
    ids = np.stack([index // (ny * nz), (index // nz) % ny, index % nz], axis=1)
    why = _run_group(lock, fn, args, ids) if count > 1 else "a group of one program"
    if why is None:
        lock.stats.grouped += count
        return True
    if count > 1:
        lock.stats.abandoned[why] += 1
    if count > 1 and not why.startswith(_FOR_THE_LAUNCH):
        # The first program alone (a kernel's error is most often every program's, so the first's), then
        # the rest in halves.
        _run_alone(fn, args, grid, first, 1, lock.interpreter.interpreter_builder)
        lock.stats.alone += 1
        rest, half = first + 1, (count - 1) // 2
        if _run_range(lock, fn, args, grid, rest, half):
            return _run_range(lock, fn, args, grid, rest + half, count - 1 - half)
        _run_alone(fn, args, grid, rest + half, count - 1 - half, lock.interpreter.interpreter_builder)
        lock.stats.alone += count - 1 - half
        return False
    _run_alone(fn, args, grid, first, count, lock.interpreter.interpreter_builder)
    lock.stats.alone += count
    return count == 1 or not why.startswith(_FOR_THE_LAUNCH)


def _run_alone(
    fn: Callable[..., Any], args: dict[str, Any], grid: tuple[int, int, int], first: int, count: int, builder: Any
) -> None:
    """Programs first .. first + count - 1 one at a time, as Triton's GridExecutor runs them."""
    _, ny, nz = grid
    for k in range(first, first + count):
        builder.set_grid_idx(k // (ny * nz), (k // nz) % ny, k % nz)
        fn(**args)


def run_grid(
    lock: Lockstep | None, fn: Callable[..., Any], args: dict[str, Any], grid: tuple[int, int, int], builder: Any
) -> None:
    """Every program of the grid, in lockstep groups where `lock` is given, else one at a time as Triton's
    GridExecutor runs them; the same memory afterwards, and the same error, either way."""
    total = grid[0] * grid[1] * grid[2]
    done = 0
    while done < total:
        if lock is None:
            _run_alone(fn, args, grid, done, total - done, builder)
            return
        count = min(max(2, min(MOST_PROGRAMS, GROUP_ELEMENTS // lock.biggest)), total - done)
        if not _run_range(lock, fn, args, grid, done, count):
            _run_alone(fn, args, grid, done + count, total - done - count, builder)
            lock.stats.alone += total - done - count
            return
        done += count
