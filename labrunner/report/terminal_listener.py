"""The terminal as a listener of a run's events: each event rendered by `report/terminal.py`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from labrunner.records.profile import Profile, RangeReport, Trace
from labrunner.report import terminal
from labrunner.report.batch_row import BatchRow
from labrunner.report.course_row import CourseRow
from labrunner.report.progress import Progress
from labrunner.report.reporter import Listener
from labrunner.report.results import RunResult


class TerminalListener(Listener):
    """Prints each event as it comes: results on stdout, notes, errors and progress on stderr.

    `verbose` (grade's --verbose): every failing case's message in full, where a narrow terminal or a
    log folds those after the first two."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose

    def note(self, words: str) -> None:
        terminal.note(words)

    def advice(self, words: str) -> None:
        terminal.note(words)

    def error(self, words: str) -> None:
        terminal.error(words)

    def lines(self, lines: list[str]) -> None:
        terminal.plain_lines(lines)

    @contextmanager
    def cases(self, description: str, total: int) -> Iterator[Progress]:
        with terminal.progress_display() as progress:
            progress.start(description, total)
            yield progress

    @contextmanager
    def submissions(self, total: int) -> Iterator[Callable[[str], None]]:
        with terminal.batch_progress(total) as finished:
            yield finished

    def compiled(self, result: RunResult) -> None:
        terminal.check_report(result)

    def judged(self, result: RunResult) -> None:
        terminal.cases_report(result, self.verbose)

    def timed(self, result: RunResult) -> None:
        terminal.timing_report(result)

    def gated(self, result: RunResult) -> None:
        terminal.gate_report(result)

    def kernel_output(self, lines: list[str]) -> None:
        terminal.kernel_output(lines)

    def verdict(self, result: RunResult, why_on_the_cpu: str | None = None) -> None:
        terminal.verdict_line(result, why_on_the_cpu)

    def doctor(self, rows: list[tuple[str, bool, str]]) -> None:
        terminal.doctor_report(rows)

    def traced(self, trace: Trace) -> None:
        terminal.trace_report(trace)

    def profiled(self, profile: Profile) -> None:
        terminal.range_report(profile)
        terminal.traffic_beside_measured(profile)
        terminal.must_move_beside_measured(profile)

    def range_summary(self, report: RangeReport) -> None:
        terminal.range_summary_line(report)

    def batch(self, lab: str, rows: list[BatchRow], counts: list[tuple[int, str, int]], worst: int,
              course: list[CourseRow] | None) -> None:  # fmt: skip
        terminal.batch_report(lab, rows, counts, worst, course)
