"""The `slurm` executor: Slurm job arrays through submitit, one array task per submission; and
`submitit-local`, submitit's own local executor, the same submitit code path without a cluster.

submitit writes the job script, pickles each task and reads each result back. What it does not do,
this does: it asks for GPUs only where the grading uses one; splits a batch at the cluster's
MaxArraySize; watches every task through squeue and sacct (slurm_queue.py), so a task the cluster
cancels, ends at its time limit or loses with its node gets a row that says so, and a task cancelled
while pending (which submitit waits for forever) is noticed; and when the batch is stopped it cancels
every job it submitted. The row of a task the cluster ended is `environment-missing` (exit 6, the
grader did not finish: not the student's doing), its error naming the cause; a stopped batch's
unfinished rows are `interrupted`. Every task's result carries what the cluster said of it, under
"cluster": its job id, sacct's state and elapsed seconds, its time limit, its requeues and the reason.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TypedDict

from labrunner.compile.backend import Backend
from labrunner.exit_codes import environment_error, usage_error
from labrunner.pipeline.batch import slurm_queue
from labrunner.pipeline.batch.grading import Grading
from labrunner.pipeline.batch.settings import BatchOptions
from labrunner.pipeline.batch.stop import BatchStop
from labrunner.pipeline.batch.submission import (
    Outcome,
    RunningProcesses,
    SubmissionTask,
    dead_result,
    environment_for_submission,
    interrupted_result,
    seed_environment,
    write_json_file,
)

# submitit's executor (a SlurmExecutor or its LocalExecutor) and the jobs it returns. submitit is imported only
# where --executor names it, and the tests give a stand-in for a cluster's: both are used by what they do.
SubmititExecutor = Any
SubmititJob = Any
# What an array task runs: `graded_on_node` with the batch's grading job bound.
NodeJob = Callable[[SubmissionTask], Outcome]

JOB_NAME = "attnlab-grade"
# How long a task may be unknown to squeue and sacct alike, with no result, before it is taken as
# removed by the cluster (sacct's record of a task that just ended can lag squeue by a second or two).
GONE_AFTER_S = 4.0
# How long a task sacct says COMPLETED may go without its result file before it is taken as lost
# (a shared file system can show a file late; submitit waits as long).
RESULT_LAG_S = 15.0
# How long, once the batch is done or stopped, the cancelled jobs are given to leave the queue.
QUEUE_DRAIN_S = 5.0
# A job ended by the cluster gets SIGTERM, then SIGKILL KillWait (30 s by default) later: the grading
# process is given this much of it to close its worker and box.
NODE_GRACE_S = 3.0
# Under these the nodes of a multi-node cluster have each a folder of their own, never the submitter's.
NODE_LOCAL = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), Path(tempfile.gettempdir()))


def submitit_executor(options: BatchOptions, folder: Path, count: int) -> SubmititExecutor:
    """The submitit executor for `slurm` or `submitit-local`; Slurm's specifics stay in its parameters."""
    try:
        import submitit
    except ImportError:
        raise environment_error(
            f"--executor {options.executor} needs submitit: pip install 'attnlab[cluster]'"
        ) from None
    if options.executor == "submitit-local":
        local = submitit.LocalExecutor(folder=folder)
        local.update_parameters(timeout_min=options.time_limit_min)
        return local
    try:
        executor = submitit.SlurmExecutor(folder=folder)
    except RuntimeError as exc:
        raise environment_error(
            f"--executor slurm: {exc} (submitit found no Slurm here); submit from a Slurm login node, "
            "or grade on this machine with --executor local"
        ) from None
    check_out_dir(options)
    executor.update_parameters(**slurm_parameters(options, count))
    return executor


