"""One BLAS thread for the command's numpy, unless the user set another number: set before numpy loads.

The driver's float64 products are small (a case's references, at most 33 rows against 1,033 keys per head
on the CPU oracle; the hints' variants of one failed case) and several of its own threads make them at
once (`pipeline/case_inputs.py`'s four, the GPU oracle's). OpenBLAS's threads on top of those spin on the
cores that the compile and the worker need: on two cores a CPU grade of lab 2's solution spent 2.3 s in
its oracle threads with them and 0.15 s without, and in a batch of 40 lab-2 files with 8 jobs on a 16-core
GPU host each wrong file's explanation took 30 to 56 s. A batch's grading processes inherit the setting.
"""

from __future__ import annotations

import os

# The thread pools numpy's BLAS may start: OpenBLAS (pip's numpy), OpenMP builds, MKL (conda's numpy)
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread() -> None:
    for name in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")
