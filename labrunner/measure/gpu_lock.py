"""One GPU, one timer: a lock file per GPU so that no two attnlab processes time on it at once.

A batch runs several submissions on one GPU. Their correctness cases may share it (a wrong
answer is wrong however busy the GPU is), but a time taken while another kernel runs is not the
kernel's time. So each GPU has a lock file with two modes (flock's shared and exclusive locks):
each case's run holds it shared (`Worker.runs_held`; not the host's work between runs, such as
explaining a failure, which a timer elsewhere need not wait for), timing holds it exclusive. A
timer then waits for the runs already under way to finish and runs alone, and a SPEEDUP graded in a
batch is the SPEEDUP the same file gets graded alone.

A waiting timer must not starve behind a stream of checks that keep overlapping one another, so a
second file works as a turnstile: a timer holds it while it waits, and a check passes through it
before taking its shared lock. Locks belong to the process that took them, and the kernel drops
them when that process ends, however it ends: a crashed grader never leaves a GPU locked.

Within one process the lock is held once: the grade's cases hold it shared while the driver's own GPU
oracle (its proof, started ahead in a thread, and the references it makes) asks for it too, and the
timing holds it exclusive while that oracle checks the timed calls. flock knows no such nesting (a
second descriptor of the same file would wait for the first, a thread for its own process), so the
process counts its holders per GPU: a request the process already covers (shared under shared or
exclusive, or anything under exclusive) is granted at once, and the file is unlocked when the last
holder leaves. The driver's GPU oracle must hold it: its kernels running while another grader times
would be part of that grader's time.

The GPU is named by its PCI bus id, as the process sees it, so two processes given the same GPU
under different CUDA_VISIBLE_DEVICES numbers still take the same lock. On a cluster the lock
folder is the node's own temporary folder, which is what a per-node GPU needs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

LOCK_FOLDER_VARIABLE = "ATTNLAB_LOCK_DIR"


def lock_folder() -> Path:
    folder = Path(os.environ.get(LOCK_FOLDER_VARIABLE) or tempfile.gettempdir()) / "attnlab-gpu-locks"
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # a folder another user made: theirs to open up
            folder.chmod(0o1777)  # like /tmp: every user of the node shares its GPUs' locks
    return folder


def open_lock_file(path: Path) -> int:
    """A descriptor to lock (flock needs no write access, so another user's lock file serves as well)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY)


def gpu_key(device_index: int = 0) -> str:
    """A name for the GPU this process uses, the same in every process that sees it."""
    try:
        import cupy

        bus_id = cupy.cuda.Device(device_index).pci_bus_id
    except Exception:  # no CuPy or no driver: there is no GPU to share, and any name will do
        bus_id = f"device-{device_index}"
    return re.sub(r"[^0-9A-Za-z.-]", "_", bus_id)


@contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    handle = open_lock_file(path)
    try:
        fcntl.flock(handle, mode)
        yield
    finally:
        os.close(handle)  # closing the descriptor releases its lock


@dataclass
class Held:
    """This process's hold on one GPU's lock: its descriptor, its mode and how many hold it now."""

    handle: int
    exclusive: bool
    holders: int = 0


_HELD: dict[str, Held] = {}
_HOLDING = threading.Condition()  # guards _HELD; a thread that must wait for the process's own holders waits here


@contextmanager
def exclusive_timing(key: str) -> Iterator[None]:
    """Hold the GPU alone while timing: wait for running checks, keep new ones out."""
    with _hold(key, exclusive=True):
        yield


@contextmanager
def shared_checking(key: str) -> Iterator[None]:
    """Run correctness cases beside other checks, but never while a kernel is being timed."""
    with _hold(key, exclusive=False):
        yield


@contextmanager
def _hold(key: str, exclusive: bool) -> Iterator[None]:
    with _HOLDING:
        # a shared hold of this process's own cannot become exclusive: wait until its holders have left
        while key in _HELD and exclusive and not _HELD[key].exclusive:
            _HOLDING.wait()
        held = _HELD.get(key)
        if held is not None:  # covered by what the process holds already
            held.holders += 1
        else:
            held = _HELD[key] = Held(_take(key, exclusive), exclusive, 1)
    try:
        yield
    finally:
        with _HOLDING:
            held.holders -= 1
            if held.holders == 0:
                del _HELD[key]
                os.close(held.handle)  # closing the descriptor releases its lock
                _HOLDING.notify_all()


def _take(key: str, exclusive: bool) -> int:
    """The lock file's descriptor, locked: exclusive through the turnstile (held while it waits, so new checks
    queue behind it), shared after passing the turnstile (so a waiting timer is not starved)."""
    folder = lock_folder()
    handle = open_lock_file(folder / f"{key}.lock")
    try:
        if exclusive:
            with _flock(folder / f"{key}.turnstile", fcntl.LOCK_EX):
                fcntl.flock(handle, fcntl.LOCK_EX)
        else:
            with _flock(folder / f"{key}.turnstile", fcntl.LOCK_EX):
                pass  # a timer that is waiting holds the turnstile: queue behind it
            fcntl.flock(handle, fcntl.LOCK_SH)
    except BaseException:
        os.close(handle)
        raise
    return handle
