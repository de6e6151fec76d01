"""The worker's side of timing: buffers, contenders, and the calls to `timing`.

Runs inside the worker process, on the GPU backend only. It returns statistics and the raw
outputs of the checked calls, each with the number of the input set it ran on; the driver checks
those against the oracle's reference of that very set, so a kernel that is fast because it skips
work, or correct only on some calls, gets no time.

Every timed call starts from nothing a kernel could reuse. Before each one (untimed, and before
the cache flush) its output and workspace are re-poisoned, and its input slot is filled with a
set of Q, K and V no earlier call has seen (`input_pool`, `labrunner.truth.timing_sets`). A kernel
therefore cannot find its previous answer in its output, cannot recognise an input and replay or
rescale what it kept, and cannot tell the calls that are checked from those that are not: which
ones are checked is drawn from the operating system's entropy, and a checked call differs from
the others only after it has finished (its output is copied back).

Lab 1's kernels are timed each inside the whole call, with an event between every two launches
(`timing.run_call`), never on calls of their own: a kernel launched alone has no output of the
lab's to check, finds its workspace as its last call left it, and could skip its work there
unseen. Inside the whole call each kernel's time belongs to a call whose output may be checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from labrunner.compile.backend import Backend
from labrunner.labs.definition import Launch
from labrunner.measure import peers
from labrunner.measure.device import Device, DeviceArray, GuardedBuffer, Kernels, device_zeros
from labrunner.measure.input_pool import InputPool
from labrunner.truth.poison import poison_for

if TYPE_CHECKING:
    from labrunner.measure.gpu_timer import CupyTimer

INPUT_SLOTS = 3  # sets in buffers at once, rotated call by call (see `timing.sample_interleaved`)


class KernelCall:
    """One contender: its launches, run on the set in a slot of the pool, with its own poisoned output.

    A contender that `leads` draws a fresh set before each call; one that follows (a comparison's
    baseline) runs on the set its leader just ran on, made again, so both time the same inputs.
    """

    def __init__(
        self,
        name: str,
        device: Device,
        kernels: Kernels,
        launches: list[Launch],
        pool: InputPool,
        out_count: int,
        workspace: dict[str, GuardedBuffer],
        leads: bool = True,
        each_kernel: bool = False,
    ) -> None:
        self.name = name
        # each_kernel: every launch is timed apart, within the call (its stages, named by kernel)
        self.stages = tuple(launch.kernel for launch in launches) if each_kernel else ()
        self.device = device
        self.kernels = kernels
        self.launches = launches
        self.pool = pool
        self.leads = leads
        self.out_count = out_count
        self.outs = [device.guarded(out_count) for _ in pool.slots]
        self.workspace = workspace  # name -> guarded buffer
        self.checked_sets: list[int | None] = []  # None: never, as a checked call follows a draw
        self.checked_outputs: list[np.ndarray] = []

    def prepare(self, input_index: int, verify: bool) -> None:
        self.outs[input_index].repoison()
        for buffer in self.workspace.values():
            buffer.repoison()
        self.new_inputs(input_index)

    def new_inputs(self, input_index: int) -> None:
        if self.leads:
            self.pool.draw(input_index)
        else:
            self.pool.refill(input_index)

    def buffers(self, input_index: int) -> dict[str, DeviceArray]:
        return {
            **self.pool.slots[input_index],
            "out": self.outs[input_index].inner,
            **{name: buffer.inner for name, buffer in self.workspace.items()},
        }

    def launch(self, input_index: int) -> None:
        buffers = self.buffers(input_index)
        for launch in self.launches:
            self.device.launch(self.kernels, launch, buffers)

    def stage_launches(self, input_index: int) -> list[Callable[[], None]]:
        """The call's launches one by one, for the timer to put an event between every two."""
        buffers = self.buffers(input_index)
        return [partial(self.device.launch, self.kernels, launch, buffers) for launch in self.launches]

    def collect(self, input_index: int, verify: bool) -> None:
        if verify:
            self.device.synchronize()
            self.checked_sets.append(self.pool.holds[input_index])
            self.checked_outputs.append(self.device.to_host(self.outs[input_index].inner))

    def checked(self) -> dict[str, np.ndarray]:
        """The checked calls for the reply: set numbers `int64 [n]`, outputs `float32 [n][out_count]`."""
        outputs = (
            np.stack(self.checked_outputs) if self.checked_outputs else np.empty((0, self.out_count), dtype=np.float32)
        )
        return {"sets": np.asarray(self.checked_sets, dtype=np.int64), "outputs": outputs}


