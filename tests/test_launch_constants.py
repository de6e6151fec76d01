"""Launch constants are the student's numbers, so every one has an upper bound and every buffer sized
from them has a memory bound, both checked at the compile gate before anything is sized.

`extern "C" __constant__ int attnlab_partition_tokens = 2147483632;` once made the driver size lab 3's
cases from it (terabytes of K pages: a traceback on the CPU, a killed driver on the GPU, exit 6 for
a whole batch). Now such a file is a compile error naming the constant, its value and its bound, in
the time it takes to compile it, and a batch grades the other files as if it were not there."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from fixture_suite import FIXTURES, REPO, load_fixtures
from result_schema import validate_file

from labrunner.compile import launch_constants
from labrunner.compile.gate import load_submission
from labrunner.compile.launch_constants import build_plan, check_launch_constants, planned_shapes
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.labs import LABS
from labrunner.labs.definition import MAX_SHARED_BYTES, MAX_THREADS_PER_BLOCK, Lab
from labrunner.pipeline.correctness import select_cases
from labrunner.pipeline.grading_run import CaseOptions
from labrunner.truth import memory_bound
from labrunner.truth.cases import Case, Seed, geometry_case, load_catalogue
from labrunner.truth.memory_bound import MAX_BUFFER_BYTES, OverBound

HUGE_ROWS = FIXTURES / "lab2/hostile/huge_rows_per_block.cu"
HUGE_PARTITION = FIXTURES / "lab3/hostile/huge_partition_tokens.cu"
REFUSALS = {
    HUGE_ROWS: "attnlab_rows_per_block = 2147483647 is above its bound 1024",
    HUGE_PARTITION: "attnlab_partition_tokens = 2147483632 is above its bound 32768",
}
EVERY_CONSTANT = [(lab, name) for lab in LABS.values() for name in lab.launch_defaults]


def gate(lab: Lab, exported: dict[str, int], label: str = "k.cu") -> dict[str, int]:
    """The launch-constant step of the gate on a module that exports `exported` (no compiler needed)."""
    return check_launch_constants(lab, SimpleNamespace(launch_constants=exported), label)


def refused(lab: Lab, exported: dict[str, int], label: str = "k.cu") -> str:
    with pytest.raises(AttnlabError) as caught:
        gate(lab, exported, label)
    assert caught.value.exit_code == ExitCode.COMPILE_ERROR == 3
    return caught.value.message


# --- every constant has a bound, and the bounds come from the hardware and the lab's sizes ----------


def test_every_launch_constant_of_every_lab_has_a_bound():
    for lab in LABS.values():
        assert list(lab.bounds) == list(lab.launch_defaults), lab.name


def test_a_lab_with_a_constant_and_no_bound_is_refused_when_it_is_defined():
    lab = LABS["lab2"]
    with pytest.raises(
        ValueError, match=r"^lab2: every launch constant needs a bound .*unbounded: \['attnlab_smem_bytes'\]"
    ):
        Lab(
            name="lab2",
            title="",
            teaches="",
            entry_points=(),
            launch_defaults=lab.launch_defaults,
            bounds={k: v for k, v in lab.bounds.items() if k != "attnlab_smem_bytes"},
            plan_launches=lab.plan_launches,
        )


def test_threads_and_shared_memory_are_bounded_by_the_hardware():
    # a CUDA block holds 1,024 threads; Hopper lets one block opt in to 227 KiB of shared memory
    assert (MAX_THREADS_PER_BLOCK, MAX_SHARED_BYTES) == (1024, 232448)
    for lab, name in EVERY_CONSTANT:
        if "threads" in name:
            assert lab.bounds[name] == 1024, name
        if name.endswith("smem_bytes"):
            assert lab.bounds[name] == 232448, name


def test_tiles_and_partitions_are_bounded_by_the_labs_own_sizes():
    lab1, lab2, lab3 = (load_catalogue(name) for name in ("lab1", "lab2", "lab3"))
    # lab 1: a tile over rows or keys is at most half of the longest T timed (2,048), so it spans two blocks
    for name in (
        "attnlab_scores_tile_keys",
        "attnlab_scores_tile_rows",
        "attnlab_softmax_rows_per_block",
        "attnlab_wsum_tile_rows",
    ):
        assert LABS["lab1"].bounds[name] == max(lab1.timing["sizes"]) // 2 == 1024
    assert LABS["lab1"].bounds["attnlab_wsum_tile_dims"] == 64  # a head's dims
    # lab 2: rows per block is at most half of the longest chunk graded or timed (2,048 rows)
    longest_chunk = max([c.rows for c in lab2.cases] + [lab2.timing["rows"]])
    assert LABS["lab2"].bounds["attnlab_rows_per_block"] == longest_chunk // 2 == 1024
    assert LABS["lab2"].bounds["attnlab_heads_per_block"] == 32
    # lab 3: a partition is at most the longest sequence graded or timed (32,768 keys)
    literal = [n for c in lab3.cases for n in c.lengths if isinstance(n, int)]
    assert LABS["lab3"].bounds["attnlab_partition_tokens"] == max(literal + [lab3.timing["prefix"]]) == 32768
    assert LABS["lab3"].bounds["attnlab_heads_per_block"] == 4  # one KV group


def test_each_starter_states_the_bound_where_each_constant_is_declared():
    declared = re.compile(r'^extern "C" __constant__ int (attnlab_\w+) = [^;]+;\s*//(.*)$', re.MULTILINE)
    for lab in LABS.values():
        text = lab.starter_path.read_text()
        found = dict(declared.findall(text))
        assert found, lab.name
        for name, comment in found.items():
            assert f"at most {lab.bounds[name]}" in comment, f"{lab.name} {name}: {comment}"
        for name in set(lab.launch_defaults) - set(found):  # lab 1's shared memory, not declared there
            assert name.endswith("smem_bytes") and "*_smem_bytes      at most 232,448 (227 KiB)" in text, name


# --- past a bound: one line naming the constant, its value and its bound ---------------------------


@pytest.mark.parametrize("lab, name", EVERY_CONSTANT, ids=lambda x: getattr(x, "name", x))
@pytest.mark.parametrize("past", ["one", "int32-max"])
def test_a_constant_past_its_bound_is_a_compile_error_that_names_it(lab, name, past):
    bound = lab.bounds[name]
    value = bound + 1 if past == "one" else 2**31 - 1
    # said once: a rule of the lab's own about the same constant (divides 32, whole pages, x * y
    # threads) would only repeat it
    assert refused(lab, {name: value}) == f"k.cu: error: launch constants: {name} = {value} is above its bound {bound}"


@pytest.mark.parametrize("lab, name", EVERY_CONSTANT, ids=lambda x: getattr(x, "name", x))
def test_a_constant_at_its_bound_is_no_bound_problem(lab, name):
    assert lab.over_bounds(lab.constants({name: lab.bounds[name]})) == []


def test_the_bounds_admit_the_extremes_of_every_lab_together():
    # each lab's largest grids and buffers: the smallest tiles and partitions, and the largest
    extremes = {
        "lab1": [
            {n: 1 for n in LABS["lab1"].bounds if "tile" in n or "rows" in n},
            {n: b for n, b in LABS["lab1"].bounds.items() if "tile" in n or "rows" in n or "smem" in n},
        ],
        "lab2": [
            {"attnlab_rows_per_block": 1},
            {
                "attnlab_rows_per_block": 1024,
                "attnlab_threads": 1024,
                "attnlab_heads_per_block": 32,
                "attnlab_smem_bytes": 232448,
            },
        ],
        "lab3": [
            {"attnlab_partition_tokens": 16},
            {
                "attnlab_partition_tokens": 32768,
                "attnlab_heads_per_block": 4,
                "attnlab_partial_threads": 1024,
                "attnlab_combine_threads": 1024,
                "attnlab_partial_smem_bytes": 232448,
            },
        ],
    }
    for name, sets in extremes.items():
        lab = LABS[name]
        for exported in sets:
            constants = gate(lab, exported)
            for rows, prefix in planned_shapes(lab, constants):
                for launch in lab.plan_launches(constants, rows, prefix):
                    # CUDA's grid limits; a block's threads and shared memory as the hardware has them
                    assert (
                        1 <= launch.grid[0] <= 2**31 - 1 and 1 <= min(launch.grid[1:]) <= max(launch.grid[1:]) <= 65535
                    )
                    assert launch.block[0] * launch.block[1] * launch.block[2] <= 1024
                    assert 0 <= launch.shared_bytes <= 232448


def test_the_smallest_partition_sizes_the_largest_buffer_at_exactly_the_memory_bound():
    lab = LABS["lab3"]
    constants = gate(lab, {"attnlab_partition_tokens": 16})
    # lab 3's timing shape (64 sequences, the longest 32,768 keys): 2,048 partitions of 16 keys
    assert lab.workspace(constants, 64, 32768)["partOut"] * 4 == 64 * 32 * 2048 * 64 * 4 == MAX_BUFFER_BYTES == 1 << 30


def test_the_largest_partition_sizes_the_largest_case():
    lab = LABS["lab3"]
    constants = gate(lab, {"attnlab_partition_tokens": 32768})
    catalogue = load_catalogue("lab3")
    largest = max((c.resolved(32768).buffer_bytes()["k"], c.name) for c in catalogue.cases)
    assert largest == ((262147 // 16 + 1 + 17 + 3) * 16 * 8 * 64 * 4, "skewed")  # 8p + 3 keys, 15 short ones, 3 spare
    assert largest[0] < MAX_BUFFER_BYTES
    build_plan(lab, constants)


# --- every shipped kernel and every correct fixture is admitted -----------------------------------

ADMITTED = sorted({*REPO.glob("kernels/lab*/*.cu"), *FIXTURES.glob("lab*/correct/*.cu")})


@pytest.mark.parametrize("path", ADMITTED, ids=lambda p: str(p.relative_to(REPO)))
@pytest.mark.slow
def test_shipped_kernels_and_correct_fixtures_are_within_every_bound(path):
    lab = LABS[next(part for part in path.parts if part.startswith("lab"))]
    submission = load_submission(lab, path)
    assert lab.over_bounds(submission.constants) == []


# --- the memory bound: every buffer sized from a file's constants, at every shape the driver runs --


def test_the_gate_plans_every_shape_grade_and_bench_run():
    seed = Seed(1, "--seed")
    for lab, exported in (
        (LABS["lab1"], {"attnlab_scores_tile_keys": 1024}),
        (LABS["lab2"], {}),
        (LABS["lab2"], {"attnlab_rows_per_block": 1024}),
        (LABS["lab3"], {}),
        (LABS["lab3"], {"attnlab_partition_tokens": 16}),
    ):
        constants = lab.constants(exported)
        planned = set(planned_shapes(lab, constants))
        for backend in ("gpu", "cpu"):
            for full in (False, True):
                run, _ = select_cases(lab, backend, CaseOptions(seed, full=full), constants)
                assert {(c.rows, c.prefix) for c in run} <= planned, (lab.name, exported, backend, full)


def test_a_buffer_past_the_memory_bound_is_a_compile_error_naming_the_constant_that_sized_it(monkeypatch):
    monkeypatch.setattr(memory_bound, "MAX_BUFFER_BYTES", 256 << 20)
    assert refused(LABS["lab3"], {"attnlab_partition_tokens": 16, "attnlab_partial_threads": 128}, "decode.cu") == (
        "decode.cu: error: launch constants: the partial buffers at B = 64, longest 32768: buffer partOut would "
        "hold 1,073,741,824 bytes (1.0 GiB), above the 268,435,456-byte (256.0 MiB) bound on any buffer a file's "
        "launch constants size; it is sized by attnlab_partition_tokens = 16"
    )
    gate(LABS["lab3"], {"attnlab_partition_tokens": 64})  # 256 MiB exactly: within the bound


def test_a_case_past_the_memory_bound_names_its_case_and_buffer(monkeypatch):
    monkeypatch.setattr(memory_bound, "MAX_BUFFER_BYTES", 8 << 20)
    assert refused(LABS["lab2"], {"attnlab_rows_per_block": 1024}, "flash.cu") == (
        "flash.cu: error: launch constants: case geometry-C2049-P31: buffer q would hold 16,785,408 bytes "
        "(16.0 MiB), above the 8,388,608-byte (8.0 MiB) bound on any buffer a file's launch constants size; "
        "it is sized by attnlab_rows_per_block = 1024"
    )


def test_two_tiles_that_each_size_the_buffer_are_both_named(monkeypatch):
    # 512 MiB: lab 1's timed T = 2,048 workspace (512 MiB exactly) fits, the geometry case's T = 2,049 does not
    monkeypatch.setattr(memory_bound, "MAX_BUFFER_BYTES", 32 * 2048 * 2048 * 4)
    lab = LABS["lab1"]
    tail = (
        "the scores workspace at T = 2049: buffer scores would hold 537,395,328 bytes (512.5 MiB), above the "
        "536,870,912-byte (512.0 MiB) bound on any buffer a file's launch constants size; it is sized by "
    )
    # the softmax threads changed too, but its default does not bring the workspace within the bound: not named
    assert (
        refused(lab, {"attnlab_scores_tile_keys": 1024, "attnlab_softmax_threads": 128})
        == f"k.cu: error: launch constants: {tail}attnlab_scores_tile_keys = 1024"
    )
    assert (
        refused(lab, {"attnlab_scores_tile_keys": 1024, "attnlab_wsum_tile_rows": 1024})
        == f"k.cu: error: launch constants: {tail}attnlab_scores_tile_keys = 1024, attnlab_wsum_tile_rows = 1024"
    )


def test_every_allocation_sized_from_a_constant_is_checked_where_it_is_sized():
    """Behind the gate: the places a file's numbers become sizes refuse them too, before any array exists."""
    with pytest.raises(OverBound, match=r"^case t at p = 2147483632: buffer k would hold [\d,]+ bytes \(32\.0 TiB\)"):
        Case("t", rows=0, lengths=("8p+3",)).resolved(2147483632)
    with pytest.raises(
        OverBound, match=r"^case geometry-C4294967295-P31: buffer q would hold [\d,]+ bytes \(32\.0 TiB\)"
    ):
        geometry_case(load_catalogue("lab2"), [2**31 - 1])
    with pytest.raises(OverBound, match=r"^the partial buffers at B = 64, longest 32768: buffer partOut would hold"):
        LABS["lab3"].workspace(LABS["lab3"].constants({"attnlab_partition_tokens": 1}), 64, 32768)
    with pytest.raises(OverBound, match=r"^the scores workspace at T = 100000: buffer scores"):
        LABS["lab1"].workspace(LABS["lab1"].constants({}), 100_000, 0)
    assert OverBound("x", 1).exit_code == ExitCode.COMPILE_ERROR


