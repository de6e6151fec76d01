"""`python -m labrunner.run.replay CASE_DIR`: one case run once, for compute-sanitizer to watch.

It runs in its own boxed process (never the driver's; see `diagnose.py`) through the worker's
own `run_case`. CASE_DIR holds case.json and one .npy per input, written by the driver and read
without pickle.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from labrunner.labs.definition import Launch
from labrunner.run.gpu_device import GpuDevice
from labrunner.run.worker_main import run_case


def read_case(folder: Path) -> dict[str, Any]:
    """case.json (`diagnose.case_files`), its inputs and launches read back: a run request with the source."""
    case: dict[str, Any] = json.loads((folder / "case.json").read_text())
    case["inputs"] = {name: np.load(folder / f"{name}.npy", allow_pickle=False) for name in case["inputs"]}
    case["launches"] = [
        Launch(
            launch["kernel"],
            tuple(launch["grid"]),
            tuple(launch["block"]),
            launch["shared_bytes"],
            tuple(launch["args"]),
        )
        for launch in case["launches"]
    ]
    return case


def main(folder: str) -> None:
    case = read_case(Path(folder))
    device = GpuDevice()
    kernels = device.compile(case["source"], case["filename"], case["entry_types"])
    run_case(device, kernels, case)


if __name__ == "__main__":
    main(sys.argv[1])
