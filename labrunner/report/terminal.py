"""Everything the user sees: rich tables on stdout, progress and errors on stderr.

The only module that imports rich. It renders results; it never decides them.
"""

from __future__ import annotations

from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table

from labrunner.report.progress import Progress
from labrunner.report.results import RunResult

stdout = Console(highlight=False)
stderr = Console(stderr=True, highlight=False)

STATUS_STYLE = {"pass": "green", "skipped": "dim", "not-run": "dim"}


def error(message: str) -> None:
    stderr.print(f"[bold red]error:[/] {message}", markup=True, soft_wrap=True)


def note(message: str) -> None:
    stderr.print(f"[yellow]note:[/] {message}", markup=True, soft_wrap=True)


@contextmanager
def progress_display(enabled: bool = True):
    """A progress bar on stderr while cases run; it vanishes when done."""
    if not enabled or not stderr.is_terminal:
        yield Progress(start=lambda d, t: stderr.print(f"{d} ({t})"),
                       advance=lambda d: stderr.print(f"  {d}"))
        return
    bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       console=stderr, transient=True)
    task = {"id": None, "finished": 0}

    def start(description: str, total: int) -> None:
        task["id"], task["finished"] = bar.add_task(description, total=total), 0

    def advance(description: str) -> None:
        # called as an item starts: everything before it has finished
        if task["id"] is not None:
            bar.update(task["id"], description=description, completed=task["finished"])
            task["finished"] += 1

    with bar:
        yield Progress(start=start, advance=advance, done=lambda: None)


def heading(text: str) -> None:
    """A title that names a file: printed whole on one line (never wrapped), so the path stays copyable."""
    stdout.print(f"[bold]{escape(text)}[/]", markup=True, soft_wrap=True)


def labs_table(labs) -> None:
    table = Table(title="attnlab labs", show_lines=False)
    table.add_column("lab", style="bold")
    table.add_column("title")
    table.add_column("what it teaches")
    for lab in labs:
        table.add_row(lab.name, lab.title, lab.teaches)
    stdout.print(table)


def check_report(result: RunResult) -> None:
    info = result.compile or {}
    heading(f"{result.file}: compiles for {result.lab} ({info.get('arch')}, NVRTC {info.get('nvrtc')})")
    table = Table()
    for column in ("kernel", "registers", "shared (static)", "stack", "spills (st/ld)"):
        table.add_column(column, justify="right" if column != "kernel" else "left")
    for name, r in info.get("resources", {}).items():
        table.add_row(name, _opt(r["registers"]), _bytes(r["shared_bytes"]), _bytes(r["stack_bytes"]),
                      f"{_opt(r['spill_stores'])}/{_opt(r['spill_loads'])}")
    stdout.print(table)
    launches = Table(title="launch geometry (exported attnlab_* constants, defaults otherwise)")
    launches.add_column("constant")
    launches.add_column("value", justify="right")
    launches.add_column("from")
    for name, value in info.get("constants", {}).items():
        launches.add_row(name, str(value), "file" if name in info.get("exported", {}) else "default")
    stdout.print(launches)
    for warning in info.get("warnings", []):
        note(warning)


def doctor_report(rows: list[tuple[str, bool, str]]) -> None:
    table = Table(title="attnlab doctor")
    table.add_column("check")
    table.add_column("")
    table.add_column("details")
    for name, ok, words in rows:
        table.add_row(name, "[green]ok[/]" if ok else "[red]missing[/]", words)
    stdout.print(table)


def cases_report(result: RunResult) -> None:
    if not result.cases:
        return
    title = f"{result.lab} · {result.file} · {result.backend}" + (f" ({result.device.get('name')})" if result.device else "")
    heading(title)
    table = Table()
    # A lab without a cached prefix (lab 1) has no prefix column: a column of zeros teaches nothing.
    with_prefix = any(case.prefix for case in result.cases)
    columns = ("case", "rows", *(("prefix",) if with_prefix else ()), "status", "max |err|", "details")
    for column in columns:
        table.add_column(column, justify="right" if column in ("rows", "prefix", "max |err|") else "left",
                         overflow="fold")
    for case in result.cases:
        style = STATUS_STYLE.get(case.status, "bold red")
        table.add_row(case.name, str(case.rows), *((str(case.prefix),) if with_prefix else ()),
                      f"[{style}]{case.status}[/]", _error(case.max_abs_err),
                      "" if case.status == "pass" else escape(case.message))
    stdout.print(table)


def timing_report(result: RunResult) -> None:
    timing = result.timing
    if not timing:
        return
    if timing.get("kind") == "pipeline":
        _pipeline_table(timing)
    elif timing.get("kind") == "speedup":
        _speedup_table(timing)
    for warning in timing.get("warnings", []):
        note(warning)


