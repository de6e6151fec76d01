"""The Range pass: Nsight Compute (`ncu`) over the lab's kernels, in a child process, and its CSV read back.

ncu replays each profiled kernel launch several times to read a fixed set of hardware counters
(one pass cannot read them all). It runs the lab's own launches through a small target program
(`labrunner.run.profile_target`), which first warms the GPU with a few unprofiled launches and
then makes one launch per contender and kernel; `--launch-skip` and `--launch-count` pick exactly
those, and `-k regex:` keeps ncu off every other kernel (CuPy's fills and copies).

Two settings are deliberate. `--clock-control none` leaves the GPU's clocks as they are: ncu's
default locks them to base, which makes every duration longer than a student will ever see, and
this tool never changes a machine's clocks. The cache control stays at ncu's default, flushing
every cache before each replay, so DRAM bytes are those of a cold call, as attnlab times them.

The CSV comes through `--log-file`, never the target's stdout, where a kernel's printf lands:
a kernel that prints a CSV row changes nothing. `--print-units base` makes every unit the base
one (nsecond, byte), so nothing is scaled by guesswork; the parser still reads the scaled units
ncu prints by default, for a CSV recorded without that flag.
"""

from __future__ import annotations

import csv
import io
import math
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from labrunner import box as boxes
from labrunner.records.profile import KernelMetrics

NCU = "ncu"

# name in ncu -> our key, and what it means
METRICS = {
    "gpu__time_duration.sum": "duration_ns",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "dram__bytes_read.sum": "dram_read_bytes",
    "dram__bytes_write.sum": "dram_write_bytes",
    "lts__t_sector_hit_rate.pct": "l2_hit_rate_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "launch__registers_per_thread": "registers_per_thread",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": "shared_bank_conflicts",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "fma_pipe_pct",
}
UNIT_SCALE = {
    "nsecond": 1.0,
    "usecond": 1e3,
    "msecond": 1e6,
    "second": 1e9,
    "ns": 1.0,
    "us": 1e3,
    "ms": 1e6,
    "s": 1e9,
    "byte": 1.0,
    "Kbyte": 1e3,
    "Mbyte": 1e6,
    "Gbyte": 1e9,
    "Tbyte": 1e12,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "Kibyte": 1024.0,
    "Mibyte": 1024.0**2,
    "Gibyte": 1024.0**3,
}
PERMISSION_HELP = (
    "ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): run attnlab as root or with "
    "CAP_SYS_ADMIN, or let every user read them with the driver option NVreg_RestrictProfilingToAdminUsers=0 "
    "(see https://developer.nvidia.com/ERR_NVGPUCTRPERM); the trace above did not need them"
)
MISSING_HELP = (
    "Nsight Compute's `ncu` is not on PATH, so there is no Range pass: install Nsight Compute (it comes with "
    "the CUDA toolkit) and put its folder on PATH; the trace above did not need it"
)


class RangePassUnavailable(Exception):
    """No counters this time, for a reason the user can act on (one line); `said` is all ncu printed."""

    def __init__(self, message: str, said: str = ""):
        super().__init__(message)
        self.said = said


def ncu_path() -> str | None:
    return shutil.which(NCU)


def ncu_command(
    tool: str,
    kernel_names: list[str],
    skip: int,
    count: int,
    log_path: Path,
    target: list[str],
    metrics: list[str] | None = None,
) -> list[str]:
    """The exact ncu invocation: the fixed metrics, the chosen launches, base units, CSV into a file."""
    pattern = "^(" + "|".join(sorted(set(kernel_names))) + ")$"
    return [
        tool,
        "--clock-control",
        "none",
        "--metrics",
        ",".join(metrics or METRICS),
        "-k",
        f"regex:{pattern}",
        "--launch-skip",
        str(skip),
        "--launch-count",
        str(count),
        "--csv",
        "--print-units",
        "base",
        "--log-file",
        str(log_path),
        *target,
    ]


def parse_number(text: str) -> float | None:
    """ncu writes thousands separators ("1,205.00") and "n/a" for a counter this GPU lacks."""
    cleaned = text.strip().replace(",", "")
    if cleaned in ("", "n/a", "N/A"):
        return None
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_ncu_csv(text: str) -> list[KernelMetrics]:
    """ncu's `--csv` output (one row per launch and metric) as one KernelMetrics per launch, in launch order.

    Lines that are not CSV (ncu's own `==PROF==` notes) are skipped; columns are found by their
    header names, since ncu versions add columns (the rule columns) at the end.
    """
    lines = [line for line in text.splitlines() if line.startswith('"')]
    header_at = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if header_at is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[header_at:]))))
    header = rows[0]
    try:
        col = {
            name: header.index(name)
            for name in ("ID", "Kernel Name", "Block Size", "Grid Size", "Metric Name", "Metric Unit", "Metric Value")
        }
    except ValueError:
        return []
    launches: dict[int, KernelMetrics] = {}
    for row in rows[1:]:
        if len(row) < len(header):
            continue
        index = parse_number(row[col["ID"]])
        key = METRICS.get(row[col["Metric Name"]])
        if index is None or key is None:
            continue
        launch = launches.setdefault(
            int(index),
            KernelMetrics(int(index), row[col["Kernel Name"]], row[col["Block Size"]], row[col["Grid Size"]]),
        )
        value = parse_number(row[col["Metric Value"]])
        unit = row[col["Metric Unit"]].strip()
        launch.values[key] = None if value is None else value * UNIT_SCALE.get(unit, 1.0)
    for launch in launches.values():
        for key in METRICS.values():
            launch.values.setdefault(key, None)
    return [launches[i] for i in sorted(launches)]


