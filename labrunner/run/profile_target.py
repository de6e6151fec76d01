"""`python -m labrunner.run.profile_target PAYLOAD.json`: the program Nsight Compute watches in the Range pass.

It compiles each contender (the student's file, the starter), makes one set of inputs at the
profiled shape, warms the GPU with a few unprofiled calls of every contender, then makes exactly
one call of each contender in order: those are the launches ncu profiles (`--launch-skip` is the
number of warm-up launches, `--launch-count` the number after them). Before any launch it writes
what the roofline needs to know about the GPU (SM count, clocks, memory bus) to `facts_path`.

It runs in its own process (never the driver's), under ncu; the driver wrote the payload itself.
Its stdout, where a kernel's printf lands, goes nowhere: ncu's CSV comes through its log file.

A prefill's inputs are made on the host and copied up, so no kernel but the lab's runs here. A
paged cache (the payload's `sets`: lab 3's gigabytes of K and V) is filled on the GPU by the timing
sets' generator, as `bench` fills it (`input_pool`), once, before the warm-up: that kernel is not
the lab's, and ncu's `-k regex:` filter, which `--launch-skip` counts within, never sees it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

from labrunner.labs.definition import Launch
from labrunner.measure.device import Kernels
from labrunner.measure.gpu_facts import read_gpu_facts
from labrunner.measure.input_pool import Slot, first_set
from labrunner.run.gpu_device import GpuDevice
from labrunner.truth.cases import random_inputs
from labrunner.truth.poison import filled, poison_for


def launch_from_json(data: dict[str, Any]) -> Launch:
    return Launch(
        data["kernel"], tuple(data["grid"]), tuple(data["block"]), int(data["shared_bytes"]), tuple(data["args"])
    )


def main(path: str) -> None:
    with open(path) as handle:
        payload = json.load(handle)
    device = GpuDevice()
    with open(payload["facts_path"], "w") as handle:
        json.dump(read_gpu_facts(), handle)
    inputs = make_inputs(device, payload)
    contenders: list[tuple[Kernels, list[Launch], Slot]] = []
    # contenders whose buffers are the same sizes share them
    writable_sets: dict[tuple[tuple[str, int], ...], Slot] = {}
    for contender in payload["contenders"]:
        kernels = device.compile(contender["source"], contender["filename"], contender["entry_types"])
        # Writable buffers are copied up poisoned, never filled on the GPU, sized by each contender's own
        # geometry (lab 3's partial buffers follow the file's partition size), over the inputs all share.
        writable = {"out": payload["out_count"], **contender["workspace"]}
        sizes = tuple(sorted(writable.items()))
        if sizes not in writable_sets:
            writable_sets[sizes] = {
                name: device.upload(filled(count, poison_for(name))) for name, count in writable.items()
            }
        contenders.append(
            (kernels, [launch_from_json(x) for x in contender["launches"]], {**inputs, **writable_sets[sizes]})
        )
    for _ in range(payload["warmup_calls"]):
        for kernels, launches, buffers in contenders:
            for launch in launches:
                device.launch(kernels, launch, buffers)
    device.synchronize()
    for kernels, launches, buffers in contenders:  # the profiled calls, one per contender
        for launch in launches:
            device.launch(kernels, launch, buffers)
    device.synchronize()


def make_inputs(device: GpuDevice, payload: dict[str, Any]) -> Slot:
    """The inputs on the GPU: a paged cache's pages filled there from the payload's key (its block table
    and lengths read from the file beside the payload), else a prefill's arrays made here and copied up."""
    rows, prefix = payload["rows"], payload["prefix"]
    if "sets" in payload:
        sets = payload["sets"]
        with np.load(sets["fixed_path"], allow_pickle=False) as saved:
            fixed = {name: saved[name] for name in saved.files}
        request = {name: value for name, value in sets.items() if name != "fixed_path"}
        made = first_set(device, {**request, "fixed": fixed})
        device.synchronize()
        return made
    inputs = random_inputs(np.random.default_rng([payload["seed"], rows, prefix]), rows, prefix)
    return {"q": device.upload(inputs.q), "k": device.upload(inputs.k), "v": device.upload(inputs.v)}


if __name__ == "__main__":
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # a kernel's printf, and anything else on stdout, goes nowhere
    main(sys.argv[1])
