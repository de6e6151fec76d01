"""The CuPy implementation of the `Timer` the sampling loop in `timing` drives.

Three things make a GPU timing honest, and each has a home here:

* Events, not host clocks. A launch returns as soon as the kernel is queued;
  CUDA events recorded on the same stream before and after it measure the
  time the GPU spent, to about half a microsecond.
* A cold L2. An attention kernel that reads K and V left in L2 by the previous
  call looks far faster than it will in a model. Before every sample we write
  a buffer of at least twice the L2 size, which pushes out whatever was there.
* No leftover "persisting" L2 lines. A process may pin part of L2 with an
  access-policy window; those lines would survive the flush, so the state is
  reset once when the timer is created.

The flush also hides the host's launch latency: it is queued before the start
event and keeps the GPU busy for tens of microseconds, long enough for Python
to queue the timed kernel, so the GPU never waits idle between the start event
and the kernel. What remains of the fixed cost, the events themselves and the
gap between them and a kernel, is what `overhead_ms` reports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from labrunner.measure.sampling import TimingOptions, measure
from labrunner.records.timing import Stats

if TYPE_CHECKING:
    import cupy

    from labrunner.records.roofline import GpuFacts

# The GPU's wait before every timed call's flush (`flush_caches`). The timing sets' fill used to give
# that cover by accident, when it was slow; once it took a few tens of microseconds at lab 2's shape,
# lab 2's SPEEDUP spread over five fresh processes on an H200 went from 0.56% to 1.5-2%, and its
# timed runs took longer to reach the noise target. 200 microseconds is several times a lab's host
# time to queue one call, and under 1% of lab 2's round.
KERNEL_HEAD_START_US = 200.0
EMPTY_KERNEL_SOURCE = 'extern "C" __global__ void attnlab_empty() {}'
# One thread that waits on the GPU's nanosecond clock: a head start for a contender whose host
# side is slow to queue its work (see `hold`).
HOLD_KERNEL_SOURCE = r"""
extern "C" __global__ void attnlab_hold(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""

# Some devices (and MIG slices) report no L2 size; never flush less than this.
MINIMUM_FLUSH_BYTES = 8 * 1024 * 1024


def reset_persisting_l2() -> bool:
    """Return persisting L2 lines to normal; True when the reset ran.

    CuPy has no wrapper for this call, so it goes through NVIDIA's
    cuda-python bindings. They are optional: without them, or on a driver
    that refuses the call, the timer still works, just without this guarantee.
    """
    try:
        from cuda.bindings import runtime
    except ImportError:
        try:
            from cuda import cudart as runtime
        except ImportError:
            return False
    try:
        (error,) = runtime.cudaCtxResetPersistingL2Cache()
    except Exception:
        return False
    return bool(error == runtime.cudaError_t.cudaSuccess)


class CupyTimer:
    """Times launches on the current CuPy device and stream with CUDA events.

    The timed work must be queued on the current stream: the events are
    recorded there, and a kernel on another stream would escape them.
    """

    def __init__(self, flush_factor: float = 2) -> None:
        if flush_factor < 2:
            # L2 is split into partitions with their own replacement policy;
            # writing just one L2's worth leaves some old lines resident.
            raise ValueError(f"flush_factor must be at least 2, got {flush_factor}")
        # Imported here, not at the top: the module is importable (and its timer replaceable by a
        # stand-in) where CuPy is not installed, as on a CPU-only test runner.
        import cupy

        self._cupy = cupy
        device_id = cupy.cuda.Device().id
        properties = cupy.cuda.runtime.getDeviceProperties(device_id)
        self.l2_bytes = int(properties["l2CacheSize"])
        self.flush_bytes = max(int(flush_factor * self.l2_bytes), MINIMUM_FLUSH_BYTES)
        self._flush_buffer = cupy.empty(self.flush_bytes, dtype=cupy.uint8)
        self._start = cupy.cuda.Event()
        self._end = cupy.cuda.Event()
        self._stage_events: list[cupy.cuda.Event] = []
        self._empty_kernel: cupy.RawKernel | None = None
        self._hold_kernel: cupy.RawKernel | None = None
        self.persisting_l2_reset = reset_persisting_l2()

    def flush_caches(self) -> None:
        # A memset writes every byte of the buffer through L2, evicting the
        # previous call's data. It is queued, not awaited: stream order puts
        # it before the start event, so it is never inside the timing.
        # The head start before it keeps the GPU busy while the host queues
        # the start event and the call (`hold`): the flush alone lasts some
        # tens of microseconds, about what a lab's launches take to queue
        # from Python, so without it the GPU could sit idle after the start
        # event and count the host's time as the kernel's.
        self.hold(KERNEL_HEAD_START_US)
        self._flush_buffer.data.memset_async(0, self.flush_bytes)

    def hold(self, microseconds: float) -> None:
        """Keep the GPU busy for `microseconds`, queued and not awaited, before the next flush.

        The flush hides a launch's host latency only while it lasts (tens of microseconds). A
        contender whose host side takes longer to queue its work (PyTorch dispatches each op
        through Python and its dispatcher) would leave the GPU idle between the start event and
        its kernels, and that idle time would count as its own. Queued before the flush, the hold
        keeps the GPU busy while the host queues the whole call, so the events measure the GPU's
        work, as they do for a single kernel launch.
        """
        if self._hold_kernel is None:
            self._hold_kernel = self._cupy.RawKernel(HOLD_KERNEL_SOURCE, "attnlab_hold")
        self._hold_kernel((1,), (1,), (self._cupy.uint64(int(microseconds * 1000)),))

    def time_ms(self, launch: Callable[[], None]) -> float:
        self._start.record()
        launch()
        self._end.record()
        self._end.synchronize()
        return float(self._cupy.cuda.get_elapsed_time(self._start, self._end))

    def time_stages_ms(self, launches: list[Callable[[], None]]) -> list[float]:
        """Each launch's time within one call: an event before the first launch and after every one.

        An event between two kernels on one stream is recorded when the first has finished and
        before the second starts, so the kernels run as they do untimed, back to back, and their
        times add up to the whole call's. The flush queued before the call keeps the GPU busy
        while the host queues the launches and events, as it does for a single launch.
        """
        while len(self._stage_events) < len(launches) + 1:
            self._stage_events.append(self._cupy.cuda.Event())
        events = self._stage_events[: len(launches) + 1]
        events[0].record()
        for launch, after in zip(launches, events[1:]):
            launch()
            after.record()
        events[-1].synchronize()
        return [self._cupy.cuda.get_elapsed_time(before, after) for before, after in zip(events, events[1:])]

    def gpu_facts(self) -> GpuFacts:
        """What the timing's physics needs of this GPU (SMs, compute capability, maximum SM clock):
        `gpu_facts.read_gpu_facts`, each fact None where it cannot be read."""
        from labrunner.measure.gpu_facts import read_gpu_facts

        return read_gpu_facts(self._cupy.cuda.Device().id, measure_copy=False)

    def overhead_ms(self, options: TimingOptions | None = None) -> Stats:
        """Time an empty kernel through the same path (flush, events, one launch).

        A kernel that measures close to this figure is too fast to time this
        way: the number is mostly the harness, not the kernel.
        """
        if self._empty_kernel is None:
            self._empty_kernel = self._cupy.RawKernel(EMPTY_KERNEL_SOURCE, "attnlab_empty")
        return measure(EmptyKernel(self._empty_kernel), 1, self, options)


class EmptyKernel:
    """A contender that launches one block of one thread doing nothing."""

    name = "empty kernel"

    def __init__(self, kernel: cupy.RawKernel) -> None:
        self._kernel = kernel

    def prepare(self, input_index: int, verify: bool) -> None:
        """Nothing to poison: the empty kernel has no output."""

    def launch(self, input_index: int) -> None:
        self._kernel((1,), (1,), ())

    def collect(self, input_index: int, verify: bool) -> None:
        """Nothing to check: the empty kernel has no output."""
