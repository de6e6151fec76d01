"""The parts every CPU build shares, made once per machine by the driver and read-only to every box.

A CPU build needs, besides the student's file: the runtime (shim.h and the system headers it
includes) preprocessed by g++, the header that gives the student's file NVRTC's predefined macros
(which probes NVRTC), and the baseline object the object check compares a build with (a whole build
of an empty file). None of them depends on a submission, yet each worker made all three in its
fresh box: seconds of every CPU grade. The driver now makes them here, from the grader's own files
only, into the grader's cache (`labrunner.grader_cache`); the box maps that folder read-only and the
worker reads them there (`module.shared_part`). Each part is named by the digest of the compiler,
the flags and the runtime's headers (and, for the view, NVRTC's version and the architecture), so
a change to any of them makes new parts rather than reusing old ones.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from labrunner.compile.nvrtc import DEFAULT_ARCH
from labrunner.exit_codes import AttnlabError
from labrunner.grader_cache import grader_cache_dir
from labrunner.phases import phase
from labrunner.run.cpu.module import (
    CpuKernelError,
    _cxx,
    _nvrtc_view,
    _runtime_text,
    build_baseline,
    cpu_compiler_available,
)


def shared_parts(arch: str = DEFAULT_ARCH) -> Path | None:
    """The folder of ready parts for `arch`, made now where missing; None where there is no trusted cache
    or a part could not be made (the worker then makes what it needs in its box, as before)."""
    folder = grader_cache_dir("cpu-parts")
    if folder is None or cpu_compiler_available() is not None:  # no g++: the worker's start says so (exit 6)
        return None
    with phase("CPU runtime parts"):
        try:
            cxx = _cxx()
            _runtime_text(cxx, folder)
            _nvrtc_view(arch, cxx, folder)
            build_baseline(folder)
        except (CpuKernelError, AttnlabError, OSError, subprocess.SubprocessError):
            return None  # the worker makes them in its box, as it did before there were shared parts
    return folder
