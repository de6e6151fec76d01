"""The case report as people read it: failing cases folded to one line each past the first two where
they would fill a screen (a terminal under 100 columns, a log), a narrow terminal given lines instead
of a table, no word cut in two at 60 columns, and each lab's sizes under their own names."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from labrunner.records.device import DeviceFacts
from labrunner.report import terminal
from labrunner.report.results import CaseResult, RunResult
from labrunner.truth.verdict import Status

WRONG = (
    "row 0, head 0, col 0: got 1.77824, expected 0.397378 (|err| > 1e-4 + 1e-3*|ref|); "
    "2046 of 2048 elements wrong; row 0 fails (1 of 1)"
)
UNWRITTEN = "row 0, head 3, col 63 still holds the output's poison: never written; rows 0-16 fail (17 of 17)"
SKIPPED = "skipped: outside the CPU backend's time budget; --full runs it"


def nine_failures() -> RunResult:
    """Lab 2 as a wrong file leaves it: nine failing cases (one never-written), then three skipped."""
    names = ["C1-P31", "C17-P31", "C33-P31", "C1-P1000", "C17-P1000", "C33-P1000", "planted-C33-P31"]
    cases = [CaseResult(name, Status.WRONG, WRONG, 1, 31, max_abs_err=3.82) for name in names]
    cases.insert(1, CaseResult("lastkey-C17-P31", Status.NEVER_WRITTEN, UNWRITTEN, 17, 31))
    cases.append(CaseResult("geometry-C129-P31", Status.WRONG, WRONG, 129, 31, max_abs_err=3.51))
    cases += [CaseResult(n, Status.SKIPPED, SKIPPED, 33, 1000) for n in ("planted-C33-P1000", "C2048-P2048")]
    return RunResult("grade", "lab2", "flash.cu", backend="cpu", device=DeviceFacts.cpu(), cases=cases)


def report(monkeypatch, result: RunResult, width: int, terminal_like: bool, verbose: bool = False) -> list[str]:
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=terminal_like, color_system=None, highlight=False)
    monkeypatch.setattr(terminal, "stdout", console)
    terminal.cases_report(result, verbose)
    terminal.verdict_line(result, "no GPU found")
    return [line.rstrip() for line in buffer.getvalue().splitlines()]


FOLD_LINE = (
    "7 more failing cases folded to one line each; --verbose shows every message in full (and --json PATH keeps them)"
)


def test_at_60_columns_each_case_is_a_line_and_the_first_two_failures_are_in_full(monkeypatch):
    lines = report(monkeypatch, nine_failures(), 60, terminal_like=True)
    assert lines == [
        "lab2 · flash.cu · cpu (CPU (attnlab's fiber backend))",
        "C1-P31 (1 row, prefix 31) wrong, max |err| 3.82e+00",
        "    row 0, head 0, col 0: got 1.77824, expected 0.397378",
        "    (|err| > 1e-4 + 1e-3*|ref|); 2046 of 2048 elements",
        "    wrong; row 0 fails (1 of 1)",
        "lastkey-C17-P31 (17 rows, prefix 31) never-written",
        "    row 0, head 3, col 63 still holds the output's poison:",
        "    never written; rows 0-16 fail (17 of 17)",
        "C17-P31 wrong, max |err| 3.82e+00: row 0, head 0, col 0…",
        "C33-P31 wrong, max |err| 3.82e+00: row 0, head 0, col 0…",
        "C1-P1000 wrong, max |err| 3.82e+00: row 0, head 0, col 0…",
        "C17-P1000 wrong, max |err| 3.82e+00: row 0, head 0, col 0…",
        "C33-P1000 wrong, max |err| 3.82e+00: row 0, head 0, col 0…",
        "planted-C33-P31 wrong, max |err| 3.82e+00: row 0, head 0…",
        "geometry-C129-P31 wrong, max |err| 3.51e+00: row 0, head 0…",
        "planted-C33-P1000 skipped: outside the CPU backend's time…",
        "C2048-P2048 skipped: outside the CPU backend's time budget…",
        "7 more failing cases folded to one line each; --verbose",
        "shows every message in full (and --json PATH keeps them)",
        "NEVER-WRITTEN (2 cases skipped on the CPU backend; --full",
        "runs them) in case lastkey-C17-P31 on the CPU backend: no",
        "GPU found (exit 1)",
    ]


def test_at_60_columns_no_word_is_cut_in_two(monkeypatch):
    """Every word printed is a word of the messages, the names or the statuses, whole (an ellipsis ends
    a folded line after a whole word): no `never-wr` / `itten`, no `(exi` / `t 1)`."""
    result = nine_failures()
    lines = report(monkeypatch, result, 60, terminal_like=True)
    said = " ".join(
        [c.name + " " + c.message for c in result.cases]
        + [FOLD_LINE, "NEVER-WRITTEN (2 cases skipped on the CPU backend; --full runs them) in case"]
        + ["on the CPU backend: no GPU found (exit 1) lab2 · flash.cu · cpu (CPU (attnlab's fiber backend))"]
        + ["1 row, prefix 31 17 rows, wrong, never-written skipped max |err| 3.82e+00 3.51e+00 129"]
    )
    whole = set(re.split(r"[\s,;:()]+", said))
    for line in lines:
        for word in re.split(r"[\s,;:()]+", line.replace("…", "")):
            assert word in whole or not word, (word, line)
    assert max(len(line) for line in lines) <= 60


def test_at_90_columns_the_table_folds_and_never_cuts_a_status(monkeypatch):
    lines = report(monkeypatch, nine_failures(), 90, terminal_like=True)
    rows = [line for line in lines if line.startswith("│ ") and not line.startswith("│   ")]
    assert [row.split("│")[1].strip() for row in rows] == [c.name for c in nine_failures().cases]
    assert [row.split("│")[4].strip() for row in rows][:3] == ["wrong", "never-written", "wrong"]
    # the first two in full (six and five lines), the other seven failures and the two skipped one line each
    assert len([line for line in lines if line.startswith("│")]) == 6 + 5 + 7 + 2
    assert all(row.endswith("… │") for row in rows[2:])
    assert FOLD_LINE.split(" (and")[0] in " ".join(lines)


def test_in_a_log_the_folded_messages_keep_their_first_clause_on_one_row(monkeypatch):
    lines = report(monkeypatch, nine_failures(), 80, terminal_like=False)
    rows = [line for line in lines if line.startswith("│ ")]
    assert len(rows) == 11  # no row wraps in a log
    assert rows[0].endswith("2046 of 2048 elements wrong; row 0 fails (1 of 1) │")
    assert rows[1].rstrip("│ ").endswith("never written; rows 0-16 fail (17 of 17)")
    assert all(
        row.rstrip("│ ").endswith("got 1.77824, expected 0.397378 (|err| > 1e-4 + 1e-3*|ref|)")
        for row in rows[2:7] + rows[8:9]
    ), rows
    assert rows[9].rstrip("│ ").endswith(SKIPPED)  # a skipped case is not a failure: said whole
    assert FOLD_LINE in lines
    assert lines[-1] == (
        "NEVER-WRITTEN (2 cases skipped on the CPU backend; --full runs them) in case lastkey-C17-P31 on the CPU "
        "backend: no GPU found (exit 1)"
    )


def test_verbose_or_a_wide_terminal_shows_every_message_in_full(monkeypatch):
    for width, verbose in ((60, True), (120, False), (80, True)):
        lines = report(monkeypatch, nine_failures(), width, terminal_like=width != 80, verbose=verbose)
        text = " ".join(line.strip("│ ") for line in lines)
        assert not any("folded" in line for line in lines), (width, verbose)
        assert text.count("elements") == 8, (width, verbose)


@pytest.mark.parametrize("failures", [1, 2])
def test_two_failures_or_fewer_are_never_folded(monkeypatch, failures):
    result = nine_failures()
    result.cases = result.cases[:failures]
    lines = report(monkeypatch, result, 60, terminal_like=True)
    assert not any("folded" in line or line.endswith("…") for line in lines)


def test_lab3_names_its_sizes_sequences_and_longest(monkeypatch):
    result = RunResult(
        "grade",
        "lab3",
        "decode.cu",
        backend="cpu",
        cases=[CaseResult("skewed", Status.PASS, "", 16, 4099), CaseResult("single-token", Status.PASS, "", 3, 1)],
    )
    lines = report(monkeypatch, result, 120, terminal_like=True)
    header = next(line for line in lines if line.startswith("┃"))
    assert [cell.strip() for cell in header.strip("┃").split("┃")] == [
        "case",
        "sequences",
        "longest",
        "status",
        "max |err|",
        "details",
    ]
    narrow = report(monkeypatch, result, 60, terminal_like=True)
    assert narrow[1:3] == ["skewed (16 sequences, longest 4099) pass", "single-token (3 sequences, longest 1) pass"]
    lab2 = report(monkeypatch, nine_failures(), 120, terminal_like=True)
    assert "┃ case              ┃ rows ┃ prefix ┃ status        ┃" in lab2[2]


def test_the_verdict_line_says_why_the_cpu_ran_only_when_it_fell_back(monkeypatch):
    result = RunResult("grade", "lab2", "flash.cu", backend="cpu", cases=[CaseResult("C1-P31", Status.PASS, "", 1, 31)])
    buffer = io.StringIO()
    monkeypatch.setattr(terminal, "stdout", Console(file=buffer, width=200, color_system=None))
    terminal.verdict_line(result)
    terminal.verdict_line(result, "CuPy is not installed")
    result.backend = "gpu"
    terminal.verdict_line(result, "CuPy is not installed")  # the GPU ran: there is nothing to explain
    assert buffer.getvalue().splitlines() == [
        "PASS on the CPU backend (exit 0)",
        "PASS on the CPU backend: CuPy is not installed (exit 0)",
        "PASS on the GPU (exit 0)",
    ]
