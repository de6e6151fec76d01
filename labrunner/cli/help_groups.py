"""A command's --help in groups: `grade` takes one file's options, a batch's, a cluster's and the
outputs', and a single list of fifty would hide the few a student needs among a course's.

The groups are data (option names in each, by click's parameter name); an option no group names is
listed in the first, so one added later is never left out of the help.
"""

from __future__ import annotations

from typing import Any

import click

# grade's groups, in the order --help shows them.
GRADE_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "One file (a .cu file, or a Triton .py file in lab2 and lab3)",
        (),  # every option the groups below do not name
    ),
    (
        "Batch (several files, a folder of them, or a folder per student)",
        (
            "jobs",
            "gpus",
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
        ),
    ),
    (
        "Cluster (a batch on Slurm: --executor slurm)",
        (
            "executor",
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
        ),
    ),
    (
        "Output",
        ("json_path", "junit_path", "gradescope_path", "annotations", "verbose", "timings", "help"),
    ),
)


class GroupedHelp(click.Command):
    """A command whose --help lists its options under `groups`' headings (see the module's docstring)."""

    def __init__(
        self, *args: Any, groups: tuple[tuple[str, tuple[str, ...]], ...] = GRADE_GROUPS, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.groups = groups

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records: dict[str, list[tuple[str, str]]] = {heading: [] for heading, _ in self.groups}
        first = self.groups[0][0]
        help_option = self.get_help_option(ctx)
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None or isinstance(param, click.Argument):
                continue
            name = "help" if param is help_option else param.name  # click names its own help option privately
            records[next((h for h, names in self.groups if name in names), first)].append(record)
        for heading, listed in records.items():
            if listed:
                with formatter.section(heading):
                    formatter.write_dl(listed)
