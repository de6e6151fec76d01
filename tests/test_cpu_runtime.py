"""The CPU backend's fiber runtime, checked in C++: who runs when, what a barrier waits for, what it reports.

`cpu_runtime/runtime_checks.cpp` includes the runtime's headers as the CPU build does and launches
small kernels through the runtime's own launch entry; it prints one line per check. It is built
once per session (about two seconds) with the CPU build's flags, and every line is pinned here
exactly: the thread orders a schedule gives, and the messages a divergent barrier or shuffle gets,
with the file and line the runtime names. One more build, against a copy of the runtime with a
wrong rule planted, shows that the program's own comparisons fail it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from labrunner.run.cpu import module as cpu_module
from labrunner.run.cpu.module import CXXFLAGS, _cxx, cpu_compiler_available

SOURCE = Path(__file__).parent / "cpu_runtime" / "runtime_checks.cpp"
RUNTIME = Path(cpu_module.__file__).parent

pytestmark = pytest.mark.skipif(cpu_compiler_available() is not None, reason=str(cpu_compiler_available()))


def site(marker: str) -> str:
    """`runtime_checks.cpp:LINE` of the line that carries `// site: MARKER`, as the runtime names it."""
    (line,) = [n for n, text in enumerate(SOURCE.read_text().splitlines(), 1) if text.endswith(f"// site: {marker}")]
    return f"{SOURCE.name}:{line}"


EXPECTED = {
    "every_thread_runs": "2 blocks of 4x3x2 threads: each thread ran once, with its own index, under schedules 0, 1 "
    "and 2",
    # The last thread to arrive at the barrier releases the others and runs on first.
    "order_forward": "block 0: 0 1 2 3 4 5 6 7 | 7 0 1 2 3 4 5 6",
    "order_reversed": "block 0: 7 6 5 4 3 2 1 0 | 0 7 6 5 4 3 2 1",
    # Seeded priorities: fixed by the schedule number and the block, drawn again at the barrier.
    "order_seeded": "schedule 2: block 0: 2 7 4 6 0 1 3 5 | 5 0 6 1 2 3 7 4, block 1: 0 1 7 3 6 5 4 2 | "
    "2 0 7 5 1 3 4 6; schedule 3: block 0: 1 5 3 7 2 6 0 4 | 4 2 5 0 6 3 1 7, block 1: 7 6 0 1 5 3 2 4 | "
    "4 6 5 2 1 0 3 7",
    # The schedule number orders the blocks: in order, reversed (1 with the threads, -1 alone), a
    # shuffle seeded by the number (-N as N); every block once, over any grid shape.
    "block_orders": "0: 0 1 2 3 4 5 6 7; 1: 7 6 5 4 3 2 1 0; -1: 7 6 5 4 3 2 1 0; 2 and -2: 5 3 7 2 0 1 6 4; "
    "3: 1 6 4 2 3 5 0 7; 5 over a grid of 3x2x2: 6 2 8 7 4 0 5 11 3 10 1 9",
    # Exactly the bytes asked for: the next one faults, and with none asked the first does.
    "dynamic_shared_bounds": "byte 4095 of 4096 written; out-of-bounds write to dynamic shared memory in kernel "
    "dyn_write, block (0,0,0), thread 0: its byte 4096, past the end of the 4096 bytes the launch asked for (a GPU "
    "gives a launch exactly the dynamic shared memory it asks for); out-of-bounds write to dynamic shared memory in "
    "kernel dyn_write, block (0,0,0), thread 0: the launch asked for none (0 bytes), yet the kernel reads or writes "
    "extern __shared__ (its byte 0); ask for the bytes it uses in the launch's shared-memory size",
    # The bytes that share a page or a 16-byte unit with the launch's are checked when the block ends.
    "dynamic_shared_slack": "out-of-bounds write to dynamic shared memory (the launch asked for 100 bytes) in kernel "
    "dyn_write, block (0,0,0): its byte 100, past its end, was written (found when the block ended, so no thread is "
    "named); out-of-bounds write to dynamic shared memory (the launch asked for 100 bytes) in kernel dyn_write, "
    "block (0,0,0): its byte -8, before its start, was written (found when the block ended, so no thread is named)",
    "barrier_makes_writes_visible": "128 threads exchanged values and summed them over a barrier per step, under "
    "schedules 0-7, with both context switches",
    "missing_barrier_reads_poison": "without __syncthreads, 7 of 8 threads read the poison in order, 1 reversed",
    "barrier_votes": "64 threads, 22 true: every thread got count 22, and 0, or 1 (all true: and 1)",
    "barrier_after_exits": "threads 0-4 passed two barriers while threads 5-7 had exited, under schedules 0-3",
    "barrier_divergence": "in order: barrier divergence in kernel divergent, block (0,0,0): thread 4 waits at "
    f"__syncthreads ({site('divergent-high')}) while thread 0 waits at __syncthreads ({site('divergent-low')}); "
    "reversed: barrier divergence in kernel divergent, block (0,0,0): thread 3 waits at __syncthreads "
    f"({site('divergent-low')}) while thread 4 waits at __syncthreads ({site('divergent-high')})",
    "barrier_against_warp_op": "barrier divergence in kernel against_warp, block (0,0,0): thread 0 waits at "
    f"__syncthreads ({site('against-warp-barrier')}) while thread 32 waits at __syncwarp "
    f"({site('against-warp-syncwarp')})",
    "warp_shuffles": "two warps: xor sum 496 and 1520, broadcast of lane 5, down by 1, up by 2 in groups of 8, "
    "ballot 0xaaaaaaaa, under schedules 0-3",
    "shuffle_with_exited_lane": "shuffle cannot complete in kernel shuffle_exited, block (0,0,0): thread 0 (warp 0, "
    f"lane 0) waits at __shfl_sync ({site('shuffle-exited')}) with mask 0xffffffff, but lane 3 (thread 3) has exited",
}


def build(runtime: Path, binary: Path) -> Path:
    """runtime_checks.cpp built against the runtime headers in `runtime`, with the CPU build's flags
    (less -shared: this is a program). Compiled from its own folder under its bare name, so that the
    runtime's messages name it `runtime_checks.cpp:LINE`, as they name a kernel file by its label."""
    flags = [f for f in CXXFLAGS if f != "-shared"]
    subprocess.run(
        [_cxx(), *flags, "-I", str(runtime), SOURCE.name, "-o", str(binary)], cwd=SOURCE.parent, check=True, timeout=120
    )
    return binary


