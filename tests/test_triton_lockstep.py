"""Lockstep groups of Triton programs (run/cpu/triton_lockstep.py): bit for bit what one program at a time gives.

Every test runs a kernel twice on the same inputs, once in lockstep groups and once one program at a
time (Triton's own order, `module.lockstep = False`), and asserts the same bits in every buffer, the same
error word for word, and how the groups ran (`module.stats`), so that a group quietly falling back to one
program at a time cannot pass for the lockstep path.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

from labrunner.run.cpu.triton_module import TritonInterpretedModule, interpreter_available

WHY_NOT = interpreter_available()  # Triton imported in interpret mode first, as the worker does
pytest.importorskip("triton")

from labrunner.compile import triton_package  # noqa: E402
from labrunner.run.cpu import triton_lockstep  # noqa: E402
from labrunner.run.cpu.device_memory import guarded_array  # noqa: E402
from labrunner.run.cpu.module import CpuKernelError, CpuOutOfBounds  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
HEAD = "import triton\nimport triton.language as tl\n\n\n"
TAIL = "on a GPU such an access reads or writes another allocation's memory, or faults"


def load(source: str, entry: dict[str, list[str]], constexprs: dict | None = None, name: str = "sub.py"):
    package = triton_package.package_source(source, name, list(entry), [])
    return TritonInterpretedModule.load(triton_package.dumps(package), name, entry, constexprs or {}, sandboxed=False)


def buffers(*arrays: np.ndarray) -> list[np.ndarray]:
    made = []
    for array in arrays:
        guarded = guarded_array(array.size, array.dtype)
        guarded[:] = array.reshape(-1)
        made.append(guarded)
    return made


def both(module, kernel: str, grid, arrays: list[np.ndarray], scalars: list[int], names: dict[int, str] | None = None):
    """The launch in lockstep groups and one program at a time, each on its own copy of `arrays`: the buffers
    after each, the error each raised (or None), and the lockstep launch's stats."""
    results = []
    for lockstep in (True, False):
        module.lockstep = lockstep
        module.stats = triton_lockstep.LockstepStats()
        given = buffers(*arrays)
        error = None
        try:
            module.launch(kernel, grid, [*given, *scalars], names or {i: f"b{i}" for i in range(len(given))})
        except (CpuOutOfBounds, CpuKernelError) as raised:
            error = (type(raised).__name__, str(raised))
        results.append(([np.array(g) for g in given], error, module.stats))
    (grouped, grouped_error, stats), (alone, alone_error, _) = results
    return grouped, alone, grouped_error, alone_error, stats


def same_bits(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(x.dtype == y.dtype and x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))


OPERATIONS = HEAD + textwrap.dedent("""
    @triton.jit
    def helper(x, y):
        return tl.exp2(x) * 0.5 + tl.log(tl.abs(y) + 1.0)


    @triton.jit
    def operations(a, b, out, n, B: tl.constexpr):
        pid = tl.program_id(0)
        r = tl.arange(0, B)
        i = r[:, None] * B + r[None, :]
        x = tl.load(a + pid * B * B + i)
        y = tl.load(b + pid * B * B + i, mask=i < n, other=-2.0)
        s = pid * 0.25 + tl.sum(x, 1)[:, None] + tl.max(y, 0)[None, :] - tl.min(x) + tl.sum(y)
        s += tl.argmax(x, 1)[:, None].to(tl.float32) + tl.argmin(y, 0)[None, :].to(tl.float32)
        s += tl.cumsum(x, 1) + tl.cumsum(y, 0, reverse=True) + tl.sum(x, 0, keep_dims=True)
        s += tl.dot(x, y) + tl.dot(x, y, input_precision="tf32x3") + tl.dot(x, tl.trans(y), input_precision="ieee")
        s += tl.dot(x, y, input_precision="bf16x3") + tl.dot(x.to(tl.float16), y.to(tl.float16)).to(tl.float32)
        s += tl.dot(x.to(tl.bfloat16), y.to(tl.bfloat16)) + x.T
        s = tl.where(s > 0, tl.sqrt(tl.abs(s)), tl.exp(s * 0.01)) + helper(x, y) + tl.sigmoid(y)
        s += tl.reshape(tl.reshape(x, (B * B,)), (B, B)) * tl.cdiv(n, 7) + (i % 5).to(tl.float32) / 3.0
        lo, hi = tl.split(tl.join(x, y))
        s += lo - hi + tl.full((B, B), pid, tl.float32) + tl.softmax(x, 1)
        tl.store(out + pid * B * B + i, s)
""")
OPERATIONS_ENTRY = {"operations": ["float*", "float*", "float*", "int"]}


