"""Speed gates: per-GPU thresholds a course calibrates once and commits.

`attnlab calibrate lab2` times the shipped solution against the starter on this GPU and writes
`{"schema": "attnlab.gates/1", "lab2": {"NVIDIA H200": {...}}}`. A gate passes a student whose
SPEEDUP over the starter is at least `fraction` times the solution's calibrated SPEEDUP. The
fraction is the course's choice (`--fraction` at calibration, or edit the file): 0.5 means
"half as much speedup as the reference solution".
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from labrunner.exit_codes import usage_error
from labrunner.records.gate import Gate
from labrunner.records.timing import Bandwidth

SCHEMA = "attnlab.gates/1"
DEFAULT_FRACTION = 0.5
# A gates file as JSON: {"schema": SCHEMA, lab: {GPU name: gate}}, each gate {"fraction", "solution_speedup", ...}.
Gates = dict[str, Any]


def load_gates(path: Path, option: str = "--gates") -> Gates:
    """Read and check a gates file; every problem is a usage error naming the file and the entry."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise usage_error(f"{option} {path}: no such file (`attnlab calibrate lab2 -o {path}` writes one)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise usage_error(f"{option} {path}: not a gates file ({exc})") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if not isinstance(data, dict) or schema != SCHEMA:
        raise usage_error(f"{option} {path}: schema is {schema!r}, expected {SCHEMA!r}")
    for lab, gpus in data.items():
        if lab == "schema":
            continue
        if not isinstance(gpus, dict):
            raise usage_error(
                f"{option} {path}: {lab!r} must map GPU names to gates; recalibrate with "
                f"`attnlab calibrate {lab} -o {path}`"
            )
        for gpu, gate in gpus.items():
            if not (
                isinstance(gate, dict) and all(positive_number(gate.get(k)) for k in ("fraction", "solution_speedup"))
            ):
                raise usage_error(
                    f"{option} {path}: the {lab} gate for {gpu} needs a positive fraction and "
                    f"solution_speedup; recalibrate it with `attnlab calibrate {lab} -o {path}`"
                )
    return data


def positive_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def gate_for(gates: Gates | None, lab: str, gpu_name: str | None) -> dict[str, Any] | None:
    if not gates or not gpu_name:
        return None
    gate: dict[str, Any] | None = gates.get(lab, {}).get(gpu_name)
    return gate


def apply_gate(gates: Gates | None, lab: str, gpu_name: str | None, speedup: float) -> Gate:
    gate = gate_for(gates, lab, gpu_name)
    if gate is None:
        return Gate("none", True, f"no speed gate for {gpu_name or 'this device'}")
    required = gate["fraction"] * gate["solution_speedup"]
    passed = speedup >= required
    verb = "met" if passed else "missed"
    return Gate(
        status=verb,
        passed=passed,
        required_speedup=required,
        speedup=speedup,
        message=(
            f"{verb}: SPEEDUP {speedup:.2f}x against the {required:.2f}x required on {gpu_name} "
            f"({gate['fraction']:g} of the solution's calibrated {gate['solution_speedup']:.2f}x)"
        ),
    )


# A lab graded on bandwidth (lab 3) needs no calibration file: its gate is a fraction of the device
# copy timed in the same run, so it calibrates itself on every GPU. Its catalogue may set another.
DEFAULT_COPY_FRACTION = 0.8


def apply_bandwidth_gate(bandwidth: Bandwidth, gpu_name: str | None) -> Gate:
    """`bandwidth`: the timing's figures, its `required_fraction` set from the lab's catalogue."""
    reached, required = bandwidth.copy_fraction, bandwidth.required_fraction
    if required is None:
        raise ValueError("the bandwidth gate needs the lab's required fraction of the device copy")
    passed = reached >= required
    verb = "met" if passed else "missed"
    return Gate(
        status=verb,
        passed=passed,
        required_fraction=required,
        copy_fraction=reached,
        message=(
            f"{verb}: {reached:.2f} of the device copy's bandwidth ({bandwidth.student_tb_s:.2f} of "
            f"{bandwidth.copy_tb_s:.2f} TB/s, timed in the same run on {gpu_name or 'this GPU'}) against "
            f"the {required:g} required"
        ),
    )


def write_gate(
    path: Path, lab: str, gpu_name: str, solution_speedup: float, fraction: float, details: dict[str, Any]
) -> dict[str, Any]:
    gates: Gates = load_gates(path, "-o") if path.exists() else {"schema": SCHEMA}
    entry = {
        "solution_speedup": round(solution_speedup, 3),
        "fraction": fraction,
        "calibrated": datetime.date.today().isoformat(),
        **details,
    }
    gates.setdefault(lab, {})[gpu_name] = entry
    try:
        path.write_text(json.dumps(gates, indent=2) + "\n")
    except OSError as exc:
        raise usage_error(f"-o {path}: cannot write ({exc.strerror})") from None
    return entry
