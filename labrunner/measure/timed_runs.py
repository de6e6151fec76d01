"""The worker's side of timing: buffers per input set, contenders, and the calls to `timing`.

Runs inside the worker process, on the GPU backend only. It returns statistics and the raw
outputs of the verified calls; the driver checks those against the oracle, so a kernel that is
fast because it skips work, or correct only on its first call, gets no time.

Every timed call starts from nothing a kernel could reuse. Before each one (untimed, and before
the cache flush) its output and workspace are re-poisoned, and V of its input set is made anew
as V times a random factor (a random sign, a magnitude between 1/2 and 2), so no input is ever
seen twice. A kernel therefore cannot find its previous answer in its output, cannot recognise an
input and replay what it kept, and cannot tell the calls that are checked from those that are
not. Attention is linear in V, so the expected output is the reference times the factor; the
driver divides it out and checks the rest against the oracle (the factor's rounding, about 1e-7
relative, is far inside the pass rule). What stays the same from call to call is Q and K: a
kernel that kept what depends on them alone (the softmax weights, 1 GiB at the timing shape) and
worked out the factor is beyond what this guards against.
"""

from __future__ import annotations

import random

from labrunner.labs.definition import Launch
from labrunner.truth.poison import poison_for


def fresh_factor(draw: random.Random) -> float:
    """A random sign times a magnitude between 1/2 and 2: never the same twice, far from overflow and subnormals."""
    return draw.choice((-1.0, 1.0)) * 2.0 ** draw.uniform(-1.0, 1.0)


class KernelCall:
    """One contender: a list of launches run on input set i with its own poisoned output."""

    def __init__(self, name: str, device, kernels, launches_per_set: list[list[Launch]], inputs: list[dict],
                 out_count: int, workspace: dict):
        self.name = name
        self.device = device
        self.kernels = kernels
        self.launches_per_set = launches_per_set
        self.inputs = inputs
        self.outs = [device.guarded(out_count) for _ in inputs]
        self.workspace = workspace  # name -> guarded buffer
        self.v_base = [s["v"].copy() for s in inputs]
        self.factors: list[float] = [1.0] * len(inputs)
        # Not seeded: a kernel that knew the sequence could replay its kept answer times the factor.
        self._draw = random.SystemRandom()
        self.verified: list[tuple[int, float, object]] = []  # (input set, factor of V, output)

    def prepare(self, input_index: int, verify: bool) -> None:
        self.outs[input_index].repoison()
        for buffer in self.workspace.values():
            buffer.repoison()
        self.factors[input_index] = fresh_factor(self._draw)
        # in place, in the buffer the kernel is given: the student's and the baseline's calls share it
        self.inputs[input_index]["v"][...] = self.v_base[input_index] * self.factors[input_index]

    def launch(self, input_index: int) -> None:
        buffers = {**self.inputs[input_index], "out": self.outs[input_index].inner,
                   **{name: buffer.inner for name, buffer in self.workspace.items()}}
        for launch in self.launches_per_set[input_index]:
            self.device.launch(self.kernels, launch, buffers)

    def collect(self, input_index: int, verify: bool) -> None:
        if verify:
            self.device.synchronize()
            self.verified.append((input_index, self.factors[input_index],
                                  self.device.to_host(self.outs[input_index].inner)))


class Unverified(KernelCall):
    """A single kernel of a pipeline, timed alone: its output is not the lab's, so there is nothing to
    check, and its workspace must keep what the kernel before it wrote, so nothing is re-poisoned."""

    def prepare(self, input_index: int, verify: bool) -> None:
        pass

    def collect(self, input_index: int, verify: bool) -> None:
        pass


def run_timing(device, modules: dict, request: dict) -> dict:
    if device.name != "gpu":
        raise RuntimeError("timing needs the GPU backend")
    from labrunner.measure.device_state import read_device_state
    from labrunner.measure.gpu_timer import CupyTimer
    from labrunner.measure.timing import TimingOptions, compare, measure

    options = TimingOptions(**request["options"])
    timer = CupyTimer()
    # The empty-kernel overhead first: it also wakes the GPU, so the clock read after it is a
    # working clock, and a drop during the real timing shows up against it.
    overhead = timer.overhead_ms(TimingOptions(budget_s=0.5, min_samples=20, seed=options.seed))
    state_before = read_device_state()
    reply: dict = {"overhead": overhead.to_json(), "l2_flush_bytes": timer.flush_bytes,
                   "persisting_l2_reset": timer.persisting_l2_reset}

    if request["kind"] == "speedup":
        inputs = [{n: device.upload(a) for n, a in s.items()} for s in request["input_sets"]]
        student = KernelCall("student", device, modules["student"], [request["student_launches"]] * len(inputs),
                             inputs, request["out_count"], {})
        baseline = KernelCall("baseline", device, modules["baseline"], [request["baseline_launches"]] * len(inputs),
                              inputs, request["out_count"], {})
        comparison = compare(student, baseline, len(inputs), timer, options)
        reply["comparison"] = comparison.to_json(include_samples=True)  # the driver pools rounds from them
        reply["verified"] = {"student": student.verified, "baseline": baseline.verified}
    else:  # one pipeline, each kernel alone and the whole call, at several sizes
        reply["sizes"] = []
        for size in request["sizes"]:
            inputs = [{n: device.upload(a) for n, a in s.items()} for s in size["input_sets"]]
            workspace = {n: device.guarded(count, poison_for(n)) for n, count in size["workspace"].items()}
            launches = size["launches"]
            stats = {}
            for index, launch in enumerate(launches):
                alone = Unverified(launch.kernel, device, modules["student"], [[launch]] * len(inputs), inputs,
                                   size["out_count"], workspace)
                stats[launch.kernel] = measure(alone, len(inputs), timer, options).to_json()
            whole = KernelCall("total", device, modules["student"], [launches] * len(inputs), inputs,
                               size["out_count"], workspace)
            stats["total"] = measure(whole, len(inputs), timer, options).to_json()
            reply["sizes"].append({"T": size["T"], "stats": stats, "verified": whole.verified})
            del workspace, inputs
            device.xp.get_default_memory_pool().free_all_blocks()
    reply["state_before"] = state_before.to_json()
    reply["state_after"] = read_device_state().to_json()
    return reply
