"""A numpy stand-in for the GPU backend, so the GPU path's plain array logic runs on any CI machine.

`GpuDevice`'s buffers are `GuardedBuffer`s over an array module (CuPy on a GPU); given numpy they
are the very same code. The "kernel" here is the oracle itself, written into the output the driver
handed over, so everything around it (poison, guard bands, the worker's request handling, timing's
verified calls, the verdict) is the real code. Subclasses misbehave on purpose.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from labrunner.run.gpu_device import GuardedBuffer
from labrunner.truth import oracle
from labrunner.truth.contract import HEAD_DIM, KV_HEADS, QUERY_HEADS
from labrunner.truth.poison import POISON_BITS


class NumpyGpu:
    """Just enough of `GpuDevice` for the worker's `run_case` and `run_timing`: numpy buffers, oracle kernels.

    `prefix=None` works the prefix out from the buffers' sizes (every case of a catalogue has its own).
    """

    name = "gpu"

    def __init__(self, prefix: int | None = None, skip_after: int | None = None):
        self.prefix = prefix
        self.skip_after = skip_after  # a kernel that stops computing after this many launches
        self.launches = 0
        self.seen: list[tuple[bytes, bytes, bytes]] = []  # Q, K and V as every launch saw them

    def compile(self, composed_source, filename, entry_types, **cpu_options):
        return {name: name for name in entry_types}

    def upload(self, array):
        return array.copy()

    def guarded(self, count, fill_bits=POISON_BITS):
        return GuardedBuffer(np, count, fill_bits)

    class xp:  # stands in for the cupy module
        @staticmethod
        def get_default_memory_pool():
            return type("Pool", (), {"free_all_blocks": staticmethod(lambda: None)})

    def launch(self, kernels, launch, buffers, reverse_threads=False):
        self.launches += 1
        self.who = kernels  # the module the worker launched from ("student" or "baseline" in timing)
        self.seen.append(tuple(buffers[n].tobytes() for n in ("q", "k", "v")))
        if self.skip_after is not None and self.launches > self.skip_after:
            return
        if launch.kernel in ("attn_scores", "attn_softmax", "decode_partial"):
            return  # labs 1 and 3: the stand-in computes everything in its last kernel
        self.compute(buffers)

    def compute(self, buffers):
        if "blockTable" in buffers:  # lab 3: decode through the block table
            q = buffers["q"].reshape(-1, QUERY_HEADS, HEAD_DIM)
            out = oracle.decode_attention(
                q, buffers["k"], buffers["v"], buffers["blockTable"].reshape(q.shape[0], -1), buffers["seqLens"]
            )
            buffers["out"][:] = out.astype(np.float32).ravel()
            return
        q = buffers["q"].reshape(-1, QUERY_HEADS, HEAD_DIM)
        k = buffers["k"].reshape(-1, KV_HEADS, HEAD_DIM)
        v = buffers["v"].reshape(-1, KV_HEADS, HEAD_DIM)
        prefix = k.shape[0] - q.shape[0] if self.prefix is None else self.prefix
        buffers["out"][:] = oracle.attention(q, k, v, prefix=prefix).astype(np.float32).ravel()

    def synchronize(self):
        pass

    def to_host(self, buffer):
        return buffer.copy()

    def describe_fault(self, exc):
        return None

    def describe_error(self, exc):
        return None


class WritesPastTheEnd(NumpyGpu):
    """A right answer, plus `past` elements written beyond the output's end (as a GPU kernel would, through
    the pointer)."""

    def __init__(self, past: int = 1, before: int = 0):
        super().__init__()
        self.past, self.before = past, before

    def launch(self, kernels, launch, buffers, reverse_threads=False):
        super().launch(kernels, launch, buffers, reverse_threads)
        out = buffers["out"]
        full = out.base  # the whole allocation the output is a view of, canaries included
        # where the kernel's pointer points, as an element index into the allocation: out[-1] and
        # out[size] are reached from it, as a kernel reaches them, whatever the layout
        start = (out.__array_interface__["data"][0] - full.__array_interface__["data"][0]) // out.itemsize
        full[start + out.size : start + out.size + self.past] = 0.0
        full[start - self.before : start] = 0.0


class InProcessWorker:
    """The `Worker` interface answered in this process by the worker's own request handlers.

    `run_case` and `run_timing` are the functions the worker process runs; requests and replies
    cross a real pipe in the wire format, checked against what the driver expects of them, so
    nothing the driver could not receive gets through.
    """

    backend = "gpu"  # what it stands in for: the pipeline reads it as it reads a real Worker's

    def __init__(self, device):
        self.device = device
        self.kernels: dict = {}
        self.restarts = 0
        self.keys: list = []  # each timing request's secret key for its input sets
        self.replies: list = []  # each timing reply, as the worker sent it

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def start(self):  # a worker in this process: nothing to start ahead
        pass

    def load(self, role, composed_source, filename, entry_types, options=None, binary=None, triton=None):
        if triton:  # the stand-in runs a .cu file's source as the CPU backend does: a Triton file has no such form
            raise NotImplementedError("the GPU stand-in loads .cu files only")
        self.kernels[role] = self.device.compile(composed_source, filename, entry_types, **(options or {}))

    def run_case(self, role, launches, inputs, writable, returned, timeout_s, reverse_threads=False, quiet=False):
        from labrunner.run import replies
        from labrunner.run.worker import CaseRun
        from labrunner.run.worker_main import run_case

        request = {
            "launches": launches,
            "inputs": inputs,
            "writable": writable,
            "returned": list(returned),
            "reverse_threads": reverse_threads,
        }
        reply = through_the_wire(
            run_case(self.device, self.kernels.get(role), through_the_wire(request)),
            replies.case_reply(inputs, writable, returned),
        )
        return CaseRun(
            reply["outputs"], {name: tuple(pair) for name, pair in reply["bands"].items()}, reply["inputs_after"]
        )

    def time(self, request, timeout_s):
        from labrunner.measure.timed_runs import run_timing
        from labrunner.run import replies

        self.keys.append(request["sets"]["key"] if "sets" in request else None)
        modules = self.kernels or {
            "student": "student",
            "baseline": "baseline",
        }  # the stand-in's kernels are its own code
        reply = run_timing(self.device, modules, through_the_wire(request))
        self.replies.append(reply)
        return through_the_wire(reply, replies.timing_reply(request))

    def check_peer(self, request, timeout_s):
        from labrunner.measure.timed_runs import run_peer_check
        from labrunner.run import replies

        self.keys.append(request["sets"]["key"])
        return through_the_wire(
            run_peer_check(self.device, through_the_wire(request)), replies.peer_check_reply(request)
        )

    def restart(self):
        self.restarts += 1

    def kernel_output(self, limit: int = 20):
        return []

    def close(self):
        pass


class NumpyPeer:
    """A stand-in for a PyTorch peer (`labrunner.measure.peers`): the oracle in numpy on the slot's own
    arrays, returned as a fresh output, as PyTorch allocates one. `wrong_after`: right for that many
    calls, then its first element is off by one."""

    def __init__(self, wrong_after: int | None = None):
        self.wrong_after = wrong_after
        self.calls = 0
        self.seen: list[tuple[bytes, bytes, bytes]] = []

    def wrap(self, slot):
        return slot

    def launch(self, views):
        self.calls += 1
        self.seen.append(tuple(views[n].tobytes() for n in ("q", "k", "v")))
        q, k, v = views["q"], views["k"], views["v"]
        out = oracle.attention(q, k, v, prefix=k.shape[0] - q.shape[0]).astype(np.float32)
        if self.wrong_after is not None and self.calls > self.wrong_after:
            out.flat[0] += 1.0
        return out

    def to_host(self, out):
        return out.reshape(-1).copy()


class CountingTimer:
    """Times nothing: every call, the empty kernel's and the device copy's too, takes 1 ms; a call
    timed kernel by kernel splits its 1 ms evenly among them. Its GPU says nothing of itself (no
    tensor-core peak is known), and its L2 is half its flush, as the real timer's is. (With the
    copy's size cut to 1 MiB, as the tests do, the stand-in's tiny shapes stay far below it.)"""

    flush_bytes = 1 << 27
    l2_bytes = 1 << 26
    persisting_l2_reset = True

    def flush_caches(self):
        pass

    def time_ms(self, launch):
        launch()
        return 1.0

    def time_stages_ms(self, launches):
        for launch in launches:
            launch()
        return [1.0 / len(launches)] * len(launches)

    def gpu_facts(self):
        return {}

    def overhead_ms(self, options):
        from labrunner.measure.sampling import measure

        class Empty:
            name = "empty"

            def prepare(self, i, verify):
                """Nothing to poison: the empty kernel has no output."""

            def launch(self, i):
                """Does nothing, as the empty kernel does."""

            def collect(self, i, verify):
                """Nothing to check: the empty kernel has no output."""

        return measure(Empty(), 1, self, options)


def through_the_wire(message, expected=None):
    """`message` encoded as the worker's wire writes it, sent through a pipe and read back as the
    driver reads it: against `expected` (any buffers where None), launches rebuilt as records."""
    from labrunner.run.wire import ANY_BUFFERS, Reader, encode

    cookie = b"0123456789abcdef"
    parts = encode(message, cookie)
    read_end, write_end = os.pipe()

    def writer():
        try:
            for part in parts:
                os.write(write_end, part.tobytes() if isinstance(part, np.ndarray) else bytes(part))
        finally:
            os.close(write_end)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        return Reader(read_end, cookie).read(expected or ANY_BUFFERS, time.monotonic() + 60, records=True)
    finally:
        os.close(read_end)
        thread.join()