# The device copy is a ceiling every figure is held to, not a contender: its fastest call and a steady
# median come within a fraction of a second (a GiB copy is half a millisecond), so its sampling stops
# there rather than spending a contender's whole budget.
COPY_BUDGET_S = 0.5


def guarded_workspace(device: Device, sizes: dict[str, int]) -> dict[str, GuardedBuffer]:
    """A contender's workspace, poisoned and guarded like a case's (re-poisoned before every call)."""
    return {name: device.guarded(count, poison_for(name)) for name, count in sizes.items()}


class DeviceCopy:
    """A device-to-device copy of `bytes`, timed like a contender: the bandwidth a decode kernel is set
    against, measured in the same process, on the same GPU, between the same flushes."""

    name = "device copy"

    def __init__(self, device: Device, count_bytes: int) -> None:
        self.bytes = count_bytes
        xp = device.xp if hasattr(device.xp, "copyto") else np
        self.copyto = xp.copyto
        self.source = device_zeros(device, count_bytes // 4)
        self.target = device_zeros(device, count_bytes // 4)

    def prepare(self, input_index: int, verify: bool) -> None:
        """Nothing to refresh: a copy's time does not depend on the values."""

    def launch(self, input_index: int) -> None:
        self.copyto(self.target, self.source)

    def collect(self, input_index: int, verify: bool) -> None:
        """Nothing to check."""


class PeerCall(KernelCall):
    """A PyTorch peer as a contender: it follows the student on the same sets, as a baseline does.

    PyTorch allocates a fresh output for every call (no earlier answer can be found in it); the
    checked calls' outputs go back to the driver to be held to the oracle like any other. Before
    each call the GPU gets a head start (`CupyTimer.hold`, where the timer has one), so the time is
    the GPU's work and not PyTorch's host dispatch; how long the host took to queue each call is
    kept (`enqueue_ms`), so a head start too short to cover it shows.
    """

    def __init__(
        self, device: Device, peer: peers.TorchPeer, pool: InputPool, out_count: int, timer: CupyTimer | None = None
    ) -> None:
        super().__init__("peer", device, None, [], pool, out_count, {}, leads=False)
        self.peer = peer
        self.views = [peer.wrap(slot) for slot in pool.slots]  # made once: no conversion is timed
        self.last: list[peers.Tensor | None] = [None] * len(pool.slots)
        self.hold = getattr(timer, "hold", None)
        self.enqueue_ms: list[float] = []

    def prepare(self, input_index: int, verify: bool) -> None:
        self.last[input_index] = None  # the previous call's output is released before this one
        self.new_inputs(input_index)
        if self.hold is not None:
            self.hold(peers.HEAD_START_US)

    def launch(self, input_index: int) -> None:
        start = time.perf_counter()
        self.last[input_index] = self.peer.launch(self.views[input_index])
        self.enqueue_ms.append((time.perf_counter() - start) * 1e3)

    def enqueue(self) -> dict[str, float]:
        """The host's time to queue one call, median and worst, against the head start it had."""
        return {
            "median_ms": float(np.median(self.enqueue_ms)),
            "max_ms": float(np.max(self.enqueue_ms)),
            "head_start_ms": peers.HEAD_START_US / 1e3 if self.hold is not None else 0.0,
        }

    def collect(self, input_index: int, verify: bool) -> None:
        if verify:
            self.device.synchronize()
            self.checked_sets.append(self.pool.holds[input_index])
            self.checked_outputs.append(self.peer.to_host(self.last[input_index]))


def load_peer(device: Device, name: str) -> peers.TorchPeer:
    """The peer `name` for this device's buffers (`peers.PeerMissing` where it cannot run here)."""
    return peers.load(name, on_gpu=device.name == Backend.GPU)


def run_peer_check(device: Device, request: dict[str, Any]) -> dict[str, Any]:
    """The peer once, on set 0 of the request's key, before any timing: the driver holds its output to
    the oracle and times the peer only if it passes. Where it cannot run, the words why."""
    try:
        peer = load_peer(device, request["peer"])
    except peers.PeerMissing as missing:
        return {"available": False, "why": str(missing)}
    pool = InputPool(device, request["sets"], 1)
    number = pool.draw(0)
    out = peer.launch(peer.wrap(pool.slots[0]))
    device.synchronize()
    return {
        "available": True,
        "checked": {"sets": np.asarray([number], dtype=np.int64), "outputs": peer.to_host(out)[None, :]},
    }


# How well the empty kernel's time (the harness's floor) is known: its standard error within 2% of its mean.
OVERHEAD_NOISE_TARGET = 0.02


def run_timing(device: Device, modules: dict[str, Kernels], request: dict[str, Any]) -> dict[str, Any]:
    if device.name != Backend.GPU:
        raise RuntimeError("timing needs the GPU backend")
    from labrunner.measure.device_state import read_device_state
    from labrunner.measure.gpu_timer import CupyTimer
    from labrunner.measure.sampling import TimingOptions, compare, measure

    options = TimingOptions(**request["options"])
    timer = CupyTimer()
    # The empty-kernel overhead first: it also wakes the GPU, so the clock read after it is a
    # working clock, and a drop during the real timing shows up against it. Its mean is known to 2%:
    # it is a floor that a kernel is compared with, not a result; held to the kernels' 0.5%, a launch of
    # a few microseconds could be sampled until its half-second budget ran out, the GPU held by the
    # timing lock all the while. Never fewer samples than before (20), so never a colder GPU after it.
    overhead = timer.overhead_ms(
        TimingOptions(budget_s=0.5, min_samples=20, noise_target=OVERHEAD_NOISE_TARGET, seed=options.seed)
    )
    state_before = read_device_state()
    reply: dict[str, Any] = {
        "overhead": overhead.to_json(),
        "l2_flush_bytes": timer.flush_bytes,
        "persisting_l2_reset": timer.persisting_l2_reset,
        # what the driver holds every figure to (`labrunner.measure.physics`), with the copy below
        "l2_bytes": timer.l2_bytes,
        "gpu_facts": timer.gpu_facts(),
    }

    if request["kind"] == "speedup":
        pool = InputPool(device, request["sets"], INPUT_SLOTS)
        student = KernelCall(
            "student",
            device,
            modules["student"],
            request["student_launches"],
            pool,
            request["out_count"],
            guarded_workspace(device, request.get("student_workspace", {})),
        )
        baseline: KernelCall
        if request.get("baseline_peer"):
            baseline = PeerCall(device, load_peer(device, request["baseline_peer"]), pool, request["out_count"], timer)
        else:
            baseline = KernelCall(
                "baseline",
                device,
                modules["baseline"],
                request["baseline_launches"],
                pool,
                request["out_count"],
                guarded_workspace(device, request.get("baseline_workspace", {})),
                leads=False,
            )
        comparison = compare(student, baseline, INPUT_SLOTS, timer, options)
        reply["comparison"] = comparison.to_json(include_samples=True)  # the driver pools rounds from them
        reply["checked"] = {"student": student.checked(), "baseline": baseline.checked()}
        if isinstance(baseline, PeerCall):
            reply["peer_enqueue"] = baseline.enqueue()
        reply["sets_drawn"] = pool.drawn
    else:  # one pipeline at several sizes: the whole call, each kernel timed inside it
        reply["sizes"] = []
        peer = load_peer(device, request["peer"]) if request.get("peer") else None
        for size in request["sizes"]:
            pool = InputPool(device, size["sets"], INPUT_SLOTS)
            workspace = guarded_workspace(device, size["workspace"])
            whole = KernelCall(
                "total",
                device,
                modules["student"],
                size["launches"],
                pool,
                size["out_count"],
                workspace,
                each_kernel=True,
            )
            measured = {"T": size["T"]}
            if peer is None:
                total = measure(whole, INPUT_SLOTS, timer, options)
            else:  # the whole call and the peer interleaved on the same sets, as lab 2's pair is
                versus = PeerCall(device, peer, pool, size["out_count"], timer)
                comparison = compare(whole, versus, INPUT_SLOTS, timer, options)
                total = comparison.student_stats
                measured["peer"] = {
                    "stats": comparison.baseline.to_json(),
                    "speedup": comparison.speedup,
                    "ci_low": comparison.ci_low,
                    "ci_high": comparison.ci_high,
                    "enqueue": versus.enqueue(),
                }
                measured["checked_peer"] = versus.checked()
                del versus
            # each kernel's figures and the whole call's, all from the same calls, checked ones among them
            measured["stats"] = {
                **{name: stage.to_json() for name, stage in total.stages.items()},
                "total": replace(total, stages={}).to_json(),
            }
            reply["sizes"].append({**measured, "checked": whole.checked(), "sets_drawn": pool.drawn})
            del workspace, pool, whole
            device.xp.get_default_memory_pool().free_all_blocks()
    if request.get("copy_bytes"):  # the bandwidth the figures are set against, timed in this same worker
        copy = DeviceCopy(device, request["copy_bytes"])
        short = replace(options, budget_s=min(options.budget_s, COPY_BUDGET_S))
        reply["copy"] = {"bytes": copy.bytes, "stats": measure(copy, 1, timer, short).to_json()}
        del copy
    reply["state_before"] = state_before.to_json()
    reply["state_after"] = read_device_state().to_json()
    return reply
