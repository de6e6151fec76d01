"""What a batch is asked to do beyond grading each file: where its submissions run, what it writes, and
the cluster's requests. The command line fills it (cli/options.py's batch options);
pipeline/batch/grade_many.py reads it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class BatchOptions:
    jobs: int | str | None = None  # a number, "auto" (from the GPUs' memory and the cores), or None (the default)
    executor: str = "local"
    gpus: tuple[str, ...] | None = None  # --gpus: the GPUs of a local batch (CUDA_VISIBLE_DEVICES names); None: all
    out_dir: Path | None = None
    csv_path: Path | None = None
    junit_path: Path | None = None  # the aggregated JUnit, where --junit is given to a batch
    annotations: str | None = None
    partition: str | None = None
    gpus_per_job: int | None = None  # Slurm: None asks for 1 with --device gpu, none otherwise
    time_limit_min: int = 60
    account: str | None = None
    mem: str | None = None  # Slurm: --mem, as sbatch takes it (4G)
    cpus_per_task: int | None = None
    qos: str | None = None
    constraint: str | None = None
    gres: str | None = None  # Slurm: a typed GPU request (gpu:h100:1); only with --device gpu
    sbatch_args: tuple[str, ...] = ()  # Slurm: anything else, passed to sbatch as given
    device: str = "auto"  # the backend the submissions are graded on (a cluster's tasks ask for GPUs only for gpu)
    batch_timeout_s: float | None = None  # a deadline for the whole batch: past it, what is left is interrupted
    regrade: bool = False  # grade every file, even where a matching report exists
    gradescope_path: Path | None = None  # Gradescope's results.json: one submission's, so a batch of one file
    html_path: Path | None = None  # the course report, one self-contained page
    roster_path: Path | None = None  # the course's roster (CSV: student_id, student; name and section optional)
    lms_csv_path: Path | None = None  # the gradebook in a learning-management system's import layout
    lms: str = "canvas"  # which system's layout: canvas or moodle (report/lms_gradebook.py)
    assignment: str | None = None  # the assignment's column in that layout
    similar_above: float = 0.6  # the share above which two submissions are listed as similar, for a person to judge
