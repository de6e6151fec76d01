"""A batch: many submissions graded as one command, on this machine or on a Slurm cluster.

Each submission is graded by the single-file path itself (`attnlab grade LAB FILE --json ...`)
in a process of its own, so a batch gives every file exactly the verdict it gets graded alone, a
grader that dies costs one submission its verdict and nothing more, and the results come back as
the JSON files that process wrote (never its stdout, which a kernel's printf can fill).

Where those processes run is the executor's business, and only that:

- `local`: a pool of `--jobs N` on this machine (default: one per GPU, or one per core on the
  CPU backend). With several GPUs, each job is given one (`CUDA_VISIBLE_DEVICES`), round robin.
- `slurm`: a Slurm job array through submitit, one array task per submission, with the partition,
  GPUs per job, time limit and account as options.
- `submitit-local`: submitit's own local executor, the same submitit code path as `slurm`, which
  is how that path is tested without a cluster.

However they run, several jobs may share a GPU: their correctness cases overlap, their timing never
does (`measure/gpu_lock.py`). The gradebook, the per-submission reports and the aggregated JUnit
are built here, from the JSON results, and the command exits with the worst submission's code.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from labrunner.exit_codes import AttnlabError, ExitCode, environment_error, usage_error
from labrunner.labs import get_lab
from labrunner.pipeline.backend import resolve_backend
from labrunner.pipeline.grade import gates_not_applied
from labrunner.pipeline.outputs import unwritable
from labrunner.report import terminal
from labrunner.report.annotations import github_annotations
from labrunner.report.gradebook import write_gradebook
from labrunner.report.junit import write_aggregate
from labrunner.report.records.batch_row import BatchRow
from labrunner.report.results import RunResult
from labrunner.run.untrusted_text import shown, shown_path
from labrunner.truth.cases import SEED_ENVIRONMENT_VARIABLE, environment_seed
from labrunner.truth.verdict import BATCH_EXIT_CODES, worst_exit_code

EXECUTORS = ("local", "slurm", "submitit-local")

RESERVED_NAMES = ("junit", "gradebook")  # the batch's own files in --out-dir


@dataclass
class BatchOptions:
    jobs: int | None = None
    executor: str = "local"
    out_dir: Path | None = None
    csv_path: Path | None = None
    junit_path: Path | None = None  # the aggregated JUnit, where --junit is given to a batch
    annotations: str | None = None
    partition: str | None = None
    gpus_per_job: int = 1
    time_limit_min: int = 60
    account: str | None = None


@dataclass(frozen=True)
class SubmissionTask:
    """One submission's grading, as a process runs it: picklable, so a Slurm job can carry it."""

    lab: str
    file: str  # as the user named it or the folder listed it (the reports show it escaped)
    options: tuple[str, ...]  # the grade command's options, as given
    json_path: str
    junit_path: str
    log_path: str | None
    cwd: str
    python: str = sys.executable
    environment: tuple[tuple[str, str], ...] = ()

    def argv(self) -> list[str]:
        # `--` before the file: a submission named `-x.cu` is a file, never an option
        return [
            self.python,
            "-m",
            "labrunner",
            "grade",
            "--json",
            self.json_path,
            "--junit",
            self.junit_path,
            *self.options,
            "--",
            self.lab,
            self.file,
        ]


@dataclass
class Outcome:
    task: SubmissionTask
    result: dict
    seconds: float
    exit_code: int = field(init=False)

    def __post_init__(self):
        self.exit_code = int(self.result.get("exit_code", ExitCode.ENVIRONMENT))


def seed_environment() -> dict[str, str]:
    """$ATTNLAB_SEED for a submission's own process, given only to it: the batch's driver took it out of
    its own environment as it started (the single-file command it runs does the same at once)."""
    seed = environment_seed()
    return {SEED_ENVIRONMENT_VARIABLE: seed} if seed else {}


@contextlib.contextmanager
def environment_for_submission(extra: dict[str, str]):
    """`extra` in this process's environment only while a cluster's jobs are submitted."""
    os.environ.update(extra)
    try:
        yield
    finally:
        for name in extra:
            os.environ.pop(name, None)


def grade_in_process(task: SubmissionTask) -> Outcome:
    """Grade one submission through the single-file command, in a process of its own.

    This is the function every executor runs, on this machine or on a cluster's node."""
    Path(task.json_path).unlink(missing_ok=True)  # a result left by an earlier batch must never stand in
    started = time.perf_counter()
    environment = {**os.environ, **seed_environment(), **dict(task.environment)}
    # stdout and stderr as one stream, in the order they were written: the log reads as a terminal would
    completed = subprocess.run(
        task.argv(),
        cwd=task.cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        stdin=subprocess.DEVNULL,
    )
    seconds = time.perf_counter() - started
    if task.log_path:
        Path(task.log_path).write_text(completed.stdout)
    try:
        result = json.loads(Path(task.json_path).read_text())
    except (OSError, ValueError):
        result = None
    if result is None or result.get("exit_code") != completed.returncode:
        why = ended_how(completed.returncode)
        last = (completed.stdout.strip().splitlines() or [""])[-1][:300]
        result = dead_result(task, f"the grading process {why} without a result" + (f": {shown(last)}" if last else ""))
        write_json_file(result, Path(task.json_path))
    return Outcome(task, result, seconds)


