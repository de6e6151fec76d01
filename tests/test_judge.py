"""The judge (truth/judge.py): one decision per case from its evidence, in the order that explains.

Runs are small numpy stand-ins for what the worker returns: guard bands of canaries, the inputs as
the kernels left them, the output. Every verdict is pinned with its exact message and numbers, and
the evidence asked for lazily (other schedules, the sanitizer) is pinned by what was asked.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import pytest

from labrunner.truth.catalogue import Case
from labrunner.truth.contract import EXACT_RULE, HEAD_DIM, PASS_RULE, QUERY_HEADS
from labrunner.truth.judge import Judgement, judge, judge_failure, same_values
from labrunner.truth.poison import CANARY_BITS, GUARD_ELEMENTS, POISON_BITS, SHARED_POISON_BITS, filled
from labrunner.truth.verdict import Status

CASE = Case("C2-P0", 2, 0)
ELEMENTS = 2 * QUERY_HEADS * HEAD_DIM  # 4096
SCORES = 2 * QUERY_HEADS * 2  # a lab 1 workspace of [32][2][2]
HAZARD = (
    "racecheck: shared-memory race in kernel flash_prefill between a write at flash.cu:41 and a read at flash.cu:57"
)
INCONCLUSIVE = "compute-sanitizer is not installed, so the GPU's race check could not run"


def reference() -> np.ndarray:
    """A float64 reference whose float32 copy passes: 0.5 everywhere, 0 in row 0's head 1."""
    ref = np.full((2, QUERY_HEADS, HEAD_DIM), 0.5)
    ref[0, 1] = 0.0
    return ref


def inputs() -> dict[str, np.ndarray]:
    return {name: np.arange(6, dtype=np.float32) + i for i, name in enumerate("qkv")}


def band() -> np.ndarray:
    return filled(GUARD_ELEMENTS, CANARY_BITS)


@dataclass
class Run:
    """What the worker returns for one case: a correct output unless changed, clean bands, untouched inputs."""

    outputs: dict[str, np.ndarray] = field(default_factory=lambda: {"out": reference().astype(np.float32).ravel()})
    bands: dict[str, tuple[np.ndarray, np.ndarray]] = field(
        default_factory=lambda: {"out": (band(), band()), "scores": (band(), band())}
    )
    inputs_after: dict[str, np.ndarray] = field(default_factory=inputs)

    @property
    def out(self) -> np.ndarray:
        return self.outputs["out"].reshape(2, QUERY_HEADS, HEAD_DIM)


def judged(run: Run, case: Case = CASE, writable=None, given=None, **evidence) -> Judgement:
    return judge(
        case,
        run,
        inputs() if given is None else given,
        {"out": ELEMENTS} if writable is None else writable,
        reference(),
        **evidence,
    )


class Asked:
    """Lazy evidence that records what the judge asked for: other schedules' runs, the sanitizer's report."""

    def __init__(self, runs=(), report=(None, None)):
        self.runs, self.report = list(runs), report
        self.schedules: list[str] = []
        self.sanitized = 0

    def other_schedules(self):
        for label, run in self.runs:
            self.schedules.append(label)
            yield label, run

    def sanitizer(self):
        self.sanitized += 1
        return self.report

    def evidence(self):
        return {"other_schedules": self.other_schedules(), "sanitizer": self.sanitizer}


PASSED = dict(max_abs_err=0.0, bad_elements=0, first_bad=None, failing_rows=(), nonfinite=0)


def wrong_run() -> Run:
    run = Run()
    run.out[1, 0, 3] = 1.5
    return run


WRONG_MESSAGE = (
    f"row 1, head 0, col 3: got 1.5, expected 0.5 ({PASS_RULE}); 1 of {ELEMENTS} elements wrong; row 1 fails (1 of 2)"
)
WRONG_NUMBERS = dict(
    max_abs_err=1.0,
    bad_elements=1,
    first_bad={"row": 1, "head": 0, "col": 3, "got": 1.5, "expected": 0.5},
    failing_rows=(1,),
    nonfinite=0,
)


# --- values -------------------------------------------------------------------------------------


