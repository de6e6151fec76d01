"""The CPU backend's barrier, vote, shuffle and thread-order rules, and proof that the probes of them bite.

Those rules live in C++ (`labrunner/run/cpu/fiber.h` and its parts `fiber_*.h`, `shim.h`), where
a Python mutation tool cannot reach. So the probes in `cpu_kernels/probes.cu` are checked twice:
against the real backend (every answer exact, worked out from CUDA's documented rules, not from the
backend), and against copies of the backend with one wrong rule planted in each (`MUTANTS`), where
at least one probe must fail. A planted rule that no probe notices would be a rule no test pins.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from labrunner.run.cpu import module as cpu_module
from labrunner.run.cpu.module import CpuModule

KERNELS = Path(__file__).parent / "cpu_kernels"
RUNTIME = Path(cpu_module.__file__).parent
ENTRY_POINTS = {
    "block_votes": ["int*"],
    "warp_votes": ["unsigned*"],
    "shuffles": ["float*"],
    "race_at_start": ["float*"],
    "race_after_barrier": ["float*"],
    "race_after_syncwarp": ["float*"],
}
NAN = float("nan")


def build(cache: Path) -> CpuModule:
    source = '#include <attnlab/prelude.cuh>\n#line 1 "probes.cu"\n' + (KERNELS / "probes.cu").read_text()
    return CpuModule.build(source, "probes.cu", ENTRY_POINTS, cache_dir=cache)


# --- what each probe must answer --------------------------------------------------------------


def check_block_votes(module: CpuModule) -> None:
    out = np.zeros((64, 6), np.int32)
    module.launch("block_votes", (1, 1, 1), (64, 1, 1), 0, [out])
    # and: all true; or: any true; count: how many true. Every thread gets the same answer.
    assert out.tolist() == [[0, 1, 1, 0, 22, 63]] * 64


def check_warp_votes(module: CpuModule) -> None:
    out = np.zeros((64, 5), np.uint32)
    module.launch("warp_votes", (1, 1, 1), (64, 1, 1), 0, [out])
    assert out.tolist() == [[0, 1, 1, 0, 0xAAAAAAAA]] * 64


def expected_shuffles() -> np.ndarray:
    """CUDA's documented rules, lane by lane: a source outside the lane's group of `width` (or, for
    up and down, past its edge) gives the lane its own value; xor may reach an earlier group."""
    lane = np.arange(64) % 32
    group8, group16 = lane & ~7, lane & ~15
    own = lane
    columns = [
        group8 + 2,
        np.full(64, 1),
        np.where(lane - 1 >= group8, lane - 1, own),
        np.where(lane >= 3, lane - 3, own),
        np.where(lane + 1 <= 31, lane + 1, own),
        np.where(lane + 2 <= group16 + 15, lane + 2, own),
        lane ^ 16,
        np.where((lane ^ 8) <= group8 + 7, lane ^ 8, own),
    ]
    return 100.0 + np.stack(columns, axis=1)


def check_shuffles(module: CpuModule) -> None:
    out = np.zeros((64, 8), np.float32)
    module.launch("shuffles", (1, 1, 1), (64, 1, 1), 0, [out])
    np.testing.assert_array_equal(out, expected_shuffles())


def race(module: CpuModule, kernel: str, threads: int) -> tuple[list, list]:
    forward, reverse = np.zeros(threads, np.float32), np.zeros(threads, np.float32)
    module.launch(kernel, (1, 1, 1), (threads, 1, 1), 0, [forward])
    module.launch(kernel, (1, 1, 1), (threads, 1, 1), 0, [reverse], reverse_threads=True)
    return forward.tolist(), reverse.tolist()


def same(a: list, b: list) -> bool:
    return np.array_equal(np.array(a), np.array(b), equal_nan=True)


def check_race_at_start(module: CpuModule) -> None:
    forward, reverse = race(module, "race_at_start", 128)
    # forward, thread t reads slot t + 1 before its owner writes it (unwritten shared memory is NaN);
    # reversed, the owner has always written it, but thread 127 reads slot 0 too early
    assert same(forward, [NAN] * 127 + [0.0])
    assert same(reverse, [float(t + 1) for t in range(127)] + [NAN])


def check_race_after_barrier(module: CpuModule, kernel: str = "race_after_barrier", threads: int = 128) -> None:
    forward, reverse = race(module, kernel, threads)
    # the last thread to arrive at a barrier runs on first (thread n-1 forward, thread 0 reversed),
    # then the others in launch order, or in reverse order under the race check
    n = threads
    assert same(forward, [-1.0] * (n - 2) + [float(n - 1), -1.0])
    assert same(reverse, [-1.0] + [float(t + 1) for t in range(1, n - 1)] + [0.0])


def check_race_after_syncwarp(module: CpuModule) -> None:
    check_race_after_barrier(module, "race_after_syncwarp", 32)


PROBES = [
    check_block_votes,
    check_warp_votes,
    check_shuffles,
    check_race_at_start,
    check_race_after_barrier,
    check_race_after_syncwarp,
]


@pytest.fixture(scope="module")
def real_backend(tmp_path_factory) -> CpuModule:
    return build(tmp_path_factory.mktemp("probes"))


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.__name__)
def test_the_backend_answers_every_probe_exactly(real_backend, probe):
    """Each probe asserts its exact answers (see the `check_` functions above)."""
    probe(real_backend)


# --- wrong rules planted one at a time ---------------------------------------------------------

# (name, file, the real code, the wrong rule): each a bug a plausible edit could introduce.
MUTANTS = [
    (
        "syncthreads_and is any",
        "fiber_barriers.h",
        "case BK_AND: f.result = count == n;",
        "case BK_AND: f.result = count > 0;",
    ),
    (
        "syncthreads_or is all",
        "fiber_barriers.h",
        "case BK_OR: f.result = count > 0;",
        "case BK_OR: f.result = count == n;",
    ),
    (
        "syncthreads_count counts arrivals",
        "fiber_barriers.h",
        "case BK_COUNT: f.result = (uint64_t)count;",
        "case BK_COUNT: f.result = (uint64_t)n;",
    ),
    # (`count += f.pred` in place of `f.pred != 0` would be an equivalent mutant: the shim hands the
    # barrier `pred != 0` already, which `block_votes`' `t * 2` predicate shows.)
    (
        "syncthreads_and calls the or barrier",
        "shim.h",
        "barrier(::attnlab::BK_AND, pred != 0",
        "barrier(::attnlab::BK_OR, pred != 0",
    ),
    (
        "release after a barrier ignores the reverse order",
        "fiber_barriers.h",
        "int i = rt.reverse ? rt.nthreads - 1 - k : k;",
        "int i = k;",
    ),
    (
        "a block starts in launch order when reversed",
        "fiber_launch.h",
        "push(rt.reverse ? rt.nthreads - 1 - k : k);",
        "push(k);",
    ),
    (
        "release after a warp sync ignores the reverse order",
        "fiber_warp.h",
        "int j = rt.reverse ? 31 - k : k;",
        "int j = k;",
    ),
    (
        "ballot ignores the predicate",
        "fiber_warp.h",
        "if (lane_fiber(w, j).pred) ballot |= 1u << j;",
        "ballot |= 1u << j;",
    ),
    (
        "all_sync is any",
        "shim.h",
        '{"__all_sync", attnlab_file, attnlab_line}) ==\n           m;',
        '{"__all_sync", attnlab_file, attnlab_line}) !=\n           0;',
    ),
    (
        "any_sync is all",
        "shim.h",
        '{"__any_sync", attnlab_file, attnlab_line}) !=\n           0;',
        '{"__any_sync", attnlab_file, attnlab_line}) ==\n           0xffffffffu;',
    ),
    ("shfl ignores width", "ptx.h", "default: j = min_lane | (bval & ~segmask);", "default: j = bval;"),
    (
        "shfl_up crosses into the group before",
        "ptx.h",
        "case SHFL_UP: j = lane - bval; ok = j >= max_lane;",
        "case SHFL_UP: j = lane - bval; ok = j >= 0;",
    ),
    (
        "shfl_down stops one lane short",
        "ptx.h",
        "case SHFL_DOWN: j = lane + bval; ok = j <= max_lane;",
        "case SHFL_DOWN: j = lane + bval; ok = j < max_lane;",
    ),
    (
        "shfl_xor reaches a later group",
        "ptx.h",
        "case SHFL_BFLY: j = lane ^ bval; ok = j <= max_lane;",
        "case SHFL_BFLY: j = lane ^ bval; ok = j < 32;",
    ),
    ("shfl source lane not wrapped", "ptx.h", "const int bval = (int)(b & 31u)", "const int bval = (int)b"),
]


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A copy of the backend's runtime with one rule replaced, compiled in place of the real one."""

    def plant(file: str, real: str, wrong: str) -> CpuModule:
        copy = tmp_path / "runtime"
        copy.mkdir()
        for path in RUNTIME.glob("*.h"):
            text = path.read_text()
            if path.name == file:
                assert text.count(real) == 1, f"{file} no longer holds `{real}` exactly once: update MUTANTS"
                text = text.replace(real, wrong)
            (copy / path.name).write_text(text)
        monkeypatch.setattr(cpu_module, "_SHIM", copy / "shim.h")
        monkeypatch.setattr(cpu_module, "_RUNTIME_FILES", tuple(copy / p.name for p in cpu_module._RUNTIME_FILES))
        return build(tmp_path / "cache")

    return plant


@pytest.mark.parametrize(("file", "real", "wrong"), [m[1:] for m in MUTANTS], ids=[m[0] for m in MUTANTS])
@pytest.mark.slow
def test_every_planted_wrong_rule_fails_a_probe(planted, file, real, wrong):
    module = planted(file, real, wrong)
    caught = []
    for probe in PROBES:
        try:
            probe(module)
        except AssertionError:
            caught.append(probe.__name__)
    assert caught, "no probe noticed the planted rule"