def test_a_group_gives_the_bits_of_one_program_at_a_time_for_every_kind_of_operation():
    module = load(OPERATIONS, OPERATIONS_ENTRY, {"operations": {"B": 16}})
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(6 * 256).astype(np.float32) for _ in range(2))
    grouped, alone, error, alone_error, stats = both(
        module, "operations", (6, 1, 1), [a, b, np.zeros(6 * 256, np.float32)], [200]
    )
    assert error is None and alone_error is None
    assert same_bits(grouped, alone)
    assert np.isfinite(grouped[2]).all()
    assert (stats.grouped, stats.alone, stats.runs, dict(stats.abandoned)) == (6, 0, 1, {})


BLOCK_POINTERS = HEAD + textwrap.dedent("""
    @triton.jit
    def tiles(x, y, n, B: tl.constexpr):
        pid = tl.program_id(0)
        source = tl.make_block_ptr(x, (n, n), (n, 1), (pid * 3, 0), (B, B), (1, 0))
        target = tl.make_block_ptr(y, (n, n), (n, 1), (pid * B, 1), (B, B), (1, 0))
        acc = tl.zeros((B, B), tl.float32)
        for k in range(0, 3):  # walks off the bottom and right edges: padded, never read
            acc += tl.load(source, boundary_check=(0, 1), padding_option="zero") * (k + 1.5)
            source = tl.advance(source, (1, B // 2))
        tl.store(target, acc, boundary_check=(0, 1))
""")


def test_block_pointers_spread_per_program_give_the_same_bits():
    module = load(BLOCK_POINTERS, {"tiles": ["float*", "float*", "int"]}, {"tiles": {"B": 4}})
    x = np.random.default_rng(13).standard_normal(100).astype(np.float32)
    grouped, alone, error, _, stats = both(module, "tiles", (4, 1, 1), [x, np.zeros(100, np.float32)], [10])
    assert error is None
    assert same_bits(grouped, alone)
    written = grouped[1].reshape(10, 10)
    assert np.count_nonzero(written[:, 1:5]) == 40 and not written[:, [0, 5, 6, 7, 8, 9]].any()
    assert (stats.grouped, stats.alone, stats.runs, dict(stats.abandoned)) == (4, 0, 1, {})


PARTING = HEAD + textwrap.dedent("""
    @triton.jit
    def parting(x, y, n, B: tl.constexpr):
        pid = tl.program_id(0)
        r = tl.arange(0, B)
        tl.store(y + pid * B + r, tl.load(x + pid * B + r) * 3.0)  # stored before the programs part
        acc = tl.zeros((B,), tl.float32)
        for k in range(0, pid % 3):  # a loop bound of each program's own
            acc += tl.load(x + k * B + r)
        if tl.load(x + pid * B) > 0:  # a branch on each program's data
            acc = acc * 2.0 + 1.0
        tl.store(y + pid * B + r, acc, mask=r < n)
""")


