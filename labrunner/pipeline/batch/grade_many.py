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

from labrunner.compile.backend import Backend
from labrunner.exit_codes import AttnlabError, ExitCode, usage_error
from labrunner.labs import get_lab
from labrunner.pipeline.backend import resolve_backend
from labrunner.pipeline.batch.course import CourseEntry, Graded, ReportNames, course_entries, course_order
from labrunner.pipeline.batch.files import CU_ONLY, WITH_TRITON, expand_submissions, report_names
from labrunner.pipeline.batch.gpu_pool import BatchGpu, GpuPool, batch_gpus, chosen_gpus, visible_gpus
from labrunner.pipeline.batch.grading import Executing, Grading
from labrunner.pipeline.batch.local_executor import batch_jobs, run_local
from labrunner.pipeline.batch.reuse import ReuseRecord, grading_machine, seed_hash
from labrunner.pipeline.batch.roster import read_roster
from labrunner.pipeline.batch.settings import BatchOptions
from labrunner.pipeline.batch.slurm import run_submitit, submitit_executor
from labrunner.pipeline.batch.stop import BatchStop, stopped_by_signals
from labrunner.pipeline.batch.students import group_students, refused, with_students
from labrunner.pipeline.batch.submission import Outcome, SubmissionTask
from labrunner.pipeline.grade import gates_not_applied
from labrunner.pipeline.outputs import unwritable
from labrunner.report.annotations import github_batch_annotations
from labrunner.report.batch_row import batch_rows
from labrunner.report.gradebook import write_gradebook
from labrunner.report.gradescope import write_gradescope
from labrunner.report.html_report import write_html_report
from labrunner.report.junit import write_aggregate
from labrunner.report.lms_gradebook import write_lms_gradebook
from labrunner.report.reporter import Reporter
from labrunner.run.untrusted_text import shown, shown_path
from labrunner.truth.cases import resolve_seed
from labrunner.truth.verdict import BATCH_EXIT_CODES, worst_exit_code


def worst_code(codes: list[int]) -> ExitCode:
    """The batch's exit code: the worst of its submissions' (truth/verdict.py's WORST_FIRST)."""
    return worst_exit_code(codes)


def code_counts(codes: list[int]) -> list[tuple[int, str, int]]:
    return [
        (int(code), BATCH_EXIT_CODES[code], codes.count(int(code))) for code in sorted(ExitCode) if int(code) in codes
    ]


