"""What the Slurm cluster says about a batch's jobs, read with its own commands: squeue (what is still
queued or running), sacct (what ended, how, and after how long), scontrol (the cluster's limits and
nodes), and scancel. Every call has a timeout: a controller that does not answer costs a poll, never
the batch.

submitit watches its jobs through sacct alone, and a job that never ran has no sacct record: a task
cancelled while pending left it waiting forever. So a task's state here is read from both, and a task
that neither knows any more, with no result, is one the cluster removed before it ran."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field

CALL_TIMEOUT_S = 30

# The states in which a job is still the cluster's business (squeue lists it): anything else has ended.
LIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD", "RESIZING"}


@dataclass
class TaskState:
    """One array task (`12_3`, or `12` for a single job) as the cluster last described it."""

    job_id: str
    state: str  # squeue's or sacct's state, its first word ("CANCELLED by 0" is CANCELLED); GONE where none knows it
    elapsed_s: int | None = None  # sacct's Elapsed of the last attempt
    time_limit_s: int | None = None  # sacct's Timelimit
    earlier: list[str] = field(default_factory=list)  # the states of the attempts before the last (a requeue)
    queued: bool = False  # squeue lists it: the cluster still runs it, or will

    @property
    def live(self) -> bool:
        return self.queued or self.state in LIVE

    @property
    def requeued_after_node_failure(self) -> bool:
        return "NODE_FAIL" in self.earlier


def run(argv: list[str], timeout_s: float = CALL_TIMEOUT_S) -> subprocess.CompletedProcess[str] | None:
    """A Slurm command's outcome, or None where it could not be run or did not answer in time."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None


def seconds(text: str) -> int | None:
    """Slurm's durations ([D-]HH:MM:SS, MM:SS, MM:SS.mmm) in seconds; None for UNLIMITED, Partition_Limit, ''."""
    match = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)(?:\.\d+)?", text.strip())
    if not match:
        return None
    days, hours, minutes, secs = (int(part or 0) for part in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + secs


def task_ids(job_id: str) -> list[str]:
    """The tasks one record names: `12_3` is itself, `12_[1-4,7%2]` is 12_1 to 12_4 and 12_7, `12` is itself."""
    match = re.fullmatch(r"(\d+)_\[([0-9,\-]+)(?:%\d+)?\]", job_id)
    if not match:
        return [job_id]
    array, ranges = match.groups()
    ids: list[str] = []
    for part in ranges.split(","):
        first, _, last = part.partition("-")
        ids.extend(f"{array}_{index}" for index in range(int(first), int(last or first) + 1))
    return ids


def queued() -> dict[str, str] | None:
    """squeue: every task of this user's still in the queue, pending array tasks one by one; None when
    squeue did not answer (a poll then learns nothing, and decides nothing)."""
    # --user, not --me: --me is Slurm 20.11's, and clusters run older ones
    completed = run(["squeue", f"--user={os.getuid()}", "--noheader", "--array", "--format=%i|%T"])
    if completed is None or completed.returncode != 0:
        return None
    states = {}
    for line in completed.stdout.splitlines():
        job_id, _, state = line.strip().partition("|")
        for task in task_ids(job_id):
            states[task] = state
    return states


def accounted(arrays: list[str]) -> dict[str, list[tuple[str, int | None, int | None]]] | None:
    """sacct: each task's attempts, oldest first, as (state, elapsed s, limit s); None when sacct did not
    answer (accounting disabled, or slurmdbd down)."""
    if not arrays:
        return {}
    completed = run(
        ["sacct", "--noheader", "--parsable2", "--allocations", "--duplicates", "--jobs", ",".join(arrays),
         "--format=JobID,State,Elapsed,Timelimit"]
    )  # fmt: skip
    if completed is None or completed.returncode != 0:
        return None
    attempts: dict[str, list[tuple[str, int | None, int | None]]] = {}
    for line in completed.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 4:
            continue
        job_id, state, elapsed, limit = parts[:4]
        for task in task_ids(job_id):
            attempts.setdefault(task, []).append((state.split()[0] if state else "", seconds(elapsed), seconds(limit)))
    return attempts


def poll(job_ids: list[str]) -> dict[str, TaskState] | None:
    """Each task's state: squeue's while it is queued (sacct's once it has ended and is only COMPLETING),
    else its last sacct attempt's, else GONE. None when
    squeue did not answer. Without sacct (no accounting database), an ended task is GONE; a task squeue
    no longer lists may still be RUNNING in sacct for a moment (its record is written after)."""
    live = queued()
    if live is None:
        return None
    history = accounted(sorted({job_id.split("_")[0] for job_id in job_ids})) or {}
    states = {}
    for job_id in job_ids:
        attempts = history.get(job_id, [])
        last = attempts[-1] if attempts else ("GONE", None, None)
        earlier = [state for state, _, _ in attempts[:-1]]
        if job_id in live:
            ended = bool(attempts) and attempts[-1][0] not in LIVE
            if live[job_id] == "COMPLETING" and ended and last[0]:
                # it has ended and its processes are being ended (a busy node takes seconds): sacct has how
                states[job_id] = TaskState(job_id, last[0], last[1], last[2], earlier, queued=True)
                continue
            # a requeued task's failed attempt is in sacct before its new, pending one is
            if ended:
                earlier = [state for state, _, _ in attempts]
            states[job_id] = TaskState(job_id, live[job_id], last[1], last[2], earlier, queued=True)
        else:
            states[job_id] = TaskState(job_id, last[0] or "GONE", last[1], last[2], earlier)
    return states


def cancel(arrays: list[str]) -> bool:
    """scancel of whole job arrays (every task, pending or running); True when scancel took them."""
    if not arrays:
        return True
    completed = run(["scancel", *arrays])
    return completed is not None and completed.returncode == 0


def config_value(name: str) -> str | None:
    """One value of `scontrol show config` (MaxArraySize, ClusterName), or None."""
    completed = run(["scontrol", "show", "config"])
    if completed is None or completed.returncode != 0:
        return None
    match = re.search(rf"^{re.escape(name)}\s*=\s*(\S+)", completed.stdout, re.MULTILINE)
    return match.group(1) if match else None


def max_array_size() -> int:
    """The cluster's MaxArraySize: an array's task indices run from 0 to one less than it. Slurm's own
    default (1001) where the controller does not say."""
    value = config_value("MaxArraySize")
    return int(value) if value and value.isdigit() and int(value) > 0 else 1001


def node_count(partition: str | None) -> int | None:
    """How many nodes the partition (or the whole cluster) has, from sinfo; None where sinfo did not answer."""
    argv = ["sinfo", "--noheader", "--Node", "--format=%N"] + (["--partition", partition] if partition else [])
    completed = run(argv)
    if completed is None or completed.returncode != 0:
        return None
    return len({line.strip() for line in completed.stdout.splitlines() if line.strip()})