def check_out_dir(options: BatchOptions) -> None:
    """The reports, logs and submitit's job files are written by the nodes and read by this driver, so
    they must be in a folder both see: --out-dir is required, and a node-local folder (/tmp) is refused
    where the cluster has more than one node."""
    if options.out_dir is None:
        raise usage_error(
            "--executor slurm needs --out-dir: the nodes write each submission's report and log, and "
            "submitit's job files, into it, so it must be a folder on storage they share with this "
            "machine (your home or a project folder), such as --out-dir ~/grading/lab2"
        )
    where = options.out_dir.resolve()
    local = next((root for root in NODE_LOCAL if where.is_relative_to(root)), None)
    if local is None:
        return
    nodes = slurm_queue.node_count(options.partition)
    if nodes is not None and nodes <= 1:
        return  # one node: it is this machine, and its /tmp is the one the reports are read from
    partition = f"partition {options.partition}" if options.partition else "cluster"
    raise usage_error(
        f"--out-dir {options.out_dir}: a folder under {local} is each node's own, and the {partition}'s "
        f"{nodes if nodes is not None else 'several'} nodes would write their reports where this machine "
        "never sees them; give a folder on storage the nodes share (your home or a project folder)"
    )


def slurm_parameters(options: BatchOptions, count: int) -> dict[str, Any]:
    """submitit's SlurmExecutor parameters (one to one with sbatch's options) for one array task per
    submission."""
    parameters: dict[str, Any] = {
        "time": options.time_limit_min,
        "ntasks_per_node": 1,
        # --jobs auto on a cluster: as many at once as the scheduler will run
        "array_parallelism": options.jobs if isinstance(options.jobs, int) else count,
        "job_name": JOB_NAME,
    }
    parameters.update(gpu_request(options))
    for name in ("partition", "account", "mem", "cpus_per_task", "qos", "constraint"):
        value = getattr(options, name)
        if value is not None:
            parameters[name] = value
    # submitit asks Slurm for USR2 90 s before the time limit, to checkpoint and requeue; Slurm may send
    # it up to 60 s earlier still, and submitit ends a job that has no checkpoint at once, so a 1-minute
    # limit ended after 24 s. A grading has nothing to checkpoint (it is graded again from its start),
    # so the warning is one nobody acts on: URG, which every process ignores, to the batch shell alone.
    # The limit itself is Slurm's: SIGTERM at the time limit, SIGKILL KillWait later.
    parameters["additional_parameters"] = {"signal": "B:URG@1", **sbatch_options(options.sbatch_args)}
    return parameters


def gpu_request(options: BatchOptions) -> dict[str, Any]:
    """The GPUs each task asks for: one by default with --device gpu, none otherwise; --gres as given."""
    if options.gres and options.gpus_per_job is not None:
        raise usage_error(f"--gres {options.gres} and --gpus-per-job {options.gpus_per_job}: give one GPU request")
    if options.device == Backend.CPU and (options.gres or options.gpus_per_job):
        given = f"--gres {options.gres}" if options.gres else f"--gpus-per-job {options.gpus_per_job}"
        raise usage_error(
            f"{given} with --device cpu: the CPU backend uses no GPU, so its tasks ask for none; "
            "drop the GPU request, or grade on GPUs with --device gpu"
        )
    if options.gres:
        if options.device != Backend.GPU:
            raise usage_error(
                f"--gres {options.gres}: a typed GPU request is for --device gpu (with --device "
                f"{options.device} a node's GPU may go unused); add --device gpu"
            )
        return {"gres": options.gres}
    gpus = options.gpus_per_job if options.gpus_per_job is not None else (1 if options.device == Backend.GPU else 0)
    return {"gpus_per_node": gpus} if gpus else {}


def sbatch_options(raw: tuple[str, ...]) -> dict[str, Any]:
    """--sbatch-arg values (`--reservation=exam`, `--exclusive`, `--mail-user you@uni`) as submitit's
    additional_parameters, each written into the job script as `#SBATCH --name=value`; one given
    there takes the place of attnlab's own (a `--time=0:30` is 30 seconds)."""
    options: dict[str, Any] = {}
    for given in raw:
        text = given.strip()
        if not text.startswith("--") or len(text) < 3:
            raise usage_error(
                f"--sbatch-arg {given}: give sbatch's long form, such as --sbatch-arg=--reservation=exam "
                "(a short one such as -w is not taken)"
            )
        name, separator, value = text[2:].partition("=")
        if not separator:
            name, _, value = text[2:].partition(" ")
        options[name.strip().replace("-", "_")] = value.strip() if value.strip() else True
    return options


