"""Every option of the command line, declared once: its flag, type and help here, its default read
from the request field it fills (`labrunner/pipeline/requests.py`), so a default is written once.

A command takes its options as `**options` and builds its request with `Request.from_options`:
an option added here reaches the pipeline without being spelled again.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from labrunner.pipeline.batch.settings import BatchOptions
from labrunner.pipeline.requests import CalibrateRequest, GradeRequest, ProfileRequest, default

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

FILE_PATH = click.Path(dir_okay=False, path_type=Path)


def stacked(*decorators: Decorator) -> Decorator:
    """Several options as one decorator, in the order `--help` lists them."""
    return lambda command: functools.reduce(lambda c, d: d(c), reversed(decorators), command)


def device_option(help: str) -> Decorator:
    return click.option(
        "--device",
        "device",
        type=click.Choice(["gpu", "cpu", "auto"]),
        default=default(GradeRequest, "device"),
        show_default=True,
        help=help,
    )


def arch_option(help: str) -> Decorator:
    return click.option("--arch", default=default(GradeRequest, "arch"), show_default=True, help=help)


# --compile-timeout and --require-box: every command that compiles a file takes both.
compile_options = stacked(
    click.option(
        "--compile-timeout",
        "compile_timeout_s",
        type=click.FloatRange(min=0.5),
        default=None,
        help="Seconds the compiler may take on the file (NVRTC: 20 s of wall clock by default; each step "
        "of a Triton file's compile: 120 CPU seconds); past it the verdict is compile-error.",
    ),
    click.option(
        "--require-box",
        is_flag=True,
        help="Refuse to start any compiler or worker outside the box (bubblewrap), on the GPU "
        "too, where it otherwise runs unboxed with a note (exit 6).",
    ),
)

# context.meta's key for --timings (`cli/guard.py:show_timings`).
SHOW_TIMINGS = "attnlab.timings"

report_options = stacked(
    click.option(
        "--json",
        "json_path",
        type=FILE_PATH,
        help="Also write the result as JSON (schema attnlab.result/1) to this file.",
    ),
    click.option(
        "--junit",
        "junit_path",
        type=FILE_PATH,
        help="Also write the cases as a JUnit XML report (one test case per case).",
    ),
    click.option(
        "--timings",
        is_flag=True,
        expose_value=False,  # read by the guard, which prints the table last, not by each command
        callback=lambda context, parameter, value: context.meta.__setitem__(SHOW_TIMINGS, value),
        help="Print where the command's time went, phase by phase (imports, box start, compiles, golden "
        "proof, each case, timing, reports); the JSON carries it as `timings` either way.",
    ),
)

seed_option = click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed for every case's inputs (default: $ATTNLAB_SEED, any text, else the public default).",
)
public_seed_option = click.option(
    "--public-seed",
    is_flag=True,
    help="With CI=true and no $ATTNLAB_SEED, grade with the public seed on purpose (else a usage error).",
)

# grade, bench and calibrate: where and how the kernels run.
run_options = stacked(
    device_option(
        "Backend: gpu (CuPy), cpu (the same .cu on the CPU, correctness only), or auto "
        "(the GPU where there is one, else the CPU). bench and calibrate time, so they need a GPU (exit 6 without one)."
    ),
    click.option(
        "--unsafe-cpu",
        "unsafe_cpu",
        is_flag=True,
        help="CPU backend: run the file without the worker's seccomp filter, where this machine "
        "has none (a student grading their own file; never for files you did not write).",
    ),
    seed_option,
    public_seed_option,
    click.option(
        "--timeout",
        "timeout_s",
        type=click.FloatRange(min=0.1),
        default=None,
        help="Seconds one case may take before its kernel is stopped (default: 20 on the GPU; on the CPU, 20 "
        "times what the shipped solution needs for the case on this machine, plus 3).",
    ),
    arch_option("GPU architecture for the compile gate."),
    compile_options,
    click.option(
        "--budget",
        "budget_s",
        type=click.FloatRange(min=0.05),
        default=default(GradeRequest, "budget_s"),
        show_default=True,
        help="Seconds of sampling per timed kernel.",
    ),
    click.option(
        "--noise",
        "noise_target",
        type=click.FloatRange(min=1e-5, max=0.5),
        default=default(GradeRequest, "noise_target"),
        show_default=True,
        help="Stop sampling once the relative standard error is below this.",
    ),
    click.option(
        "--rounds",
        type=click.IntRange(min=1, max=20),
        default=default(GradeRequest, "rounds"),
        show_default=True,
        help="Lab 2: time the comparison this many times, each in a fresh worker process on fresh "
        "buffers, and pool them; SPEEDUP's interval then includes the spread between rounds.",
    ),
    report_options,
)


if TYPE_CHECKING:
    # click's ParamType is generic in the value it converts to from click 8.4 on; at run time the base is
    # the plain class, which every click from 8.1 (the oldest taken) has.
    JobsBase = click.ParamType[int | str]
    GpusBase = click.ParamType[tuple[str, ...]]
else:
    JobsBase = GpusBase = click.ParamType


class JobsType(JobsBase):
    """--jobs: a whole number of at least 1, or auto."""

    name = "N|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int):
            return value
        if value == "auto":
            return "auto"
        try:
            number = int(value)
        except (TypeError, ValueError):
            number = 0
        if number < 1:
            self.fail(f"{value!r} is neither a whole number of at least 1 nor auto", param, ctx)
        return number


class GpusType(GpusBase):
    """--gpus: GPU names separated by commas (indices or UUIDs, as CUDA_VISIBLE_DEVICES takes them), each once."""

    name = "LIST"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, ...]:
        if isinstance(value, tuple):
            return value
        names = [name.strip() for name in str(value).split(",")]
        if not all(re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z/-]*", name) for name in names):
            self.fail(f"{value!r} is not a list of GPUs such as 0,2 (indices or UUIDs, by commas)", param, ctx)
        if len(set(names)) != len(names):
            self.fail(f"{value!r} names a GPU twice", param, ctx)
        return tuple(names)


# grade's options for many submissions (see pipeline/batch/grade_many.py).
batch_options = stacked(
    click.option(
        "--jobs",
        type=JobsType(),
        default=default(BatchOptions, "jobs"),
        help="Submissions graded at once, a number or auto (default: one per GPU; on the CPU backend, one "
        "per core). auto: on a GPU as many per GPU as its free memory holds (8 GiB each) and half the cores "
        "keep busy (their cases share the GPU, their timing takes turns); on the CPU one per core; on Slurm "
        "as many as the scheduler runs.",
    ),
    click.option(
        "--gpus",
        type=GpusType(),
        default=None,
        help="The GPUs a local batch grades on, such as 0,2 (as CUDA_VISIBLE_DEVICES names them; default: "
        "every visible GPU). Each grading process gets one, spread by free memory; a GPU that fails a health "
        "check after a crash is taken out and that submission graded again on another.",
    ),
    click.option(
        "--executor",
        type=click.Choice(["local", "slurm", "submitit-local"]),
        default=default(BatchOptions, "executor"),
        show_default=True,
        help="Where the submissions run: this machine, a Slurm job array "
        "(submitit; pip install 'attnlab[cluster]'), or submitit's local executor.",
    ),
    click.option(
        "--out-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Folder (created if missing) for one JSON, JUnit and log per submission, the aggregated "
        "junit.xml and gradebook.csv.",
    ),
    click.option(
        "--csv",
        "csv_path",
        type=FILE_PATH,
        default=None,
        help="Write the gradebook (a row per submission) to this CSV file.",
    ),
    click.option(
        "--annotations",
        type=click.Choice(["github"]),
        default=None,
        help="Also print GitHub Actions ::error annotations for compile errors and failing cases.",
    ),
    click.option(
        "--regrade",
        is_flag=True,
        help="Grade every file again, even where --out-dir holds a report of the same bytes, lab, options "
        "and attnlab version (by default such a report is reused).",
    ),
    click.option(
        "--batch-timeout",
        "batch_timeout_s",
        type=click.FloatRange(min=1),
        default=None,
        help="Seconds the whole batch may take; past them, what has not finished is stopped and reported "
        "interrupted, and the reports of what finished are written.",
    ),
    click.option(
        "--gradescope",
        "gradescope_path",
        type=FILE_PATH,
        default=None,
        help="Also write Gradescope's autograder results.json (one submission: the batch's single file, or the one "
        "kernel file of a Gradescope submission folder; a fault of the grader writes none).",
    ),
    click.option(
        "--html",
        "html_path",
        type=FILE_PATH,
        default=None,
        help="Also write the course report: one self-contained HTML page (the gradebook, sortable; each "
        "submission's cases; the distribution of SPEEDUP or of the copy fraction; a roofline of profiled kernels).",
    ),
    click.option(
        "--roster",
        "roster_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="The course's roster, a CSV file with the columns student_id and student (the student's folder "
        "or file name; name and section may follow): ids in every output, rows in its order, and a row "
        "'no submission' (score 0) for each student without a file.",
    ),
    click.option(
        "--lms-csv",
        "lms_csv_path",
        type=FILE_PATH,
        default=None,
        help="Also write the gradebook as a learning-management system imports it (--lms; the column named "
        "by --assignment); a grade the grader could not finish is an empty cell, never 0.",
    ),
    click.option(
        "--lms",
        type=click.Choice(["canvas", "moodle"]),
        default=default(BatchOptions, "lms"),
        show_default=True,
        help="The layout of --lms-csv: Canvas's gradebook import or Moodle's grade import.",
    ),
    click.option(
        "--assignment",
        default=None,
        help="The assignment's column in --lms-csv (default: the lab's name).",
    ),
    click.option(
        "--similar-above",
        type=click.FloatRange(min=0.0, max=1.0),
        default=default(BatchOptions, "similar_above"),
        show_default=True,
        help="List two submissions as similar (for a person to judge; never a verdict or points) when they "
        "share at least this fraction of their own code, the starter taken out (1.0: identical).",
    ),
    click.option("--partition", default=None, help="Slurm: the partition to submit to."),
    click.option(
        "--gpus-per-job",
        type=click.IntRange(min=0),
        default=None,
        help="Slurm: GPUs each array task asks for (default: 1 with --device gpu, none otherwise).",
    ),
    click.option("--gres", default=None, help="Slurm: a typed GPU request, such as gpu:h100:1 (with --device gpu)."),
    click.option("--mem", default=None, help="Slurm: memory per array task, as sbatch takes it (such as 8G)."),
    click.option("--cpus-per-task", type=click.IntRange(min=1), default=None, help="Slurm: CPUs per array task."),
    click.option("--qos", default=None, help="Slurm: the quality of service to submit under."),
    click.option("--constraint", default=None, help="Slurm: node features the tasks need (sbatch --constraint)."),
    click.option(
        "--sbatch-arg",
        "sbatch_args",
        multiple=True,
        help="Slurm: any other sbatch option, passed as given (repeatable), such as --sbatch-arg=--reservation=exam.",
    ),
    click.option(
        "--time-limit",
        "time_limit_min",
        type=click.IntRange(min=1),
        default=default(BatchOptions, "time_limit_min"),
        show_default=True,
        help="Slurm: minutes each array task may run.",
    ),
    click.option("--account", default=None, help="Slurm: the account to charge."),
)

# The batch options a single submission's own process never sees.
BATCH_ONLY = (
    "jobs",
    "gpus",
    "executor",
    "out_dir",
    "csv_path",
    "regrade",
    "batch_timeout_s",
    "html_path",
    "roster_path",
    "lms_csv_path",
    "lms",
    "assignment",
    "similar_above",
    "partition",
    "gpus_per_job",
    "gres",
    "mem",
    "cpus_per_task",
    "qos",
    "constraint",
    "sbatch_args",
    "time_limit_min",
    "account",
)

grade_options = stacked(
    click.option(
        "-v",
        "--verbose",
        is_flag=True,
        help="Every failing case's message in full (on a terminal under 100 columns, and in a log, the "
        "failing cases after the first two are folded to one line each).",
    ),
    click.option("--full", is_flag=True, help="CPU backend: also run the cases outside its time budget."),
    click.option(
        "--race-check",
        is_flag=True,
        help="CPU: run every case again under other thread orders (reversed, seeded random); different "
        "outputs mean a missing __syncthreads(). GPU: the small cases under compute-sanitizer's "
        "racecheck and synccheck.",
    ),
    click.option("--case", "only", multiple=True, help="Run only this case (repeatable)."),
    click.option(
        "--diagnose/--no-diagnose",
        default=default(GradeRequest, "diagnose"),
        show_default=True,
        help="GPU: after a crash, replay that case under compute-sanitizer (where installed) to name the line.",
    ),
    click.option(
        "--gates",
        "gates_path",
        type=FILE_PATH,
        default=None,
        help="Speed gates file written by `attnlab calibrate` (applied when this GPU's name is in it).",
    ),
    click.option("--no-timing", is_flag=True, help="Check correctness only."),
    click.option(
        "--profile",
        "with_profile",
        is_flag=True,
        help="GPU: after a correct run, Nsight Compute's Range pass in one line (slow; see `attnlab profile`).",
    ),
)

bench_options = stacked(
    click.option("--chunk", type=click.IntRange(min=1), default=None, help="lab2: rows in the chunk (default 2048)."),
    click.option(
        "--prefix", type=click.IntRange(min=0), default=None, help="lab2: cached prefix length (default 2048)."
    ),
    click.option(
        "--vs",
        "versus",
        default=default(CalibrateRequest, "versus"),
        show_default=True,
        help="lab2 baseline: starter, solution, expert, sdpa (PyTorch's fused attention), or a .cu file; "
        "lab1: torch (eager PyTorch, interleaved with the whole call). PyTorch peers: pip install "
        "'attnlab[peers]'.",
    ),
    click.option(
        "--profile",
        "with_profile",
        is_flag=True,
        help="After timing, Nsight Compute's Range pass in one line (slow; see `attnlab profile`).",
    ),
)

calibrate_options = stacked(
    click.option(
        "-o",
        "--output",
        type=FILE_PATH,
        default=default(CalibrateRequest, "output"),
        show_default=True,
        help="Gates file to create or update (one entry per GPU model).",
    ),
    click.option(
        "--fraction",
        type=click.FloatRange(min=0.0, max=1.0, min_open=True),
        default=default(CalibrateRequest, "fraction"),
        show_default=True,
        help="Fraction of the solution's SPEEDUP a student needs to pass the gate.",
    ),
)

profile_options = stacked(
    device_option(
        "Backend: profile looks at kernels on a GPU (auto: the GPU where there is one); without one it exits 6."
    ),
    click.option(
        "--calls",
        type=click.IntRange(min=1, max=100),
        default=default(ProfileRequest, "calls"),
        show_default=True,
        help="Calls traced at each timing shape.",
    ),
    click.option(
        "--trace",
        "trace_path",
        type=FILE_PATH,
        default=None,
        help="Write the trace as Chrome trace-event JSON, which Perfetto's UI (ui.perfetto.dev) opens.",
    ),
    click.option(
        "--plot",
        "plot_path",
        type=FILE_PATH,
        default=None,
        help="Draw the roofline (both ceilings, the ridge, every kernel) to this PNG (needs matplotlib).",
    ),
    click.option(
        "--ncu-csv",
        "ncu_csv_path",
        type=FILE_PATH,
        default=None,
        help="Also save Nsight Compute's raw CSV of the Range pass to this file.",
    ),
    click.option(
        "--range/--no-range",
        "range_pass",
        default=default(ProfileRequest, "range_pass"),
        show_default=True,
        help="Run the Range pass (Nsight Compute's counters; slow, and needs permission to read them).",
    ),
    click.option(
        "--cupti/--no-cupti",
        default=default(ProfileRequest, "cupti"),
        show_default=True,
        help="Trace with CUPTI's activity records where cupti-python is installed; else CUDA events.",
    ),
    click.option(
        "--seed",
        type=int,
        default=None,
        help="Seed for the inputs (default: $ATTNLAB_SEED, else the public default).",
    ),
    public_seed_option,
    click.option(
        "--timeout",
        "timeout_s",
        type=click.FloatRange(min=0.1),
        default=None,
        help="Seconds the correctness check may take before its kernel is stopped (default 60).",
    ),
    arch_option("GPU architecture for the compile gate."),
    click.option(
        "--json",
        "json_path",
        type=FILE_PATH,
        help='Also write the result as JSON (the profile is under "profile", schema attnlab.profile/1).',
    ),
)


def comma_separated_ints(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        numbers = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: give whole numbers separated by commas, e.g. 1024,4096") from None
    if any(n <= 0 for n in numbers):
        raise click.BadParameter(f"{value!r}: every length must be positive")
    return numbers


def passed_options(command: click.Command, params: dict[str, Any], leave_out: set[str]) -> tuple[str, ...]:
    """The grade command's options as the user gave them, spelled again for each submission's process.

    Read from click's own definitions, so an option added to `grade` passes through unchanged. A seed
    taken from $ATTNLAB_SEED is never written out: each process reads it from its environment, so a
    secret seed never appears on a command line."""
    words: list[str] = []
    for option in command.params:
        if not isinstance(option, click.Option) or option.name in leave_out or option.name not in params:
            continue
        value = params[option.name]
        if value is None or value == option.default or (option.multiple and not value):
            continue
        if option.is_flag and option.secondary_opts:
            words.append(option.opts[0] if value else option.secondary_opts[0])
        elif option.is_flag:
            words += [option.opts[0]] if value else []
        elif option.multiple:
            for item in value:
                words += [option.opts[0], str(item)]
        else:
            words += [option.opts[0], str(value)]
    return tuple(words)
