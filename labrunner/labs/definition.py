"""What a lab is, as data and a few functions: entry points, launch geometry, buffers, timing, files.

A lab names its kernels with their exact signatures, the launch constants a student may export
from the `.cu` (`extern "C" __constant__ int attnlab_<name> = <value>;`) with their defaults, and
turns those constants and a shape into the launches the backends run. It says how it is timed
(`timing_strategy`). Everything else (cases, tolerances, seeds) is data in its case file,
`cases/<lab>.toml`, which the lab parses once (`catalogue`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Protocol

import numpy as np

from labrunner import data_dir
from labrunner.labs.timing_strategy import AgainstBaseline, AgainstCopy, TimingLayout, TimingStrategy
from labrunner.truth.catalogue import CASES_DIR, Catalogue, load_catalogue
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS
from labrunner.truth.memory_bound import check_buffers

KERNELS_DIR = data_dir("kernels")
# The hardware's limits, which bound every lab's thread counts and shared memory: a CUDA block holds
# at most 1,024 threads on every GPU since Fermi, and Hopper (H100, H200) lets one block opt in to
# 227 KiB of dynamic shared memory (sm_90's 228 KiB per SM, less the 1 KiB the system keeps).
MAX_THREADS_PER_BLOCK = 1024
MAX_SHARED_BYTES = 227 * 1024


@dataclass(frozen=True)
class Parameter:
    c_type: str  # "const float*", "float*" or "int"
    name: str

    @property
    def ptx_type(self) -> str:
        return "u64" if self.c_type.endswith("*") else "u32"


@dataclass(frozen=True)
class EntryPoint:
    name: str
    parameters: tuple[Parameter, ...]
    duty: str  # what the kernel must do, for messages and the starter

    @property
    def signature(self) -> str:
        params = ", ".join(f"{p.c_type} {p.name}" for p in self.parameters)
        return f'extern "C" __global__ void {self.name}({params})'


def entry(name: str, signature: str, duty: str) -> EntryPoint:
    """`entry("k", "const float* q, int T", ...)`: signatures read as they are written in C."""
    parameters = []
    for part in signature.split(","):
        c_type, _, param = part.strip().rpartition(" ")
        parameters.append(Parameter(c_type.replace(" *", "*"), param))
    return EntryPoint(name, tuple(parameters), duty)


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: tuple[str | int, ...]  # buffer names ("q", "k", "v", "out", workspace names) or integers


class StageInputs(Protocol):
    """What a stage check reads of a case's inputs (`truth.cases.Inputs`; not imported, so that the timing,
    which reads the lab's launches, never reaches the oracle through this module)."""

    q: np.ndarray
    k: np.ndarray


# The check of the buffer a kernel wrote against its definition: (buffer, inputs, rows) -> a problem in words,
# or None where it agrees.
StageCheck = Callable[[np.ndarray, StageInputs, int], str | None]


def attention_flops(rows: int, prefix: int) -> float:
    """4 * 64 FLOPs per visible (query, key) pair per query head: QK^T and PV, a multiply and an add each."""
    visible_pairs = rows * prefix + rows * (rows + 1) // 2
    return 4.0 * HEAD_DIM * visible_pairs * QUERY_HEADS