def test_programs_whose_python_parts_run_as_parts_and_give_the_same_bits():
    module = load(PARTING, {"parting": ["float*", "float*", "int"]}, {"parting": {"B": 16}})
    x = np.random.default_rng(5).standard_normal(12 * 16).astype(np.float32)
    grouped, alone, error, _, stats = both(
        module, "parting", (12, 1, 1), [x, np.full(12 * 16, np.nan, np.float32)], [13]
    )
    assert error is None
    assert same_bits(grouped, alone)
    # the first store of every program is overwritten where the mask holds, kept where it does not
    assert np.array_equal(grouped[1].reshape(12, 16)[:, 13:], x.reshape(12, 16)[:, 13:] * 3.0)
    # parts by the loop bound (3 values), then each part again by the sign of its first element where
    # both signs occur in it: every part runs again from the start
    signs = [{bool(x[p * 16] > 0) for p in range(12) if p % 3 == bound} for bound in range(3)]
    assert (stats.grouped, stats.alone, dict(stats.abandoned)) == (12, 0, {})
    assert stats.runs == 1 + 3 + sum(len(s) for s in signs if len(s) > 1) == 8


PAYLOADS = HEAD + textwrap.dedent("""
    @triton.jit
    def moved(x, y, n, B: tl.constexpr):
        r = tl.program_id(0) * B + tl.arange(0, B)
        tl.store(y + r, tl.load(x + r, mask=r % 3 != 0, other=float("nan")))
""")


def test_a_nan_payload_is_moved_bit_for_bit_through_a_groups_loads():
    module = load(PAYLOADS, {"moved": ["float*", "float*", "int"]}, {"moved": {"B": 8}})
    bits = (np.uint32(0x7FA00000) + np.arange(64, dtype=np.uint32)) | np.uint32(0x80000000) * (np.arange(64) % 2 == 0)
    x = bits.astype(np.uint32).view(np.float32)  # signalling NaNs of both signs, each with its own payload
    grouped, alone, error, _, stats = both(module, "moved", (8, 1, 1), [x, np.zeros(64, np.float32)], [64])
    assert error is None
    assert same_bits(grouped, alone)
    kept = np.arange(64) % 3 != 0
    assert np.array_equal(grouped[1].view(np.uint32)[kept], bits[kept])
    assert (stats.grouped, stats.alone) == (8, 0)


OUT_OF_BOUNDS = HEAD + textwrap.dedent("""
    @triton.jit
    def past(x, y, n, B: tl.constexpr):
        pid = tl.program_id(0)
        r = pid * B + tl.arange(0, B)
        v = tl.load(x + r + (pid == 29) * 6, mask=r < n)  # program 29 reads 6 elements on: past the end
        tl.store(y + r, v + 1.0, mask=r < 64)
""")


def test_a_masked_access_past_a_buffer_names_the_same_program_and_element_and_leaves_the_same_memory():
    module = load(OUT_OF_BOUNDS, {"past": ["float*", "float*", "int"]}, {"past": {"B": 2}})
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    grouped, alone, error, alone_error, stats = both(module, "past", (40, 1, 1), [x, y], [60], {0: "x", 1: "y"})
    assert (
        error
        == alone_error
        == (
            "CpuOutOfBounds",
            "out-of-bounds read of x in past, program (29, 0, 0): its byte 256 (element 64), past the end of its 256 "
            f"bytes (64 elements of float32); {TAIL}",
        )
    )
    assert same_bits(grouped, alone)
    # programs 0 .. 28 ran and stored; nothing of 29 or later did
    assert np.array_equal(grouped[1][:58], np.arange(58, dtype=np.float32) + 1.0)
    assert np.array_equal(grouped[1][58:], np.zeros(6, np.float32))
    # a failing group runs its first program alone, then the rest in halves: 0-39 failed, 0 alone, 1-19
    # grouped; 20-39 failed, 20 alone; 21-29 failed, 21 alone, 22-25 grouped; 26-29 failed, 26 alone, 27
    # alone (a group of one); 28-29 failed, 28 alone, and 29 raised alone
    assert (stats.grouped, stats.alone) == (19 + 4, 6)
    assert dict(stats.abandoned) == {"an access outside one buffer": 5}


