"""`attnlab check`: the compile gate alone (NVRTC, no GPU needed), and what it found in the file."""

from __future__ import annotations

from labrunner.build.gate import Submission, load_submission
from labrunner.build.nvrtc import nvrtc_version
from labrunner.build.source import take_notes
from labrunner.labs import get_lab
from labrunner.pipeline.prepare import said_once
from labrunner.pipeline.requests import CheckRequest
from labrunner.report import terminal
from labrunner.report.records.compile import CompileSummary
from labrunner.report.results import RunResult
from labrunner.run.untrusted_text import shown_path


def check_submission(request: CheckRequest, result: RunResult) -> None:
    submission = load_submission(
        get_lab(request.lab), request.file, shown_path(request.file), request.arch, request.compile_limits
    )
    result.notes += said_once(take_notes())
    result.compile = compile_summary(submission, request.arch, nvrtc_version())
    terminal.check_report(result)
    terminal.verdict_line(result)


def compile_summary(submission: Submission, arch: str, nvrtc: str) -> CompileSummary:
    module = submission.module
    return CompileSummary(
        arch=arch,
        nvrtc=nvrtc,
        entry_points=module.entry_points,
        constants=submission.constants,
        exported=module.launch_constants,
        resources=dict(module.resources),
        warnings=module.warnings,
    )
