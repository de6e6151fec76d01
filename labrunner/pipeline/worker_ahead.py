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
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

from labrunner.compile.backend import Backend
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
        threading.Thread(target=self._start_and_stay, args=(self._worker,), name="attnlab-worker", daemon=True).start()

    def _start_and_stay(self, worker: Worker) -> None:
        try:
            worker.start()
        except BaseException as exc:  # said again by the grade's own worker, which starts where this one failed
            self._started.set_exception(exc)
        else:
            self._started.set_result(None)
        self._over.wait()  # the box lives as long as the thread that made it

    def take(self, backend: Backend) -> Worker:
        """The worker for `backend`: the one started ahead where it is for that backend and it started."""
        worker, self._worker = self._worker, None
        if worker is not None and backend == self.backend and self._started.exception() is None:
            return worker
        if worker is not None:
            worker.close()
        return self._new(backend)  # starts at its first request, and says why it cannot

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
            worker.close()
        self._over.set()