ATOMICS = HEAD + textwrap.dedent("""
    @triton.jit
    def counted(x, counts, order, B: tl.constexpr):
        pid = tl.program_id(0)
        r = tl.arange(0, B)
        v = tl.load(x + pid * B + r)
        tl.atomic_add(counts + r, v)  # float sums: their bits depend on the order of the programs
        seen = tl.atomic_xchg(order, pid)  # the program before this one, in the order programs ran
        tl.store(order + 1 + pid, seen)
""")


def test_atomics_run_one_program_at_a_time_in_order_and_give_the_same_bits():
    module = load(ATOMICS, {"counted": ["float*", "float*", "int*"]}, {"counted": {"B": 8}})
    x = np.random.default_rng(9).standard_normal(10 * 8).astype(np.float32)
    arrays = [x, np.zeros(8, np.float32), np.full(11, -1, np.int32)]
    grouped, alone, error, _, stats = both(module, "counted", (10, 1, 1), arrays, [])
    assert error is None
    assert same_bits(grouped, alone)
    assert np.array_equal(grouped[2], np.array([9, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8], np.int32))
    reason = "an atomic operation (its result depends on the order of the programs)"
    assert (stats.grouped, stats.alone, dict(stats.abandoned)) == (0, 10, {reason: 1})


CONFLICTS = HEAD + textwrap.dedent("""
    @triton.jit
    def last_wins(x, y, n, B: tl.constexpr):
        pid = tl.program_id(0)
        tl.store(y + tl.arange(0, B), tl.load(x + pid * B + tl.arange(0, B)))  # every program, the same words


    @triton.jit
    def chained(x, y, n, B: tl.constexpr):
        pid = tl.program_id(0)
        r = tl.arange(0, B)
        before = tl.load(y + (pid - 1) * B + r, mask=(pid > 0) & (r < B), other=1.0)  # the previous program's
        tl.store(y + pid * B + r, before * 2.0 + tl.load(x + pid * B + r))
""")
CONFLICTS_ENTRY = {name: ["float*", "float*", "int"] for name in ("last_wins", "chained")}


@pytest.mark.parametrize(
    "kernel, reason",
    [
        ("last_wins", "two programs of a group write the same word"),
        ("chained", "a program writes what another program of its group reads"),
    ],
)
def test_programs_that_touch_each_others_words_run_one_at_a_time_in_order(kernel, reason):
    module = load(CONFLICTS, CONFLICTS_ENTRY, {name: {"B": 4} for name in CONFLICTS_ENTRY})
    x = np.random.default_rng(11).standard_normal(64).astype(np.float32)
    grouped, alone, error, _, stats = both(module, kernel, (16, 1, 1), [x, np.zeros(64, np.float32)], [64])
    assert error is None
    assert same_bits(grouped, alone)
    if kernel == "last_wins":
        assert np.array_equal(grouped[1][:4], x[60:64])  # the last program's, as in order
    assert (stats.grouped, stats.alone, dict(stats.abandoned)) == (0, 16, {reason: 1})


PRINTS = HEAD + textwrap.dedent("""
    @triton.jit
    def shown(x, B: tl.constexpr):
        pid = tl.program_id(0)
        tl.device_print("v", tl.load(x + pid))


    @triton.jit
    def said(x, B: tl.constexpr):
        print("program", tl.program_id(0))
""")


@pytest.mark.parametrize("kernel", ["shown", "said"])
def test_prints_come_once_per_program_in_order(kernel, capsys):
    module = load(PRINTS, {k: ["float*"] for k in ("shown", "said")}, {k: {"B": 1} for k in ("shown", "said")})
    module.lockstep = True
    module.launch(kernel, (3, 1, 1), buffers(np.arange(4, dtype=np.float32)), {0: "x"})
    grouped = capsys.readouterr().out
    module.lockstep = False
    module.launch(kernel, (3, 1, 1), buffers(np.arange(4, dtype=np.float32)), {0: "x"})
    assert grouped == capsys.readouterr().out
    assert grouped.count("\n") == 3


