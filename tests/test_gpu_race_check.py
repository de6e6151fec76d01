"""`grade --race-check` on the GPU, end to end on the numpy stand-in, with compute-sanitizer faked.

The sanitizer runs the small cases, in the catalogue's order, each after its own run, and the first
hazard (or the first check that could not finish) decides that case; no case after it is checked.
A case whose guards or inputs already failed, or whose output already carries the race, is never
replayed: its own verdict stands. What is pinned here is which case the sanitizer's word decides,
its exact message, the replays made, and that nothing else of the run changes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gpu_standin import InProcessWorker, NumpyGpu

from labrunner.cli import main
from labrunner.exit_codes import ExitCode
from labrunner.labs.definition import Lab
from labrunner.pipeline import backend as backend_module
from labrunner.pipeline import correctness as cases_module
from labrunner.pipeline import grade as grade_pipeline
from labrunner.run.worker import WorkerFailure
from labrunner.truth.cases import Case, Catalogue
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS
from labrunner.truth.poison import POISON_BITS, SHARED_POISON_BITS

REPO = Path(__file__).resolve().parent.parent
SOLUTION = REPO / "kernels/lab2/solution.cu"
ROW = QUERY_HEADS * HEAD_DIM
# Three small cases (the sanitizer's) around one that is not.
CATALOGUE = Catalogue(
    lab="lab2",
    cases=(
        Case("C3-P31", 3, 31, cpu=True),
        Case("C5-P7", 5, 7, cpu=True),
        Case("C9-P2", 9, 2),
        Case("C2-P0", 2, 0, cpu=True),
    ),
    timing={"rows": 3, "prefix": 31},
)
HAZARD = (
    "racecheck: shared-memory race in kernel flash_prefill between a write at flash.cu:41 and a read at "
    "flash.cu:57: a missing __syncthreads()?"
)
INCONCLUSIVE = "compute-sanitizer is not installed, so the GPU's race check could not run"


class Misbehaving(NumpyGpu):
    """The oracle, except on the cases named by their rows: `unwritten` leaves the last row as the
    poison left it, `past` writes one element past the output's end, `poisoned` leaves the shared-memory
    poison in its first row's first head."""

    def __init__(self, unwritten: tuple[int, ...] = (), past: tuple[int, ...] = (), poisoned: tuple[int, ...] = ()):
        super().__init__()
        self.unwritten, self.past, self.poisoned = unwritten, past, poisoned

    def compute(self, buffers):
        super().compute(buffers)
        rows = buffers["out"].size // ROW
        if rows in self.unwritten:
            buffers["out"].reshape(rows, ROW)[-1].view(np.uint32)[:] = POISON_BITS
        if rows in self.poisoned:
            buffers["out"].reshape(rows, ROW)[0, :HEAD_DIM].view(np.uint32)[:] = SHARED_POISON_BITS


class Worker(InProcessWorker):
    backend = "gpu"

    def __init__(self, device, crash: tuple[int, ...] = ()):
        super().__init__(device)
        self.crash = crash

    def run_case(self, role, launches, inputs, writable, returned, timeout_s, reverse_threads=False, quiet=False):
        if writable["out"] // ROW in self.crash:
            raise WorkerFailure("crash", "cudaErrorIllegalAddress: an illegal memory access was encountered")
        run = super().run_case(role, launches, inputs, writable, returned, timeout_s, reverse_threads)
        if writable["out"] // ROW in self.device.past:
            before, after = run.bands["out"]
            after = after.copy()
            after[0] = 0.0
            run.bands["out"] = (before, after)
        return run


@pytest.fixture
def standin(monkeypatch, tmp_path):
    """Returns `setup(reports, device=..., crash=...)`; the replays the sanitizer made, by rows, fill `replayed`."""
    replayed: list[int] = []

    def setup(reports: dict[int, tuple[str | None, str | None]], device=None, crash=()):
        worker = Worker(device or Misbehaving(), crash)
        monkeypatch.setattr(grade_pipeline, "Worker", lambda backend: worker)

        def find_hazard(payload, case_timeout_s):
            rows = payload["request"]["writable"]["out"] // ROW
            replayed.append(rows)
            return reports.get(rows, (None, None))

        monkeypatch.setattr(cases_module, "find_hazard", find_hazard)

    monkeypatch.setattr(backend_module, "gpu_status", lambda: (True, "NVIDIA H200"))
    monkeypatch.setattr(Lab, "catalogue", property(lambda lab: CATALOGUE))
    monkeypatch.setattr(cases_module, "replay_under_sanitizer", lambda payload, case_timeout_s: None)
    monkeypatch.chdir(tmp_path)
    setup.replayed = replayed
    return setup


def grade():
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["grade", "lab2", str(SOLUTION), "--device", "gpu", "--race-check", "--no-timing", "--json", "r.json"]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result, json.loads(Path("r.json").read_text())


def statuses(report):
    return [(c["name"], c["status"]) for c in report["cases"]]


