"""The `local` executor: a pool of `--jobs N` on this machine (default: one per GPU, or one per core on
the CPU backend). With several GPUs, each job is given one (`CUDA_VISIBLE_DEVICES`), round robin."""

from __future__ import annotations

import os
import queue
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable

from labrunner.pipeline.submission import Outcome, SubmissionTask, dead_result, grade_in_process, write_json_file


def default_jobs(backend: str) -> int:
    if backend == "gpu":
        return max(1, len(visible_gpus()))
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them for a child."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [g for g in given.split(",") if g.strip()]
    try:
        import cupy

        return [str(i) for i in range(cupy.cuda.runtime.getDeviceCount())]
    except Exception:
        return []


def run_local(
    tasks: list[SubmissionTask],
    jobs: int,
    gpus: list[str],
    finished: Callable[[Outcome], None],
    job: Callable[[SubmissionTask], Outcome] = grade_in_process,
) -> list[Outcome]:
    """A pool of `jobs` slots; each slot grades one submission at a time in its own process. Slots are
    spread over the GPUs, so with one job per GPU every GPU grades one submission at a time."""
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(jobs):
        slots.put(slot)

    def one(task: SubmissionTask) -> Outcome:
        slot = slots.get()
        try:
            if len(gpus) > 1:
                task = SubmissionTask(
                    **{**task.__dict__, "environment": (("CUDA_VISIBLE_DEVICES", gpus[slot % len(gpus)]),)}
                )
            try:
                return job(task)
            except Exception as exc:  # the job itself failed: that submission is ungraded, the rest go on
                outcome = Outcome(task, dead_result(task, f"the grading job failed: {exc}"), 0.0)
                write_json_file(outcome.result, Path(task.json_path))
                return outcome
        finally:
            slots.put(slot)

    outcomes: dict[int, Outcome] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(one, task): i for i, task in enumerate(tasks)}
        for future in as_completed(futures):
            outcome = future.result()
            outcomes[futures[future]] = outcome
            finished(outcome)
    return [outcomes[i] for i in range(len(tasks))]
