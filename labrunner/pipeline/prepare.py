"""Everything before the first kernel runs: the oracle's proof, the compile gate, the backend, the seed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labrunner.compile.backend import Backend
from labrunner.compile.gate import Submission, load_submission
from labrunner.compile.source import take_notes
from labrunner.compile.triton_build import is_triton_file
from labrunner.labs import get_lab
from labrunner.labs.definition import Lab
from labrunner.phases import phase
from labrunner.pipeline.backend import resolve_backend
from labrunner.pipeline.grading_run import Prepared
from labrunner.pipeline.requests import ProfileRequest, RunRequest
from labrunner.report.reporter import Reporter
from labrunner.report.results import RunResult
from labrunner.run.untrusted_text import shown_path
from labrunner.run.worker import Worker
from labrunner.truth.cases import resolve_seed
from labrunner.truth.golden import require_proven_oracle

# The gate's compile beside the CPU worker's build: it takes what the build and the worker's start leave of
# the cores. On two cores the grade waits for the build, never for the gate (the gate's 0.5 s end well
# before the worker's start and build, 0.9 s, on the two-core machines measured).
GATE_NICENESS = 10


def prepare(
    request: RunRequest | ProfileRequest,
    path: Path,
    result: RunResult,
    reporter: Reporter,
    policy_passed: Callable[[str, str], None] | None = None,
) -> Prepared:
    """Oracle proof, compile gate, backend, seed: everything before the first kernel runs. `path`: the
    file to grade (bench's default is the lab's solution, which the request does not name);
    `policy_passed`: told of a `.cu` file's composed source once a compiler may read it (`load_submission`);
    given only where the CPU worker builds the file then, so the gate's own compile yields the CPU to it."""
    lab = get_lab(request.lab)
    with phase("golden proof"):
        result.oracle_proof = require_proven_oracle().to_json()
    # A Triton file is built for the backend that runs it (the CPU's interpreter needs no cubin), so its
    # backend is chosen first; a .cu file's compile comes first, so its errors come before the backend's.
    chosen_backend = resolve_backend(request.device, request.unsafe_cpu) if is_triton_file(path) else None
    limits = request.compile_limits
    if policy_passed is not None and chosen_backend is None:
        # the CPU worker builds the .cu file beside the gate, and the grade waits for that build: the gate yields
        limits = dataclasses.replace(limits, niceness=GATE_NICENESS)
    with phase("compile student"):
        target = chosen_backend[0] if chosen_backend else Backend.GPU
        # the name as every message shows it
        submission = load_submission(lab, path, shown_path(path), request.arch, limits, target, policy_passed)
    reporter.notes(take_notes())  # what reading the file set right (a byte-order mark removed)
    backend, notes = chosen_backend or resolve_backend(request.device, request.unsafe_cpu)
    reporter.notes(notes)
    result.backend = backend
    chosen = resolve_seed(request.seed, request.public_seed)
    result.seed = chosen.shown
    return Prepared(lab, submission, backend, chosen)


def display_path(path: Path) -> str:
    """A path as short as it can be said: relative to the working folder when it lies inside it.

    Never resolved through links: the file read is the one named (a link named is refused as one)."""
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def load_student(worker: Worker, lab: Lab, submission: Submission, options: dict[str, Any] | None = None) -> None:
    """Load the file in the worker; the backend's own build refusing it (the CPU's g++, its limits,
    its object check) is a compile error like NVRTC's, and a load that crashes is a verdict too."""
    load_module(worker, lab, "student", submission, options)


def load_text(worker: Worker, lab: Lab, composed_source: str, label: str, options: dict[str, Any] | None) -> None:
    """A `.cu` file's composed text loaded as the student's module where no gate's machine code is needed:
    the CPU worker builds it with g++ (the early load, `WorkerAhead.load_ahead`)."""
    worker.load("student", composed_source, label, lab.entry_point_types(), options)


def load_module(
    worker: Worker, lab: Lab, role: str, submission: Submission, options: dict[str, Any] | None = None
) -> None:
    """`submission`'s module loaded in the worker as `role`: the machine code the gate built (a `.cu`
    file's cubin, or a Triton file's kernels with their launch facts) and the text a CPU build reads."""
    worker.load(
        role,
        submission.module.composed_source,
        submission.label,
        lab.entry_point_types(),
        options,
        binary=(submission.module.arch, submission.module.cubin),
        triton=submission.module.triton,
    )
