"""The command line: what each command prints, writes and exits with, on a machine without a GPU.

Most tests call `labrunner.cli.main` through click's CliRunner; a few run `python -m labrunner`
as a user would, to prove the module entry point and that errors never end in a traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from labrunner import box as boxes
from labrunner.cli import main
from labrunner.pipeline import backend as backend_module

REPO = Path(__file__).resolve().parent.parent
STARTER = REPO / "kernels/lab2/starter.cu"
UNKNOWN_LAB = "error: unknown lab 'lab9': choose one of lab1, lab2, lab3 (`attnlab labs` lists them)\n"
GPU_ONLY = (
    ". --device gpu grades on a GPU only; leave --device out (auto, the default: the GPU where there is one, "
    "else the CPU) or give --device cpu to grade on the CPU (correctness only)\n"
)
NO_GPU = "error: no GPU found" + GPU_ONLY


@pytest.fixture
def runner(tmp_path, monkeypatch):
    """A CliRunner in an empty folder, wide enough that tables do not wrap."""
    monkeypatch.chdir(tmp_path)
    return CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def no_gpu(monkeypatch):
    """The same answer on every machine: CuPy sees no GPU."""
    monkeypatch.setattr(backend_module, "gpu_status", lambda: (False, "no GPU found"))


def has_gpu() -> bool:
    return backend_module.gpu_status()[0]


def cpu_backend_ready() -> bool:
    from labrunner.run.cpu_device import cpu_backend_status

    return cpu_backend_status()[0]


def invoke(runner: CliRunner, *args: str):
    result = runner.invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result


def attnlab(*args: str, cwd: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "labrunner", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# --- labs and starter ------------------------------------------------------------------------


def test_labs_lists_both_labs(runner):
    result = invoke(runner, "labs")
    assert result.exit_code == 0
    assert re.search(r"│ lab1 +│ The full score matrix +│", result.stdout)
    assert re.search(r"│ lab2 +│ Flash prefill against a cached prefix +│", result.stdout)
    assert result.stderr == ""


def test_starter_prints_the_starter_exactly(runner):
    result = invoke(runner, "starter", "lab2")
    assert result.exit_code == 0
    assert result.stdout == STARTER.read_text()


def test_starter_writes_the_file_and_says_how_to_grade_it(runner, tmp_path):
    result = invoke(runner, "starter", "lab2", "-o", "attention.cu")
    assert result.exit_code == 0
    assert (tmp_path / "attention.cu").read_text() == STARTER.read_text()
    assert result.stderr == "note: wrote attention.cu; grade it with: attnlab grade lab2 attention.cu\n"
    assert result.stdout == ""


def test_starter_refuses_to_overwrite_without_force(runner, tmp_path):
    target = write(tmp_path / "attention.cu", "// my work\n")
    result = invoke(runner, "starter", "lab2", "-o", "attention.cu")
    assert result.exit_code == 2
    assert result.stderr == "error: attention.cu exists; nothing was written (use --force to overwrite it)\n"
    assert target.read_text() == "// my work\n"


def test_starter_overwrites_with_force(runner, tmp_path):
    target = write(tmp_path / "attention.cu", "// my work\n")
    result = invoke(runner, "starter", "lab2", "-o", "attention.cu", "--force")
    assert result.exit_code == 0
    assert target.read_text() == STARTER.read_text()


def test_starter_into_a_missing_folder_is_a_usage_error(runner):
    result = invoke(runner, "starter", "lab2", "-o", "no/such/folder/attention.cu")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: no/such/folder/attention.cu: cannot be written (No such file or directory); check the folder exists\n"
    )
    assert result.stdout == ""


# --- usage errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["starter", "lab9"],
        ["check", "lab9", str(STARTER)],
        ["grade", "lab9", str(STARTER), "--device", "cpu"],
    ],
)
def test_an_unknown_lab_is_one_line_and_exit_2(runner, args):
    result = invoke(runner, *args)
    assert result.exit_code == 2
    assert result.stderr == UNKNOWN_LAB
    assert "Traceback" not in result.output


def test_a_missing_file_is_one_line_and_exit_2(runner):
    result = invoke(runner, "check", "lab2", "nope.cu")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: nope.cu: no such file; pass the path of your .cu file (`attnlab starter LAB` writes one)\n"
    )
    assert result.stdout == ""


def test_a_folder_is_not_a_kernel_file(runner, tmp_path):
    (tmp_path / "kernels").mkdir()
    result = invoke(runner, "check", "lab2", "kernels")
    assert result.exit_code == 2
    assert result.stderr == "error: kernels: is a folder, not a .cu file\n"


def test_a_file_that_is_not_utf8_is_a_usage_error(runner, tmp_path):
    (tmp_path / "bad.cu").write_bytes(b"// ok\n// caf\xe9\n")
    result = invoke(runner, "check", "lab2", "bad.cu")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: bad.cu: is not UTF-8 text: byte 0xe9 at line 2, column 7 (a file saved as Latin-1 or "
        "Windows-1252?); save it as UTF-8\n"
    )


def test_a_utf16_file_is_named_as_such(runner, tmp_path):
    (tmp_path / "wide.cu").write_bytes("// x\n".encode("utf-16"))
    result = invoke(runner, "check", "lab2", "wide.cu")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "error: wide.cu: is UTF-16 text, which the compilers do not read; save it as UTF-8\n"


BOM_NOTE = (
    "note: flash.cu: starts with a UTF-8 byte-order mark, removed before compiling (save the file as UTF-8 "
    "without BOM to silence this note)\n"
)


def test_a_byte_order_mark_is_removed_and_said_once(runner, tmp_path):
    (tmp_path / "flash.cu").write_bytes(b"\xef\xbb\xbf" + STARTER.read_bytes())
    result = invoke(runner, "check", "lab2", "flash.cu", "--json", "c.json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == BOM_NOTE
    assert json.loads((tmp_path / "c.json").read_text())["notes"] == [BOM_NOTE.removeprefix("note: ").rstrip()]


@pytest.mark.skipif(not cpu_backend_ready(), reason="no C++ compiler for the CPU backend")
def test_a_file_with_a_byte_order_mark_is_graded_as_without_it(runner, tmp_path):
    (tmp_path / "flash.cu").write_bytes(b"\xef\xbb\xbf" + STARTER.read_bytes())
    result = invoke(runner, "grade", "lab2", "flash.cu", "--device", "cpu", "--case", "C1-P31")
    assert (result.exit_code, result.stdout.splitlines()[-1]) == (0, "PASS on the CPU backend (exit 0)")
    assert result.stderr.count("byte-order mark") == 1
    assert result.stderr.startswith(BOM_NOTE)


def test_no_python_warning_reaches_the_student(runner, monkeypatch):
    """A warning raised in the driver (numpy's RuntimeWarning over a kernel's NaN, say) is never shown:
    the command ignores warnings, whatever PYTHONWARNINGS or the caller asked for."""
    import warnings

    from labrunner.pipeline import check as check_module

    def nvrtc_version_that_warns() -> str:
        warnings.warn("invalid value encountered in subtract", RuntimeWarning, stacklevel=1)
        return "13.0"

    monkeypatch.setattr(check_module, "nvrtc_version", nvrtc_version_that_warns)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = invoke(runner, "check", "lab2", str(STARTER))
    assert result.exit_code == 0
    assert caught == []
    assert "Warning" not in result.output


# --- check -----------------------------------------------------------------------------------


def test_check_passes_the_starter(runner):
    result = invoke(runner, "check", "lab2", str(STARTER))
    assert result.exit_code == 0
    assert result.stdout.rstrip().endswith("PASS (exit 0)")
    assert f"{STARTER}: compiles for lab2 (sm_90, NVRTC " in result.stdout
    assert re.search(r"│ flash_prefill +│ +\d+ │", result.stdout)  # the registers column
    assert re.search(r"│ attnlab_smem_bytes +│ +0 │", result.stdout)


def test_a_long_path_in_a_heading_is_never_wrapped_in_a_log(tmp_path, monkeypatch):
    # a log without COLUMNS keeps each line whole, however long (with COLUMNS, it wraps as a terminal would)
    monkeypatch.chdir(tmp_path)
    deep = tmp_path / ("a_folder_with_a_long_name_" * 4) / "attention_submission.cu"
    deep.parent.mkdir()
    shutil.copy(STARTER, deep)
    result = invoke(CliRunner(env={"COLUMNS": None}), "check", "lab2", str(deep))
    assert result.exit_code == 0
    assert f"{deep}: compiles for lab2 (sm_90, NVRTC " in result.stdout


def test_check_reports_a_syntax_error_at_the_students_line(runner, tmp_path):
    source = STARTER.read_text().splitlines()
    at = next(i for i, line in enumerate(source) if line.strip() == "const int warp = threadIdx.x / 32;")
    source[at] = source[at] + " int x = ;"
    write(tmp_path / "broken.cu", "\n".join(source) + "\n")
    result = invoke(runner, "check", "lab2", "broken.cu")
    assert result.exit_code == 3
    assert result.stderr == (
        f'broken.cu({at + 1}): error: expected an expression\n1 error detected in the compilation of "broken.cu".\n'
    )
    assert result.stdout == "COMPILE-ERROR (exit 3)\n"  # the compiler's lines end with a verdict, as every grade's


def test_check_names_a_missing_entry_point(runner, tmp_path):
    write(tmp_path / "empty.cu", "// nothing yet\n")
    result = invoke(runner, "check", "lab2", "empty.cu")
    assert result.exit_code == 3
    assert result.stderr == (
        'empty.cu: error: missing entry point flash_prefill; lab2 needs: extern "C" __global__ void '
        "flash_prefill(const float* q, const float* kCache, const float* vCache, float* out, int chunkLen, "
        "int prefixLen)\n"
    )


def test_a_file_of_another_lab_is_recognised_by_its_entry_points(runner):
    lab2_solution = REPO / "kernels" / "lab2" / "solution.cu"
    result = invoke(runner, "check", "lab1", str(lab2_solution))
    assert result.exit_code == 3
    assert result.stderr == (
        f"{lab2_solution}: error: missing entry point attn_scores; this looks like a lab2 file (it defines "
        f"flash_prefill): grade it with `attnlab grade lab2 {lab2_solution}`\n"
    )
    assert result.stdout == "COMPILE-ERROR (exit 3)\n"


def test_check_json(runner, tmp_path):
    result = invoke(runner, "check", "lab2", str(STARTER), "--json", "out.json")
    assert result.exit_code == 0
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["schema"] == "attnlab.result/1"
    assert (data["command"], data["lab"], data["file"]) == ("check", "lab2", str(STARTER))
    assert (data["backend"], data["verdict"], data["exit_code"], data["error"]) == (None, "pass", 0, None)
    assert data["oracle_proof"] is None and data["cases"] == []
    assert data["compile"]["entry_points"] == {"flash_prefill": ["u64", "u64", "u64", "u64", "u32", "u32"]}
    assert data["compile"]["constants"] == {
        "attnlab_threads": 256,
        "attnlab_rows_per_block": 64,
        "attnlab_heads_per_block": 1,
        "attnlab_smem_bytes": 0,
    }
    assert data["compile"]["resources"]["flash_prefill"]["registers"] > 0


def test_check_json_of_a_compile_error(runner, tmp_path):
    write(tmp_path / "broken.cu", "int int x;\n")
    result = invoke(runner, "check", "lab2", "broken.cu", "--json", "out.json")
    assert result.exit_code == 3
    data = json.loads((tmp_path / "out.json").read_text())
    assert (data["verdict"], data["exit_code"], data["file"]) == ("compile-error", 3, "broken.cu")
    assert data["error"].startswith("broken.cu(1): error: ")


def test_json_to_an_unwritable_path_is_a_usage_error(runner):
    result = invoke(runner, "check", "lab2", str(STARTER), "--json", "no/such/folder/out.json")
    assert result.exit_code == 2
    assert result.stderr == "error: --json no/such/folder/out.json: cannot write (No such file or directory)\n"


# --- grade -----------------------------------------------------------------------------------


def test_an_unwritable_report_path_is_refused_before_grading(runner):
    result = invoke(runner, "grade", "lab2", str(STARTER), "--device", "cpu", "--junit", "no/such/folder/j.xml")
    assert result.exit_code == 2
    assert result.stderr == "error: --junit no/such/folder/j.xml: cannot write (No such file or directory)\n"
    assert result.stdout == ""  # nothing was graded, so nothing was lost


def test_grade_on_the_gpu_without_one_says_how_to_grade_on_the_cpu(runner, no_gpu, tmp_path):
    result = invoke(runner, "grade", "lab2", str(STARTER), "--device", "gpu", "--json", "out.json")
    assert result.exit_code == 6
    assert result.stderr == NO_GPU
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["schema"] == "attnlab.result/1"
    assert (data["command"], data["lab"], data["file"], data["backend"]) == ("grade", "lab2", str(STARTER), None)
    assert (data["verdict"], data["exit_code"]) == ("environment-missing", 6)
    assert data["oracle_proof"]["passed"] is True and data["oracle_proof"]["max_error"] <= 1e-12
    assert data["cases"] == []


@pytest.mark.skipif(not cpu_backend_ready(), reason="no C++ compiler for the CPU backend")
def test_grade_without_a_gpu_grades_on_the_cpu_by_default_and_says_why(runner, no_gpu, tmp_path):
    """--device auto is the default: no option is needed on a machine without a GPU, and the verdict line
    says where the grade ran and why."""
    result = invoke(runner, "grade", "lab2", str(STARTER), "--case", "C1-P31", "--json", "out.json")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "PASS on the CPU backend: no GPU found (exit 0)"
    assert result.stderr.startswith(
        "note: no GPU found: grading on the CPU backend instead (correctness only, no GPU timings)\n"
    )
    data = json.loads((tmp_path / "out.json").read_text())
    assert (data["backend"], data["verdict"], data["options"]["device"]) == ("cpu", "pass", "auto")


def test_a_cpu_verdict_asked_for_names_no_reason(runner, no_gpu, tmp_path):
    if not cpu_backend_ready():
        pytest.skip("no C++ compiler for the CPU backend")
    result = invoke(runner, "grade", "lab2", str(STARTER), "--case", "C1-P31", "--device", "cpu")
    assert (result.exit_code, result.stdout.splitlines()[-1]) == (0, "PASS on the CPU backend (exit 0)")
    assert "note: " not in result.stderr


@pytest.mark.parametrize(
    "args, command, instead",
    [
        (["bench", "lab2"], "bench", "check correctness on the CPU with `attnlab grade lab2 FILE`"),
        (["bench", "lab2", "flash.cu"], "bench", "check correctness on the CPU with `attnlab grade lab2 flash.cu`"),
        (["profile", "lab2", "flash.cu"], "profile", "check correctness on the CPU with `attnlab grade lab2 flash.cu`"),
        (
            ["calibrate", "lab2"],
            "calibrate",
            "a speed gate is a time taken on the GPU it gates; nothing was written to gates.json",
        ),
    ],
)
@pytest.mark.parametrize("device", [[], ["--device", "auto"], ["--device", "gpu"], ["--device", "cpu"]])
def test_the_commands_that_time_say_in_one_line_that_they_need_a_gpu(runner, no_gpu, args, command, instead, device):
    """bench, calibrate and profile without a GPU: one line, exit 6, naming no option the command lacks (today's
    calibrate once named bench), before any file is read (flash.cu does not exist here)."""
    result = invoke(runner, *args, *device)
    why = "--device cpu chose the CPU backend, which takes no timings" if "cpu" in device else "no GPU found"
    assert (result.exit_code, result.stdout) == (6, "")
    assert result.stderr == f"error: {command} needs a GPU: {why}; {instead}\n"
    assert not Path("gates.json").exists()  # the runner's folder: nothing was written


def test_grade_compiles_before_it_looks_for_a_gpu(runner, no_gpu, tmp_path):
    write(tmp_path / "broken.cu", "int int x;\n")
    result = invoke(runner, "grade", "lab2", "broken.cu")
    assert result.exit_code == 3
    assert result.stderr.startswith("broken.cu(1): error: ")


@pytest.mark.parametrize("command", ["grade", "bench"])
def test_rounds_for_lab1_is_a_usage_error(runner, command):
    result = invoke(runner, command, "lab1", str(REPO / "kernels/lab1/solution.cu"), "--rounds", "3", "--device", "cpu")
    assert result.exit_code == 2
    assert result.stderr == "error: --rounds applies to lab2's SPEEDUP; lab1 times its pipeline at fixed sizes\n"


def test_bench_lab1_names_every_speedup_option_given(runner):
    result = invoke(runner, "bench", "lab1", "--chunk", "64", "--vs", "solution", "--device", "cpu")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --chunk and --vs apply to lab2's SPEEDUP; lab1 times its pipeline "
        "at fixed sizes (its --vs takes torch only: PyTorch beside the whole call)\n"
    )


@pytest.mark.slow
def test_grade_with_an_unknown_case_is_a_usage_error(runner):
    if not cpu_backend_ready():
        pytest.skip("no C++ compiler for the CPU backend")
    result = invoke(runner, "grade", "lab2", str(STARTER), "--device", "cpu", "--case", "C5")
    assert result.exit_code == 2
    assert result.stderr.endswith(
        "error: --case C5: lab2 has no such case (it has C1-P31, C17-P31, C33-P31, "
        "C1-P1000, C17-P1000, C33-P1000, planted-C33-P31, planted-C33-P1000, "
        "lastkey-C33-P1000, lastkey-C17-P31, C2048-P2048, geometry-C129-P31)\n"
    )


def test_grade_on_the_cpu_writes_the_cases_to_json(runner, tmp_path, monkeypatch):
    if not cpu_backend_ready():
        pytest.skip("no C++ compiler for the CPU backend")
    monkeypatch.delenv("ATTNLAB_SEED", raising=False)
    result = invoke(runner, "grade", "lab2", str(STARTER), "--device", "cpu", "--case", "C1-P31", "--json", "g.json")
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "g.json").read_text())
    assert (data["backend"], data["verdict"], data["exit_code"], data["seed"]) == ("cpu", "pass", 0, "20261129")
    assert [(c["name"], c["status"], c["rows"], c["prefix"], c["bad_elements"]) for c in data["cases"]] == [
        ("C1-P31", "pass", 1, 31, 0)
    ]
    assert data["cases"][0]["message"] == "all 2048 elements within the pass rule"
    assert data["cases"][0]["max_abs_err"] < 1e-5
    assert result.stdout.rstrip().endswith("PASS on the CPU backend (exit 0)")


@pytest.mark.slow
def test_grading_leaves_no_kernel_output_log_behind(runner, tmp_path, monkeypatch):
    if not cpu_backend_ready():
        pytest.skip("no C++ compiler for the CPU backend")
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    result = invoke(runner, "grade", "lab2", str(STARTER), "--device", "cpu", "--case", "C1-P31")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in temp.glob("attnlab-kernel-output-*")) == []


def test_a_negative_seed_is_a_usage_error(runner):
    if not cpu_backend_ready():
        pytest.skip("no C++ compiler for the CPU backend")
    result = invoke(runner, "grade", "lab2", str(STARTER), "--device", "cpu", "--case", "C1-P31", "--seed", "-1")
    assert result.exit_code == 2
    assert result.stderr == "error: --seed must not be negative, got -1\n"


# --- doctor ----------------------------------------------------------------------------------


def test_doctor_without_a_gpu_exits_0_and_shows_the_golden_proof(runner, no_gpu, tmp_path):
    result = invoke(runner, "doctor", "--json", "d.json")
    assert result.exit_code == 0
    assert re.search(
        r"│ GPU and driver +│ missing │ no GPU found: grade with --device cpu \(correctness only\)", result.stdout
    )
    assert re.search(r"│ oracle golden proof +│ ok +│ max error \d\.\de-\d\d \(must be <= 1e-12\)", result.stdout)
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["schema"] == "attnlab.result/1"
    assert (data["command"], data["lab"], data["file"], data["backend"]) == ("doctor", None, None, None)
    assert (data["verdict"], data["exit_code"]) == ("pass", 0)
    assert data["notes"][0] == "GPU and driver: missing: no GPU found: grade with --device cpu (correctness only)"
    assert data["oracle_proof"]["passed"] is True and data["oracle_proof"]["max_error"] <= 1e-12
    assert data["cases"] == []


def test_doctor_names_the_box_and_the_tool_that_made_it(runner, no_gpu, tmp_path):
    if boxes.availability() is not None:
        pytest.skip(f"no box here: {boxes.availability()}")
    result = invoke(runner, "doctor")
    assert re.search(
        r"│ box +│ ok +│ bubblewrap \d+\.\d+\.\d+ \(\S*bwrap\): mount, PID, IPC, UTS, network and user", result.stdout
    ), result.stdout


def test_doctor_without_a_box_says_what_is_missing_and_what_it_costs(runner, no_gpu, tmp_path, monkeypatch):
    monkeypatch.setattr(
        boxes,
        "availability",
        lambda: "bubblewrap is not installed (apt-get install bubblewrap, or set ATTNLAB_BWRAP to a bwrap binary)",
    )
    invoke(runner, "doctor", "--json", "d.json")
    data = json.loads((tmp_path / "d.json").read_text())
    assert (
        "box: missing: bubblewrap is not installed (apt-get install bubblewrap, or set ATTNLAB_BWRAP to a bwrap "
        "binary): --device cpu refuses to grade, the GPU path runs unboxed (--require-box refuses)"
    ) in data["notes"]


def test_require_box_refuses_to_compile_outside_a_box(runner, tmp_path, monkeypatch):
    monkeypatch.setattr(
        boxes,
        "availability",
        lambda: "bubblewrap is not installed (apt-get install bubblewrap, or set ATTNLAB_BWRAP to a bwrap binary)",
    )
    write(tmp_path / "flash.cu", STARTER.read_text())
    result = invoke(runner, "check", "lab2", "flash.cu", "--require-box")
    assert result.exit_code == 6
    assert result.stderr == (
        "error: --require-box: no box can be made here: bubblewrap is not installed "
        "(apt-get install bubblewrap, or set ATTNLAB_BWRAP to a bwrap binary)\n"
    )
    assert boxes.REQUIRED is False  # the request's requirement lasted its run, no longer
    assert invoke(runner, "check", "lab2", "flash.cu").exit_code == 0  # without the flag, the next run compiles


# --- help ------------------------------------------------------------------------------------


def context(command: click.Command, name: str) -> click.Context:
    """The context click itself would build, so the help option is the real -h/--help."""
    return command.context_class(command, info_name=name, **command.context_settings)


def test_the_group_and_every_command_and_option_have_help():
    missing = [] if (main.help or "").strip() else ["attnlab"]
    for param in main.get_params(context(main, "attnlab")):
        if isinstance(param, click.Option) and not (param.help or "").strip():
            missing.append(f"attnlab {param.opts[0]}")
    for name, command in main.commands.items():
        if not (command.help or "").strip():
            missing.append(name)
        for param in command.get_params(context(command, name)):
            if isinstance(param, click.Option) and not (param.help or "").strip():
                missing.append(f"{name} {param.opts[0]}")
    assert missing == []


def test_the_command_set():
    assert sorted(main.commands) == [
        "bench",
        "calibrate",
        "check",
        "doctor",
        "grade",
        "labs",
        "profile",
        "starter",
        "traffic",
    ]


@pytest.mark.parametrize(
    "name", ["labs", "starter", "check", "doctor", "grade", "bench", "calibrate", "profile", "traffic"]
)
def test_dash_h_shows_each_commands_help(runner, name):
    result = invoke(runner, name, "-h")
    assert result.exit_code == 0
    summary = " ".join(main.commands[name].help.split("\n\n")[0].split())
    assert summary in " ".join(result.stdout.split())


def test_grade_help_groups_its_options_and_lists_each_once(runner):
    result = invoke(runner, "grade", "--help")
    assert result.exit_code == 0
    headings = [line for line in result.stdout.splitlines() if line and not line.startswith(" ")][1:]
    assert headings == [
        "One file (a .cu file, or a Triton .py file in lab2 and lab3):",
        "Batch (several files, a folder of them, or a folder per student):",
        "Cluster (a batch on Slurm: --executor slurm):",
        "Output:",
    ]
    grade = main.commands["grade"]
    sections = dict(zip(headings, re.split(r"^\S.*:$", result.stdout, flags=re.MULTILINE)[1:]))
    named = [o for p in grade.get_params(context(grade, "grade")) if isinstance(p, click.Option) for o in p.opts]
    for option in named:  # each option in exactly one section, none left out
        # `-v, --verbose`: either name, in its record's first column; --gpus is not --gpus-per-job
        listed = rf"^  (?:\S+, )*{re.escape(option)}(?![\w-])"
        assert sum(bool(re.search(listed, s, re.MULTILINE)) for s in sections.values()) == 1, option
    assert re.search(r"^  --partition\b", sections["Cluster (a batch on Slurm: --executor slurm):"], re.MULTILINE)
    assert re.search(r"^  --roster\b", sections[headings[1]], re.MULTILINE)
    assert re.search(r"^  --json\b", sections["Output:"], re.MULTILINE)
    assert re.search(r"^  -h, --help\b", sections["Output:"], re.MULTILINE)
    assert re.search(r"^  --race-check\b", sections[headings[0]], re.MULTILINE)
    assert "a Triton .py file" in " ".join(result.stdout.split()[:60])


# --- as a user runs it -----------------------------------------------------------------------


@pytest.mark.slow
def test_python_m_labrunner_labs():
    completed = attnlab("labs")
    assert completed.returncode == 0
    assert "│ lab1 " in completed.stdout and "│ lab2 " in completed.stdout


@pytest.mark.slow
def test_python_m_labrunner_unknown_lab_has_no_traceback():
    completed = attnlab("starter", "lab9")
    assert completed.returncode == 2
    assert completed.stderr == UNKNOWN_LAB
    assert completed.stdout == ""


@pytest.mark.slow
def test_python_m_labrunner_check_with_a_syntax_error(tmp_path):
    write(tmp_path / "attention.cu", "// one\n// two\nint int x;\n")
    completed = attnlab("check", "lab2", "attention.cu", cwd=tmp_path)
    assert completed.returncode == 3
    assert completed.stderr.startswith("attention.cu(3): error: ")
    assert "Traceback" not in completed.stderr


@pytest.mark.slow
def test_the_starters_advice_works_with_no_option_on_a_machine_without_a_gpu(tmp_path):
    """`attnlab starter lab2 -o flash.cu` says "grade it with: attnlab grade lab2 flash.cu": that command, as
    written, grades on the CPU here and says so."""
    if has_gpu() or not cpu_backend_ready():
        pytest.skip("this machine has a GPU, or no C++ compiler for the CPU backend")
    written = attnlab("starter", "lab2", "-o", "flash.cu", cwd=tmp_path)
    assert written.stderr == "note: wrote flash.cu; grade it with: attnlab grade lab2 flash.cu\n"
    completed = attnlab("grade", "lab2", "flash.cu", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    why = backend_module.why_on_the_cpu([f"{backend_module.gpu_status()[1]}: {backend_module.CPU_INSTEAD}"])
    assert completed.stdout.splitlines()[-1] == (
        f"PASS (3 cases skipped on the CPU backend; --full runs them) on the CPU backend: {why} (exit 0)"
    )


@pytest.mark.slow
def test_device_gpu_requires_a_gpu_and_says_so_with_exit_6(tmp_path):
    """A course that wants GPU verdicts only passes --device gpu: on a machine without one it never
    falls back to the CPU."""
    if has_gpu():
        pytest.skip("this machine has a GPU")
    completed = attnlab("grade", "lab2", str(STARTER), "--device", "gpu", "--json", str(tmp_path / "g.json"))
    words = backend_module.gpu_status()[1]
    assert completed.returncode == 6
    assert completed.stderr == f"error: {words}" + GPU_ONLY
    data = json.loads((tmp_path / "g.json").read_text())
    assert (data["verdict"], data["backend"], data["cases"]) == ("environment-missing", None, [])


@pytest.mark.slow
def test_python_m_labrunner_doctor_without_a_gpu():
    if has_gpu():
        pytest.skip("this machine has a GPU")
    completed = attnlab("doctor")
    assert completed.returncode == 0
    assert re.search(r"│ GPU and driver +│ missing │", completed.stdout)
    assert re.search(r"│ oracle golden proof +│ ok +│", completed.stdout)


@pytest.mark.slow
def test_grade_writes_a_junit_report_with_one_test_case_per_case(runner, tmp_path):
    if not cpu_backend_ready():
        pytest.skip("no C++ compiler for the CPU backend")
    from xml.etree import ElementTree

    wrong = REPO / "tests" / "fixtures" / "lab2" / "wrong" / "causal_off_by_one.cu"
    result = invoke(
        runner,
        "grade",
        "lab2",
        str(wrong),
        "--device",
        "cpu",
        "--case",
        "C1-P31",
        "--case",
        "C17-P31",
        "--junit",
        "report.xml",
    )
    assert result.exit_code == 1
    suite = ElementTree.parse(tmp_path / "report.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("2", "2")
    assert [(p.get("name"), p.get("value")) for p in suite.find("properties")] == [("backend", "cpu")]
    assert result.stdout.rstrip().endswith("WRONG in case C1-P31 on the CPU backend (exit 1)")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["C1-P31", "C17-P31"]
    assert [c.find("failure").get("type") for c in cases] == ["wrong", "wrong"]
    assert cases[0].find("failure").get("message").startswith("row 0, head 0, col ")


def test_ci_runs_the_two_commands_at_the_top_of_the_readme():
    readme = (REPO / "README.md").read_text()
    top = readme[readme.index("```bash") : readme.index("```", readme.index("```bash") + 7)]
    commands = [line for line in top.splitlines() if line and not line.startswith(("#", "```"))]
    setup_and_grade, tests = commands
    ci = (REPO / ".ci/run").read_text()
    assert tests in ci.splitlines()
    *_, warm, grade = setup_and_grade.split(" && ")
    assert (warm, grade) == (
        ".venv/bin/attnlab doctor --warm",
        ".venv/bin/attnlab grade lab2 kernels/lab2/solution.cu --device auto",
    )
    # the warm-up step, then the main job, as the README runs them
    lines = ci.splitlines()
    assert lines.index(warm) + 1 == lines.index(grade)


def test_json_to_a_dash_is_the_json_alone_on_standard_output(runner, tmp_path):
    # `--json - | jq`: the document on stdout, the report a person reads on stderr, no file named "-"
    result = invoke(runner, "check", "lab2", str(STARTER), "--json", "-")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert (data["command"], data["verdict"], data["exit_code"]) == ("check", "pass", 0)
    assert "PASS" in result.stderr
    assert not (tmp_path / "-").exists()
    # and the next command's report is back on stdout
    again = invoke(runner, "check", "lab2", str(STARTER))
    assert "PASS" in again.stdout