def test_a_correct_output_passes_with_its_numbers():
    assert judged(Run()) == Judgement(
        Status.PASS, f"all {ELEMENTS} elements within the pass rule", **PASSED, output=Status.PASS
    )


def test_a_wrong_value_is_wrong_with_where_and_which_rows():
    assert judged(wrong_run()) == Judgement(Status.WRONG, WRONG_MESSAGE, **WRONG_NUMBERS, output=Status.WRONG)


def test_an_exact_case_is_held_to_the_last_bit():
    run = Run()
    run.out[0, 0, 0] = np.nextafter(np.float32(0.5), np.float32(1))
    exact = Case("T1", 2, 0, exact=True)
    judgement = judged(run, exact)
    assert (judgement.status, judgement.failing_rows, judgement.bad_elements) == (Status.WRONG, (0,), 1)
    assert judgement.message == (
        f"row 0, head 0, col 0: got 0.50000006, expected 0.5 ({EXACT_RULE}); 1 of {ELEMENTS} elements wrong; "
        "row 0 fails (1 of 2)"
    )
    assert judged(run).status is Status.PASS  # within the tolerance


def test_an_element_never_written_is_never_written():
    run = Run()
    run.out[1, 2].view(np.uint32)[:] = POISON_BITS
    judgement = judged(run)
    assert judgement == Judgement(
        Status.NEVER_WRITTEN,
        "row 1, head 2, col 0: never written, or computed from a value never written (an output or shared buffer "
        f"read before it was set?); {HEAD_DIM} of {ELEMENTS} elements never written; row 1 fails (1 of 2)",
        max_abs_err=judgement.max_abs_err,
        bad_elements=HEAD_DIM,
        first_bad={"row": 1, "head": 2, "col": 0, "got": None, "expected": 0.5},
        failing_rows=(1,),
        nonfinite=HEAD_DIM,
        output=Status.NEVER_WRITTEN,
    )
    assert np.isnan(judgement.max_abs_err)


# --- guards, then inputs ------------------------------------------------------------------------


def test_a_write_past_the_output_is_out_of_bounds_and_nothing_else_is_read():
    run = wrong_run()
    run.bands["out"][1][2] = 0.0
    run.inputs_after["q"][0] = 9.0
    asked = Asked([("reverse order", wrong_run())], (HAZARD, None))
    assert judged(run, **asked.evidence()) == Judgement(
        Status.OUT_OF_BOUNDS,
        f"out-of-bounds write to out: 1 element(s) past its end (up to 3 past element {ELEMENTS - 1})",
    )
    assert (asked.schedules, asked.sanitized) == ([], 0)


def test_the_first_damaged_buffer_in_order_is_named_with_its_own_length():
    run = Run()
    run.bands["scores"][0][-1] = 0.0
    writable = {"out": ELEMENTS, "scores": SCORES}
    assert judged(run, writable=writable).message == (
        "out-of-bounds write to scores: 1 element(s) before its start (up to 1 before element 0)"
    )
    run.bands["out"][1][0] = 0.0
    assert judged(run, writable=writable).message == (
        f"out-of-bounds write to out: 1 element(s) past its end (up to 1 past element {ELEMENTS - 1})"
    )
    run.bands["out"] = (band(), band())
    run.bands["scores"][1][0] = 0.0
    assert judged(run, writable=writable).message == (
        f"out-of-bounds write to scores: 1 element(s) past its end (up to 1 past element {SCORES - 1}) and "
        "1 element(s) before its start (up to 1 before element 0)"
    )


def test_a_changed_input_is_input_mutated_before_any_value_is_read():
    run = wrong_run()
    run.inputs_after["k"][[1, 4]] = -1.0
    run.inputs_after["v"][0] = -1.0
    asked = Asked([("reverse order", wrong_run())], (HAZARD, None))
    assert judged(run, **asked.evidence()) == Judgement(
        Status.INPUT_MUTATED,
        "input k was modified: 2 element(s) changed, the first at flat index 1; kernels must treat q, k and v as "
        "read-only",
    )
    assert (asked.schedules, asked.sanitized) == ([], 0)