# --- on the node --------------------------------------------------------------------------------


class EndedByCluster(Exception):
    """The cluster ended the job while it graded (a scancel, its time limit): no result, the driver
    reads why from sacct."""


def graded_on_node(job: Callable[..., Outcome], task: SubmissionTask) -> Outcome:
    """What each array task runs, in submitit's process on the node.

    submitit lets SIGTERM pass (it waits for its own USR2); but SIGTERM is how Slurm ends a job, at its
    time limit or a scancel, and SIGKILL follows. So here SIGTERM ends the grading process as a stopped
    batch ends its own (RunningProcesses: the signal, a grace, then its whole process group, box and
    worker included), and the task ends with no result, for the driver to report what the cluster did."""
    running = RunningProcesses()
    ended: list[str] = []

    def end(signum: int, frame: FrameType | None) -> None:
        ended.append(signal.Signals(signum).name)
        threading.Thread(target=running.end_all, args=(signal.Signals(signum), NODE_GRACE_S), daemon=True).start()

    signal.signal(signal.SIGTERM, end)
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # a warning of the limit: nothing here to checkpoint
    outcome = job(task, running) if "running" in inspect.signature(job).parameters else job(task)
    if ended:
        raise EndedByCluster(f"the job was ended by {ended[0]} while it graded")
    return outcome


# --- in the driver ------------------------------------------------------------------------------


def run_submitit(
    tasks: list[SubmissionTask], executor: SubmititExecutor, grading: Grading = Grading(), poll_s: float = 0.5
) -> list[Outcome]:
    """Every task graded through submitit; each result gathered as it ends, `finished` called with it.
    A stop (a signal, --batch-timeout) cancels what was submitted and reports the rest interrupted."""
    node_job: NodeJob = functools.partial(graded_on_node, grading.job)
    if executor_name(executor) == "slurm":
        return SlurmBatch(tasks, executor, node_job, grading, poll_s).run()
    return run_elsewhere(tasks, executor, node_job, grading, poll_s)


def executor_name(executor: SubmititExecutor) -> str:
    name = getattr(executor, "name", None)
    return name() if callable(name) else ""


def run_elsewhere(
    tasks: list[SubmissionTask], executor: SubmititExecutor, node_job: NodeJob, grading: Grading, poll_s: float
) -> list[Outcome]:
    """Another submitit executor (submitit-local): one map_array, each task's end read from submitit."""
    stop, finished = grading.stop, grading.finished
    with environment_for_submission(seed_environment()):
        handles = executor.map_array(node_job, tasks)
    outcomes: dict[int, Outcome] = {}
    while len(outcomes) < len(handles):
        if stop.is_set():
            for i, handle in enumerate(handles):
                if i not in outcomes:
                    with contextlib.suppress(Exception):
                        handle.cancel(check=False)
                    outcomes[i] = interrupted(tasks[i], stop)
                    finished(outcomes[i])
            break
        for i, handle in enumerate(handles):
            if i in outcomes or not handle.done():
                continue
            try:
                outcomes[i] = handle.result()
            except Exception as exc:
                outcomes[i] = dead(tasks[i], f"the grading job {handle.job_id} died: {one_line(str(exc))}")
            finished(outcomes[i])
        if len(outcomes) < len(handles):
            stop.wait(poll_s)
    return [outcomes[i] for i in range(len(tasks))]


def one_line(text: str, limit: int = 400) -> str:
    return " ".join(text.split())[:limit]


def dead(task: SubmissionTask, reason: str, seconds: float = 0.0, cluster: ClusterRecord | None = None) -> Outcome:
    """A row the driver writes for a task with no result of its own: environment-missing (exit 6)."""
    result = dead_result(task, reason)
    if cluster is not None:
        result["cluster"] = cluster
    write_json_file(result, Path(task.json_path))
    return Outcome(task, result, seconds)


