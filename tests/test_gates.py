"""Speed gates: the file a course commits, read strictly, applied by GPU name, written without losing others."""

from __future__ import annotations

import datetime
import json
import re

import pytest
from click.testing import CliRunner

from labrunner.cli import main
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.measure.gates import SCHEMA, apply_gate, load_gates, write_gate

H200 = {"solution_speedup": 13.1, "fraction": 0.5}


def gates_file(tmp_path, content) -> object:
    path = tmp_path / "gates.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def refusal(path, option="--gates") -> str:
    with pytest.raises(AttnlabError, match=rf"^{re.escape(option)} {re.escape(str(path))}: ") as caught:
        load_gates(path, option)
    assert caught.value.exit_code == ExitCode.USAGE
    return caught.value.message


def test_a_gate_is_met_at_exactly_the_required_speedup():
    gates = {"schema": SCHEMA, "lab2": {"NVIDIA H200": H200}}
    met = apply_gate(gates, "lab2", "NVIDIA H200", 6.55).to_json()
    assert (met["status"], met["passed"], met["required_speedup"]) == ("met", True, 6.55)
    assert met["message"] == (
        "met: SPEEDUP 6.55x against the 6.55x required on NVIDIA H200 (0.5 of the solution's calibrated 13.10x)"
    )


def test_a_missed_gate_gives_both_numbers():
    gates = {"schema": SCHEMA, "lab2": {"NVIDIA H200": H200}}
    missed = apply_gate(gates, "lab2", "NVIDIA H200", 1.0).to_json()
    assert (missed["status"], missed["passed"]) == ("missed", False)
    assert missed["message"] == (
        "missed: SPEEDUP 1.00x against the 6.55x required on NVIDIA H200 (0.5 of the solution's calibrated 13.10x)"
    )


def test_another_gpu_has_no_gate_and_passes():
    gates = {"schema": SCHEMA, "lab2": {"NVIDIA H200": H200}}
    assert apply_gate(gates, "lab2", "NVIDIA A100-SXM4-80GB", 1.0).to_json() == {
        "status": "none",
        "passed": True,
        "message": "no speed gate for NVIDIA A100-SXM4-80GB",
    }
    assert apply_gate(None, "lab2", None, 1.0).to_json()["message"] == "no speed gate for this device"


def test_a_missing_file_says_how_to_make_one(tmp_path):
    path = tmp_path / "gates.json"
    assert refusal(path) == f"--gates {path}: no such file (`attnlab calibrate lab2 -o {path}` writes one)"


def test_a_file_of_another_kind_is_refused_by_its_schema(tmp_path):
    assert refusal(gates_file(tmp_path, [1, 2])) == (
        f"--gates {tmp_path / 'gates.json'}: schema is None, expected 'attnlab.gates/1'"
    )
    assert refusal(gates_file(tmp_path, {"schema": "attnlab.result/1"})) == (
        f"--gates {tmp_path / 'gates.json'}: schema is 'attnlab.result/1', expected 'attnlab.gates/1'"
    )


def test_broken_json_is_refused(tmp_path):
    message = refusal(gates_file(tmp_path, "{not json"))
    assert message.startswith(f"--gates {tmp_path / 'gates.json'}: not a gates file (Expecting property name")


@pytest.mark.parametrize(
    "gate",
    [
        {"fraction": 0.5},
        {"fraction": "half", "solution_speedup": 13.1},
        {"fraction": 0, "solution_speedup": 13.1},
        {"fraction": True, "solution_speedup": 1},
        "13.1",
    ],
)
def test_a_hand_edited_gate_without_its_numbers_is_refused(tmp_path, gate):
    path = gates_file(tmp_path, {"schema": SCHEMA, "lab2": {"NVIDIA H200": gate}})
    assert refusal(path, "-o") == (
        f"-o {path}: the lab2 gate for NVIDIA H200 needs a positive fraction and "
        f"solution_speedup; recalibrate it with `attnlab calibrate lab2 -o {path}`"
    )


def test_a_lab_entry_that_is_not_a_table_of_gpus_is_refused(tmp_path):
    path = gates_file(tmp_path, {"schema": SCHEMA, "lab2": 13.1})
    assert refusal(path) == (
        f"--gates {path}: 'lab2' must map GPU names to gates; recalibrate with `attnlab calibrate lab2 -o {path}`"
    )