def test_an_input_is_compared_bit_for_bit():
    run = Run()
    given = {"q": np.array([0.0, np.nan], dtype=np.float32)}
    run.inputs_after = {"q": np.array([-0.0, np.nan], dtype=np.float32)}  # equal as numbers, not as bits
    assert judged(run, given=given).message == (
        "input q was modified: 1 element(s) changed, the first at flat index 0; kernels must treat q as read-only"
    )
    run.inputs_after = {"q": given["q"].copy()}
    assert judged(run, given=given).status is Status.PASS


def test_two_inputs_are_named_with_and():
    run = Run()
    given = {"q": np.zeros(3, np.float32), "seqLens": np.ones(2, np.float32)}
    run.inputs_after = {"q": np.zeros(3, np.float32), "seqLens": np.array([1, 2], np.float32)}
    assert judged(run, given=given).message == (
        "input seqLens was modified: 1 element(s) changed, the first at flat index 1; kernels must treat q and "
        "seqLens as read-only"
    )


# --- races --------------------------------------------------------------------------------------


def test_the_shared_memory_poison_is_a_race_and_no_other_evidence_is_asked_for():
    run = Run()
    run.out[1, 3, 5] = filled(1, SHARED_POISON_BITS)[0]
    asked = Asked([("reverse order", Run())], (HAZARD, None))
    judgement = judged(run, **asked.evidence())
    assert judgement == Judgement(
        Status.RACE,
        "row 1, head 3, col 5: read shared memory no thread had written since the last barrier: a missing "
        f"__syncthreads()? (1 of {ELEMENTS} elements carry the shared-memory poison); row 1 fails (1 of 2)",
        max_abs_err=judgement.max_abs_err,
        bad_elements=1,
        first_bad={"row": 1, "head": 3, "col": 5, "got": "nan", "expected": 0.5},
        failing_rows=(1,),
        nonfinite=1,
        output=Status.RACE,
    )
    assert (asked.schedules, asked.sanitized) == ([], 0)


def test_another_schedule_that_disagrees_is_a_race_and_ends_the_search():
    other = Run()
    other.out[0, 1, 2] = 0.25
    asked = Asked([("reverse order", Run()), ("random order (seed 2)", other), ("random order (seed 3)", other)])
    assert judged(Run(), **asked.evidence()) == Judgement(
        Status.RACE,
        "the output depends on thread order: with each block's threads in random order (seed 2) between barriers, "
        "row 0, head 1, col 2 is 0.25 instead of 0: a missing __syncthreads()?",
        **PASSED,
        output=Status.RACE,
    )
    assert (asked.schedules, asked.sanitized) == (["reverse order", "random order (seed 2)"], 0)


def test_a_wrong_output_that_another_schedule_changes_is_a_race_with_the_values_numbers():
    other = wrong_run()
    other.out[1, 0, 3] = np.inf
    judgement = judged(wrong_run(), other_schedules=[("reverse order", other)])
    assert judgement == Judgement(
        Status.RACE,
        "the output depends on thread order: with each block's threads in reverse order between barriers, "
        "row 1, head 0, col 3 is inf instead of 1.5: a missing __syncthreads()?",
        **WRONG_NUMBERS,
        output=Status.RACE,
    )


@pytest.mark.parametrize(
    ("first", "other", "words"),
    [(np.nan, 0.1234567, "0.123457 instead of nan"), (0.1234567, -np.inf, "-inf instead of 0.123457")],
)
def test_a_disagreeing_value_is_shown_to_six_digits_or_as_its_word(first, other, words):
    run, changed = Run(), Run()
    run.out[1, 31, 63] = first
    changed.out[1, 31, 63] = other
    assert judged(run, other_schedules=[("reverse order", changed)]).message.endswith(
        f"row 1, head 31, col 63 is {words}: a missing __syncthreads()?"
    )