def interrupted(task: SubmissionTask, stop: BatchStop, cluster: ClusterRecord | None = None) -> Outcome:
    result = interrupted_result(task, stop.reason, stop.exit_code)
    if cluster is not None:
        result["cluster"] = cluster
    write_json_file(result, Path(task.json_path))
    return Outcome(task, result, 0.0)


@dataclass
class Array:
    """One submitted job array (or, for a chunk of one task, one job): its tasks' places in the batch."""

    places: list[int]
    handles: list[SubmititJob]
    parallelism: int

    @property
    def job_id(self) -> str:
        return str(self.handles[0].job_id).split("_")[0]


@dataclass
class Watch:
    """What the driver knows of one task between polls: its last state, and since when it has been out
    of the queue with no final word."""

    state: slurm_queue.TaskState | None = None
    ended_since: float | None = None
    ran: bool = False  # seen RUNNING: a task that leaves the queue unrecorded then was not cancelled pending


class SlurmBatch:
    """A batch on a Slurm cluster: its arrays submitted (at most --jobs tasks running at once, each
    array at most MaxArraySize tasks), watched, and ended."""

    def __init__(
        self,
        tasks: list[SubmissionTask],
        executor: SubmititExecutor,
        node_job: NodeJob,
        grading: Grading,
        poll_s: float,
    ) -> None:
        self.tasks = tasks
        self.executor = executor
        self.finished = grading.finished
        self.node_job = node_job
        self.stop = grading.stop
        self.reporter = grading.reporter
        self.poll_s = poll_s
        self.outcomes: dict[int, Outcome] = {}
        self.watch = {i: Watch() for i in range(len(tasks))}
        self.arrays: list[Array] = []
        self.handles: dict[int, SubmititJob] = {}  # each submitted task's submitit job, by its place in the batch
        size = slurm_queue.max_array_size()
        self.pending = [list(range(start, min(start + size, len(tasks)))) for start in range(0, len(tasks), size)]
        self.capacity = int(executor.parameters.get("array_parallelism") or len(tasks))
        self.max_array_size = size

    # what each task is and where it stands

    def handle(self, place: int) -> SubmititJob:
        return self.handles[place]

    def submitted(self) -> list[int]:
        return list(self.handles)

    def unfinished(self) -> list[int]:
        return [place for place in self.submitted() if place not in self.outcomes]

    def run(self) -> list[Outcome]:
        started = time.monotonic()
        last_poll = float("-inf")
        self.submit_what_fits()
        self.say_submitted()
        while len(self.outcomes) < len(self.tasks):
            if self.stop.is_set():
                self.end_stopped()
                break
            self.gather_results()
            since = time.monotonic() - started
            # the queue is asked every 2 s at first, then less often (every 10 s after 100 s): a cluster's
            # controller serves everyone, and a batch's tasks take minutes
            if time.monotonic() - last_poll >= min(10.0, max(2.0, since / 10)):
                last_poll = time.monotonic()
                self.read_queue()
            self.submit_what_fits()  # an array that has ended makes room for the next
            if len(self.outcomes) < len(self.tasks):
                self.stop.wait(self.poll_s)
        self.finish_records()
        return [self.outcomes[i] for i in range(len(self.tasks))]

    def say_submitted(self) -> None:
        if not self.arrays:
            return
        ids = ", ".join(array.job_id for array in self.arrays)
        later = f"; {sum(map(len, self.pending))} more when those finish" if self.pending else ""
        split = f" (MaxArraySize {self.max_array_size})" if len(self.pending) + len(self.arrays) > 1 else ""
        self.reporter.note(f"submitted {len(self.submitted())} submissions as Slurm job {ids}{split}{later}")

    # submission

    def running_capacity(self) -> int:
        """Tasks that may still start at once: --jobs, less what the live arrays may run."""
        live = [a for a in self.arrays if any(p not in self.outcomes for p in a.places)]
        return self.capacity - sum(a.parallelism for a in live)

    def submit_what_fits(self) -> None:
        while self.pending and not self.stop.is_set():
            free = self.running_capacity()
            if free <= 0:
                return
            places = self.pending.pop(0)
            parallelism = min(len(places), free)
            self.executor.update_parameters(array_parallelism=parallelism)
            try:
                # sbatch passes the submitting environment on; submitit prints sbatch's refusal itself,
                # which the error below says once
                with (
                    environment_for_submission(seed_environment()),
                    contextlib.redirect_stderr(io.StringIO()),
                    signals_held(),
                ):
                    handles = self.executor.map_array(self.node_job, [self.tasks[p] for p in places])
            except Exception as exc:
                message = refusal(exc)
                if not self.arrays:
                    raise environment_error(message) from None
                # a later array refused (the queue's limit reached, say): its submissions only are ungraded
                for place in places:
                    self.done(place, dead(self.tasks[place], message.removeprefix("--executor slurm: ")))
                continue
            self.arrays.append(Array(places, handles, parallelism))
            self.handles.update(zip(places, handles))

    # gathering

    def gather_results(self) -> None:
        """A task whose result file holds its outcome is done, whatever the queue says yet. One holding
        an error waits for the queue: a job the cluster ended says so there, not in its traceback."""
        for place in self.unfinished():
            kind, value = node_result(self.handle(place))
            if kind == "success":
                self.done(place, value)

    def done(self, place: int, outcome: Outcome) -> None:
        self.outcomes[place] = outcome
        self.finished(outcome)

    def read_queue(self) -> None:
        """One poll of squeue and sacct; a task the cluster has ended with no result gets its row."""
        places = self.unfinished()
        if not places:
            return
        states = slurm_queue.poll([str(self.handle(p).job_id) for p in places])
        if states is None:
            return  # squeue did not answer: nothing is decided on a silence
        now = time.monotonic()
        for place in places:
            state = states[str(self.handle(place).job_id)]
            watch = self.watch[place]
            watch.state = state
            if state.queued:
                watch.ended_since = None
                watch.ran = watch.ran or state.state == "RUNNING"
                continue
            handle = self.handle(place)
            kind, value = node_result(handle)
            if kind == "success":
                self.done(place, value)
                continue
            if state.state in CLUSTER_ENDED - {"GONE"}:
                self.done(place, self.ended_by_cluster(place, state))
                continue
            # out of the queue, and sacct's last word is not a cluster's doing: it may not be written yet
            # (a task that just ended is RUNNING there, or unknown, for a moment), so its end is waited out
            watch.ended_since = watch.ended_since or now
            waited = now - watch.ended_since
            settled = state.state not in slurm_queue.LIVE | {"GONE"}
            if kind == "error" and (settled or waited >= RESULT_LAG_S):
                self.done(place, dead(self.tasks[place], f"the grading job {handle.job_id} died: {value}"))
            elif state.state == "GONE" and kind != "error" and not watch.ran and waited >= GONE_AFTER_S:
                self.done(place, self.ended_by_cluster(place, state))  # cancelled while pending: it never ran
            elif waited >= RESULT_LAG_S or (settled and state.state != "COMPLETED"):
                self.done(place, self.ended_by_cluster(place, state))

    def ended_by_cluster(self, place: int, state: slurm_queue.TaskState) -> Outcome:
        ran = self.watch[place].ran
        reason = cluster_reason(state, ran)
        detail = cluster_detail(state, self.handle(place), ran)
        return dead(self.tasks[place], f"{reason}: {detail}", state.elapsed_s or 0, cluster_record(state, reason))

    # ending

    def end_stopped(self) -> None:
        """The batch was stopped: nothing more is submitted, every array with a task unfinished is
        cancelled, and each unfinished task is `interrupted` (a result that arrived first still counts)."""
        arrays = [a.job_id for a in self.arrays if any(p not in self.outcomes for p in a.places)]
        if slurm_queue.cancel(arrays) or slurm_queue.cancel(arrays):  # once more: a busy controller may time out
            if arrays:
                why = self.stop.reason.removeprefix("not graded: ")
                self.reporter.note(f"cancelled Slurm job {', '.join(arrays)} ({why})")
        else:
            self.reporter.error(
                f"scancel did not take Slurm job {', '.join(arrays)}: cancel it by hand (scancel {arrays[0]})"
            )
        self.drain()
        self.gather_results()
        left = self.unfinished()
        # what the cluster says of them now (CANCELLED, as a rule), else what it said last
        states = (slurm_queue.poll([str(self.handle(p).job_id) for p in left]) or {}) if left else {}
        for place in left:
            state = states.get(str(self.handle(place).job_id)) or self.watch[place].state
            self.done(place, interrupted(self.tasks[place], self.stop, cluster_record(state, None) if state else None))
        for place in (p for chunk in self.pending for p in chunk):
            self.done(place, interrupted(self.tasks[place], self.stop))
        self.pending = []

    def drain(self) -> None:
        """Waits (a few seconds at most) until none of this batch's jobs is in the queue, so that the
        rows written after are the last word on their files."""
        mine = {str(h.job_id) for a in self.arrays for h in a.handles}
        until = time.monotonic() + QUEUE_DRAIN_S
        while time.monotonic() < until:
            queued = slurm_queue.queued()
            if queued is not None and not mine & set(queued):
                return
            time.sleep(0.5)

    def finish_records(self) -> None:
        """Each result the node wrote gets what sacct says of its task (state, elapsed, requeues). Its job
        is given a few seconds to leave the queue as it ends; one still pending then (a requeue that
        came after the result) or still running is cancelled, so that nothing is left behind."""
        ids = {place: str(self.handle(place).job_id) for place in self.submitted()}
        waiting = [job_id for place, job_id in ids.items() if "cluster" not in self.outcomes[place].result]
        if not waiting:
            return
        # after a stop the jobs were drained already: a second wait would hold the batch past its 10 s
        until = time.monotonic() + (1.0 if self.stop.is_set() else QUEUE_DRAIN_S)
        states = slurm_queue.poll(waiting) or {}
        # sacct's record of a just-ended job can lag squeue a little: GONE is waited out too
        while time.monotonic() < until and any(s.live or s.state == "GONE" for s in states.values()):
            time.sleep(0.5)
            states = slurm_queue.poll(waiting) or states
        leftover = [job_id for job_id, state in states.items() if state.live]
        if leftover:
            slurm_queue.cancel(leftover)
            self.reporter.note(f"cancelled Slurm job {', '.join(leftover)}: its submission had its result already")
        for place, job_id in ids.items():
            result = self.outcomes[place].result
            state = states.get(job_id)
            if "cluster" in result or state is None:
                continue
            reason = "node failure, requeued" if state.requeued_after_node_failure else None
            result["cluster"] = cluster_record(state, reason)
            write_json_file(result, Path(self.tasks[place].json_path))


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back while sbatch runs: sbatch is in this terminal's process group, and a
    Ctrl-C reaching it would kill it mid-submission, leaving an array Slurm took that this batch never
    heard of, so never cancels. The signal is delivered (and the batch stopped) as soon as sbatch is done."""
    held = {signal.SIGINT, signal.SIGTERM}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


# The states in which the cluster, not the grading, ended a task.
CLUSTER_ENDED = {"CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "GONE"}


def refusal(exc: Exception) -> str:
    """sbatch's no (a GRES the partition lacks, an unknown QOS or account, a bad --mem) in its own words,
    with what to check."""
    said = [line.strip() for line in str(exc).splitlines() if line.strip()]
    message = "; ".join(line.removeprefix("sbatch: error: ") for line in said) or type(exc).__name__
    hint = (
        "a GPU request the partition cannot meet (--device cpu asks for none; a typed one is "
        "--gres gpu:TYPE:N, the types as `sinfo -o %G` lists them)"
        if "gres" in message.lower()
        else "check --partition, --account, --qos, --mem, --cpus-per-task, --constraint and --sbatch-arg "
        "against what `sinfo` and `sacctmgr show qos` list"
    )
    return f"--executor slurm: sbatch refused the job array: {message}; {hint}"


def cluster_reason(state: slurm_queue.TaskState, ran: bool = False) -> str:
    """Why a task has no verdict, first in its row's error: what the cluster did."""
    if state.state == "CANCELLED" or (state.state == "GONE" and not ran):
        return "cancelled by the cluster"
    if state.state == "GONE":
        return "ended by the cluster"
    if state.state == "TIMEOUT":
        return f"time limit ({state.time_limit_s} s)" if state.time_limit_s else "time limit"
    if state.state == "NODE_FAIL":
        return "node failure"
    if state.requeued_after_node_failure:
        return "node failure, requeued"
    if state.state == "OUT_OF_MEMORY":
        return "out of memory"
    if state.state == "COMPLETED":
        return "no result"
    if state.state == "FAILED":
        return "the grading job failed"
    return f"ended by the cluster ({state.state})"


