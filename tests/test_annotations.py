"""GitHub Actions annotations: the right file and line, and no way for a student's text to start a
workflow command of its own."""

from __future__ import annotations

import shutil
from pathlib import Path

from labrunner.exit_codes import ExitCode
from labrunner.report.annotations import github_annotations, github_batch_annotations
from labrunner.report.results import CaseResult, RunResult

REPO = Path(__file__).resolve().parent.parent


def test_a_compile_error_points_at_the_compilers_line():
    data = RunResult(
        "grade",
        "lab2",
        "subs/a.cu",
        error="subs/a.cu(41): error: expected an expression\n"
        'subs/a.cu(44): warning: unused variable\nsubs/a.cu(50): error: identifier "y" is undefined',
        error_code=ExitCode.COMPILE_ERROR,
    ).to_json()
    assert github_annotations(data) == [
        "::error file=subs/a.cu,line=41,title=attnlab lab2%3A compile error::expected an expression",
        '::error file=subs/a.cu,line=50,title=attnlab lab2%3A compile error::identifier "y" is undefined',
    ]


def test_a_failing_case_points_at_the_kernels_definition(tmp_path):
    kernel = tmp_path / "flash, v2.cu"
    shutil.copy(REPO / "kernels/lab2/starter.cu", kernel)
    line = next(n for n, text in enumerate(kernel.read_text().splitlines(), 1) if "flash_prefill(" in text)
    cases = [
        CaseResult("C1-P31", "pass", "ok", 1, 31),
        CaseResult("C17-P31", "wrong", "row 0: got 1, expected 2", 17, 31),
    ]
    data = RunResult("grade", "lab2", str(kernel), backend="cpu", cases=cases).to_json()
    file = str(kernel).replace(",", "%2C")
    assert github_annotations(data) == [
        f"::error file={file},line={line},title=attnlab lab2 C17-P31%3A wrong::row 0: got 1, expected 2"
    ]


def test_a_newline_in_a_message_cannot_start_another_command():
    data = RunResult(
        "grade", "lab2", "a.cu", error="a.cu: refused\n::warning::pwned 100%", error_code=ExitCode.USAGE
    ).to_json()
    (line,) = github_annotations(data)
    # the second line's own `::` is shown (`\x3a:`) as well, so even a log that splits at %0A reads no command
    assert line == "::error file=a.cu,title=attnlab lab2%3A usage-error::a.cu: refused%0A\\x3a:warning::pwned 100%25"
    assert "\n" not in line


def test_a_pass_has_no_annotations():
    data = RunResult("grade", "lab2", "a.cu", cases=[CaseResult("C1-P31", "pass", "ok", 1, 31)]).to_json()
    assert github_annotations(data) == []


def test_a_single_file_prints_its_annotations_after_the_verdict(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from labrunner.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.cu").write_text("// one\nint int x;\n")
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["grade", "lab2", "broken.cu", "--device", "cpu", "--annotations", "github"]
    )
    assert result.exit_code == 3
    assert result.stdout.startswith(
        "COMPILE-ERROR (exit 3)\n::error file=broken.cu,line=2,title=attnlab lab2%3A compile error::"
    )
    assert result.stderr.startswith("broken.cu(2): error: ")  # a compiler's line says error once


def test_a_hostile_file_name_stays_inside_its_property():
    import os

    from labrunner.run.untrusted_text import shown_path

    name = os.fsdecode(b"subs/a\n::stop-commands::tok,x\x1b[2J\xff.cu")
    # as a grade makes it: the message names the file as shown (compile/source.py's label)
    data = RunResult(
        "grade", "lab2", name, error=f"{shown_path(name)}: is a FIFO, not a regular file", error_code=ExitCode.USAGE
    ).to_json()
    (line,) = github_annotations(data)
    shown = "subs/a\\x0a%3A%3Astop-commands%3A%3Atok%2Cx\\x1b[2J\\xff.cu"
    assert line == (
        f"::error file={shown},title=attnlab lab2%3A usage-error::"
        "subs/a\\x0a::stop-commands::tok,x\\x1b[2J\\xff.cu: is a FIFO, not a regular file"
    )


def test_the_kernel_line_is_never_read_through_a_link(tmp_path, monkeypatch):
    import os

    monkeypatch.chdir(tmp_path)
    shutil.copy(REPO / "kernels/lab2/starter.cu", "real.cu")
    os.symlink("real.cu", "link.cu")
    cases = [CaseResult("C17-P31", "wrong", "row 0: got 1, expected 2", 17, 31)]
    data = RunResult("grade", "lab2", "link.cu", backend="cpu", cases=cases).to_json()
    assert github_annotations(data) == [
        "::error file=link.cu,title=attnlab lab2 C17-P31%3A wrong::row 0: got 1, expected 2"
    ]