def ended_how(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited {returncode}"


def dead_result(task: SubmissionTask, reason: str) -> dict:
    """What a submission's result says when the job grading it died: the grader's fault, not the student's
    (environment-missing, exit 6), with nothing the dead process could have said, its version included."""
    result = RunResult("grade", task.lab, task.file, error=reason, error_code=ExitCode.ENVIRONMENT, grader_died=True)
    return result.to_json()


def write_json_file(data: dict, path: Path) -> None:
    try:
        path.write_text(json.dumps(data, indent=2) + "\n")
    except OSError:
        pass  # the gradebook still has the row; the folder itself is what failed


# --- which files ----------------------------------------------------------------------------


def expand_submissions(paths: tuple[Path, ...]) -> list[Path]:
    """Files as given, and each folder's .cu entries (sorted by name), in the order named."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():  # the folder as named; reading each entry walks its path as build/source.py says
            found = folder_entries(path)
            if not found:
                raise usage_error(
                    f"{shown_path(path)}: a folder with no .cu files; name the submissions or their folder"
                )
            files += found
        else:  # a file, or anything else: reading it says what it is
            files.append(path)
    return files


def folder_entries(folder: Path) -> list[Path]:
    """Every entry of `folder` named *.cu that is not itself a folder, without following links.

    A link, a FIFO or a device named `x.cu` is listed like a file: grading it gives that submission
    its usage error (build/source.py), so it has its row in the gradebook and is never graded as
    whatever it points at. Folders are not descended into. Names come as the OS gives them, a name
    that is not UTF-8 with surrogate escapes (`os.fsdecode`), and are only ever shown escaped."""
    try:
        with os.scandir(folder) as entries:
            found = [
                folder / entry.name
                for entry in entries
                if Path(entry.name).suffix == ".cu" and not entry.is_dir(follow_symlinks=False)
            ]
    except OSError as exc:
        raise usage_error(f"{shown_path(folder)}: cannot list it ({exc.strerror}); check its permissions") from None
    return sorted(found, key=lambda p: p.name)


# A report's file name keeps these characters of the submission's stem and writes `_` for any other:
# a name with a newline, an escape sequence, a `;` or bytes that are not UTF-8 becomes a name any
# shell, spreadsheet or file system takes as it is. A leading dot or dash would hide the file or
# read as an option, so it becomes `_` too.
_REPORT_NAME_KEEPS = re.compile(r"[^A-Za-z0-9_.-]")
REPORT_NAME_MAX = 100


def report_name(path: Path) -> str:
    """The stem of `path` as a safe file name (before it is made unique)."""
    stem = _REPORT_NAME_KEEPS.sub("_", path.stem)[:REPORT_NAME_MAX]
    return re.sub(r"^[.-]", "_", stem) or "submission"


def report_names(files: list[Path]) -> list[str]:
    """A report name per submission: its safe stem, made unique (a.cu twice becomes a, a-2; unique without
    regard to case, for file systems that ignore it) and never the batch's own."""
    used = {name.lower() for name in RESERVED_NAMES}
    names = []
    for path in files:
        stem = report_name(path)
        name, n = stem, 1
        while name.lower() in used:
            n += 1
            name = f"{stem}-{n}"
        used.add(name.lower())
        names.append(name)
    return names


# --- the executors ----------------------------------------------------------------------------


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


def submitit_executor(options: BatchOptions, folder: Path, count: int):
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
            f"--executor slurm: {exc} (submitit found no Slurm here); submit from a Slurm "
            "login node, or grade on this machine with --executor local"
        ) from None
    executor.update_parameters(**slurm_parameters(options, count))
    return executor


def slurm_parameters(options: BatchOptions, count: int) -> dict:
    """submitit's SlurmExecutor parameters for one array task per submission."""
    parameters = {
        "time": options.time_limit_min,
        "gpus_per_node": options.gpus_per_job,
        "ntasks_per_node": 1,
        "array_parallelism": options.jobs or count,
        "job_name": "attnlab-grade",
    }
    if options.partition:
        parameters["partition"] = options.partition
    if options.account:
        parameters["account"] = options.account
    return parameters


def run_submitit(
    tasks: list[SubmissionTask],
    executor,
    finished: Callable[[Outcome], None],
    job: Callable[[SubmissionTask], Outcome] = grade_in_process,
    poll_s: float = 0.5,
) -> list[Outcome]:
    """One job array (`map_array`); each task's result is gathered as it ends. A task that died (killed,
    out of time, node lost) gives its submission `environment-missing` with submitit's reason."""
    with environment_for_submission(seed_environment()):  # sbatch passes the submitting environment on
        handles = executor.map_array(job, tasks)
    outcomes: dict[int, Outcome] = {}
    while len(outcomes) < len(handles):
        for i, handle in enumerate(handles):
            if i in outcomes or not handle.done():
                continue
            try:
                outcome = handle.result()
            except Exception as exc:
                reason = " ".join(str(exc).split())[:400] or type(exc).__name__
                outcome = Outcome(
                    tasks[i], dead_result(tasks[i], f"the grading job {handle.job_id} died: {reason}"), 0.0
                )
                write_json_file(outcome.result, Path(tasks[i].json_path))
            outcomes[i] = outcome
            finished(outcome)
        if len(outcomes) < len(handles):
            time.sleep(poll_s)
    return [outcomes[i] for i in range(len(tasks))]