def cluster_detail(state: slurm_queue.TaskState, handle: SubmititJob, ran: bool = False) -> str:
    """What happened, in Slurm's words, and where to look."""
    job = f"Slurm job {handle.job_id}"
    after = f"after {state.elapsed_s} s" if state.elapsed_s else ""
    requeued = " (requeued after a node failure first)" if state.requeued_after_node_failure else ""
    if state.state == "GONE" and ran:
        return f"{job} left the queue with no result and no record in sacct; its log is under {handle.paths.folder}"
    if state.state == "GONE":
        return f"{job} left the queue before it ran, with no record in sacct (scancel of a pending task)"
    if state.state == "CANCELLED":
        when = f"after {state.elapsed_s or 0} s running" if state.elapsed_s or ran else "before it ran"
        return f"{job} was cancelled (scancel, or an administrator) {when}{requeued}"
    if state.state == "TIMEOUT":
        return f"{job} ran past its limit and was ended {after}{requeued}; give it more with --time-limit MINUTES"
    if state.state == "NODE_FAIL":
        return f"{job}'s node failed {after}, and the job was not requeued; grade the file again"
    if state.state == "OUT_OF_MEMORY":
        return f"{job} went past its memory {after}; give it more with --mem"
    if state.state == "COMPLETED":
        return f"{job} ended (COMPLETED) and left no result; its log is under {handle.paths.folder}"
    return f"{job} ended {state.state} {after}{requeued}; its log is under {handle.paths.folder}"