def grade_batch(
    lab: str, paths: tuple[Path, ...], options: tuple[str, ...], batch: BatchOptions, executing: Executing
) -> int:
    """Grade every submission (`options`: grade's own, passed on to each), write the reports, show the
    gradebook; returns the batch's exit code."""
    device, reporter = batch.device, executing.reporter
    definition = get_lab(lab)  # an unknown lab is one usage error, not one per submission
    found, not_graded = expand_submissions(paths, WITH_TRITON if definition.triton_blocks else CU_ONLY)
    found = with_students(found, paths)
    students = group_students(found, paths)
    roster = read_roster(batch.roster_path) if batch.roster_path else None
    if batch.gradescope_path and len(found) > 1:
        raise usage_error(
            f"--gradescope {batch.gradescope_path}: Gradescope's results.json is one student's, and this batch "
            f"has {len(found)} files; grade each submission on its own (as Gradescope's autograder does)"
        )
    if "--seed" not in options:  # a seed the grade would refuse is refused once, before all
        resolve_seed(None, "--public-seed" in options)
    prepare_outputs(batch)
    for skipped in not_graded:
        reporter.note(f"not graded: {shown_path(skipped.path)}: {skipped.reason}")
    backend, gpus = (Backend.GPU if device == Backend.GPU else device), list[BatchGpu]()
    if batch.executor == "local":
        backend, notes = resolve_backend(device)
        if "--gates" in options and backend != Backend.GPU:
            notes.append(gates_not_applied(options[options.index("--gates") + 1], backend))
        reporter.notes(notes)
        if batch.gpus is not None and backend != Backend.GPU:
            raise usage_error(
                f"--gpus {','.join(batch.gpus)}: this batch grades on the {backend} backend, and --gpus chooses "
                "the GPUs of a batch on the GPU; leave it out, or grade with --device gpu"
            )
        if backend == Backend.GPU:
            visible = visible_gpus()
            asked = chosen_gpus(batch.gpus, visible)
            gpus = batch_gpus(asked, visible, measured=batch.jobs == "auto" or len(asked) > 1)
    elif batch.gpus is not None:
        raise usage_error(
            f"--gpus {','.join(batch.gpus)}: chooses this machine's GPUs for a local batch; a cluster's tasks "
            "ask for theirs with --gpus-per-job or --gres"
        )
    jobs = batch_jobs(batch.jobs, backend, gpus)
    stop = BatchStop(batch.batch_timeout_s)
    with tempfile.TemporaryDirectory(prefix="attnlab-batch-") as scratch, stopped_by_signals(stop):
        reports = Path(batch.out_dir or scratch).resolve()
        # a report name per student, unique, carrying the student however the files were listed
        names = dict(zip((s.name for s in students), report_names([s.files[0] for s in students])))
        graded_students = [s for s in students if not s.several]
        tasks = [
            SubmissionTask(
                lab,
                str(student.files[0].path),
                options,
                str(reports / f"{names[student.name]}.json"),
                str(reports / f"{names[student.name]}.xml"),
                str(reports / f"{names[student.name]}.log") if batch.out_dir else None,
                str(Path.cwd()),
            )
            for student in graded_students
        ]
        # what a folder held that the grade will refuse is the student's fault: read here as the grade reads it
        students_fault = {s.name for s in graded_students if s.listed and refused(s.files[0].path)}
        record = ReuseRecord(reports)
        seed = seed_hash(record.salt)
        machine = grading_machine(backend, None if batch.executor == "local" else cluster_request(batch))
        reused: dict[int, Outcome] = {}
        if batch.out_dir and not batch.regrade:
            for i, task in enumerate(tasks):
                result = record.reusable(task, machine, seed)
                if result is not None:
                    reused[i] = Outcome(task, result, float(result.get("seconds") or 0.0))
        if reused:
            reporter.note(
                f"reused {len(reused)} of {len(tasks)} reports: the same bytes, lab, options, seed and attnlab "
                "version as when they were graded (--regrade grades them again)"
            )
        to_grade = [task for i, task in enumerate(tasks) if i not in reused]
        with reporter.submissions(len(to_grade)) as progress:

            def finished(outcome: Outcome) -> None:
                progress(f"{shown_path(outcome.task.file)}: {outcome.result.get('verdict')} (exit {outcome.exit_code})")

            grading = Grading(finished, executing.job, stop, reporter)
            if not to_grade:
                graded: list[Outcome] = []
            elif batch.executor == "local":
                graded = run_local(to_grade, jobs, GpuPool(gpus) if gpus else None, grading)
            else:
                folder = (batch.out_dir.resolve() / "submitit") if batch.out_dir else Path(scratch) / "submitit"
                chosen = executing.executor or submitit_executor(batch, folder, len(to_grade))
                graded = run_submitit(to_grade, chosen, grading)
        fresh = iter(graded)
        outcomes = [reused[i] if i in reused else next(fresh) for i in range(len(tasks))]
        stopped = stop.is_set()  # once: a deadline passing while the reports are written stops nothing
        if batch.out_dir:
            record.remember(graded, machine, seed)
        if stopped:
            reporter.error(f"{stop.reason.removeprefix('not graded: ')}: the reports of what finished are written")
        by_student = dict(zip((s.name for s in graded_students), outcomes))
        graded_ones = Graded(students, by_student, students_fault, backend)
        entries = course_entries(lab, graded_ones, roster, batch, ReportNames(reports, names))
        for entry in entries:  # every report names its student, id and score, as the gradebook does
            entry.write_reports()
        code = report(lab, course_order(entries, roster), outcomes, batch, reporter)
        return int(stop.exit_code) if stopped else code


def cluster_request(batch: BatchOptions) -> str:
    """A cluster's request as the verdicts may depend on it: which nodes, and what GPU, the tasks asked for."""
    return " ".join(
        f"{name}={value}"
        for name, value in (
            ("device", batch.device),
            ("partition", batch.partition),
            ("gres", batch.gres),
            ("constraint", batch.constraint),
            ("gpus", batch.gpus_per_job),
        )
        if value is not None
    )


