"""`python -m labrunner.run.profile_target PAYLOAD.json`: the program Nsight Compute watches in the Range pass.

It compiles each contender (the student's file, the starter), makes one set of inputs at the
profiled shape, warms the GPU with a few unprofiled calls of every contender, then makes exactly
one call of each contender in order: those are the launches ncu profiles (`--launch-skip` is the
number of warm-up launches, `--launch-count` the number after them). Before any launch it writes
what the roofline needs to know about the GPU (SM count, clocks, memory bus) to `facts_path`.

It runs in its own process (never the driver's), under ncu; the driver wrote the payload itself.
Its stdout, where a kernel's printf lands, goes nowhere: ncu's CSV comes through its log file.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from labrunner.labs.definition import Launch
from labrunner.measure.gpu_facts import read_gpu_facts
from labrunner.run.gpu_device import GpuDevice
from labrunner.truth.cases import random_inputs
from labrunner.truth.poison import poison_for


def launch_from_json(data: dict) -> Launch:
    return Launch(data["kernel"], tuple(data["grid"]), tuple(data["block"]), int(data["shared_bytes"]),
                  tuple(data["args"]))


def main(path: str) -> None:
    with open(path) as handle:
        payload = json.load(handle)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    device = GpuDevice()
    with open(payload["facts_path"], "w") as handle:
        json.dump(read_gpu_facts(), handle)
    contenders = []
    for contender in payload["contenders"]:
        kernels = device.compile(contender["source"], contender["filename"], contender["entry_types"])
        contenders.append((kernels, [launch_from_json(x) for x in contender["launches"]]))
    rows, prefix = payload["rows"], payload["prefix"]
    made = random_inputs(np.random.default_rng([payload["seed"], rows, prefix]), rows, prefix)
    buffers = {"q": device.upload(made.q), "k": device.upload(made.k), "v": device.upload(made.v),
               "out": device.guarded(payload["out_count"]).inner}
    buffers.update({name: device.guarded(count, poison_for(name)).inner for name, count in payload["workspace"].items()})
    for _ in range(payload["warmup_calls"]):
        for kernels, launches in contenders:
            for launch in launches:
                device.launch(kernels, launch, buffers)
    device.synchronize()
    for kernels, launches in contenders:  # the profiled calls, one per contender
        for launch in launches:
            device.launch(kernels, launch, buffers)
    device.synchronize()


if __name__ == "__main__":
    main(sys.argv[1])