class ClusterRecord(TypedDict):
    """result["cluster"]: what the cluster said of a task (its job id, sacct's state, elapsed seconds and
    time limit, the attempts before its last, and why it has no verdict where the cluster ended it)."""

    job_id: str
    state: str
    elapsed_s: int | None
    time_limit_s: int | None
    requeued: int
    reason: str | None


def cluster_record(state: slurm_queue.TaskState, reason: str | None) -> ClusterRecord:
    """result["cluster"]: what the gradebook's cluster columns read."""
    return {
        "job_id": state.job_id,
        "state": state.state,
        "elapsed_s": state.elapsed_s,
        "time_limit_s": state.time_limit_s,
        "requeued": len(state.earlier),
        "reason": reason,
    }


def node_result(handle: SubmititJob) -> tuple[str, Any]:
    """What the task's result file holds: ("success", its Outcome), ("error", the last line of the
    traceback submitit carried back from the node, `RuntimeError: node lost`), or ("", None) before one."""
    from submitit.core.utils import pickle_load

    path = handle.paths.result_pickle
    if not path.exists():
        return "", None
    try:
        kind, value = pickle_load(path)
    except Exception as exc:  # half written, or written by another submitit: as good as none, said so
        return "error", f"its result file {path} could not be read ({type(exc).__name__})"
    if kind == "success":
        return kind, value
    lines = [line.strip() for line in str(value).splitlines() if line.strip()]
    raised = [line for line in lines if ":" in line and line.split(":")[0].replace(".", "").isidentifier()]
    return "error", one_line(raised[-1] if raised else (lines[-1] if lines else "no traceback"))