def test_writing_a_gate_keeps_the_other_gpus_and_replaces_its_own(tmp_path):
    path = gates_file(
        tmp_path, {"schema": SCHEMA, "lab2": {"NVIDIA H100 80GB HBM3": {"solution_speedup": 11.0, "fraction": 0.6}}}
    )
    write_gate(path, "lab2", "NVIDIA H200", 12.0, 0.5, {"starter_ms": 28.4})
    entry = write_gate(path, "lab2", "NVIDIA H200", 13.1234, 0.5, {"starter_ms": 28.5})
    assert entry == {
        "solution_speedup": 13.123,
        "fraction": 0.5,
        "calibrated": datetime.date.today().isoformat(),
        "starter_ms": 28.5,
    }
    data = load_gates(path)
    assert data["lab2"] == {"NVIDIA H100 80GB HBM3": {"solution_speedup": 11.0, "fraction": 0.6}, "NVIDIA H200": entry}


def test_calibrate_into_a_missing_folder_is_refused_before_any_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["calibrate", "lab2", "-o", "no/such/gates.json"])
    assert result.exit_code == 2
    assert result.stderr == "error: -o no/such/gates.json: cannot write (No such file or directory)\n"


def test_calibrate_over_a_broken_gates_file_is_refused_before_any_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gates.json").write_text(json.dumps({"schema": "something else"}))
    result = CliRunner().invoke(main, ["calibrate", "lab2", "-o", "gates.json", "--device", "cpu"])
    assert result.exit_code == 2
    assert result.stderr == "error: -o gates.json: schema is 'something else', expected 'attnlab.gates/1'\n"


def test_a_gate_is_looked_up_by_lab_and_gpu_name_and_missing_pieces_mean_no_gate():
    gates = {"schema": SCHEMA, "lab2": {"NVIDIA H200": H200}}
    assert apply_gate(None, "lab2", "NVIDIA H200", 1.0).to_json() == {
        "status": "none",
        "passed": True,
        "message": "no speed gate for NVIDIA H200",
    }
    assert apply_gate(gates, "lab2", None, 1.0).to_json()["message"] == "no speed gate for this device"
    assert apply_gate(gates, "lab1", "NVIDIA H200", 1.0).to_json()["status"] == "none"  # no lab1 entry at all
    assert apply_gate({"schema": SCHEMA}, "lab2", "NVIDIA H200", 1.0).to_json()["status"] == "none"


def test_a_missed_gate_records_both_speedups():
    missed = apply_gate({"schema": SCHEMA, "lab2": {"NVIDIA H200": H200}}, "lab2", "NVIDIA H200", 6.549).to_json()
    assert {k: v for k, v in missed.items() if k != "message"} == {
        "status": "missed",
        "passed": False,
        "required_speedup": 6.55,
        "speedup": 6.549,
    }


def test_the_gates_option_is_named_in_a_refusal_by_default(tmp_path):
    path = tmp_path / "gates.json"
    with pytest.raises(AttnlabError, match=r"^--gates .*: no such file") as caught:
        load_gates(path)
    assert caught.value.message == f"--gates {path}: no such file (`attnlab calibrate lab2 -o {path}` writes one)"


def test_writing_a_gate_creates_the_file_with_its_schema(tmp_path):
    path = tmp_path / "gates.json"
    entry = write_gate(path, "lab2", "NVIDIA H200", 13.0, 0.5, {"ci_low": 12.8})
    today = datetime.date.today().isoformat()
    assert entry == {"solution_speedup": 13.0, "fraction": 0.5, "calibrated": today, "ci_low": 12.8}
    assert path.read_text() == (
        '{\n  "schema": "attnlab.gates/1",\n  "lab2": {\n    "NVIDIA H200": {\n      "solution_speedup": 13.0,\n'
        f'      "fraction": 0.5,\n      "calibrated": "{today}",\n      "ci_low": 12.8\n    }}\n  }}\n}}\n'
    )


def test_writing_a_gate_where_it_cannot_be_written_is_a_usage_error(tmp_path):
    path = tmp_path / "no" / "such" / "gates.json"
    with pytest.raises(AttnlabError, match=r"^-o .*gates\.json: cannot write \(No such file or directory\)$") as caught:
        write_gate(path, "lab2", "NVIDIA H200", 13.0, 0.5, {})
    assert (caught.value.exit_code, caught.value.message) == (
        ExitCode.USAGE,
        f"-o {path}: cannot write (No such file or directory)",
    )


def test_writing_over_a_broken_gates_file_is_refused_and_leaves_it_alone(tmp_path):
    path = gates_file(tmp_path, {"schema": "attnlab.result/1"})
    with pytest.raises(AttnlabError, match=r"^-o .*: schema is 'attnlab.result/1', expected 'attnlab.gates/1'$"):
        write_gate(path, "lab2", "NVIDIA H200", 13.0, 0.5, {})
    assert json.loads(path.read_text()) == {"schema": "attnlab.result/1"}