@dataclass(frozen=True)
class Lab:
    name: str
    title: str
    teaches: str
    entry_points: tuple[EntryPoint, ...]
    launch_defaults: dict[str, int]  # attnlab_* constant -> default value
    # attnlab_* constant -> the largest value it may take, for every constant of launch_defaults: the
    # constants size grids, shared memory, cases and buffers, so none may be as large as an int allows.
    # Checked before any other rule, and before anything is sized from them (`over_bounds`).
    bounds: dict[str, int]
    plan_launches: Callable[[dict[str, int], int, int], list[Launch]]  # (constants, rows, prefix)
    # (constants, rows, prefix) -> workspace name -> float count: a workspace may depend on the file's geometry
    workspace: Callable[[dict[str, int], int, int], dict[str, int]] = lambda constants, rows, prefix: {}
    validate: Callable[[dict[str, int]], list[str]] = lambda constants: []
    # How a correct kernel is timed (`labs.timing_strategy`): against a baseline kernel by default.
    timing_strategy: TimingStrategy = AgainstBaseline()
    # For every grid dimension that runs over rows (or keys): how many one block covers (0: all of them).
    row_tiles: Callable[[dict[str, int]], list[int]] = lambda constants: []
    # Kernel -> the check of the buffer it writes (`StageCheck`), for every kernel but the last: the stage
    # check of a wrong output.
    stages: dict[str, StageCheck] = field(default_factory=dict)
    # The file's own partition size (keys per partition; 0: one partition per sequence), from its constants:
    # a decode catalogue's lengths are written against it (see `[geometry] partition_when_whole`).
    partition: Callable[[dict[str, int]], int] = lambda constants: 0
    # What a timed call's inputs hold beside the random Q, K and V, at (rows, prefix, seed): for a paged
    # cache {"pages": how many, "fixed": {name: int32 array}} (the block table and lengths); {}: nothing.
    timing_layout: Callable[[int, int, int], TimingLayout] = lambda rows, prefix, seed: {}
    # The PyTorch peer `bench --vs <peer>` times beside the student's kernel (`measure.peers`), if any.
    peer: str | None = None
    # The FLOPs of one call at (rows, prefix, timing layout): the roofline's numerator. A prefill's by
    # default (every visible query-key pair); a decode batch counts its sequences' keys from the layout.
    flops: Callable[[int, int, TimingLayout], float] = lambda rows, prefix, layout: attention_flops(rows, prefix)
    # Kernel -> its share of those FLOPs, for a lab of several kernels (a kernel not named does none);
    # a lab of one kernel needs none: it does them all.
    flop_shares: dict[str, float] = field(default_factory=dict)
    # Kernel -> (its threads constant, its shared-memory constant or None), for a lab that takes Triton files:
    # a Triton kernel's block is 32 x its num_warps threads and its shared memory what Triton's compiler
    # allots, so these constants are the compile's to set, never the file's. Empty: `.cu` files only.
    triton_blocks: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    # Where the lab's files lie: its case file `<cases_dir>/<name>.toml` and its kernels in
    # `<kernels_dir>/<name>/` (starter.cu, solution.cu, expert.cu). None: attnlab's own `cases/` and
    # `kernels/`; a lab defined elsewhere names its own folders.
    cases_dir: Path | None = None
    kernels_dir: Path | None = None
    # Seconds the shipped solution takes on the CPU backend per unit of `case_limit.case_work`, measured on
    # the reference machine (`pipeline/case_limit.py`): a CPU case's time limit is priced from it. None: never
    # measured, and the CPU gives each case a fixed, generous limit.
    cpu_seconds_per_unit: float | None = None
    # The same for a Triton file, which the CPU runs in Triton's interpreter (None: never measured).
    interpreted_seconds_per_unit: float | None = None

    def __post_init__(self) -> None:
        unbounded = [name for name in self.launch_defaults if name not in self.bounds]
        if unbounded or set(self.bounds) - set(self.launch_defaults):
            raise ValueError(
                f"{self.name}: every launch constant needs a bound and every bound a constant "
                f"(unbounded: {unbounded}, bounds of no constant: "
                f"{sorted(set(self.bounds) - set(self.launch_defaults))})"
            )

    def over_bounds(self, constants: dict[str, int]) -> list[str]:
        """The constants above their bounds, each in words: `attnlab_threads = 2048 is above its bound 1024`."""
        return [
            f"{name} = {constants[name]} is above its bound {self.bounds[name]}"
            for name in self.launch_defaults
            if constants[name] > self.bounds[name]
        ]

    @property
    def case_file(self) -> Path:
        return (self.cases_dir or CASES_DIR) / f"{self.name}.toml"

    @cached_property
    def catalogue(self) -> Catalogue:
        """The lab's case file, parsed and checked once (`load_catalogue`) the first time it is asked for."""
        return load_catalogue(self.name, self.case_file.parent)

    @property
    def kernel_folder(self) -> Path:
        """`<kernels_dir>/<name>/`, where the starter, the solution and the expert reference lie."""
        return (self.kernels_dir or KERNELS_DIR) / self.name

    @property
    def bytes_to_move(self) -> Callable[[int, int, TimingLayout], int] | None:
        """The lab's model of the bytes one call must move at the least, from the timing layout, for a lab
        graded on bandwidth (`AgainstCopy`); None: SPEEDUP alone."""
        strategy = self.timing_strategy
        return strategy.bytes_to_move if isinstance(strategy, AgainstCopy) else None

    def shape_label(self, rows: int, prefix: int) -> str:
        """How `profile` names a timing shape (rows, prefix) on the terminal and in the trace."""
        return self.timing_strategy.shape_label(rows, prefix)

    @property
    def starter_path(self) -> Path:
        return self.kernel_folder / "starter.cu"

    @property
    def solution_path(self) -> Path:
        return self.kernel_folder / "solution.cu"

    @property
    def triton_starter_path(self) -> Path:
        return self.kernel_folder / "starter.py"

    @property
    def expert_path(self) -> Path:
        """The expert reference (`bench --vs expert`): as fast as the hardware allows, where the solution
        stays the readable one that `calibrate` times."""
        return self.kernel_folder / "expert.cu"

    def entry_point_types(self) -> dict[str, list[str]]:
        """Kernel name -> "float*"/"int*"/"int" per parameter, for the CPU backend's launch wrappers."""
        return {
            e.name: [
                "int" if p.c_type == "int" else "int*" if p.c_type.endswith("int*") else "float*" for p in e.parameters
            ]
            for e in self.entry_points
        }

    def constants(self, exported: dict[str, int]) -> dict[str, int]:
        """The defaults, overridden by what the student's module exports."""
        return {**self.launch_defaults, **{k: v for k, v in exported.items() if k in self.launch_defaults}}


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def bounded_workspace(where: str, counts: dict[str, int]) -> dict[str, int]:
    """A workspace (name -> float count) sized from a file's constants, refused (`OverBound`, exit 3) where
    a buffer would pass the memory bound, before anything is allocated for it."""
    check_buffers(where, {name: count * 4 for name, count in counts.items()})
    return counts


def check_block(constants: dict[str, int], x: str, y: str | None = None) -> list[str]:
    """Thread counts a GPU can launch: positive, and at most 1024 per block."""
    counts = [constants[x]] + ([constants[y]] if y else [])
    names = " * ".join(n for n in (x, y) if n)
    if any(c <= 0 for c in counts):
        return [f"{names} must be positive"]
    total = 1
    for c in counts:
        total *= c
    if total > MAX_THREADS_PER_BLOCK:
        return [f"{names} = {total} threads: a block holds at most {MAX_THREADS_PER_BLOCK}"]
    return []


def check_positive(constants: dict[str, int], *names: str) -> list[str]:
    return [f"{n} = {constants[n]} must be positive" for n in names if constants[n] <= 0]


def check_nonnegative(constants: dict[str, int], *names: str) -> list[str]:
    return [f"{n} = {constants[n]} must not be negative" for n in names if constants[n] < 0]