# --- the command ------------------------------------------------------------------------------


def worst_code(codes: list[int]) -> ExitCode:
    """The batch's exit code: the worst of its submissions' (truth/verdict.py's WORST_FIRST)."""
    return worst_exit_code(codes)


def code_counts(codes: list[int]) -> list[tuple[int, str, int]]:
    return [
        (int(code), BATCH_EXIT_CODES[code], codes.count(int(code))) for code in sorted(ExitCode) if int(code) in codes
    ]


def grade_batch(
    lab: str,
    paths: tuple[Path, ...],
    device: str,
    options: tuple[str, ...],
    batch: BatchOptions,
    job: Callable[[SubmissionTask], Outcome] = grade_in_process,
    executor=None,
) -> int:
    """Grade every submission, write the reports, print the gradebook; returns the batch's exit code.

    `job` and `executor` are for tests: a job that dies, submitit's local executor injected."""
    get_lab(lab)  # an unknown lab is one usage error, not one per submission
    files = expand_submissions(paths)
    prepare_outputs(batch)
    backend, gpus = "gpu", []
    if batch.executor == "local":
        backend, notes = resolve_backend(device)
        if "--gates" in options and backend != "gpu":
            notes.append(gates_not_applied(options[options.index("--gates") + 1], backend))
        for words in notes:
            terminal.note(words)
        gpus = visible_gpus() if backend == "gpu" else []
    jobs = batch.jobs or default_jobs(backend)
    with tempfile.TemporaryDirectory(prefix="attnlab-batch-") as scratch:
        reports = Path(batch.out_dir or scratch).resolve()
        tasks = [
            SubmissionTask(
                lab,
                str(path),
                options,
                str(reports / f"{name}.json"),
                str(reports / f"{name}.xml"),
                str(reports / f"{name}.log") if batch.out_dir else None,
                str(Path.cwd()),
            )
            for path, name in zip(files, report_names(files))
        ]
        with terminal.batch_progress(len(tasks)) as progress:

            def finished(outcome: Outcome) -> None:
                progress(f"{shown_path(outcome.task.file)}: {outcome.result.get('verdict')} (exit {outcome.exit_code})")

            if batch.executor == "local":
                outcomes = run_local(tasks, jobs, gpus, finished, job)
            else:
                folder = (batch.out_dir.resolve() / "submitit") if batch.out_dir else Path(scratch) / "submitit"
                chosen = executor or submitit_executor(batch, folder, len(tasks))
                outcomes = run_submitit(tasks, chosen, finished, job)
        return report(lab, outcomes, batch)


def prepare_outputs(batch: BatchOptions) -> None:
    """--out-dir is created if missing; every report path is checked before any grading, so none is lost."""
    if batch.out_dir:
        try:
            batch.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise usage_error(f"--out-dir {batch.out_dir}: cannot create it ({exc.strerror})") from None
        if not os.access(batch.out_dir, os.W_OK):
            raise usage_error(f"--out-dir {batch.out_dir}: cannot write there (Permission denied)")
    for option, path in (("--csv", batch.csv_path), ("--junit", batch.junit_path)):
        problem = path and unwritable(path)
        if problem:
            raise usage_error(f"{option} {path}: cannot write ({problem})")


def report(lab: str, outcomes: list[Outcome], batch: BatchOptions) -> int:
    rows = [BatchRow.from_json(o.result, o.seconds) for o in outcomes]
    codes = [o.exit_code for o in outcomes]
    worst = worst_code(codes)
    if batch.annotations == "github":
        terminal.plain_lines([line for o in outcomes for line in github_annotations(o.result)])
    terminal.batch_report(lab, rows, code_counts(codes), int(worst))
    results = [o.result for o in outcomes]
    written = []
    csv_paths = [p for p in (batch.csv_path, batch.out_dir / "gradebook.csv" if batch.out_dir else None) if p]
    junit_paths = [p for p in (batch.junit_path, batch.out_dir / "junit.xml" if batch.out_dir else None) if p]
    try:
        for path in csv_paths:
            write_gradebook([r.to_json() for r in rows], path)
            written.append(str(path))
        for path in junit_paths:
            write_aggregate(results, path, f"attnlab {lab}")
            written.append(str(path))
    except OSError as exc:
        raise AttnlabError(f"{exc.filename}: cannot write ({exc.strerror})", ExitCode.USAGE) from None
    if batch.out_dir:
        terminal.note(f"wrote one JSON, JUnit and log per submission to {batch.out_dir}")
    if written:
        terminal.note("wrote " + ", ".join(written))
    return int(worst)