def _pipeline_table(timing: dict) -> None:
    table = Table(title="what the score matrix costs (median of cold calls, L2 flushed)")
    kernel_names = list(timing["rows"][0]["kernels"]) if timing["rows"] else []
    columns = ["T", "matrix MiB", "Q,K,V,out MiB", "ratio", *(f"{k.removeprefix('attn_')} ms" for k in kernel_names),
               "total ms",
               "matrix traffic", "implied GB/s"]
    for column in columns:
        table.add_column(column, justify="right")
    for row in timing["rows"]:
        kernels = row["kernels"]
        table.add_row(
            str(row["T"]), f"{row['matrix_mib']:g}", f"{row['tensors_mib']:.1f}", f"{row['matrix_over_tensors']:.1f}x",
            *(f"{kernels[k]['median_ms']:.3f}" for k in kernel_names),
            f"{row['total']['median_ms']:.3f}", f"{row['matrix_traffic_mib']:g} MiB", f"{row['implied_gb_s']:.0f}",
        )
    for row in timing.get("projections", []):
        table.add_row(f"[dim]{row['T']}[/]", f"[dim]{_mib(row['matrix_mib'])} (projected)[/]",
                      f"[dim]{row['tensors_mib']:.1f}[/]", f"[dim]{row['matrix_over_tensors']:.0f}x[/]",
                      *([""] * (len(kernel_names) + 1)), f"[dim]{_mib(row['matrix_traffic_mib'])}[/]", "")
    stdout.print(table)
    stdout.print("[dim]matrix traffic: 4 passes over the [32][T][T] float32 matrix (scores writes it, softmax reads "
                 "and writes it, the weighted sum reads it); projected rows are arithmetic, nothing was allocated[/]")


def _speedup_table(timing: dict) -> None:
    comparison = timing["comparison"]
    table = Table(title=f"C = {timing['rows']}, P = {timing['prefix']} ({timing['gflop']:.2f} GFLOP), "
                        "interleaved cold calls, L2 flushed")
    for column in ("kernel", "median ms", "min ms", "max ms", "samples", "noise", "TFLOP/s"):
        table.add_column(column, justify="right" if column != "kernel" else "left")
    for label, key in ((timing["student_label"], "student"), (timing["baseline_label"], "baseline")):
        stats = comparison[key]
        table.add_row(label, f"{stats['median_ms']:.3f}", f"{stats['min_ms']:.3f}", f"{stats['max_ms']:.3f}",
                      str(stats["count"]), "" if stats["rse"] is None else f"{100 * stats['rse']:.2f}%",
                      f"{timing['gflop'] / stats['median_ms']:.2f}")
    stdout.print(table)
    stdout.print(f"[bold]SPEEDUP {comparison['speedup']:.2f}x[/] "
                 f"(95% CI {comparison['ci_low']:.2f}x to {comparison['ci_high']:.2f}x, vs {timing['baseline_label']})")
    rounds = timing.get("rounds", [])
    if len(rounds) > 1:
        stdout.print(f"{len(rounds)} rounds, each in a fresh worker process on fresh buffers; SPEEDUP per round: "
                     + ", ".join(f"{r['speedup']:.2f}x" for r in rounds), soft_wrap=True)
    if timing.get("overhead_ms") is not None:
        stdout.print(f"[dim]measurement overhead (empty kernel, same path): {timing['overhead_ms']:.4f} ms[/]")


def gate_report(result: RunResult) -> None:
    gate = result.gate
    if not gate:
        return
    if gate.get("status") == "none":
        note(gate["message"])
    else:
        style = "green" if gate["passed"] else "bold red"
        stdout.print(f"[{style}]speed gate: {gate['message']}[/]")


def verdict_line(result: RunResult) -> None:
    verdict = result.verdict
    style = "bold green" if verdict == "pass" else "bold red"
    decisive = result.decisive_case
    where = f" in case {decisive.name}" if decisive else ""
    skipped = result.summary.removeprefix(verdict)  # " (N cases skipped on the CPU backend; --full runs them)"
    for hint in result.hints:
        stdout.print(f"[yellow]hint ({hint['hazard']}):[/] {escape(hint['text'])}", soft_wrap=True)
    stdout.print(f"[{style}]{verdict.upper()}[/]{escape(skipped)}{where} (exit {int(result.exit_code)})")


def kernel_output(lines: list[str]) -> None:
    if lines:
        stderr.print("[dim]the kernels printed (device printf; shown for reference, never read as results):[/]")
        for line in lines:
            stderr.print(f"[dim]  | {escape(line)}[/]", markup=True, highlight=False)


def _error(value: float | None) -> str:
    """max |err|: nan or inf when any element is, never a small number beside `got nan`."""
    if value is None:
        return ""
    return f"{value:.2e}" if value == value and abs(value) != float("inf") else str(value)


def _opt(value) -> str:
    return "-" if value is None else str(value)


def _bytes(value) -> str:
    return "-" if value is None else f"{value} B"


def _mib(value: float) -> str:
    return f"{value / 1024:g} GiB" if value >= 1024 else f"{value:g} MiB"
