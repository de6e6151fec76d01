"""Launches the lab-2 starter a few times at C = P = 2048: the target ncu profiles in bench_stability.py."""

from __future__ import annotations

import cupy

from labrunner.benchmark import timing_inputs
from labrunner.compile import compose_source
from labrunner.gpu_backend import GpuDevice
from labrunner.labs import get_lab
from labrunner.submission import load_submission

lab = get_lab("lab2")
submission = load_submission(lab, lab.starter_path, "starter.cu")
device = GpuDevice()
kernels = device.compile(compose_source(submission.source, "starter.cu"), "starter.cu", lab.entry_point_types())
inputs = {name: device.upload(array) for name, array in timing_inputs(0, 2048, 2048, count=1)[0].items()}
out = device.guarded(2048 * 32 * 64)
for launch in lab.plan_launches(submission.constants, 2048, 2048) * 4:
    device.launch(kernels, launch, {**inputs, "out": out.inner})
cupy.cuda.runtime.deviceSynchronize()
