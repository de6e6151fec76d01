"""`attnlab check`: the compile gate alone (NVRTC, no GPU needed), and what it found in the file."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from labrunner.build.gate import Submission, load_submission
from labrunner.build.nvrtc import nvrtc_version
from labrunner.labs import get_lab
from labrunner.pipeline.requests import CheckRequest
from labrunner.report import terminal
from labrunner.report.results import RunResult
from labrunner.run.untrusted_text import shown_path


def check_submission(request: CheckRequest, result: RunResult) -> None:
    submission = load_submission(
        get_lab(request.lab), request.file, shown_path(request.file), request.arch, request.compile_limits
    )
    result.compile = compile_summary(submission, request.arch, nvrtc_version())
    terminal.check_report(result)
    terminal.verdict_line(result)


def compile_summary(submission: Submission, arch: str, nvrtc: str) -> dict[str, Any]:
    module = submission.module
    return {
        "arch": arch,
        "nvrtc": nvrtc,
        "entry_points": module.entry_points,
        "constants": submission.constants,
        "exported": module.launch_constants,
        "resources": {name: asdict(r) for name, r in module.resources.items()},
        "warnings": module.warnings,
    }
