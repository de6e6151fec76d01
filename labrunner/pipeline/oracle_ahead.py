"""The driver's GPU oracle, started while the compile gate runs, and used by the cases and the timing.

On the GPU backend the float64 references of the cases took the CPU oracle seconds (lab 2's
C2048-P2048 alone 2.3 s on an H200 host's core), and the timing made and proved a GPU oracle of its
own after the cases. Both now come from one `GpuOracle` (`labrunner.run.gpu_oracle`), made and
proven in a thread of the driver while the compile gate's child compiles the file and the worker
starts: its CUDA context, CuPy's import and its proof cost the grade no time of its own.

The oracle is the same code (`labrunner.truth.oracle` with CuPy as its array module), proven every
run against the golden case and against the CPU oracle on a random set to 1e-12, far inside the
pass rule, so a case judged from it is judged as from the CPU oracle. Where the driver cannot use the
GPU (an exclusive-process GPU, CuPy missing), the cases fall back to the CPU oracle and the timing
says why it cannot check its calls, as it always did.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from labrunner.compile.backend import Backend
from labrunner.phases import phase
from labrunner.pipeline.backend import gpu_may_be_here, gpu_share
from labrunner.pipeline.timing_stage import References, proven_gpu_references
from labrunner.truth.cases import Inputs

# A prefill case whose rows times keys reach this takes its reference from the GPU oracle (lab 2's
# C2048-P2048 has 8.4 million; its next largest, under 30 thousand, take the CPU oracle milliseconds);
# so does a decode batch of this many keys in all (lab 3's `long` has 42,283 and took the CPU oracle
# a second; its next largest, 4,226).
GPU_CASE_SCORES = 1 << 20
GPU_CASE_KEYS = 1 << 14


def on_the_gpu_oracle(inputs: Inputs) -> bool:
    """Whether a case is large enough for the GPU oracle (GPU_CASE_SCORES, GPU_CASE_KEYS)."""
    if inputs.block_table is not None:
        return sum(inputs.lengths) >= GPU_CASE_KEYS
    rows: int = inputs.q.shape[0]
    return rows * (inputs.prefix + rows) >= GPU_CASE_SCORES


def proven_sharing_the_gpu(decode: bool) -> References:
    """The GPU oracle made and proven while holding the GPU as a check does (`measure/gpu_lock.py`): in a
    batch its proof's kernels would otherwise run while another grader times, and be part of that time."""
    with gpu_share(Backend.GPU, "checking"):
        return proven_gpu_references(decode)


class OracleAhead:
    """A GPU oracle being made in the background where a GPU may grade; nothing for `--device cpu`."""

    def __init__(self, requested_device: str, decode: bool = True):
        """`decode`: the lab judges decode batches (its decode oracle is proven too; lab 3 only, since
        on a fresh machine that proof is a second of CuPy compiling kernels the other labs never use)."""
        self._future: Future[References] | None = None
        if requested_device != Backend.CPU and gpu_may_be_here():
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnlab-oracle")
            self._future = pool.submit(proven_sharing_the_gpu, decode)
            pool.shutdown(wait=False)

    def _ready(self) -> References | None:
        if self._future is None:
            return None
        with phase("waiting for the GPU oracle"):
            try:
                return self._future.result()
            except Exception:  # said where the timing needs it; the cases use the CPU oracle
                return None

    def for_cases(self) -> Callable[[Inputs], np.ndarray] | None:
        """The cases' references: the GPU's for a large prefill case, the CPU oracle's (`Inputs.reference`)
        for the rest; None where no GPU oracle was started (every case on the CPU oracle).

        Which oracle a case gets depends on its size alone, never on timing, so a grade is the same every
        run: the CPU oracle answers the small cases in milliseconds, and only lab 2's C2048-P2048 (2.3 s
        on the CPU) and lab 3's `long` need the GPU's. Those run last, so the cases no longer wait for
        the GPU oracle's proof (a second and a half on a fresh machine)."""
        if self._future is None:
            return None

        def case_reference(inputs: Inputs) -> np.ndarray:
            if not on_the_gpu_oracle(inputs):
                return inputs.reference()
            made = getattr(self._ready(), "case_reference", None)
            if not callable(made):
                return inputs.reference()
            with gpu_share(Backend.GPU, "checking"):  # its kernels never run while another grader times
                reference: np.ndarray = made(inputs)
            return reference

        return case_reference

    def for_timing(self) -> References | None:
        """The timing's references: this oracle; None where none was started (the timing makes its own);
        or the environment error that says why the one started failed."""
        references = self._ready()
        if references is not None or self._future is None:
            return references
        return self._future.result()  # raises what made it fail: the timing's error, as before
