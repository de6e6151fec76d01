"""`python -m labrunner.run.profile_target PAYLOAD.json`: the program Nsight Compute watches in the Range pass.

It compiles each contender (the student's file, the starter), makes one set of inputs at the
profiled shape, warms the GPU with a few unprofiled calls of every contender, then makes exactly
one call of each contender in order: those are the launches ncu profiles (`--launch-skip` is the
number of warm-up launches, `--launch-count` the number after them). Before any launch it writes
what the roofline needs to know about the GPU (SM count, clocks, memory bus) to `facts_path`.

It runs in its own process (never the driver's), under ncu; the driver wrote the payload itself.
Its stdout, where a kernel's printf lands, goes nowhere: ncu's CSV comes through its log file. No
kernel but the lab's runs in it (buffers are copied up, not filled on the GPU), so the launch
numbers ncu counts are the lab's alone.
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
from labrunner.truth.poison import filled, poison_for


def launch_from_json(data: dict) -> Launch:
    return Launch(data["kernel"], tuple(data["grid"]), tuple(data["block"]), int(data["shared_bytes"]),
                  tuple(data["args"]))


def main(path: str) -> None:
    with open(path) as handle:
        payload = json.load(handle)
    device = GpuDevice()
    with open(payload["facts_path"], "w") as handle:
        json.dump(read_gpu_facts(), handle)
    contenders = []
    for contender in payload["contenders"]:
        kernels = device.compile(contender["source"], contender["filename"], contender["entry_types"])
        contenders.append((kernels, [launch_from_json(x) for x in contender["launches"]]))
    rows, prefix = payload["rows"], payload["prefix"]
    made = random_inputs(np.random.default_rng([payload["seed"], rows, prefix]), rows, prefix)
    # Every buffer is copied up from the host, never filled on the GPU: a fill is a kernel, and the only
    # kernels in this process must be the lab's, so that ncu's launch counting cannot be thrown off.
    writable = {"out": payload["out_count"], **payload["workspace"]}
    buffers = {"q": device.upload(made.q), "k": device.upload(made.k), "v": device.upload(made.v),
               **{name: device.upload(filled(count, poison_for(name))) for name, count in writable.items()}}
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
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # a kernel's printf, and anything else on stdout, goes nowhere
    main(sys.argv[1])
