"""`attnlab check`: the compile gate alone (NVRTC, no GPU needed), and what it found in the file."""

from __future__ import annotations

from labrunner import box as boxes
from labrunner.compile.gate import Submission, load_submission
from labrunner.compile.nvrtc import nvrtc_version
from labrunner.compile.source import take_notes
from labrunner.labs import get_lab
from labrunner.labs.definition import Lab
from labrunner.pipeline.requests import CheckRequest
from labrunner.records.compile import CompileSummary
from labrunner.report.reporter import Reporter
from labrunner.report.results import RunResult
from labrunner.run.untrusted_text import shown_path


def check_submission(request: CheckRequest, result: RunResult, reporter: Reporter) -> None:
    lab = get_lab(request.lab)
    with boxes.required(request.require_box):
        submission = load_submission(lab, request.file, shown_path(request.file), request.arch, request.compile_limits)
    reporter.notes(take_notes())
    result.compile = compile_summary(lab, submission, request.arch, nvrtc_version())
    reporter.compiled(result)
    reporter.verdict(result)


def compile_summary(lab: Lab, submission: Submission, arch: str, nvrtc: str) -> CompileSummary:
    module = submission.module
    return CompileSummary(
        arch=arch,
        nvrtc="" if module.triton else nvrtc,
        entry_points=module.entry_points,
        constants=submission.constants,
        exported=module.launch_constants,
        resources=dict(module.resources),
        warnings=module.warnings,
        triton=module.triton_version,
        triton_kernels={
            name: {"num_warps": k.num_warps, "num_stages": k.num_stages, "shared_bytes": k.shared_bytes}
            for name, k in module.triton.items()
        },
        compiled=tuple(name for names in lab.triton_blocks.values() for name in names if name and module.triton),
    )
