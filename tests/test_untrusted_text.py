"""Text from student code is shown, never interpreted: on the terminal, in JSON and in JUnit."""

from __future__ import annotations

import io
import json
import os
import xml.dom.minidom

from rich.console import Console

from labrunner.exit_codes import ExitCode
from labrunner.report import terminal
from labrunner.report.batch_row import BatchRow
from labrunner.report.junit import write_junit
from labrunner.report.results import CaseResult, RunResult, write_json
from labrunner.run.kernel_output import CappedOutput
from labrunner.run.untrusted_text import shown, shown_text

HOSTILE = "\x1b[1;32mPASS\x1b[0m\r\x07 \x00\x0b\x7f\x9b \u202e ok\ttab"


def test_every_control_character_is_written_as_a_visible_escape():
    assert shown(HOSTILE) == "\\x1b[1;32mPASS\\x1b[0m\\x0d\\x07 \\x00\\x0b\\x7f\\x9b \\u202e ok\ttab"
    assert shown_text("line one\nline \x1b two") == "line one\nline \\x1b two"
    assert shown(shown(HOSTILE)) == shown(HOSTILE)  # showing twice changes nothing


def hostile_result() -> RunResult:
    result = RunResult(
        "grade",
        "lab2",
        "k\x01.cu",
        error=f"k.cu(3): error: {HOSTILE}",
        error_code=ExitCode.COMPILE_ERROR,
        kernel_output=[HOSTILE],
    )
    result.cases = [CaseResult("C1-P31", "wrong", f"got {HOSTILE}", 1, 31)]
    return result


def test_junit_stays_well_formed_xml_with_the_controls_shown(tmp_path):
    write_junit(hostile_result(), tmp_path / "r.xml")
    document = xml.dom.minidom.parse(str(tmp_path / "r.xml"))
    failures = document.getElementsByTagName("failure")
    assert failures[0].getAttribute("message") == f"got {shown(HOSTILE)}"
    assert failures[1].getAttribute("message") == f"k.cu(3): error: {shown(HOSTILE)}"
    assert document.getElementsByTagName("system-out")[0].firstChild.data == shown(HOSTILE)
    assert document.documentElement.getAttribute("name") == "attnlab lab2 k\\x01.cu"


def test_json_carries_the_escapes_as_text(tmp_path):
    write_json(hostile_result(), tmp_path / "r.json")
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["kernel_output"] == [shown(HOSTILE)]
    assert written["error"] == f"k.cu(3): error: {shown(HOSTILE)}"
    assert written["cases"][0]["message"] == f"got {shown(HOSTILE)}"


def test_the_terminal_neither_interprets_escapes_nor_reads_markup(monkeypatch):
    buffer = io.StringIO()
    monkeypatch.setattr(terminal, "stderr", Console(file=buffer, width=200, force_terminal=True, color_system=None))
    terminal.error("k.cu(3): [green]PASS[/green] \x1b[32mPASS")
    assert buffer.getvalue() == "error: k.cu(3): [green]PASS[/green] \\x1b[32mPASS\n"


def test_kernel_output_keeps_the_first_bytes_and_counts_the_rest():
    output = CappedOutput(keep=10)
    write_end = output.pipe()
    os.write(write_end, b"0123456789abcdef\x1b\n")
    os.close(write_end)
    output.finish()
    assert output.lines() == ["0123456789", "... 8 more bytes not shown (the first 10 bytes are kept)"]


# --- what a CI log or a terminal would read as a command --------------------------------------------


def test_a_line_that_would_be_a_workflow_command_is_shown_as_text():
    assert shown("::error::pwned") == "\\x3a:error::pwned"
    assert shown("  \t::stop-commands::tok") == "  \t\\x3a:stop-commands::tok"  # the runner trims leading space
    assert shown("x ##[error]pwned ##[set-env name=A]b") == "x \\x23#[error]pwned \\x23#[set-env name=A]b"
    assert shown_text("std::vector\n  ::memcpy(a, b, 4);") == "std::vector\n  \\x3a:memcpy(a, b, 4);"
    for text in ("::error::x", "  ::x", "###[x", "##[##[", "a\n::b"):
        assert shown(shown(text)) == shown(text) and shown_text(shown_text(text)) == shown_text(text), text


def test_a_name_that_is_not_utf8_is_shown_byte_by_byte():
    from labrunner.run.untrusted_text import shown_path

    assert shown_path(b"sub/\xff\xfe.cu") == "sub/\\xff\\xfe.cu"
    assert shown_path(os.fsdecode(b"\xc3.cu")) == "\\xc3.cu"
    assert shown_path("caf\u00e9.cu") == "caf\u00e9.cu"  # UTF-8 that decodes is a name, not an escape
    assert shown("\ud800") == "\\ud800"  # a lone surrogate that is no escaped byte keeps its code point


def test_progress_lines_and_the_batch_table_show_names_escaped(monkeypatch):
    buffer = io.StringIO()
    console = Console(file=buffer, width=300, color_system=None)
    monkeypatch.setattr(terminal, "stderr", console)
    monkeypatch.setattr(terminal, "stdout", console)
    name = "a\n::error::b\x1b[2J.cu"
    with terminal.batch_progress(1) as progress:
        progress(f"{name}: compile-error (exit 3)")
    terminal.heading(f"{name}: compiles for lab2")
    terminal.batch_report(
        "lab2",
        [BatchRow(name, "", "compile-error", 3, None, "", "compile", "", 1.0)],
        [],
        3,
    )
    lines = buffer.getvalue().splitlines()
    assert lines[:2] == [
        "[1/1] a\\x0a::error::b\\x1b[2J.cu: compile-error (exit 3)",
        "a\\x0a::error::b\\x1b[2J.cu: compiles for lab2",
    ]
    assert any("a\\x0a::error::b\\x1b[2J.cu" in line for line in lines[2:])
    assert "\x1b" not in buffer.getvalue() and not any(line.lstrip().startswith("::") for line in lines)


def test_kernel_output_is_never_wrapped_into_a_line_of_its_own(monkeypatch):
    buffer = io.StringIO()
    monkeypatch.setattr(terminal, "stderr", Console(file=buffer, width=40, color_system=None))
    terminal.kernel_output(["x" * 30 + " ::error::pwned"])
    assert buffer.getvalue().splitlines()[-1] == "  | " + "x" * 30 + " ::error::pwned"  # wider than 40, unbroken
