"""Each case's inputs and float64 reference, made in threads ahead of the worker.

A case's inputs are normals drawn from the seed and the case's name, and its reference is the
oracle's answer for them: neither depends on anything the submission does, so both can be made while
the worker runs the case before. They took a grade seconds in a row (lab 3's paged caches 1.3 s to
draw and 0.35 s to check on an H200 host), and now overlap the runs. Nothing else changes: the worker
gets a case's inputs only once they are whole, the judge gets the reference made from those very
inputs, and an error in making either is raised where the case asks for it, as before.

numpy's generators and its float64 matrix products release the GIL, and the GPU oracle works in the
driver's own CUDA context, so the threads run beside the main one's wait on the worker. When the cases
stop (a crash, an interrupt) what was not started is dropped, and `close` waits for those being
made: nothing of the oracle's may still run when the timing starts, or it would share the GPU with a
timed call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from labrunner.phases import phase
from labrunner.truth.cases import Inputs, make_inputs
from labrunner.truth.catalogue import Case

Oracle = Callable[[Inputs], np.ndarray]
# Threads making inputs and references at once. numpy's generators release the GIL, so they draw in
# parallel; lab 3's longest case alone takes a second to draw on one core.
THREADS = 4


class CaseInputs:
    """Where `judged_case` takes a case's inputs and reference from. `ahead`: every case's made in
    threads from the start, the first case first, then the largest (the one that takes longest is then
    ready when its turn comes), then the rest in the order they run; a case not among them, or with
    `ahead` off, is made when asked."""

    def __init__(self, seed: int, oracle: Oracle | None, cases: Sequence[Case] = (), ahead: bool = False):
        self.seed, self.oracle = seed, oracle
        self._made: dict[str, tuple[Future[Inputs], Future[np.ndarray]]] = {}
        self._pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="attnlab-inputs") if ahead else None
        if self._pool is None or not cases:
            return
        first, *rest = cases
        largest = max(rest, key=lambda c: sum(c.buffer_bytes().values()), default=None)
        for case in [first, *([largest] if largest else []), *(c for c in rest if c is not largest)]:
            inputs = self._pool.submit(self._inputs, case)
            # queued behind its inputs, so a thread that waits for them waits for work already running
            self._made[case.name] = (inputs, self._pool.submit(self._reference_of, inputs))

    def _inputs(self, case: Case) -> Inputs:
        with phase("inputs"):
            return make_inputs(case, self.seed)

    def _reference_of(self, inputs: Future[Inputs]) -> np.ndarray:
        return self._reference(inputs.result())

    def _reference(self, inputs: Inputs) -> np.ndarray:
        with phase("oracle"):
            return self.oracle(inputs) if self.oracle else inputs.reference()

    def inputs(self, case: Case) -> Inputs:
        """The case's inputs, waited for where they are being made ahead (the wait is the `inputs` phase)."""
        made = self._made.get(case.name)
        if made is None:
            return self._inputs(case)
        with phase("inputs"):
            return made[0].result()

    def reference(self, case: Case, inputs: Inputs) -> np.ndarray:
        """The float64 reference of `inputs`, the case's own (made ahead, or now)."""
        made = self._made.pop(case.name, None)
        if made is None:
            return self._reference(inputs)
        with phase("oracle"):
            return made[1].result()

    def close(self, wait: bool = True) -> None:
        """Drop what was not started, and wait for what is being made (see the module's note); `wait`
        False: on the way out of a grade that failed, whose verdict need not wait for it."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
        self._made.clear()

    def __enter__(self) -> CaseInputs:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self.close(wait=kind is None)