def explain_failure(log_text: str, stderr: str, returncode: int) -> str:
    """One line on why ncu gave no counters."""
    both = log_text + "\n" + stderr
    if "ERR_NVGPUCTRPERM" in both:
        return PERMISSION_HELP
    errors = [line.split("==ERROR==", 1)[1].strip() for line in both.splitlines() if "==ERROR==" in line]
    if errors:
        return f"ncu failed: {errors[0]}"
    tail = [line.strip() for line in stderr.splitlines() if line.strip()]
    return f"ncu exited with status {returncode} and no counters" + (f": {tail[-1]}" if tail else "")


@dataclass
class NcuRun:
    launches: list[KernelMetrics]
    command: list[str]
    raw_csv: str
    seconds: float
    dropped_metrics: list[str] = field(default_factory=list)


def run_ncu(
    kernel_names: list[str],
    skip: int,
    count: int,
    target: list[str],
    timeout_s: float,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    box_folder: Path | None = None,
) -> NcuRun:
    """Run ncu over `target` and return exactly `count` profiled launches, or raise RangePassUnavailable.

    A metric this ncu or this GPU does not know makes ncu refuse the whole run. Its error names the
    metric, so a failed run that names some of ours is tried once more without them, and the
    report says which were dropped: one unknown counter should not cost the other eight.

    `box_folder`: ncu and its target run in a box (`labrunner/box.py`, purpose PROFILE) whose /job is
    this host folder; `target` and `env` are then as seen inside it.
    """
    tool = ncu_path()
    if tool is None:
        raise RangePassUnavailable(MISSING_HELP)
    metrics = list(METRICS)
    try:
        return ncu_once(tool, kernel_names, skip, count, target, timeout_s, cwd, env, metrics, box_folder)
    except RangePassUnavailable as first:
        named = [m for m in metrics if m in first.said]
        if not named or len(named) == len(metrics) or "ERR_NVGPUCTRPERM" in first.said:
            raise
        run = ncu_once(
            tool,
            kernel_names,
            skip,
            count,
            target,
            timeout_s,
            cwd,
            env,
            [m for m in metrics if m not in named],
            box_folder,
        )
        run.dropped_metrics = named
        return run


def ncu_once(
    tool: str,
    kernel_names: list[str],
    skip: int,
    count: int,
    target: list[str],
    timeout_s: float,
    cwd: Path | None,
    env: dict[str, str] | None,
    metrics: list[str],
    box_folder: Path | None = None,
) -> NcuRun:
    """One ncu run. A failure carries the one-line reason, then everything ncu said (for `run_ncu`'s retry)."""
    import time

    with tempfile.TemporaryDirectory(prefix="attnlab-ncu-") as scratch:
        log_path = (box_folder if box_folder else Path(scratch)) / "ncu.csv"
        log_path.unlink(missing_ok=True)  # a retry's report must be its own
        if box_folder:
            inside = ncu_command(tool, kernel_names, skip, count, Path(boxes.PRIVATE) / "ncu.csv", target, metrics)
            command = boxes.wrap(boxes.PROFILE, inside, env or {}, private_source=str(box_folder))
            env, cwd = {}, None
        else:
            command = ncu_command(tool, kernel_names, skip, count, log_path, target, metrics)
        started = time.monotonic()
        try:
            completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=cwd, env=env)
        except subprocess.TimeoutExpired:
            raise RangePassUnavailable(f"ncu did not finish within {timeout_s:g} s; it was stopped", "") from None
        seconds = time.monotonic() - started
        log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
    launches = parse_ncu_csv(log_text)
    if not launches and parse_ncu_csv(completed.stdout):
        # an ncu that kept its report on stdout despite --log-file; the target's own stdout goes to /dev/null
        log_text = completed.stdout
        launches = parse_ncu_csv(log_text)
    said = log_text + "\n" + completed.stdout + "\n" + completed.stderr
    if len(launches) != count or completed.returncode != 0:
        if launches and completed.returncode == 0:
            raise RangePassUnavailable(f"ncu profiled {len(launches)} launches where {count} were asked for", said)
        raise RangePassUnavailable(
            explain_failure(log_text + "\n" + completed.stdout, completed.stderr, completed.returncode), said
        )
    return NcuRun(launches, command, log_text, seconds)
