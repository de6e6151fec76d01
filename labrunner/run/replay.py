"""`python -m labrunner.run.replay CASE.pkl`: one case run once, for compute-sanitizer to watch.

It runs in its own process (never the driver's) through the worker's own `run_case`.
"""

from __future__ import annotations

import pickle
import sys

from labrunner.run.gpu_device import GpuDevice
from labrunner.run.worker import run_case


def main(path: str) -> None:
    with open(path, "rb") as handle:
        payload = pickle.load(handle)
    device = GpuDevice()
    kernels = device.compile(payload["source"], payload["filename"], payload["entry_types"])
    run_case(device, kernels, payload["request"])


if __name__ == "__main__":
    main(sys.argv[1])
