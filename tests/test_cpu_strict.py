"""The CPU backend as strict as a GPU: shared memory exactly as large as asked, guards around every
buffer the CPU device hands a kernel, advice only with evidence, and one verdict on every run.

A GPU faults where a kernel leaves the memory it was given (shared memory past what the launch and
its declarations asked for, global memory outside every allocation); the CPU backend must not pass
such a kernel, and must fail it the same way on every run, so each fault here is pinned to its
exact message.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from labrunner.labs.definition import Launch
from labrunner.run.cpu.module import CpuFault, CpuKernelError, CpuModule, CpuOutOfBounds, cpu_compiler_available
from labrunner.run.cpu_device import CpuDevice

pytestmark = pytest.mark.skipif(cpu_compiler_available() is not None, reason=str(cpu_compiler_available()))

ROOT = Path(__file__).resolve().parent.parent

SHARED = r"""
extern __shared__ float fileScope[];
__device__ float helper(int i) { return fileScope[i]; }
extern "C" __global__ void k(float* out, int n, int over) {
    extern __shared__ float s[];
    __shared__ float tile[8][9], x;
    const int t = threadIdx.x;
    s[t] = t;
    tile[t % 8][t % 9] = t;
    x = 2;
    __syncthreads();
    out[t] = helper(t) + tile[t % 8][t % 9] + x;
    if (over == 1 && t == 3) s[n] = 1;
    if (over == 2 && t == 3) tile[8][5] = 1;
    if (over == 3 && t == 3) out[t] = tile[-200][0];
    if (over == 4 && t == 3) out[t] = s[n + 100000];
}
"""


@pytest.fixture(scope="module")
def shared_module(tmp_path_factory):
    return CpuModule.build(SHARED, "shared.cu", {"k": ["float*", "int", "int"]}, tmp_path_factory.mktemp("cpu"))


def launched(module, shared_bytes: int, over: int) -> np.ndarray:
    out = np.zeros(32, np.float32)
    module.launch("k", (2, 1, 1), (32, 1, 1), shared_bytes, [out, shared_bytes // 4, over])
    return out


def test_in_bounds_shared_memory_works_at_file_scope_and_in_functions(shared_module):
    out = launched(shared_module, 128, 0)
    t = np.arange(32, dtype=np.float32)
    assert out.tolist() == (t + t + 2).tolist()


@pytest.mark.parametrize(
    ("over", "shared_bytes", "message"),
    [
        (
            1,
            128,
            "out-of-bounds write to dynamic shared memory in kernel k, block (0,0,0), thread 3: its byte 128, past "
            "the end of the 128 bytes the launch asked for (a GPU gives a launch exactly the dynamic shared memory it "
            "asks for)",
        ),
        (
            0,
            0,
            "out-of-bounds write to dynamic shared memory in kernel k, block (0,0,0), thread 0: the launch asked for "
            "none (0 bytes), yet the kernel reads or writes extern __shared__ (its byte 0); ask for the bytes it uses "
            "in the launch's shared-memory size",
        ),
        (
            2,
            128,
            "out-of-bounds write to __shared__ tile in kernel k, block (0,0,0), thread 3: its byte 308, past the end "
            "of its 288 bytes",
        ),
        (
            3,
            128,
            "out-of-bounds read of __shared__ tile in kernel k, block (0,0,0), thread 3: its byte -7200, before the "
            "start of its 288 bytes",
        ),
        (
            4,
            128,
            "out-of-bounds read of dynamic shared memory in kernel k, block (0,0,0), thread 3: its byte 400128, past "
            "the end of the 128 bytes the launch asked for (a GPU gives a launch exactly the dynamic shared memory it "
            "asks for)",
        ),
    ],
)
def test_shared_memory_past_what_was_asked_for_is_out_of_bounds(shared_module, over, shared_bytes, message):
    with pytest.raises(CpuOutOfBounds) as raised:
        launched(shared_module, shared_bytes, over)
    assert str(raised.value) == message
    # the module stays usable, and the next launch gets its own bytes again
    assert launched(shared_module, 128, 0)[1] == 4.0


WILD = r"""
extern "C" __global__ void k(const float* in, float* out, long long at, int mode) {
    if (threadIdx.x != 1) return;
    if (mode == 0) out[0] = in[at];
    if (mode == 1) out[at] = 1.0f;
    if (mode == 2) out[0] = *(const float*)(at);
}
"""


@pytest.fixture(scope="module")
def wild_module(tmp_path_factory):
    return CpuModule.build(
        WILD, "wild.cu", {"k": ["float*", "float*", "long long", "int"]}, tmp_path_factory.mktemp("w")
    )


def wild_launch(module, at: int, mode: int) -> None:
    device = CpuDevice()
    buffers = {"q": device.upload(np.ones(1000, np.float32)), "out": device.guarded(64).inner}
    device.launch(module, Launch("k", (1, 1, 1), (32, 1, 1), 0, ("q", "out", at, mode)), buffers)


@pytest.mark.parametrize(
    ("at", "mode", "message"),
    [
        (
            1000 + 1024,
            0,
            "out-of-bounds read of q in kernel k, block (0,0,0), thread 1: its byte 8096 (element 2024), past the "
            "end of its 4000 bytes (1000 elements of float32); on a GPU such an access reads or writes another "
            "allocation's memory, or faults",
        ),
        (
            -(1 << 28),
            0,
            "out-of-bounds read of q in kernel k, block (0,0,0), thread 1: its byte -1073741824 (element -268435456), "
            "before the start of its 4000 bytes (1000 elements of float32); on a GPU such an access reads or writes "
            "another allocation's memory, or faults",
        ),
        (
            64 + 4096 + 5000,
            1,
            "out-of-bounds write to out in kernel k, block (0,0,0), thread 1: its byte 36640 (element 9160), past the "
            "end of its 256 bytes (64 elements of float32); on a GPU such an access reads or writes another "
            "allocation's memory, or faults",
        ),
    ],
)
def test_a_wild_access_near_any_buffer_is_out_of_bounds_naming_it_on_every_run(wild_module, at, mode, message):
    for _ in range(3):
        with pytest.raises(CpuOutOfBounds) as raised:
            wild_launch(wild_module, at, mode)
        assert str(raised.value) == message


def test_an_address_in_no_guard_stays_an_illegal_memory_access_without_advice(wild_module):
    with pytest.raises(CpuFault) as raised:
        wild_launch(wild_module, 16, 2)
    assert str(raised.value) == (
        "illegal memory access (SIGSEGV) in kernel k, block (0,0,0), thread 1: a read at address 0x10"
    )


STACKS = r"""
__device__ long long g_local;
__device__ int deep(int n) {
    volatile int frame[1024];
    frame[0] = n;
    return n == 0 ? frame[0] : deep(n - 1) + frame[0];
}
extern "C" __global__ void k(int* out, int mode) {
    if (mode == 0 && threadIdx.x == 0) out[0] = deep(1 << 20);
    if (mode == 1) {
        // Thread 5 shows where its stack's top page is; the page above it is the guard below thread
        // 6's stack (the stacks are mapped one after another). Thread 0 reads there: a wild read into
        // some stack's guard, far from thread 0's own stack pointer.
        volatile int local = 1;
        if (threadIdx.x == 5) g_local = (long long)&local;
        __syncthreads();
        if (threadIdx.x == 0) out[0] = *(volatile int*)((g_local & ~4095LL) + 4096) + local;
    }
}
"""


def test_the_stack_advice_comes_only_with_an_overflow(tmp_path):
    module = CpuModule.build(STACKS, "stacks.cu", {"k": ["int*", "int"]}, tmp_path)
    out = np.zeros(4, np.int32)
    with pytest.raises(CpuKernelError) as overflow:
        module.launch("k", (1, 1, 1), (64, 1, 1), 0, [out, 0])
    assert str(overflow.value) == (
        "illegal memory access (SIGSEGV) in kernel k, block (0,0,0), thread 0: stack overflow (each thread has "
        "128 KiB; set ATTNLAB_CPU_STACK_KB)"
    )
    with pytest.raises(CpuFault) as wild:
        module.launch("k", (1, 1, 1), (64, 1, 1), 0, [out, 1])
    assert str(wild.value) == (
        "illegal memory access (SIGSEGV) in kernel k, block (0,0,0), thread 0: a read at address "
        f"{wild.value.address:#x}"
    )
    assert not wild.value.write


def grade_json(fixture: str, report: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "labrunner", "grade", "lab3", fixture, "--device", "cpu", "--no-timing"]
        + ["--json", str(report)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    result = json.loads(report.read_text())
    decisive = next(c for c in result["cases"] if c["name"] == result["decisive_case"])
    return {
        "exit": done.returncode,
        "verdict": result["verdict"],
        "case": decisive["name"],
        "message": decisive["message"],
    }


@pytest.mark.slow
def test_the_page_table_kernel_gets_one_verdict_in_five_grades(tmp_path):
    """The page number computed as b * maxPages + j / PAGE read past kCache: on the old heap layout it
    gave exit 4, 1, 4, 4 in four runs (a "stack overflow", a masked-nan hint); now the guard after k
    faults at the same element every time."""
    fixture = "tests/fixtures/lab3/wrong/page_number_ignores_table.cu"
    grades = [grade_json(fixture, tmp_path / f"grade{n}.json") for n in range(5)]
    assert grades == [grades[0]] * 5
    assert grades[0] == {
        "exit": 4,
        "verdict": "out-of-bounds",
        "case": "lengths-around-p",
        # the first block to fault is the grid's last that reads past k: every case runs its blocks last first
        "message": "out-of-bounds read of k in kernel decode_partial, block (2,7,9), thread 0: its byte 3213060 "
        "(element 803265), past the end of its 1277952 bytes (319488 elements of float32); on a GPU such an access "
        "reads or writes another allocation's memory, or faults",
    }
