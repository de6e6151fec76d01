"""The two backends a kernel runs on: the GPU (CuPy) or the CPU (g++ and fibers).

A `StrEnum`: each member is its string, so the JSON, the CSV, the worker's command line and every
comparison with the word read exactly as before. The compile stage is the lowest that needs the
name (what a Triton file is built for); every stage above imports it from here.
"""

from __future__ import annotations

from enum import StrEnum


class Backend(StrEnum):
    GPU = "gpu"
    CPU = "cpu"
