"""A batch: many submissions graded as one command, on this machine or on a Slurm cluster.

Each submission is graded by the single-file path itself (`attnlab grade LAB FILE --json ...`)
in a process of its own, so a batch gives every file exactly the verdict it gets graded alone, a
grader that dies costs one submission its verdict and nothing more, and the results come back as
the JSON files that process wrote (never its stdout, which a kernel's printf can fill).

Where those processes run is the executor's business, and only that: `local` (local_executor.py)
or a Slurm job array (`slurm`, and `submitit-local` to test that path; slurm.py). A submission's own
process is submission.py; which files, and their report names, batch_files.py.

However they run, several jobs may share a GPU: their correctness cases overlap, their timing never
does (`measure/gpu_lock.py`). The gradebook, the per-submission reports and the aggregated JUnit
are built here, from the JSON results, and the command exits with the worst submission's code.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from labrunner.exit_codes import AttnlabError, ExitCode, usage_error
from labrunner.labs import get_lab
from labrunner.pipeline.backend import resolve_backend
from labrunner.pipeline.batch_files import expand_submissions, report_names
from labrunner.pipeline.batch_options import BatchOptions
from labrunner.pipeline.grade import gates_not_applied
from labrunner.pipeline.local_executor import default_jobs, run_local, visible_gpus
from labrunner.pipeline.outputs import unwritable
from labrunner.pipeline.slurm import run_submitit, submitit_executor
from labrunner.pipeline.submission import Outcome, SubmissionTask, grade_in_process
from labrunner.report import terminal
from labrunner.report.annotations import github_batch_annotations
from labrunner.report.gradebook import write_gradebook
from labrunner.report.html_report import write_html_report
from labrunner.report.junit import write_aggregate
from labrunner.report.records.batch_row import BatchRow
from labrunner.run.untrusted_text import shown_path
from labrunner.truth.verdict import BATCH_EXIT_CODES, worst_exit_code


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
    for option, path in (("--csv", batch.csv_path), ("--junit", batch.junit_path), ("--html", batch.html_path)):
        problem = path and unwritable(path)
        if problem:
            raise usage_error(f"{option} {path}: cannot write ({problem})")


def report(lab: str, outcomes: list[Outcome], batch: BatchOptions) -> int:
    rows = [BatchRow.from_json(o.result, o.seconds) for o in outcomes]
    codes = [o.exit_code for o in outcomes]
    worst = worst_code(codes)
    if batch.annotations == "github":
        terminal.plain_lines(github_batch_annotations([o.result for o in outcomes]))
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
        if batch.html_path:
            write_html_report(lab, [r.to_json() for r in rows], results, batch.html_path)
            written.append(str(batch.html_path))
    except OSError as exc:
        raise AttnlabError(f"{exc.filename}: cannot write ({exc.strerror})", ExitCode.USAGE) from None
    if batch.out_dir:
        terminal.note(f"wrote one JSON, JUnit and log per submission to {batch.out_dir}")
    if written:
        terminal.note("wrote " + ", ".join(written))
    return int(worst)
