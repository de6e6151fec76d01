"""A Gradescope submission folder (labrunner/pipeline/gradescope_folder.py): which file is graded, what a
student is told when none can be, and that a fault of the grader publishes no results.json."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_gradescope import valid

from labrunner.cli import main
from labrunner.cli.guard import reporter_for
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.labs import LABS
from labrunner.pipeline import gradescope_folder
from labrunner.pipeline.gradescope_folder import GradescopeFolder
from labrunner.report.results import RunResult

REPO = Path(__file__).resolve().parent.parent
SOLUTION = REPO / "kernels" / "lab2" / "solution.cu"
AGAIN = "upload that file alone and submit again"


def upload(root: Path, files: dict[str, bytes]) -> Path:
    """A submission folder holding `files` (relative names), as Gradescope unpacks an upload."""
    folder = root / "submission"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def refusal(folder: Path, lab: str = "lab2") -> str:
    kit = GradescopeFolder(lab, folder, folder.parent / "results.json")
    with pytest.raises(AttnlabError) as raised:
        kit.submission()
    assert raised.value.exit_code == ExitCode.USAGE
    assert kit.refused == raised.value.message
    return raised.value.message


def test_the_one_kernel_file_is_graded_wherever_it_lies(tmp_path):
    folder = upload(tmp_path, {"work/lab/flash.cu": b"// mine\n", "notes.txt": b"hi", "work/.flash.cu.swp": b"x"})
    assert GradescopeFolder("lab2", folder, tmp_path / "r.json").submission() == folder / "work/lab/flash.cu"


def test_hidden_entries_and_macos_copies_are_not_candidates(tmp_path):
    folder = upload(
        tmp_path,
        {
            "flash.cu": b"// mine\n",
            "._flash.cu": b"\x00\x05\x16\x07",
            "__MACOSX/flash.cu": b"\x00",
            ".git/objects/old.cu": b"// old\n",
        },
    )
    assert GradescopeFolder("lab2", folder, tmp_path / "r.json").submission() == folder / "flash.cu"


def test_two_kernel_files_are_refused_with_both_names(tmp_path):
    folder = upload(tmp_path, {"flash.cu": b"// a\n", "old/flash.cu": b"// b\n"})
    assert refusal(folder) == (
        "2 kernel files were submitted (flash.cu, old/flash.cu): attnlab grades exactly one kernel file (.cu, or a "
        f"Triton .py); keep the one you mean to hand in, {AGAIN}"
    )


def test_a_cu_and_a_py_file_are_two_files_in_a_lab_that_takes_triton(tmp_path):
    folder = upload(tmp_path, {"flash.cu": b"// a\n", "flash.py": b"# b\n"})
    assert refusal(folder).startswith("2 kernel files were submitted (flash.cu, flash.py): ")


def test_many_files_are_named_five_and_counted(tmp_path):
    folder = upload(tmp_path, {f"k{i}.cu": b"// k\n" for i in range(8)})
    assert refusal(folder, "lab1") == (
        "8 kernel files were submitted (k0.cu, k1.cu, k2.cu, k3.cu, k4.cu and 3 more): attnlab grades exactly one "
        f"kernel file (.cu); keep the one you mean to hand in, {AGAIN}"
    )


def test_an_empty_upload_says_what_to_upload(tmp_path):
    assert refusal(upload(tmp_path, {})) == (
        "no kernel file was submitted: lab2 grades one .cu file or one Triton .py file, and the submission is "
        "empty. Upload your kernel file and submit again"
    )


def test_no_kernel_file_names_what_was_there_and_a_misnamed_one(tmp_path):
    folder = upload(tmp_path, {"README.md": b"#", "flash.CU": b"// k\n"})
    assert refusal(folder) == (
        "no kernel file was submitted: lab2 grades one .cu file or one Triton .py file, and the submission holds "
        "README.md, flash.CU; rename flash.CU to end in .cu. Upload your kernel file and submit again"
    )


def test_a_triton_file_in_a_lab_without_triton_is_no_kernel_file(tmp_path):
    folder = upload(tmp_path, {"attention.py": b"import triton\n"})
    assert refusal(folder, "lab1") == (
        "no kernel file was submitted: lab1 grades one .cu file, and the submission holds attention.py; lab1 takes "
        "no Triton file. Upload your kernel file and submit again"
    )


@pytest.mark.parametrize("content", [b"", b"  \n\t\n"])
def test_an_empty_file_is_refused(tmp_path, content):
    folder = upload(tmp_path, {"flash.cu": content})
    assert refusal(folder) == (
        "flash.cu is empty: upload the file that holds your kernels and submit again (`attnlab starter lab2` "
        "prints the file to start from)"
    )


def test_a_link_is_a_candidate_and_is_never_followed(tmp_path):
    (tmp_path / "secret.cu").write_text("// someone else's\n")
    folder = upload(tmp_path, {})
    (folder / "flash.cu").symlink_to(tmp_path / "secret.cu")
    assert refusal(folder) == (
        "flash.cu: is a symbolic link; grade the file itself, not a link to it. Upload the corrected file and "
        "submit again"
    )


def test_a_folder_named_like_a_kernel_and_a_link_to_a_folder_are_not_walked_into(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "other.cu").write_text("// not the student's\n")
    folder = upload(tmp_path, {"trick.cu/inner.cu": b"// k\n"})
    (folder / "linked").symlink_to(tmp_path / "elsewhere")
    assert GradescopeFolder("lab2", folder, tmp_path / "r.json").submission() == folder / "trick.cu/inner.cu"


def test_a_fifo_is_refused_without_waiting(tmp_path):
    folder = upload(tmp_path, {})
    os.mkfifo(folder / "flash.cu")
    assert refusal(folder) == "flash.cu: is a FIFO, not a regular file. Upload the corrected file and submit again"


def test_a_file_that_is_not_utf8_is_refused_with_where(tmp_path):
    folder = upload(tmp_path, {"flash.cu": b"// caf\xe9\n"})
    assert refusal(folder) == (
        "flash.cu: is not UTF-8 text: byte 0xe9 at line 1, column 7 (a file saved as Latin-1 or Windows-1252?); "
        "save it as UTF-8. Upload the corrected file and submit again"
    )


def test_an_upload_past_the_entry_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(gradescope_folder, "MAX_ENTRIES", 3)
    folder = upload(tmp_path, {f"n{i}.txt": b"" for i in range(4)})
    assert refusal(folder) == (
        f"the submission holds more than 3 files and folders: {AGAIN.replace('that', 'your kernel')}"
    )


def test_files_deeper_than_the_depth_limit_are_not_seen(tmp_path, monkeypatch):
    monkeypatch.setattr(gradescope_folder, "MAX_DEPTH", 2)
    folder = upload(tmp_path, {"a/b/deep.cu": b"// k\n", "a/shallow.cu": b"// k\n"})
    assert GradescopeFolder("lab2", folder, tmp_path / "r.json").submission() == folder / "a/shallow.cu"


def test_an_unknown_lab_is_the_graders_and_refuses_nothing(tmp_path):
    kit = GradescopeFolder("lab9", upload(tmp_path, {"flash.cu": b"// k\n"}), tmp_path / "r.json")
    with pytest.raises(AttnlabError) as raised:
        kit.submission()
    assert (raised.value.exit_code, kit.refused) == (ExitCode.USAGE, None)


def test_a_missing_submission_folder_is_the_graders(tmp_path):
    kit = GradescopeFolder("lab2", tmp_path / "absent", tmp_path / "r.json")
    with pytest.raises(AttnlabError) as raised:
        kit.submission()
    assert raised.value.message == (
        f"{tmp_path / 'absent'}: cannot list the submission folder (No such file or directory)"
    )
    assert kit.refused is None


# --- what is published --------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [ExitCode.USAGE, ExitCode.ENVIRONMENT, ExitCode.INTERRUPTED, ExitCode.TERMINATED])
def test_a_fault_of_the_grader_publishes_nothing_and_says_why(tmp_path, capsys, code):
    results = tmp_path / "results.json"
    results.write_text('{"score": 80}')
    kit = GradescopeFolder("lab2", tmp_path, results)
    kit.withdraw_stale()
    kit.publish(
        RunResult("grade", "lab2", "flash.cu", error="the grader's", error_code=code),
        reporter_for(RunResult("grade", "lab2")),
    )
    assert not results.exists()
    assert list(tmp_path.iterdir()) == []
    verdict = {2: "usage-error", 6: "environment-missing", 130: "interrupted", 143: "interrupted"}[int(code)]
    assert " ".join(capsys.readouterr().err.split()) == (
        f"error: no results.json written: the grade ended {verdict} (exit {int(code)}), a fault of the grader, not "
        "of the submission. Fix the autograder (its lab, seed, options, or what setup.sh installs) and regrade: "
        "until then Gradescope shows the autograder as failed, never a score"
    )


@pytest.mark.parametrize("code", [ExitCode.COMPILE_ERROR, ExitCode.MISBEHAVED])
def test_a_verdict_on_the_file_is_published(tmp_path, code):
    results = tmp_path / "results.json"
    kit = GradescopeFolder("lab2", tmp_path, results)
    kit.publish(
        RunResult("grade", "lab2", "flash.cu", error="the file's", error_code=code),
        reporter_for(RunResult("grade", "lab2")),
    )
    written = valid(json.loads(results.read_text()))
    assert written["score"] == 0.0
    assert written["extra_data"]["attnlab"]["exit_code"] == int(code)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # no partial file left beside it


def test_a_refused_upload_is_published_though_its_code_is_a_usage_error(tmp_path):
    folder = upload(tmp_path, {"a.cu": b"// a\n", "b.cu": b"// b\n"})
    results = tmp_path / "results.json"
    kit = GradescopeFolder("lab2", folder, results)
    with pytest.raises(AttnlabError) as raised:
        kit.submission()
    kit.publish(
        RunResult("grade", "lab2", str(folder), error=raised.value.message, error_code=ExitCode.USAGE),
        reporter_for(RunResult("grade", "lab2")),
    )
    written = valid(json.loads(results.read_text()))
    assert written["score"] == 0.0
    assert [t["status"] for t in written["tests"]] == ["failed"]
    assert written["tests"][0]["output"].split("\n\n")[-1] == raised.value.message


# --- through the command line ------------------------------------------------------------------------


def test_the_command_publishes_a_refusal_and_exits_2(tmp_path):
    folder = upload(tmp_path, {"flash.cu": b"", "notes.txt": b"x"})
    results = tmp_path / "results" / "results.json"
    results.parent.mkdir()
    run = CliRunner().invoke(main, ["grade", "lab2", str(folder), "--device", "cpu", "--gradescope", str(results)])
    message = (
        "flash.cu is empty: upload the file that holds your kernels and submit again (`attnlab starter lab2` "
        "prints the file to start from)"
    )
    assert (run.exit_code, " ".join(run.stderr.split())) == (2, f"error: {message}")
    written = valid(json.loads(results.read_text()))
    assert (written["score"], written["tests"][0]["output"].split("\n\n")[-1]) == (0.0, message)


def test_a_bad_points_table_publishes_nothing_and_removes_a_stale_results_json(tmp_path, monkeypatch):
    table = (REPO / "cases/lab2.toml").read_text().replace("\nspeed = 20\n", "\nspeeed = 20\n")
    (tmp_path / "lab2.toml").write_text(table)
    monkeypatch.setitem(
        LABS, "lab2", dataclasses.replace(LABS["lab2"], cases_dir=tmp_path, kernels_dir=REPO / "kernels")
    )
    folder = upload(tmp_path, {"flash.cu": SOLUTION.read_bytes()})
    results = tmp_path / "results.json"
    results.write_text('{"score": 80}')
    run = CliRunner().invoke(main, ["grade", "lab2", str(folder), "--device", "cpu", "--gradescope", str(results)])
    problem = f"{tmp_path / 'lab2.toml'} [points]: unknown key 'speeed'; the keys are cases, speed and shares"
    assert run.exit_code == 2
    assert run.stderr.splitlines()[0] == f"error: {problem}"
    assert " ".join(run.stderr.split()).endswith("until then Gradescope shows the autograder as failed, never a score")
    assert not results.exists()