def test_a_nan_that_carries_the_shared_poison_under_another_order_is_a_race():
    # NaN agrees with NaN, yet the other order's NaN read shared memory no thread had written
    first = wrong_run()
    first.out[1, 0, 3] = np.nan
    other = wrong_run()
    other.out[1, 0, 3] = filled(1, SHARED_POISON_BITS)[0]
    other.out[1, 2, 0] = filled(1, SHARED_POISON_BITS)[0]
    asked = Asked([("reverse order", other), ("random order (seed 2)", wrong_run())])
    judgement = judged(first, when_failing=asked.other_schedules())
    assert np.isnan(judgement.max_abs_err)
    assert dataclasses.replace(judgement, max_abs_err=None) == Judgement(
        Status.RACE,
        "with each block's threads in reverse order between barriers, row 1, head 0, col 3: read shared memory "
        "no thread had written since the last barrier: a missing __syncthreads()? (2 of 4096 elements carry "
        "the shared-memory poison)",
        max_abs_err=None,
        bad_elements=1,
        first_bad={"row": 1, "head": 0, "col": 3, "got": "nan", "expected": 0.5},
        failing_rows=(1,),
        nonfinite=1,
        output=Status.RACE,
    )
    assert asked.schedules == ["reverse order"]


def test_the_shared_poison_under_the_blocks_order_alone_names_that_order():
    other = wrong_run()
    other.out[0, 0, 0] = filled(1, SHARED_POISON_BITS)[0]
    judgement = judged(wrong_run(), when_failing=[("blocks in ascending order", other)])
    assert (judgement.status, judgement.between_blocks) == (Status.RACE, False)
    assert judgement.message.startswith(
        "with the blocks in ascending order (each block's threads in order), row 0, head 0, col 0: read shared"
    )


def test_schedules_that_agree_leave_the_values_verdict():
    nan = wrong_run()
    nan.out[0, 0, 0] = np.nan
    close = wrong_run()
    close.out[0, 0, 1] += 1e-5  # within the pass rule of the first run's value
    close.out[0, 0, 0] = np.nan
    asked = Asked([("reverse order", nan), ("random order (seed 2)", close)])
    run = wrong_run()
    run.out[0, 0, 0] = np.nan
    judgement = judged(run, **asked.evidence())
    assert (judgement.status, judgement.output) == (Status.WRONG, Status.WRONG)
    assert asked.schedules == ["reverse order", "random order (seed 2)"]


def test_same_values_is_both_nan_or_within_the_pass_rule():
    a = np.array([np.nan, 1.0, 1.0, 1.0, np.nan, np.inf, -np.inf, np.inf], dtype=np.float32)
    b = np.array([np.nan, 1.0 + 5e-4, 1.1, np.nan, 1.0, np.inf, -np.inf, -np.inf], dtype=np.float32)
    # the same infinity twice is one value, not a race, though it never passes against the oracle
    with np.errstate(invalid="ignore"):  # inf - inf, on the way to "inf never passes"
        assert same_values(a, b).tolist() == [True, True, False, False, False, True, True, False]


def test_the_sanitizers_hazard_is_a_race_in_its_own_words_with_the_values_numbers():
    asked = Asked([("reverse order", Run())], (HAZARD, None))
    assert judged(Run(), **asked.evidence()) == Judgement(
        Status.RACE, HAZARD, **PASSED, output=Status.PASS, by_sanitizer=True
    )
    assert (asked.schedules, asked.sanitized) == (["reverse order"], 1)
    assert judged(wrong_run(), sanitizer=lambda: (HAZARD, None)) == Judgement(
        Status.RACE, HAZARD, **WRONG_NUMBERS, output=Status.WRONG, by_sanitizer=True
    )


def test_a_sanitizer_check_that_could_not_finish_is_inconclusive():
    assert judged(wrong_run(), sanitizer=lambda: (None, INCONCLUSIVE)) == Judgement(
        Status.RACE_CHECK_INCONCLUSIVE, INCONCLUSIVE, **WRONG_NUMBERS, output=Status.WRONG, by_sanitizer=True
    )
    assert judged(Run(), sanitizer=lambda: (HAZARD, INCONCLUSIVE)).status is Status.RACE  # a hazard is never less


def test_a_clean_sanitizer_leaves_the_values_verdict():
    asked = Asked()
    assert judged(wrong_run(), **asked.evidence()) == Judgement(
        Status.WRONG, WRONG_MESSAGE, **WRONG_NUMBERS, output=Status.WRONG
    )
    assert asked.sanitized == 1


