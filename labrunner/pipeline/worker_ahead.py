"""The worker's box, started while the compile gate runs.

A grade's worker costs a box, a Python with numpy and the device (a CUDA context, or the CPU
runtime's parts) before its first case: most of a second that used to wait for the compile gate to
finish. The box holds nothing of the submission until the gate's module is loaded into it, so it can
start first, in a thread, for the backend the grade will most likely use (`--device`, or for `auto`
the GPU where the NVIDIA driver is present). Where the grade ends on another backend, or the early
start failed, that worker is closed and the grade starts its own, which says what went wrong.

The thread that started the box lives until the grade is over: the box dies with the thread that
made it (bubblewrap's --die-with-parent is the kernel's parent-death signal, which follows the
thread, not the process), so a thread that ended after the start would take the worker with it.

On the CPU the file's own build (g++, in the worker's box) starts as soon as the gate has read the file
and its include and linker policy passed, while NVRTC compiles it (`load_ahead`): the two compilers
overlap instead of following each other, most of half a second of a CPU grade. Nothing of the gate's
order changes: its verdict is taken first, and the build's outcome (a g++ refusal is a compile error,
as before) only once the gate passed and the grade chose the CPU.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from labrunner.compile.backend import Backend
from labrunner.phases import phase
from labrunner.pipeline.backend import gpu_may_be_here
from labrunner.run.worker import Worker


class WorkerAhead:
    def __init__(self, device: str, arch: str, make: Callable[[Backend], Worker] = Worker):
        self.arch, self.make = arch, make
        self.backend = (
            Backend.CPU if device == Backend.CPU or (device == "auto" and not gpu_may_be_here()) else Backend.GPU
        )
        self._worker: Worker | None = self._new(self.backend)
        self._started: Future[None] = Future()
        self._over = threading.Event()
        self._early: tuple[Worker, Future[None]] | None = None  # the file's load started in the early worker
        self._cancelled = threading.Event()
        threading.Thread(target=self._start_and_stay, args=(self._worker,), name="attnlab-worker", daemon=True).start()

    def _start_and_stay(self, worker: Worker) -> None:
        try:
            worker.start()
        except BaseException as exc:  # said again by the grade's own worker, which starts where this one failed
            self._started.set_exception(exc)
        else:
            self._started.set_result(None)
        self._over.wait()  # the box lives as long as the thread that made it

    def load_ahead(self, load: Callable[[Worker], None]) -> None:
        """`load(worker)` started now in a thread, on the early worker where it is the CPU's: the build a
        CPU worker makes of the file runs beside the gate's NVRTC compile (see the module's words). On a
        GPU the worker loads the gate's cubin, which does not exist yet, so nothing starts there."""
        worker = self._worker
        if worker is None or self.backend != Backend.CPU or self._early is not None:
            return

        def early() -> None:
            self._started.result()  # a box that did not start is said again by the grade's own worker
            if not self._cancelled.is_set():
                load(worker)

        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnlab-early-load")
        self._early = (worker, pool.submit(early))
        pool.shutdown(wait=False)

    def loaded(self, worker: Worker, load: Callable[[], None]) -> None:
        """The file loaded in `worker`: the early load's outcome where it ran there (its failure raised
        here, where a load's failure is raised), else `load()` now."""
        early, self._early = self._early, None
        if early is None or early[0] is not worker:
            load()
            return
        with phase("waiting for the early load"):
            early[1].result()

    def take(self, backend: Backend) -> Worker:
        """The worker for `backend`: the one started ahead where it is for that backend and it started."""
        worker, self._worker = self._worker, None
        if worker is not None and backend == self.backend and self._started.exception() is None:
            return worker
        if worker is not None:
            self._end(worker)
        return self._new(backend)  # starts at its first request, and says why it cannot

    def _end(self, worker: Worker) -> None:
        """Close a worker this grade will not use, and any load started in it: the load's thread is
        waited for and the worker closed again, since a load that began after the first close would have
        started a fresh box."""
        self._cancelled.set()
        worker.close()
        early, self._early = self._early, None
        if early is not None and early[0] is worker:
            early[1].exception()  # its failure is that of a worker closed under it: not this grade's
            worker.close()

    def _new(self, backend: Backend) -> Worker:
        worker = self.make(backend)
        worker.cpu_arch = self.arch  # the CPU parts its box is given are made for the gate's architecture
        return worker

    def close(self) -> None:
        """The grade is over: end the early worker where the grade never took it (the gate refused the
        file, Ctrl-C), and let the thread that started it go."""
        worker, self._worker = self._worker, None
        if worker is not None:
            self._started.exception()  # wait for the start to end, so that nothing it started outlives it
            self._end(worker)
        elif self._early is not None:  # taken by a grade that stopped before it asked for the load
            self._end(self._early[0])
        self._over.set()