def test_the_defaults_of_every_lab_fit():
    for lab in LABS.values():
        assert launch_constants.sizing_constants(lab, lab.constants({})) == []
        build_plan(lab, lab.constants({}))


# --- the hostile files, through the real command line ---------------------------------------------


def attnlab(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    environment.pop("ATTNLAB_SEED", None)
    return subprocess.run(
        [sys.executable, "-m", "labrunner", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_the_hostile_fixtures_expect_a_compile_error():
    hostile = {f.path: f.expected for f in load_fixtures() if f.path in REFUSALS}
    assert hostile == {path: {"verdict": "compile-error", "exit_code": 3} for path in REFUSALS}


# Runs the command line in this process, after its imports, and reports the driver's own CPU time for
# the command (the compiler's children excluded) and the peak resident memory of the driver and of
# every child it waited for.
MEASURED = """
import json, resource, sys
from labrunner.cli import main
report, args = sys.argv[1], sys.argv[2:]
before = resource.getrusage(resource.RUSAGE_SELF)
try:
    main(args, prog_name="attnlab")
except SystemExit as stop:
    code = stop.code
after = resource.getrusage(resource.RUSAGE_SELF)
children = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(report, "w") as handle:
    json.dump({"code": code, "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
               "peak_mib": max(after.ru_maxrss, children.ru_maxrss) / 1024}, handle)
"""


@pytest.mark.parametrize("path", sorted(REFUSALS), ids=lambda p: p.name)
@pytest.mark.slow
def test_a_hostile_constant_is_refused_in_under_a_second_and_allocates_nothing_large(path, tmp_path):
    lab = path.parent.parent.name
    # Started by a small shell, not straight from pytest: Linux carries a process's peak memory across
    # exec, so a child of a test process grown large would report that process's peak as its own.
    completed = subprocess.run(
        [
            "/bin/sh",
            "-c",
            '"$0" "$@"; exit $?',
            sys.executable,
            "-c",
            MEASURED,
            str(tmp_path / "usage.json"),
            "grade",
            lab,
            str(path),
            "--device",
            "cpu",
            "--json",
            str(tmp_path / "result.json"),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    usage = json.loads((tmp_path / "usage.json").read_text())
    result = validate_file(tmp_path / "result.json")
    message = f"{path}: error: launch constants: {REFUSALS[path]}"
    assert (usage["code"], result["verdict"], result["exit_code"], result["error"]) == (3, "compile-error", 3, message)
    assert message in completed.stdout + completed.stderr and "Traceback" not in completed.stderr
    assert result["cases"] == []
    assert usage["cpu_s"] < 1.0, usage
    assert usage["peak_mib"] < 200, usage


def cpu_backend_ready() -> bool:
    from labrunner.run.cpu_device import cpu_backend_status

    return cpu_backend_status()[0]


@pytest.mark.skipif(not cpu_backend_ready(), reason="no C++ compiler for the CPU backend")
@pytest.mark.parametrize(
    "lab, hostile, case", [("lab3", HUGE_PARTITION, "single-token"), ("lab2", HUGE_ROWS, "C1-P31")]
)
@pytest.mark.slow
def test_a_batch_with_a_hostile_constant_grades_every_other_file(lab, hostile, case, tmp_path):
    solution = REPO / "kernels" / lab / "solution.cu"
    completed = attnlab(
        "grade",
        lab,
        str(solution),
        str(hostile),
        "--jobs",
        "2",
        "--device",
        "cpu",
        "--case",
        case,
        "--out-dir",
        "out",
        cwd=tmp_path,
    )
    assert completed.returncode == 3, completed.stderr[-2000:]  # the worst submission's code, not 6
    graded = validate_file(tmp_path / "out" / "solution.json")
    assert (graded["verdict"], graded["exit_code"], [(c["name"], c["status"]) for c in graded["cases"]]) == (
        "pass",
        0,
        [(case, "pass")],
    )
    failed = validate_file(tmp_path / "out" / f"{hostile.stem}.json")
    assert (failed["verdict"], failed["exit_code"], failed["error"]) == (
        "compile-error",
        3,
        f"{hostile}: error: launch constants: {REFUSALS[hostile]}",
    )
    with open(tmp_path / "out" / "gradebook.csv", newline="") as handle:
        assert [(r["verdict"], r["exit_code"]) for r in csv.DictReader(handle)] == [
            ("pass", "0"),
            ("compile-error", "3"),
        ]