def test_a_schedules_race_is_decided_before_the_sanitizer_is_asked():
    other = Run()
    other.out[0, 0, 0] = 0.75
    asked = Asked([("reverse order", other)], (HAZARD, None))
    assert judged(Run(), **asked.evidence()).message.startswith("the output depends on thread order")
    assert asked.sanitized == 0


# --- a run that did not answer --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "status", "message"),
    [
        ("timeout", Status.TIMEOUT, "no answer within 2 s; the kernel was stopped"),
        ("crash", Status.CRASH, "no answer within 2 s; the kernel was stopped"),
        ("fault", Status.CRASH, "no answer within 2 s; the kernel was stopped"),
        ("compile", Status.CRASH, "no answer within 2 s; the kernel was stopped"),
        ("error", Status.CRASH, "the run failed in a kernel launch: no answer within 2 s; the kernel was stopped"),
    ],
)
def test_a_run_that_did_not_answer_is_judged_by_its_kind(kind, status, message):
    assert judge_failure(kind, "no answer within 2 s; the kernel was stopped") == Judgement(status, message)


# --- the judgement ------------------------------------------------------------------------------


def test_a_judgement_is_never_revised():
    judgement = judged(Run())
    with pytest.raises(dataclasses.FrozenInstanceError):
        judgement.status = Status.RACE  # type: ignore[misc]


def test_a_judgements_defaults_are_those_of_a_case_whose_output_was_never_read():
    assert Judgement(Status.CRASH, "m") == Judgement(Status.CRASH, "m", None, 0, None, (), 0, None, False)


@pytest.mark.parametrize(
    ("judgement", "failed"),
    [
        (Judgement(Status.PASS, "", output=Status.PASS), False),
        (Judgement(Status.RACE, HAZARD, output=Status.PASS, by_sanitizer=True), False),
        (Judgement(Status.RACE_CHECK_INCONCLUSIVE, INCONCLUSIVE, output=Status.PASS, by_sanitizer=True), False),
        (Judgement(Status.RACE, HAZARD, output=Status.WRONG, by_sanitizer=True), True),
        (Judgement(Status.WRONG, "", output=Status.WRONG), True),
        (Judgement(Status.RACE, "", output=Status.RACE), True),
        (Judgement(Status.OUT_OF_BOUNDS, ""), True),
        (Judgement(Status.CRASH, ""), True),
    ],
)
def test_a_run_failed_where_its_own_output_or_run_did_whatever_the_sanitizer_said(judgement, failed):
    assert judgement.run_failed is failed


def test_the_reruns_of_a_failing_case_are_asked_for_only_when_it_failed():
    # the CPU reruns a failing case unasked: a passing one never costs a rerun
    asked = Asked([("reverse order", wrong_run())])
    assert judged(Run(), when_failing=asked.other_schedules()).status == Status.PASS
    assert asked.schedules == []


def test_a_failing_case_its_reruns_move_is_a_race_and_one_they_leave_alone_stays_wrong():
    other = wrong_run()
    other.out[1, 0, 3] = 2.5
    moved = Asked([("reverse order", wrong_run()), ("random order (seed 2)", other)])
    judgement = judged(wrong_run(), when_failing=moved.other_schedules())
    assert judgement == Judgement(
        Status.RACE,
        "the output depends on thread order: with each block's threads in random order (seed 2) between barriers, "
        "row 1, head 0, col 3 is 2.5 instead of 1.5: a missing __syncthreads()?",
        **WRONG_NUMBERS,
        output=Status.RACE,
    )
    assert moved.schedules == ["reverse order", "random order (seed 2)"]
    same = Asked([("reverse order", wrong_run()), ("random order (seed 2)", wrong_run())])
    assert judged(wrong_run(), when_failing=same.other_schedules()) == Judgement(
        Status.WRONG, WRONG_MESSAGE, **WRONG_NUMBERS, output=Status.WRONG
    )


def test_a_decode_batch_speaks_of_sequences():
    decode = Case("single-token", 2, 1, lengths=(1, 1))
    judgement = judged(wrong_run(), case=decode)
    assert judgement.message == (
        f"sequence 1, head 0, col 3: got 1.5, expected 0.5 ({PASS_RULE}); 1 of {ELEMENTS} elements wrong; "
        "sequence 1 fails (1 of 2)"
    )