CAUGHT = HEAD + textwrap.dedent("""
    @triton.jit
    def stubborn(x, y, B: tl.constexpr):
        pid = tl.program_id(0)
        r = tl.arange(0, B)
        v = tl.load(x + pid * B + r)
        try:  # a kernel that catches everything, the groups' own signals too
            for k in range(0, pid % 2):
                v += 1.0
            tl.atomic_add(y + 32 + r, v)
        except:  # noqa: E722
            pass
        tl.store(y + pid * B + r, v)
""")


def test_a_kernel_that_catches_everything_cannot_keep_a_group_going():
    module = load(CAUGHT, {"stubborn": ["float*", "float*"]}, {"stubborn": {"B": 4}})
    x = np.arange(32, dtype=np.float32)
    grouped, alone, error, _, stats = both(module, "stubborn", (8, 1, 1), [x, np.zeros(64, np.float32)], [])
    assert error is None
    assert same_bits(grouped, alone)
    assert stats.alone == 8 and stats.grouped == 0


RAISES = HEAD + textwrap.dedent("""
    @triton.jit
    def uneven(x, y, B: tl.constexpr):
        pid = tl.program_id(0)
        r = tl.arange(0, B)
        tl.store(y + pid * B + r, tl.load(x + pid * B + r))
        if pid == 5:
            z = 1 // 0
""")


def test_an_error_in_one_program_is_raised_as_that_program_raises_it():
    module = load(RAISES, {"uneven": ["float*", "float*"]}, {"uneven": {"B": 4}})
    x = np.arange(32, dtype=np.float32)
    grouped, alone, error, alone_error, _ = both(module, "uneven", (8, 1, 1), [x, np.zeros(32, np.float32)], [])
    said = "uneven, program (5, 0, 0): sub.py:12: ZeroDivisionError: integer division or modulo by zero"
    assert error == alone_error == ("CpuKernelError", said)
    assert same_bits(grouped, alone)
    assert np.array_equal(grouped[1][:24], x[:24]) and not grouped[1][24:].any()


def test_a_group_too_large_for_its_values_runs_in_halves(monkeypatch):
    monkeypatch.setattr(triton_lockstep, "GROUP_ELEMENTS", 64)  # 16-element values: groups of 4, halves of 8
    module = load(OPERATIONS, OPERATIONS_ENTRY, {"operations": {"B": 4}})
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal(12 * 16).astype(np.float32) for _ in range(2))
    grouped, alone, error, _, stats = both(
        module, "operations", (12, 1, 1), [a, b, np.zeros(12 * 16, np.float32)], [40]
    )
    assert error is None
    assert same_bits(grouped, alone)
    # a group of 12 parts in halves at its first 4 x 4 load (12 x 16 elements >= 2 x 64), each half in
    # halves again at its join (6 x 4 x 4 x 2): runs of 12, 6, 6 and four of 3
    assert (stats.grouped, stats.alone, stats.runs, dict(stats.abandoned)) == (12, 0, 7, {})


# ----------------------------------------------------------------------------------- the shipped kernels

LAB2 = {"flash_prefill": ["float*", "float*", "float*", "float*", "int", "int"]}
LAB3 = {
    "decode_partial": ["float*", "float*", "float*", "int*", "int*", "float*", "float*", "float*", "int", "int"],
    "decode_combine": ["float*", "float*", "float*", "int*", "float*", "int"],
}
CONSTANTS = ["attnlab_rows_per_block", "attnlab_heads_per_block", "attnlab_partition_tokens"]