@pytest.mark.slow
def test_the_first_hazard_decides_its_case_and_no_later_case_is_replayed(standin):
    standin({5: (HAZARD, None), 2: (HAZARD, None)})
    result, report = grade()
    assert standin.replayed == [3, 5]
    assert statuses(report) == [("C3-P31", "pass"), ("C5-P7", "race"), ("C9-P2", "pass"), ("C2-P0", "pass")]
    raced = report["cases"][1]
    assert raced["message"] == HAZARD  # the tool names the kernel and line: nothing is appended
    assert (raced["bad_elements"], raced["first_bad"], raced["failing_rows"]) == (0, None, [])
    assert isinstance(raced["max_abs_err"], float)  # the values were checked, and passed
    assert (report["verdict"], report["exit_code"], report["decisive_case"]) == ("race", 4, "C5-P7")
    assert report["hints"] == []
    assert result.exit_code == ExitCode.MISBEHAVED


@pytest.mark.slow
def test_a_check_that_could_not_finish_is_inconclusive_and_ends_the_search(standin):
    standin({3: (None, INCONCLUSIVE), 5: (HAZARD, None)})
    _, report = grade()
    assert standin.replayed == [3]
    assert statuses(report)[:2] == [("C3-P31", "race-check-inconclusive"), ("C5-P7", "pass")]
    assert report["cases"][0]["message"] == INCONCLUSIVE
    assert (report["verdict"], report["exit_code"]) == ("race-check-inconclusive", 4)


@pytest.mark.slow
def test_an_unwritten_output_with_a_hazard_is_a_race_and_keeps_its_numbers_and_evidence(standin):
    standin({5: (HAZARD, None)}, Misbehaving(unwritten=(5,)))
    _, report = grade()
    assert standin.replayed == [3, 5]
    raced = report["cases"][1]
    assert (raced["status"], raced["message"]) == ("race", HAZARD)
    assert (raced["bad_elements"], raced["failing_rows"], raced["max_abs_err"]) == (ROW, [4], "nan")
    assert raced["first_bad"] == {
        "row": 4,
        "head": 0,
        "col": 0,
        "got": None,
        "expected": raced["first_bad"]["expected"],
    }
    # the hints read the output as its values showed it (never written from row 4 on), as before the
    # sanitizer ran: its hazard is a verdict with its own words, not evidence about the values
    assert [hint["hazard"] for hint in report["hints"]] == ["bounds", "unwritten"]
    assert report["hints"][0]["text"] == (
        "only the last rows fail (from row 4 on in case C5-P7): check the bounds of your row loops and how "
        "each block finds its first row"
    )
    assert (report["verdict"], report["decisive_case"]) == ("race", "C5-P7")


@pytest.mark.slow
def test_a_case_whose_guards_failed_keeps_its_verdict_and_the_next_small_case_is_checked(standin):
    standin({3: (HAZARD, None), 5: (HAZARD, None)}, Misbehaving(past=(3,)))
    _, report = grade()
    assert standin.replayed == [5]
    assert statuses(report)[:2] == [("C3-P31", "out-of-bounds"), ("C5-P7", "race")]
    assert report["decisive_case"] == "C3-P31"


@pytest.mark.slow
def test_no_hazard_anywhere_leaves_every_case_as_its_run_judged_it(standin):
    standin({})
    _, report = grade()
    assert standin.replayed == [3, 5, 2]
    assert statuses(report) == [("C3-P31", "pass"), ("C5-P7", "pass"), ("C9-P2", "pass"), ("C2-P0", "pass")]
    assert (report["verdict"], report["exit_code"]) == ("pass", 0)


@pytest.mark.slow
def test_an_output_that_carries_the_race_is_not_replayed_and_the_next_small_case_is(standin):
    standin({3: (HAZARD, None), 5: (HAZARD, None)}, Misbehaving(poisoned=(3,)))
    _, report = grade()
    assert standin.replayed == [5]
    assert statuses(report)[:2] == [("C3-P31", "race"), ("C5-P7", "race")]
    assert report["cases"][0]["message"] == (
        "row 0, head 0, col 0: read shared memory no thread had written since the last barrier: a missing "
        "__syncthreads()? (64 of 6144 elements carry the shared-memory poison); row 0 fails (1 of 3); "
        "in kernel flash_prefill"
    )
    assert report["cases"][1]["message"] == HAZARD


@pytest.mark.slow
def test_a_crash_stops_the_run_and_the_cases_before_it_keep_their_own_verdicts(standin):
    # each case is judged once, with the sanitizer's word, before the next one runs: a crash later on
    # leaves an earlier case's race standing (the crash, more severe, is the run's verdict)
    standin({3: (HAZARD, None)}, crash=(9,))
    _, report = grade()
    assert standin.replayed == [3]
    assert statuses(report) == [("C3-P31", "race"), ("C5-P7", "pass"), ("C9-P2", "crash"), ("C2-P0", "not-run")]
    assert report["cases"][0]["message"] == HAZARD
    assert report["cases"][3]["message"] == "not run: case C9-P2 ended in a crash"
    assert (report["verdict"], report["exit_code"], report["decisive_case"]) == ("crash", 4, "C9-P2")
