"""Text from student code is shown, never interpreted: on the terminal, in JSON and in JUnit."""

from __future__ import annotations

import io
import json
import os
import xml.dom.minidom

from rich.console import Console

from labrunner.exit_codes import ExitCode
from labrunner.report import terminal
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
    result = RunResult("grade", "lab2", "k\x01.cu", error=f"k.cu(3): error: {HOSTILE}",
                       error_code=ExitCode.COMPILE_ERROR, kernel_output=[HOSTILE])
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