def shipped(path: str, entry: dict[str, list[str]]):
    source = (REPO / path).read_text()
    package = triton_package.package_source(source, path, list(entry), CONSTANTS)
    module = TritonInterpretedModule.load(
        triton_package.dumps(package), path, entry, package["launch"]["constexprs"], sandboxed=False
    )
    return module, package["launch"]["constants"]


def run_lab2(path: str, rows: int, prefix: int, lockstep: bool):
    module, constants = shipped(path, LAB2)
    module.lockstep = lockstep
    rng = np.random.default_rng(rows * 1000 + prefix)
    q, k, v = (
        rng.standard_normal(n * 8 * 64 * s).astype(np.float32)
        for n, s in ((rows, 4), (prefix + rows, 1), (prefix + rows, 1))
    )
    given = buffers(q, k, v, np.full(rows * 32 * 64, np.nan, np.float32))
    per_block = constants.get("attnlab_rows_per_block") or rows
    grid = (math.ceil(rows / per_block), 32 // constants.get("attnlab_heads_per_block", 1), 1)
    module.launch("flash_prefill", grid, [*given, rows, prefix], {0: "q", 1: "kCache", 2: "vCache", 3: "out"})
    return [np.array(g) for g in given], module.stats


def run_lab3(path: str, lengths: list[int], lockstep: bool):
    module, constants = shipped(path, LAB3)
    module.lockstep = lockstep
    rng = np.random.default_rng(len(lengths))
    batch, partition = len(lengths), constants.get("attnlab_partition_tokens", 0)
    parts = 1 if partition == 0 else math.ceil(max(lengths) / partition)
    pages = math.ceil(max(lengths) / 16)
    q = rng.standard_normal(batch * 32 * 64).astype(np.float32)
    k, v = (rng.standard_normal(batch * pages * 16 * 8 * 64).astype(np.float32) for _ in range(2))
    table = rng.permutation(batch * pages).astype(np.int32)
    poisoned = [np.full(batch * 32 * parts * n, np.nan, np.float32) for n in (64, 1, 1)]
    given = buffers(
        q, k, v, table, np.array(lengths, np.int32), *poisoned, np.full(batch * 32 * 64, np.nan, np.float32)
    )
    names = dict(enumerate(["q", "k", "v", "blockTable", "seqLens", "partOut", "partMax", "partSum", "out"]))
    grid = (parts, 32 // constants.get("attnlab_heads_per_block", 1), batch)
    module.launch("decode_partial", grid, [*given[:8], pages, parts], names)
    combined = [given[i] for i in (5, 6, 7, 4, 8)]
    module.launch(
        "decode_combine",
        (32, batch, 1),
        [*combined, parts],
        dict(enumerate(["partOut", "partMax", "partSum", "seqLens", "out"])),
    )
    return [np.array(g) for g in given], module.stats


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    [
        "kernels/lab2/starter.py",
        "kernels/lab2/solution.py",
        "tests/fixtures/lab2/correct/triton_tutorial_block_ptrs.py",
    ],
)
def test_the_shipped_lab2_kernels_give_the_same_bits_in_groups(path):
    for rows, prefix in ((1, 31), (17, 31), (33, 70)):
        grouped, stats = run_lab2(path, rows, prefix, True)
        alone, _ = run_lab2(path, rows, prefix, False)
        assert same_bits(grouped, alone)
        assert np.isfinite(grouped[3]).all()
        assert stats.alone == 0 and not stats.abandoned


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    ["kernels/lab3/starter.py", "kernels/lab3/solution.py", "tests/fixtures/lab3/correct/triton_equal_splits.py"],
)
def test_the_shipped_lab3_kernels_give_the_same_bits_in_groups(path):
    lengths = [1, 2, 15, 16, 17, 33, 1030, 5]
    grouped, stats = run_lab3(path, lengths, True)
    alone, _ = run_lab3(path, lengths, False)
    assert same_bits(grouped, alone)
    assert np.isfinite(grouped[8]).all()
    assert stats.alone == 0 and not stats.abandoned