def prepare_outputs(batch: BatchOptions) -> None:
    """--out-dir is created if missing; every report path is checked before any grading, so none is lost."""
    if batch.out_dir:
        try:
            batch.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise usage_error(f"--out-dir {batch.out_dir}: cannot create it ({exc.strerror})") from None
        if not os.access(batch.out_dir, os.W_OK):
            raise usage_error(f"--out-dir {batch.out_dir}: cannot write there (Permission denied)")
    for option, path in (
        ("--csv", batch.csv_path),
        ("--junit", batch.junit_path),
        ("--html", batch.html_path),
        ("--gradescope", batch.gradescope_path),
        ("--lms-csv", batch.lms_csv_path),
    ):
        problem = path and unwritable(path)
        if problem:
            raise usage_error(f"{option} {path}: cannot write ({problem})")


def ranked_code(entry: CourseEntry) -> int:
    """A row's exit code as the batch ranks it: a file the folder held that cannot be graded, or several
    files for one student, is the student's fault (ranked as a compile error, 3), never a wrong command."""
    code = int(entry.result.get("exit_code", ExitCode.ENVIRONMENT))
    return int(ExitCode.COMPILE_ERROR) if code == ExitCode.USAGE and entry.students_fault else code


def report(
    lab: str, entries: list[CourseEntry], outcomes: list[Outcome], batch: BatchOptions, reporter: Reporter
) -> int:
    """Every output of the batch, one row per student (in the roster's order where there is one), and the
    batch's exit code: the worst of its submissions' as `ranked_code` ranks them."""
    submitted = [e for e in entries if e.submitted]
    rows = batch_rows([(e.result, e.seconds) for e in entries])
    course = [e.course for e in entries]
    results = [e.result for e in entries]
    worst = worst_code([ranked_code(e) for e in submitted])
    codes = [int(e.result.get("exit_code", ExitCode.ENVIRONMENT)) for e in submitted]
    if batch.annotations == "github":
        reporter.lines(github_batch_annotations([e.result for e in submitted]))
    reporter.batch(lab, rows, code_counts(codes), int(worst), course)
    missing = [e.student for e in entries if not e.submitted]
    if missing:
        reporter.note(
            f"no submission from {len(missing)} rostered student{'s' if len(missing) != 1 else ''}: "
            + ", ".join(shown(m) for m in missing)
            + " (each a row scored 0; no exit code changes)"
        )
    if any(ranked_code(e) != e.result.get("exit_code") for e in submitted):
        reporter.note(
            "a file the folders held that cannot be graded, and a student with several files, are the students' "
            "own: ranked as a compile error (3) in the batch's exit code, never as a wrong command (2)"
        )
    gradebook = [{**row.to_json(), **entry.cells()} for row, entry in zip(rows, course)]
    written = []
    csv_paths = [p for p in (batch.csv_path, batch.out_dir / "gradebook.csv" if batch.out_dir else None) if p]
    junit_paths = [p for p in (batch.junit_path, batch.out_dir / "junit.xml" if batch.out_dir else None) if p]
    try:
        for path in csv_paths:
            write_gradebook(gradebook, path)
            written.append(str(path))
        for path in junit_paths:
            write_aggregate(results, path, f"attnlab {lab}")
            written.append(str(path))
        if batch.html_path:
            write_html_report(lab, gradebook, results, batch.html_path, batch.similar_above)
            written.append(str(batch.html_path))
        if batch.lms_csv_path:
            write_lms_gradebook(batch.lms, course, batch.assignment or lab, batch.lms_csv_path)
            written.append(str(batch.lms_csv_path))
        if batch.gradescope_path and outcomes:  # a batch of one file (more is refused): reused or interrupted
            write_gradescope(outcomes[0].result, batch.gradescope_path)
            written.append(str(batch.gradescope_path))
    except OSError as exc:
        raise AttnlabError(f"{exc.filename}: cannot write ({exc.strerror})", ExitCode.USAGE) from None
    if batch.out_dir:
        reporter.note(f"wrote one JSON, JUnit and log per submission to {batch.out_dir}")
    if written:
        reporter.note("wrote " + ", ".join(written))
    return int(worst)
