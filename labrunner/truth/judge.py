"""The judge: one decision per case, made once from all its evidence, never revised afterwards.

The evidence is read in the order that lets each step explain the ones after it:

1. guards: a write past either end of a buffer (`out-of-bounds`) can have put anything anywhere;
2. inputs: a kernel that wrote into q, k or v computed from values it changed (`input-mutated`);
3. races: the output carries the CPU backend's shared-memory poison, or differs under another
   thread schedule (CPU `--race-check`), or compute-sanitizer reports a hazard or could not finish
   its check (GPU `--race-check`): a race makes every value an accident of the thread order;
4. values: every output element against the oracle (`check_output`: pass, wrong or never-written).

The other schedules' runs and the sanitizer's report are asked for only when the steps before them
found nothing, one at a time: the first schedule that disagrees ends the search. The judge reads
arrays only; it runs nothing itself (the driver hands it the runs and the sanitizer's answer).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from labrunner.truth.catalogue import Case
from labrunner.truth.checker import RACE_WORDS, FirstBad, OutputCheck, check_output, describe_rows
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS, within_tolerance
from labrunner.truth.poison import SHARED_POISON_BITS, carries, inspect_guards
from labrunner.truth.verdict import Status, failure_status

# How the label of a schedule that reorders only the blocks begins (pipeline/schedules.py): a
# difference it makes is about the blocks, not the threads.
BLOCK_ORDER = "blocks in "

# compute-sanitizer's answer on one case (run/racecheck.py's find_hazard): (hazard, inconclusive),
# the first hazard in one line, or the reason the check could not be made; (None, None) when clean.
SanitizerReport = tuple[str | None, str | None]


class Run(Protocol):
    """One run of a case, as the worker returned it (run/worker.py's CaseRun)."""

    @property
    def outputs(self) -> Mapping[str, np.ndarray]: ...  # the writable buffers asked for

    @property
    def bands(self) -> Mapping[str, tuple[np.ndarray, np.ndarray]]: ...  # each writable buffer's guard bands

    @property
    def inputs_after(self) -> Mapping[str, np.ndarray]: ...  # the inputs the kernels changed, as they left them


@dataclass(frozen=True)
class Judgement:
    """A case's verdict, in words, with the numbers the values check gave (where it ran).

    `output`: what the case's own output showed (its values, or its values under other schedules);
    None where it was never read (guards, inputs, a run that failed). It differs from `status` where
    the sanitizer decided: the explanations (the hints' evidence, lab 1's stage check) read the output.
    `by_sanitizer`: compute-sanitizer's report decided, and its words name the kernel and the line.
    """

    status: Status
    message: str
    max_abs_err: float | None = None
    bad_elements: int = 0
    first_bad: FirstBad | None = None
    failing_rows: tuple[int, ...] = ()
    nonfinite: int = 0
    output: Status | None = None
    by_sanitizer: bool = False
    between_blocks: bool = False  # a race seen when only the blocks' order changed

    @property
    def run_failed(self) -> bool:
        """The case's own run failed (its guards, inputs or output), whatever the sanitizer said."""
        return (self.output or self.status) != Status.PASS


def judge(
    case: Case,
    run: Run,
    given: Mapping[str, np.ndarray],
    writable: Mapping[str, int],
    reference: np.ndarray,
    other_schedules: Iterable[tuple[str, Run]] = (),
    sanitizer: Callable[[], SanitizerReport] | None = None,
    when_failing: Iterable[tuple[str, Run]] = (),
) -> Judgement:
    """Guards first (they explain everything after them), then inputs, then races, then every value.

    `given`: the inputs as sent; `writable`: each writable buffer's length; `reference`: the oracle's
    float64 output. `other_schedules`: (label, run) of the same case under other thread schedules,
    taken one at a time; any difference from this run is a race, whether or not this run passed.
    `sanitizer`: asks compute-sanitizer about this case (GPU --race-check), only when nothing before
    it decided. `when_failing`: more schedules, asked for only when the output failed its check (the
    CPU reruns a failing case unasked: a failure that moves with the order is a race, not a wrong formula).
    """
    for name in writable:
        damage = inspect_guards(name, *run.bands[name])
        if damage:
            return Judgement(Status.OUT_OF_BOUNDS, damage.describe(writable[name]))
    for name, original in given.items():
        after = run.inputs_after.get(name)
        if after is None:  # the worker found it as sent (`labrunner.run.replies`)
            continue
        changed = np.flatnonzero(after.view(np.uint32).ravel() != original.view(np.uint32).ravel())
        if changed.size:
            return Judgement(
                Status.INPUT_MUTATED,
                f"input {name} was modified: {changed.size} element(s) changed, the first at flat "
                f"index {changed[0]}; kernels must treat {_listed(list(given))} as read-only",
            )
    out = run.outputs["out"].reshape(case.rows, QUERY_HEADS, HEAD_DIM)
    # a decode batch's rows are its sequences: every message speaks of them so
    noun = "sequence" if case.decode else "row"
    checked = check_output(out, reference, exact=case.exact, row_noun=noun)
    values = (
        checked.message
        if checked.passed
        else f"{checked.message}; {describe_rows(checked.failing_rows, case.rows, noun)}"
    )
    if checked.status == Status.RACE:
        return _judged(checked, Status.RACE, values, Status.RACE)
    reruns = itertools.chain(other_schedules, when_failing if not checked.passed else ())
    for label, other_run in reruns:
        other = other_run.outputs["out"].reshape(out.shape)
        # NaN agrees with NaN below, yet a NaN that carries the shared-memory poison under another order
        # read shared memory no thread had written: the race itself, whatever this run's NaN held
        raced = carries(other, SHARED_POISON_BITS)
        if raced.any():
            row, head, col = np.unravel_index(np.flatnonzero(raced)[0], out.shape)
            message = (
                f"with {_order_in_words(label)}, {noun} {row}, head {head}, col {col}: {RACE_WORDS} "
                f"({int(raced.sum())} of {out.size} elements carry the shared-memory poison)"
            )
            # shared memory is each block's own: what no thread wrote is a barrier missing inside a block
            return _judged(checked, Status.RACE, message, Status.RACE)
        agree = same_values(other, out)
        if not agree.all():
            row, head, col = np.unravel_index(np.flatnonzero(~agree)[0], out.shape)
            # the two values to six digits (a NaN or an Inf prints as its word)
            differs = (
                f"{noun} {row}, head {head}, col {col} is {float(other[row, head, col]):.6g} "
                f"instead of {float(out[row, head, col]):.6g}"
            )
            if label.startswith(BLOCK_ORDER):  # only the order of the blocks changed
                message = (
                    f"blocks depend on each other's order: with the {label} (each block's threads in order), "
                    f"{differs}: a block reads what another block of the same launch writes, but a GPU runs "
                    f"blocks in any order, many at once"
                )
            else:
                message = (
                    f"the output depends on thread order: with each block's threads in {label} between "
                    f"barriers, {differs}: a missing __syncthreads()?"
                )
            return _judged(checked, Status.RACE, message, Status.RACE, between_blocks=label.startswith(BLOCK_ORDER))
    if sanitizer is not None:
        hazard, inconclusive = sanitizer()
        if hazard:
            return _judged(checked, Status.RACE, hazard, checked.status, by_sanitizer=True)
        if inconclusive:
            return _judged(checked, Status.RACE_CHECK_INCONCLUSIVE, inconclusive, checked.status, by_sanitizer=True)
    return _judged(checked, checked.status, values, checked.status)


def judge_failure(kind: str, detail: str) -> Judgement:
    """A case the worker could not answer (run/worker.py's WorkerFailure): a timeout or a crash, in its words."""
    message = detail if kind != "error" else f"the run failed in a kernel launch: {detail}"
    return Judgement(failure_status(kind), message)


def same_values(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two runs agree on an element when both are NaN, are the same value (the same infinity too, which
    the pass rule never passes), or are equal within the pass rule."""
    agree: np.ndarray = (np.isnan(a) & np.isnan(b)) | (a == b) | within_tolerance(a, b.astype(np.float64))
    return agree


def _judged(
    checked: OutputCheck,
    status: Status,
    message: str,
    output: Status,
    by_sanitizer: bool = False,
    between_blocks: bool = False,
) -> Judgement:
    """A verdict reached after the values were checked: it carries the check's numbers."""
    return Judgement(
        status,
        message,
        checked.max_abs_err,
        checked.bad_elements,
        checked.first_bad,
        tuple(checked.failing_rows),
        checked.nonfinite,
        output,
        by_sanitizer,
        between_blocks,
    )


def _order_in_words(label: str) -> str:
    """A schedule's label as the order it ran in: `the blocks in ascending order (each block's threads in
    order)`, or `each block's threads in reverse order between barriers`."""
    if label.startswith(BLOCK_ORDER):
        return f"the {label} (each block's threads in order)"
    return f"each block's threads in {label} between barriers"


def _listed(names: list[str]) -> str:
    """`q, k and v`: the inputs a lab's kernels receive, in words."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