@pytest.fixture(scope="session")
def checks_binary(tmp_path_factory) -> Path:
    return build(RUNTIME, tmp_path_factory.mktemp("cpu-runtime") / "runtime_checks")


def run(binary: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60)


def test_every_check_of_the_program_is_pinned_here(checks_binary):
    done = run(checks_binary, "--list")
    assert (done.returncode, done.stdout.split(), done.stderr) == (0, list(EXPECTED), "")


@pytest.mark.parametrize("check", list(EXPECTED))
def test_runtime_check(checks_binary, check):
    done = run(checks_binary, check)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{check}: ok: {EXPECTED[check]}\n", "")


def test_all_checks_run_in_one_go_in_their_order(checks_binary):
    done = run(checks_binary)
    want = "".join(f"{check}: ok: {line}\n" for check, line in EXPECTED.items())
    assert (done.returncode, done.stdout, done.stderr) == (0, want, "")


def test_a_name_that_is_no_check_exits_2(checks_binary):
    done = run(checks_binary, "no_such_check")
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        "runtime_checks: no check named no_such_check (see --list)\n",
    )


@pytest.mark.slow
def test_a_planted_wrong_rule_fails_its_check_and_the_exit_status(tmp_path):
    """The program's own comparisons bite: with the barrier releasing in launch order even when the
    schedule is reversed, order_reversed says FAILED and the program exits 1."""
    real, wrong = "int i = rt.reverse ? rt.nthreads - 1 - k : k;", "int i = k;"
    for path in RUNTIME.glob("*.h"):
        text = path.read_text()
        if path.name == "fiber_barriers.h":
            assert text.count(real) == 1, f"fiber_barriers.h no longer holds `{real}` exactly once"
            text = text.replace(real, wrong)
        (tmp_path / path.name).write_text(text)
    binary = build(tmp_path, tmp_path / "runtime_checks")
    done = run(binary, "order_reversed")
    assert (done.returncode, done.stdout) == (1, "order_reversed: FAILED: block 0: 7 6 5 4 3 2 1 0 | 0 1 2 3 4 5 6 7\n")
