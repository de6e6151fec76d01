"""Launches one lab-2 kernel file a few times at C = P = 2048: the target ncu profiles in the timing scripts.

usage: python scripts/kernel_once.py [FILE]   (default: the lab-2 starter)
"""

from __future__ import annotations

import sys
from pathlib import Path

import cupy

from labrunner.compile.gate import load_submission
from labrunner.compile.nvrtc import compose_source
from labrunner.labs import get_lab
from labrunner.run.gpu_device import GpuDevice
from labrunner.truth.timing_sets import make_set

lab = get_lab("lab2")
path = Path(sys.argv[1]) if len(sys.argv) > 1 else lab.starter_path
submission = load_submission(lab, path, path.name)
device = GpuDevice()
kernels = device.compile(compose_source(submission.source, path.name), path.name, lab.entry_point_types())
inputs = {name: device.upload(array) for name, array in make_set((0, 0), 0, 2048, 2048).items()}
out = device.guarded(2048 * 32 * 64)
for launch in lab.plan_launches(submission.constants, 2048, 2048) * 4:
    device.launch(kernels, launch, {**inputs, "out": out.inner})
cupy.cuda.runtime.deviceSynchronize()