HINTS = [
    {"hazard": "causal-mask", "text": "row i sees keys j <= prefix + i, its own key included"},
    {"hazard": "constant-factor", "text": "each failing row is off by one factor"},
]


def test_a_failing_cases_annotation_carries_the_grades_hints():
    cases = [CaseResult("C1-P31", "wrong", "row 0: got 1, expected 2", 1, 31)]
    data = RunResult("grade", "lab2", "missing.cu", backend="cpu", cases=cases, hints=HINTS).to_json()
    assert github_annotations(data) == [
        "::error file=missing.cu,title=attnlab lab2 C1-P31%3A wrong::row 0: got 1, expected 2"
        "%0Ahint (causal-mask): row i sees keys j <= prefix + i, its own key included"
        "%0Ahint (constant-factor): each failing row is off by one factor"
    ]


def submission(name: str, verdict: str, **fields) -> dict:
    """A batch's result for `subs/<name>.cu` (no such file: no kernel line) ending in `verdict`."""
    file = f"subs/{name}.cu"
    if verdict == "compile-error":
        error = f"{file}(7): error: expected a ';'\n{file}(9): error: x is undefined\n{file}(12): error: y"
        return RunResult("grade", "lab2", file, error=error, error_code=ExitCode.COMPILE_ERROR).to_json()
    status = {"pass": "pass"}.get(verdict, verdict)
    cases = [CaseResult("C1-P31", "pass", "ok", 1, 31), CaseResult("C17-P31", status, f"{verdict} here", 17, 31)]
    return RunResult("grade", "lab2", file, backend="cpu", cases=cases, **fields).to_json()


def test_a_batch_gets_one_annotation_per_failing_submission_worst_first_and_a_summary():
    results = [
        submission("ana", "pass"),
        submission("ben", "wrong", hints=HINTS),
        submission("cho", "compile-error"),
        submission("dev", "crash"),
        submission("eve", "pass"),
    ]
    results[1]["cases"].append(CaseResult("C33-P31", "wrong", "also wrong", 33, 31).to_json())  # still one line
    assert github_batch_annotations(results) == [
        "::notice title=attnlab lab2::5 submissions: 2 pass, 1 wrong answer, 1 compile error, 1 misbehaving kernel",
        "::error file=subs/cho.cu,line=7,title=attnlab lab2%3A compile error::expected a ';' (and 2 more errors)",
        "::error file=subs/dev.cu,title=attnlab lab2 C17-P31%3A crash::crash here",
        "::error file=subs/ben.cu,title=attnlab lab2 C17-P31%3A wrong::wrong here"
        "%0Ahint (causal-mask): row i sees keys j <= prefix + i, its own key included",  # the first hint only
    ]


def test_a_batch_of_passes_still_prints_its_summary():
    assert github_batch_annotations([submission("ana", "pass"), submission("eve", "pass")]) == [
        "::notice title=attnlab lab2::2 submissions: 2 pass"
    ]


def test_a_batch_annotates_at_most_ten_submissions_and_says_how_many_it_left_out():
    results = [submission(f"s{i:02}", "wrong") for i in range(11)] + [submission("z", "timeout")]
    lines = github_batch_annotations(results)
    assert len(lines) == 11 and sum(line.startswith("::error ") for line in lines) == 10
    assert lines[0] == (
        "::notice title=attnlab lab2::12 submissions: 11 wrong answer, 1 misbehaving kernel; 2 more failing "
        "submissions are not annotated (GitHub shows 10 errors a step): the gradebook lists every one"
    )
    assert lines[1].startswith("::error file=subs/z.cu,")  # the worst first, then the batch's order
    assert [line.split(",", 1)[0] for line in lines[2:]] == [f"::error file=subs/s{i:02}.cu" for i in range(9)]


def test_an_interrupted_submission_is_counted_in_words_and_annotated_with_its_error():
    stopped = RunResult("grade", "lab2", "subs/x.cu", error="interrupted", error_code=ExitCode.INTERRUPTED).to_json()
    lines = github_batch_annotations([submission("ben", "wrong"), stopped])
    assert lines[0] == "::notice title=attnlab lab2::2 submissions: 1 wrong answer, 1 interrupted"
    assert sorted(lines[1:]) == [
        "::error file=subs/ben.cu,title=attnlab lab2 C17-P31%3A wrong::wrong here",
        "::error file=subs/x.cu,title=attnlab lab2%3A interrupted::interrupted",
    ]


def test_a_hostile_message_in_a_batch_stays_inside_its_annotation():
    data = submission("ben", "wrong")
    data["cases"][1]["message"] = "bad\n::error::pwned 100%"
    (_, line) = github_batch_annotations([data])
    assert line == "::error file=subs/ben.cu,title=attnlab lab2 C17-P31%3A wrong::bad%0A\\x3a:error::pwned 100%25"
