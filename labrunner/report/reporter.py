"""The events a command's run emits, and the listeners that hear them.

The pipeline never prints: it tells a `Reporter` what happened (a case started, the cases were judged,
a note, the verdict), and the reporter hands each event to every listener. The terminal is one listener
(`report/terminal_listener.py`); the run's own record is another (`NotesRecorded`): a note is said once,
to the reporter, so the notes printed and the notes in `--json` are the same notes, in the same order.

A listener implements the events it cares about; `Listener`'s own methods ignore every event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING

from labrunner.report.progress import Progress

if TYPE_CHECKING:
    from labrunner.records.profile import Profile, RangeReport, Trace
    from labrunner.report.batch_row import BatchRow
    from labrunner.report.course_row import CourseRow
    from labrunner.report.results import RunResult


class Listener:
    """Hears a run's events. Every method here ignores its event: a listener overrides those it shows."""

    def note(self, words: str) -> None:
        """Something the user should know that is no error."""

    def recorded(self, words: str) -> None:
        """A note for the run's record that the terminal says in its own way (in the verdict line, say)."""

    def advice(self, words: str) -> None:
        """What to run next, said last; the run's record took it (`recorded`) where it was found."""

    def error(self, words: str) -> None:
        """Something that went wrong and does not end the run (a batch's lost submission, say)."""

    def lines(self, lines: list[str]) -> None:
        """Plain lines a command prints as they are (the traffic model, CI annotations)."""

    @contextmanager
    def cases(self, description: str, total: int) -> Iterator[Progress]:
        """The cases are being run: the progress each one reports as it starts, until the block ends."""
        yield Progress()

    @contextmanager
    def submissions(self, total: int) -> Iterator[Callable[[str], None]]:
        """A batch's submissions are being graded: called with each one's name as it finishes."""
        yield lambda name: None

    def compiled(self, result: RunResult) -> None:
        """`attnlab check`: what the compile gate found."""

    def judged(self, result: RunResult) -> None:
        """Every case has its verdict: the cases' report."""

    def timed(self, result: RunResult) -> None:
        """The timing is done (or was not taken): the timing's report."""

    def gated(self, result: RunResult) -> None:
        """The speed gate's decision, or calibration's record of one."""

    def kernel_output(self, lines: list[str]) -> None:
        """What the student's kernels printed."""

    def verdict(self, result: RunResult, why_on_the_cpu: str | None = None) -> None:
        """The run's verdict: its last line."""

    def doctor(self, rows: list[tuple[str, bool, str]]) -> None:
        """`attnlab doctor`'s checks, each with whether it passed."""

    def traced(self, trace: Trace) -> None:
        """`attnlab profile`'s timeline of kernels."""

    def profiled(self, profile: Profile) -> None:
        """`attnlab profile`'s Range pass: the counters, the traffic beside the model, the bytes that must move."""

    def range_summary(self, report: RangeReport) -> None:
        """`grade --profile`'s one line from the Range pass."""

    def batch(self, lab: str, rows: list[BatchRow], counts: list[tuple[int, str, int]], worst: int,
              course: list[CourseRow] | None) -> None:  # fmt: skip
        """A batch's gradebook, and a line per exit code."""


class NotesRecorded(Listener):
    """The run's record hears its notes: what `--json` carries under `notes`."""

    def __init__(self, result: RunResult) -> None:
        self.result = result

    def note(self, words: str) -> None:
        self.result.notes.append(words)

    def recorded(self, words: str) -> None:
        self.result.notes.append(words)


class Reporter:
    """What the pipeline tells of a run: each event goes to every listener, in the order they were given."""

    def __init__(self, *listeners: Listener) -> None:
        self.listeners = listeners

    def note(self, words: str) -> None:
        for listener in self.listeners:
            listener.note(words)

    def notes(self, said: list[str]) -> None:
        for words in said:
            self.note(words)

    def recorded(self, words: str) -> None:
        for listener in self.listeners:
            listener.recorded(words)

    def advice(self, words: str) -> None:
        for listener in self.listeners:
            listener.advice(words)

    def error(self, words: str) -> None:
        for listener in self.listeners:
            listener.error(words)

    def lines(self, lines: list[str]) -> None:
        for listener in self.listeners:
            listener.lines(lines)

    @contextmanager
    def cases(self, description: str, total: int) -> Iterator[Progress]:
        with ExitStack() as stack:
            shown = [stack.enter_context(listener.cases(description, total)) for listener in self.listeners]

            # each listener's display was started with the description and count already: the cases
            # only say which one starts
            def advance(what: str) -> None:
                for progress in shown:
                    progress.advance(what)

            yield Progress(advance=advance)

    @contextmanager
    def submissions(self, total: int) -> Iterator[Callable[[str], None]]:
        with ExitStack() as stack:
            shown = [stack.enter_context(listener.submissions(total)) for listener in self.listeners]

            def finished(name: str) -> None:
                for one in shown:
                    one(name)

            yield finished

    def compiled(self, result: RunResult) -> None:
        for listener in self.listeners:
            listener.compiled(result)

    def judged(self, result: RunResult) -> None:
        for listener in self.listeners:
            listener.judged(result)

    def timed(self, result: RunResult) -> None:
        for listener in self.listeners:
            listener.timed(result)

    def gated(self, result: RunResult) -> None:
        for listener in self.listeners:
            listener.gated(result)

    def kernel_output(self, lines: list[str]) -> None:
        for listener in self.listeners:
            listener.kernel_output(lines)

    def verdict(self, result: RunResult, why_on_the_cpu: str | None = None) -> None:
        for listener in self.listeners:
            listener.verdict(result, why_on_the_cpu)

    def doctor(self, rows: list[tuple[str, bool, str]]) -> None:
        for listener in self.listeners:
            listener.doctor(rows)

    def traced(self, trace: Trace) -> None:
        for listener in self.listeners:
            listener.traced(trace)

    def profiled(self, profile: Profile) -> None:
        for listener in self.listeners:
            listener.profiled(profile)

    def range_summary(self, report: RangeReport) -> None:
        for listener in self.listeners:
            listener.range_summary(report)

    def batch(self, lab: str, rows: list[BatchRow], counts: list[tuple[int, str, int]], worst: int,
              course: list[CourseRow] | None = None) -> None:  # fmt: skip
        for listener in self.listeners:
            listener.batch(lab, rows, counts, worst, course)


def silent() -> Reporter:
    """A reporter no one listens to: for a caller that wants the run's record alone."""
    return Reporter()
