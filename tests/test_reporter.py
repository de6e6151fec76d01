"""The reporter: every event reaches every listener, and the run's record hears exactly the notes."""

from __future__ import annotations

import io

from rich.console import Console

from labrunner.report import terminal
from labrunner.report.reporter import Listener, NotesRecorded, Reporter
from labrunner.report.results import RunResult
from labrunner.report.terminal_listener import TerminalListener


def test_a_note_printed_is_a_note_recorded_and_advice_is_recorded_once(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(terminal, "stderr", Console(file=err, width=400, highlight=False, color_system=None))
    result = RunResult("grade", "lab2", "flash.cu")
    reporter = Reporter(TerminalListener(), NotesRecorded(result))
    reporter.note("first")
    reporter.recorded("in the verdict line's own words")
    reporter.recorded("run again with --race-check")
    reporter.notes(["second", "third"])
    reporter.advice("run again with --race-check")
    assert result.notes == [
        "first",
        "in the verdict line's own words",
        "run again with --race-check",
        "second",
        "third",
    ]
    assert err.getvalue() == "note: first\nnote: second\nnote: third\nnote: run again with --race-check\n"


def test_each_case_started_reaches_every_listeners_progress():
    heard: list[tuple[str, str]] = []

    class Counting(Listener):
        def __init__(self, name: str) -> None:
            self.name = name

        def cases(self, description, total):
            from contextlib import contextmanager

            from labrunner.report.progress import Progress

            @contextmanager
            def shown():
                heard.append((self.name, f"{description} ({total})"))
                yield Progress(advance=lambda what: heard.append((self.name, what)))
                heard.append((self.name, "done"))

            return shown()

    with Reporter(Counting("a"), Counting("b")).cases("checking cases", 2) as progress:
        progress.advance("C1-P31")
        progress.advance("C17-P31")
    assert heard == [
        ("a", "checking cases (2)"),
        ("b", "checking cases (2)"),
        ("a", "C1-P31"),
        ("b", "C1-P31"),
        ("a", "C17-P31"),
        ("b", "C17-P31"),
        ("b", "done"),
        ("a", "done"),
    ]
