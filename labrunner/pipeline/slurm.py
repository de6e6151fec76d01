"""The `slurm` executor: a Slurm job array through submitit, one array task per submission, with the
partition, GPUs per job, time limit and account as options; and `submitit-local`, submitit's own local
executor, the same submitit code path, which is how that path is tested without a cluster."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from labrunner.exit_codes import environment_error
from labrunner.pipeline.batch_options import BatchOptions
from labrunner.pipeline.submission import (
    Outcome,
    SubmissionTask,
    dead_result,
    environment_for_submission,
    grade_in_process,
    seed_environment,
    write_json_file,
)


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
