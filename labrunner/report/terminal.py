"""Everything the user sees: rich tables on stdout, progress and errors on stderr.

The only module that imports rich. It renders results; it never decides them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

from labrunner.compile.backend import Backend
from labrunner.records.profile import Profile, RangeReport, Trace
from labrunner.records.timing import Peer, PeerRow, PipelineTiming, Series, SpeedupTiming
from labrunner.report.batch_row import BatchRow
from labrunner.report.course_row import CourseRow
from labrunner.report.progress import Progress
from labrunner.report.results import RunResult
from labrunner.run.untrusted_text import shown, shown_text
from labrunner.truth.verdict import Status

if TYPE_CHECKING:
    from labrunner.labs.definition import Lab

stdout = Console(highlight=False)
stderr = Console(stderr=True, highlight=False)

# `FILE: error: ...` or `FILE(LINE): error: ...`, as the compile gate writes its messages.
_SAYS_ERROR = re.compile(r"^\S[^\n]*?(?:\(\d+\))?: (?:catastrophic )?error: ")
MEBIBYTE = 1024 * 1024
STATUS_STYLE: dict[str, str] = {Status.PASS: "green", Status.SKIPPED: "dim", Status.NOT_RUN: "dim"}


def _columns_set() -> bool:
    """`COLUMNS` given in the environment: a log's lines keep within it as a terminal's do."""
    import os

    columns = os.environ.get("COLUMNS", "")
    return columns.isdigit() and int(columns) > 0


def _whole(console: Console) -> bool:
    """Lines printed whole, never wrapped: in a log without `COLUMNS` (one line to grep). On a terminal, or
    piped with `COLUMNS` set, rich wraps them at spaces within the width. An error's line is always whole
    (a CI problem matcher reads `file(line): error: ...` from one line)."""
    return not console.is_terminal and not _columns_set()


# Messages can quote a student's file or what its code printed: control characters are shown
# escaped and square brackets are never read as rich markup.
def error(message: str) -> None:
    # A compiler's message already reads `attention.cu(20): error: ...`; a second "error:" in
    # front of it would only double the word. The message itself is never read as markup.
    message = shown_text(message)
    first_line = message.split("\n", 1)[0]
    if _SAYS_ERROR.match(first_line):
        stderr.print(
            f"[bold red]{escape(first_line)}[/]" + escape(message[len(first_line) :]),
            markup=True,
            soft_wrap=not stderr.is_terminal,
        )
        return
    stderr.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=not stderr.is_terminal)


def note(message: str) -> None:
    stderr.print(f"[yellow]note:[/] {escape(shown_text(message))}", markup=True, soft_wrap=_whole(stderr))


@contextmanager
def progress_display(enabled: bool = True) -> Iterator[Progress]:
    """A progress bar on stderr while cases run; it vanishes when done."""
    if not enabled or not stderr.is_terminal:
        yield Progress(start=lambda d, t: stderr.print(f"{d} ({t})"), advance=lambda d: stderr.print(f"  {d}"))
        return
    bar = RichProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )
    task: dict[str, Any] = {"id": None, "finished": 0}

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
    """A title that names a file: in a log on one line, so the path stays copyable; on a terminal wrapped
    at spaces (a path longer than the terminal is folded, never cut).

    It starts with the file's name, the student's text, so it is shown (untrusted_text.py) whole."""
    stdout.print(f"[bold]{escape(shown(text))}[/]", markup=True, soft_wrap=_whole(stdout))


def labs_table(labs: Iterable[Lab]) -> None:
    table = Table(title="attnlab labs", show_lines=False)
    table.add_column("lab", style="bold")
    table.add_column("title")
    table.add_column("what it teaches")
    for lab in labs:
        table.add_row(lab.name, lab.title, lab.teaches)
    stdout.print(table)


def check_report(result: RunResult) -> None:
    summary = result.compile
    if summary is None:
        return
    heading(f"{result.file}: compiles for {result.lab} ({summary.arch}, {summary.compiler})")
    table = Table()
    if summary.triton:
        for column in ("kernel", "warps", "threads", "stages", "shared (dynamic)"):
            table.add_column(column, justify="right" if column != "kernel" else "left")
        for name, k in summary.triton_kernels.items():
            warps = k["num_warps"]
            table.add_row(name, str(warps), str(32 * warps), str(k["num_stages"]), _bytes(k["shared_bytes"]))
    else:
        for column in ("kernel", "registers", "shared (static)", "stack", "spills (st/ld)"):
            table.add_column(column, justify="right" if column != "kernel" else "left")
        for name, r in summary.resources.items():
            table.add_row(
                name,
                _opt(r.registers),
                _bytes(r.shared_bytes),
                _bytes(r.stack_bytes),
                f"{_opt(r.spill_stores)}/{_opt(r.spill_loads)}",
            )
    stdout.print(table)
    title = "launch geometry (attnlab_* constants: the file's, Triton's compile's, defaults otherwise)"
    launches = Table(
        title=title if summary.triton else "launch geometry (exported attnlab_* constants, defaults otherwise)"
    )
    launches.add_column("constant")
    launches.add_column("value", justify="right")
    launches.add_column("from")
    for name, value in summary.constants.items():
        launches.add_row(name, str(value), summary.constant_source(name))
    stdout.print(launches)
    for warning in summary.warnings:
        note(warning)


def doctor_report(rows: list[tuple[str, bool, str]]) -> None:
    table = Table(title="attnlab doctor")
    table.add_column("check")
    table.add_column("status")
    table.add_column("details", overflow="fold")  # a long word (a CUDA error's name) is folded, never cut
    for name, ok, words in rows:
        table.add_row(name, "[green]ok[/]" if ok else "[red]missing[/]", escape(words))
    print_unwrapped(table)


# Failing cases past the first two fold to one line each where their messages would fill a screen: on a
# terminal narrower than this, and in a log. Below NARROW_COLUMNS no table fits (a case name, its sizes,
# `never-written` and an error take 70 columns), so each case is a line and its message wraps under it.
FOLD_BELOW_COLUMNS = 100
NARROW_COLUMNS = 80
IN_FULL = 2
# --verbose: every failing case's message in full, however narrow the terminal (set by grade's option)
QUIET_STATUSES = (Status.PASS, Status.SKIPPED, Status.NOT_RUN)


def size_columns(lab: str | None) -> tuple[str, str]:
    """What a case's two sizes are called: a prefill's query rows and cached prefix, or a decode batch's
    sequences and its longest sequence's keys (lab 3: `truth/catalogue.py`'s Case)."""
    from labrunner.labs import LABS

    definition = LABS.get(lab or "")
    decode = definition is not None and any(case.lengths for case in definition.catalogue.cases)
    return ("sequences", "longest") if decode else ("rows", "prefix")


def folded(message: str) -> str:
    """A message on one line: its first clause (where, and got against expected), the rest left to
    --verbose and --json."""
    return message.split("; ", 1)[0]


def cases_report(result: RunResult, verbose: bool = False) -> None:
    """The cases' table. `verbose`: every failing case's message in full, where a narrow terminal or a log
    folds those after the first two to one line each."""
    if not result.cases:
        return
    title = f"{result.lab} · {result.file} · {result.backend}" + (f" ({result.device.name})" if result.device else "")
    heading(title)
    terminal = stdout.is_terminal
    fold = not verbose and (not terminal or stdout.width < FOLD_BELOW_COLUMNS)
    failing = [i for i, case in enumerate(result.cases) if case.status not in QUIET_STATUSES]
    folding = set(failing[IN_FULL:]) if fold else set()
    rows_name, prefix_name = size_columns(result.lab)
    # A lab without a cached prefix (lab 1) has no prefix column: a column of zeros teaches nothing.
    with_prefix = any(case.prefix for case in result.cases)
    if not _whole(stdout) and stdout.width < NARROW_COLUMNS:
        _cases_as_lines(result, folding, rows_name, prefix_name if with_prefix else None)
    else:
        _cases_table(
            result, folding, rows_name, prefix_name if with_prefix else None, one_line=not _whole(stdout) and fold
        )
    if folding:
        count = len(folding)
        stdout.print(
            f"{count} more failing case{'s' if count != 1 else ''} folded to one line each; --verbose shows "
            "every message in full (and --json PATH keeps them)",
            soft_wrap=_whole(stdout),
        )


def _cases_table(result: RunResult, folding: set[int], rows_name: str, prefix_name: str | None, one_line: bool) -> None:
    """The case table. Only the details wrap (at spaces): a name, a size, a status or an error is never cut.
    `one_line`: on a terminal, a folded row (and a skipped one) ends in an ellipsis rather than wrapping."""
    table = Table()
    columns = ("case", rows_name, *((prefix_name,) if prefix_name else ()), "status", "max |err|")
    for column in columns:
        table.add_column(column, justify="left" if column in ("case", "status") else "right", no_wrap=True)
    table.add_column("details", overflow="fold", ratio=1)
    for number, case in enumerate(result.cases):
        style = STATUS_STYLE.get(case.status, "bold red")
        details = "" if case.status == Status.PASS else shown_text(case.message)
        short = number in folding or case.status in (Status.SKIPPED, Status.NOT_RUN)
        if number in folding:
            details = folded(details)
        table.add_row(
            case.name,
            str(case.rows),
            *((str(case.prefix),) if prefix_name else ()),
            f"[{style}]{case.status}[/]",
            _error(case.max_abs_err),
            Text(details, no_wrap=True, overflow="ellipsis") if one_line and short else Text(details),
        )
    print_unwrapped(table)


def _cases_as_lines(result: RunResult, folding: set[int], rows_name: str, prefix_name: str | None) -> None:
    """A terminal too narrow for the table: each case on a line of its own, its message wrapped under it at
    spaces (a folded or skipped case's message on the same line, cut with an ellipsis)."""
    for number, case in enumerate(result.cases):
        style = STATUS_STYLE.get(case.status, "bold red")
        sizes = _counted(case.rows, rows_name) + (f", {prefix_name} {case.prefix}" if prefix_name else "")
        err = "" if case.max_abs_err is None else f", max |err| {_error(case.max_abs_err)}"
        line = Text.assemble(case.name, f" ({sizes}) ", (str(case.status), style), err)
        message = "" if case.status == Status.PASS else shown_text(case.message)
        if number in folding or case.status in (Status.SKIPPED, Status.NOT_RUN):
            for said in ("skipped: ", "not run: "):  # the status already says so
                message = message.removeprefix(said)
            short = Text.assemble(case.name, " ", (str(case.status), style), err)
            said = folded(message) if number in folding else message
            short.append(": " + _words_within(said, stdout.width - len(short.plain) - 2))
            stdout.print(short, no_wrap=True, overflow="ellipsis")
            continue
        stdout.print(line)
        if message:
            stdout.print(Padding(Text(message, overflow="fold"), (0, 0, 0, 4), expand=False))


def _words_within(text: str, width: int) -> str:
    """`text` cut after its last whole word that fits in `width` columns, with an ellipsis, where it is longer."""
    if len(text) <= width:
        return text
    room = max(0, width - 1)  # one column for the ellipsis
    cut = text[:room] if text[room] == " " else text[:room].rsplit(" ", 1)[0]  # the last word only if whole
    return cut.rstrip(",;: ") + "…"


def _counted(count: int, name: str) -> str:
    """`1 row`, `17 rows`, `3 sequences`."""
    return f"{count} {name.removesuffix('s') if count == 1 else name}"


def timing_report(result: RunResult) -> None:
    timing = result.timing
    if not timing:
        return
    if isinstance(timing, PipelineTiming):
        _pipeline_table(timing)
    else:
        _speedup_table(timing)
    for warning in timing.conditions.warnings:
        note(warning)


def _pipeline_table(timing: PipelineTiming) -> None:
    table = Table(title="what the score matrix costs (median of cold calls, L2 flushed)")
    kernel_names = list(timing.rows[0].kernels or {}) if timing.rows else []
    peer = timing.peer if timing.peer is not None and timing.peer.timed else None
    columns = [
        "T",
        "matrix MiB",
        "Q,K,V,out MiB",
        "ratio",
        *(f"{k.removeprefix('attn_')} ms" for k in kernel_names),
        "total ms",
        *(("peer ms", "SPEEDUP vs peer") if peer else ()),
        "matrix traffic",
        "implied GB/s",
    ]
    for column in columns:
        table.add_column(column, justify="right")
    for row in timing.rows:
        kernels = row.kernels or {}
        table.add_row(
            str(row.t),
            f"{row.matrix_mib:g}",
            f"{row.tensors_mib:.1f}",
            f"{row.matrix_over_tensors:.1f}x",
            *(_ms(kernels[k]) for k in kernel_names),
            _ms(row.total),
            *(_peer_cells(row.peer) if peer else ()),
            f"{row.matrix_traffic_mib:g} MiB",
            f"{row.implied_gb_s:.0f}",
        )
    for row in timing.projections:
        table.add_row(
            f"[dim]{row.t}[/]",
            f"[dim]{_mib(row.matrix_mib)} (projected)[/]",
            f"[dim]{row.tensors_mib:.1f}[/]",
            f"[dim]{row.matrix_over_tensors:.0f}x[/]",
            *([""] * (len(kernel_names) + 1 + (2 if peer else 0))),
            f"[dim]{_mib(row.matrix_traffic_mib)}[/]",
            "",
        )
    stdout.print(table)
    stdout.print(
        "[dim]matrix traffic: 4 passes over the [32][T][T] float32 matrix (scores writes it, softmax reads "
        "and writes it, the weighted sum reads it); projected rows are arithmetic, nothing was allocated[/]"
    )
    _floor_table(timing)
    if peer:
        stdout.print(
            f"SPEEDUP vs peer = {escape(peer.label)}'s time / the whole call's time, each pair interleaved "
            "on the same fresh input sets (95% CI in --json)",
            soft_wrap=_whole(stdout),
        )
        _peer_includes(peer)


def _floor_table(timing: PipelineTiming) -> None:
    """At the largest measured T: the bytes each kernel must move, its GB/s against this run's device
    copy, and the whole call against the floor those bytes set."""
    row = timing.largest_measured
    if row is None or not row.must_move:
        return
    floor = row.floor
    kernels = row.kernels or {}
    table = Table(title=f"the bytes each kernel must move at T = {row.t}")
    for column in ("kernel", "must move", "ms", "GB/s", *(("of the copy",) if floor else ())):
        table.add_column(column, justify="left" if column == "kernel" else "right")
    for name, moved in row.must_move.items():
        table.add_row(
            name,
            f"{moved.bytes / MEBIBYTE:,.0f} MiB",
            _ms(kernels[name]),
            f"{moved.gb_s:.0f}",
            *((f"{moved.copy_fraction:.0%}",) if floor else ()),
        )
    stdout.print(table)
    if floor:
        stdout.print(
            f"floor: {floor.bytes / MEBIBYTE:,.0f} MiB at this run's device-copy bandwidth ({floor.copy_gb_s:.0f} "
            f"GB/s, bytes read plus written) = {floor.ms:.3f} ms; the whole call takes "
            f"{_ms(row.total)} ms, {floor.times_floor:.2f}x the floor",
            soft_wrap=_whole(stdout),
        )
    else:
        note("no device copy was timed in this run, so the floor is not known")


def _ms(series: Series | None) -> str:
    """A series' median, as every timing table shows it."""
    return "" if series is None else f"{series.median_ms:.3f}"


def _peer_cells(versus: PeerRow | None) -> tuple[str, str]:
    if versus is None:
        return "", ""
    return f"{versus.median_ms:.3f}", f"{versus.speedup:.2f}x"


def _peer_includes(peer: Peer) -> None:
    stdout.print(
        f"[dim]the peer's time ({escape(peer.label)}) includes: {escape(peer.includes)}[/]", soft_wrap=_whole(stdout)
    )


def _speedup_table(timing: SpeedupTiming) -> None:
    comparison = timing.comparison
    bandwidth = timing.bandwidth  # a lab graded on bandwidth: bytes and TB/s, not FLOPs
    shape = (
        f"B = {timing.rows} sequences, the longest {timing.prefix} keys ({bandwidth.bytes / 1e9:.2f} GB must move)"
        if bandwidth
        else f"C = {timing.rows}, P = {timing.prefix} ({timing.gflop:.2f} GFLOP)"
    )
    table = Table(title=f"{shape}, interleaved cold calls, L2 flushed")
    for column in ("kernel", "median ms", "min ms", "max ms", "samples", "noise", "TB/s" if bandwidth else "TFLOP/s"):
        table.add_column(column, justify="right" if column != "kernel" else "left")
    contenders = (
        (timing.student_label, comparison.student, bandwidth.student_tb_s if bandwidth else timing.student_tflop_s),
        (timing.baseline_label, comparison.baseline, bandwidth.baseline_tb_s if bandwidth else timing.baseline_tflop_s),
    )
    for label, stats, rate in contenders:
        table.add_row(
            label,
            f"{stats.median_ms:.3f}",
            f"{stats.min_ms:.3f}",
            f"{stats.max_ms:.3f}",
            str(stats.count),
            "" if stats.rse is None else f"{stats.rse:.2%}",
            f"{rate:.2f}",
        )
    stdout.print(table)
    if bandwidth:
        stdout.print(
            f"device copy in the same run: {bandwidth.copy_tb_s:.2f} TB/s; {timing.student_label} "
            f"reaches [bold]{bandwidth.copy_fraction:.2f}[/] of it ({bandwidth.student_tb_s:.2f} TB/s)"
        )
    stdout.print(
        f"[bold]SPEEDUP {comparison.speedup:.2f}x[/] "
        f"(95% CI {comparison.ci_low:.2f}x to {comparison.ci_high:.2f}x, vs {timing.baseline_label})"
    )
    if len(timing.rounds) > 1:
        stdout.print(
            f"{len(timing.rounds)} rounds, each in a fresh worker process on fresh buffers; SPEEDUP per round: "
            + ", ".join(f"{r.speedup:.2f}x" for r in timing.rounds),
            soft_wrap=_whole(stdout),
        )
    if timing.peer is not None and timing.peer.timed:
        _peer_includes(timing.peer)
    if timing.conditions.overhead_ms is not None:
        stdout.print(f"[dim]measurement overhead (empty kernel, same path): {timing.conditions.overhead_ms:.4f} ms[/]")


def gate_report(result: RunResult) -> None:
    gate = result.gate
    if not gate:
        return
    if gate.status == "none":
        note(gate.message)
    else:
        style = "green" if gate.passed else "bold red"
        stdout.print(f"[{style}]speed gate: {gate.message}[/]")


def verdict_line(result: RunResult, why_on_the_cpu: str | None = None) -> None:
    """The last line: the verdict, its case, the backend that gave it, the exit code. `why_on_the_cpu`: why
    `--device auto` fell back to the CPU ("no GPU found"), said after the backend, so that a student who
    never chose a backend learns which one ran."""
    verdict = result.verdict
    style = "bold green" if verdict == Status.PASS else "bold red"
    decisive = result.decisive_case
    where = f" in case {decisive.name}" if decisive else ""
    # A CPU verdict speaks for the CPU build only; say which backend gave it (the skipped count,
    # where there is one, already names it).
    skipped = result.summary.removeprefix(verdict)  # " (N cases skipped on the CPU backend; --full runs them)"
    backend = ""
    if not skipped and result.backend is not None:
        backend = {Backend.CPU: " on the CPU backend", Backend.GPU: " on the GPU"}[result.backend]
    if why_on_the_cpu and result.backend == Backend.CPU:
        backend = f" on the CPU backend: {why_on_the_cpu}"
    for hint in result.hints:
        stdout.print(
            f"[yellow]hint ({hint['hazard']}):[/] {escape(shown_text(hint['text']))}", soft_wrap=_whole(stdout)
        )
    stdout.print(
        f"[{style}]{verdict.upper()}[/]{escape(skipped)}{where}{backend} (exit {int(result.exit_code)})",
        soft_wrap=_whole(stdout),
    )  # in a log, one line to grep; on a terminal, wrapped at spaces (a terminal's own wrap cuts words)


def phase_table(phases: list[tuple[str, float]], total_s: float) -> None:
    """`--timings`: where the command's time went, on stderr (standard output keeps the verdict last)."""
    table = Table(title="where the time went", title_justify="left")
    table.add_column("phase")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    whole = total_s + next((s for name, s in phases if name == "imports"), 0.0)  # imports ran before the command
    for name, seconds in phases:
        table.add_row(escape(name), f"{seconds:.3f}", f"{100 * seconds / whole:.0f}%" if whole > 0 else "")
    table.add_row("[bold]total[/]", f"[bold]{whole:.3f}[/]", "")
    stderr.print(table)


def kernel_output(lines: list[str]) -> None:
    if lines:
        stderr.print("[dim]the kernels printed (device printf; shown for reference, never read as results):[/]")
        for line in lines:  # never wrapped: a wrap would start a line with the kernel's text (`::error::`)
            stderr.print(f"[dim]  | {escape(shown(line))}[/]", markup=True, highlight=False, soft_wrap=_whole(stderr))


def _error(value: float | None) -> str:
    """max |err|: nan or inf when any element is, never a small number beside `got nan`."""
    if value is None:
        return ""
    return f"{value:.2e}" if value == value and abs(value) != float("inf") else str(value)


def _opt(value: object) -> str:
    return "-" if value is None else str(value)


def _bytes(value: int | None) -> str:
    return "-" if value is None else f"{value} B"


def _mib(value: float) -> str:
    return f"{value / 1024:g} GiB" if value >= 1024 else f"{value:g} MiB"


# --- attnlab traffic and attnlab profile ------------------------------------------------------

BAR_WIDTH = 60
KERNEL_STYLES = ("cyan", "magenta", "yellow", "green", "blue", "red")


def plain_lines(lines: list[str]) -> None:
    """Lines printed exactly as given: no markup, no highlighting, never wrapped."""
    for line in lines:
        stdout.print(line, markup=False, highlight=False, soft_wrap=True)


def trace_report(trace: Trace) -> None:
    """One line per call, each kernel a bar proportional to its GPU time, with its ms."""
    source = (
        "CUPTI activity records" + (f" (cupti-python {trace.cupti_version})" if trace.cupti_version else "")
        if trace.source == "cupti"
        else "CUDA events around each launch"
    )
    heading(f"Trace timeline: {trace.calls} calls per shape, GPU start and end of every kernel from {source}")
    if trace.why_not_cupti and trace.source != "cupti":
        note(f"no CUPTI: {trace.why_not_cupti}")
    style = {k: KERNEL_STYLES[i % len(KERNEL_STYLES)] for i, k in enumerate(trace.kernels)}
    for shape in trace.shapes:
        longest = trace.longest_ms(shape)
        stdout.print(f"[bold]{escape(shape)}[/] [dim](a full bar is {longest:.3f} ms)[/]", soft_wrap=_whole(stdout))
        for call in trace.calls_at(shape):
            bars, words = [], []
            for s in call.launches:
                # the bar's length in characters: the launch's share of the longest call, drawn
                width = max(1, round(BAR_WIDTH * s.duration_ms / longest)) if longest else 1
                bars.append(f"[{style[s.kernel]}]{'█' * width}[/]")
                words.append(f"[{style[s.kernel]}]{escape(s.kernel.removeprefix('attn_'))}[/] {s.duration_ms:.3f}")
            stdout.print(
                f"  call {call.call + 1}  {''.join(bars)}  {' · '.join(words)} = {call.total_ms:.3f} ms"
                + (f" [dim](first start to last end {call.span_ms:.3f} ms)[/]" if len(call.launches) > 1 else ""),
                soft_wrap=_whole(stdout),
            )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.1f}"


def range_report(profile: Profile) -> None:
    """The Range pass's counters per kernel, the roofline verdicts, and the ceilings they stand under."""
    report = profile.range
    if report is None or not report.available:
        note(f"Range pass: {None if report is None else report.message}")
        return
    shape = report.shape.label if report.shape else ""
    table = Table(title=f"Range pass (Nsight Compute, one cold call at {shape}, clocks untouched)")
    columns = (
        "kernel",
        "ms",
        "SM %",
        "DRAM read MB",
        "DRAM write MB",
        "L2 hit",
        "occupancy",
        "regs",
        "bank conflicts",
        "FMA pipe",
        "TFLOP/s",
        "FLOP/B",
    )
    for column in columns:
        # a path longer than its column folds onto more lines rather than losing its end to an ellipsis
        table.add_column(
            column,
            justify="left" if column == "kernel" else "right",
            overflow="fold" if column == "kernel" else "ellipsis",
        )
    for contender in report.contenders:
        # the file on a row of its own, its kernels indented under it: a long path may wrap there
        # without cutting a kernel's name in two
        table.add_row(escape(contender.label), *[""] * (len(columns) - 1))
        for number, k in enumerate(contender.kernels):
            point = k.point
            table.add_row(
                "  " + escape(k.kernel),
                "-" if k.duration_ns is None else f"{k.duration_ns / 1e6:.3f}",
                _pct(k.sm_throughput_pct),
                _mb(k.dram_read_bytes),
                _mb(k.dram_write_bytes),
                _pct(k.l2_hit_rate_pct),
                _pct(k.achieved_occupancy_pct),
                _count(k.registers_per_thread),
                _count(k.shared_bank_conflicts),
                _pct(k.fma_pipe_pct),
                f"{point.achieved_flops_per_s / 1e12:.2f}" if point else "-",
                f"{point.intensity_flop_per_byte:.1f}" if point and point.intensity_flop_per_byte else "-",
                end_section=number == len(contender.kernels) - 1,
            )
    stdout.print(table)
    if report.dropped_metrics:
        note("ncu does not know " + ", ".join(report.dropped_metrics) + " here: those columns are empty")
    ceilings = profile.ceilings
    if ceilings:
        stdout.print(
            f"[dim]ceilings: FP32 {ceilings.peak_flops / 1e12:.1f} TFLOP/s ({escape(ceilings.peak_source)}); "
            f"HBM {ceilings.bandwidth / 1e12:.2f} TB/s ({escape(ceilings.bandwidth_source)}); "
            f"ridge point {ceilings.ridge:.1f} FLOP/B[/]",
            soft_wrap=_whole(stdout),
        )
    else:
        note(f"no roofline verdict: {profile.ceilings_problem}")
    for contender in report.contenders:
        if contender.point:
            kernels = "" if len(contender.kernels) == 1 else " (the whole call)"
            stdout.print(
                f"[bold]{escape(contender.label)}{kernels}: {contender.point.verdict}[/]", soft_wrap=_whole(stdout)
            )
        if len(contender.kernels) > 1:
            for k in contender.kernels:
                if k.point:
                    stdout.print(f"  {escape(k.kernel)}: {k.point.verdict}", soft_wrap=_whole(stdout))
    for row in profile.trace_vs_ncu or []:
        stdout.print(
            f"[dim]{escape(row.kernel)}: the trace's median {row.trace_median_ms:.3f} ms, ncu's "
            f"{row.ncu_ms:.3f} ms ({row.difference:+.1%})[/]",
            soft_wrap=_whole(stdout),
        )
    if profile.no_starter_row:
        note(profile.no_starter_row)


def traffic_beside_measured(profile: Profile) -> None:
    """The lesson's model at the profiled shape, next to the DRAM bytes ncu counted."""
    model = profile.traffic
    if not model:
        return
    shape = profile.range.shape.label if profile.range and profile.range.shape else ""
    stdout.print(
        f"HBM traffic model at {shape}: naive {model.naive_bytes / 1e6:.2f} MB (the score matrix "
        f"{model.matrix_bytes / 1e6:.2f} MB, written and read twice), flash {model.flash_bytes / 1e6:.2f} MB "
        "(Q, K, V read once, the output written once)",
        soft_wrap=_whole(stdout),
    )
    for row in profile.dram_beside_model:
        stdout.print(
            f"  measured DRAM, {escape(row.label)}: {row.dram_bytes / 1e6:.2f} MB = "
            f"{row.times_flash:.2f}x flash, {row.times_naive:.3f}x naive",
            soft_wrap=_whole(stdout),
        )


def must_move_beside_measured(profile: Profile) -> None:
    """A lab's own model of the least bytes one call must move (`Lab.bytes_to_move`), next to the DRAM bytes
    ncu counted: above 1x is what was read more than once, or written beside the output."""
    model = profile.must_move
    if not model:
        return
    stdout.print(
        f"bytes one call must move at {model.label} (the lab's model, as bench counts them): "
        f"{model.bytes / 1e6:,.2f} MB",
        soft_wrap=_whole(stdout),
    )
    for row in profile.dram_beside_model:
        stdout.print(
            f"  measured DRAM, {escape(row.label)}: {row.dram_bytes / 1e6:,.2f} MB = "
            f"{row.times_must_move:.3f}x the bytes that must move",
            soft_wrap=_whole(stdout),
        )


def range_summary_line(report: RangeReport) -> None:
    """`grade --profile`, `bench --profile`: the Range pass in one line."""
    if not report.available:
        note(f"Range pass: {report.message}")
        return
    parts = []
    for contender in report.contenders:
        sm = [k.sm_throughput_pct for k in contender.kernels]
        parts.append(
            f"{contender.label} {contender.duration_ms:.3f} ms, DRAM {_mb(contender.dram_bytes)} MB, "
            f"SM {'/'.join(_pct(x) for x in sm)}" + (f", {contender.point.verdict}" if contender.point else "")
        )
    label = report.shape.label if report.shape else ""
    stdout.print(escape(f"Range pass at {label} (ncu): " + " | ".join(parts)), soft_wrap=_whole(stdout))


# --- output fit for logs ---------------------------------------------------------------------


def print_unwrapped(table: Table) -> None:
    """In a log (stdout not a terminal) a table is as wide as its rows need, so no row ever wraps; on a
    terminal, or where the rows fit, the console's own width (COLUMNS honoured)."""
    if not _whole(stdout):
        stdout.print(table)
        return
    from rich.measure import Measurement

    natural = Measurement.get(stdout, stdout.options.update(max_width=100_000), table).maximum
    if natural <= stdout.width:
        stdout.print(table)
        return
    stdout.width = natural  # rich clamps a print's width to the console's, so widen the console for this one
    try:
        stdout.print(table)
    finally:
        stdout._width = None  # back to asking COLUMNS and the terminal


# Characters attnlab itself prints, spelled in ASCII for a stream that cannot encode them.
ASCII_SPELLING = {
    "·": "-",
    "×": "x",
    "≤": "<=",
    "≥": ">=",
    "±": "+/-",
    "…": "...",
    "—": "-",
    "–": "-",
    "→": "->",
    "│": "|",
    "─": "-",
    "━": "-",
    "µ": "u",
    "≈": "~",
}


def _spell_in_ascii(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):  # registered for writing only: decoding never reaches here
        raise error
    text = error.object[error.start : error.end]
    return "".join(ASCII_SPELLING.get(c, "?") for c in text), error.end


def ascii_wanted(stream: TextIO) -> bool:
    """A stream that cannot encode UTF-8 (PYTHONIOENCODING=ascii), or a C/POSIX locale (LANG=C, which
    Python itself would quietly coerce to UTF-8)."""
    import os

    encoding = (getattr(stream, "encoding", None) or "ascii").lower().replace("-", "").replace("_", "")
    locale = os.environ.get("LC_ALL") or os.environ.get("LANG") or ""
    return not encoding.startswith("utf") or locale in ("C", "POSIX")


def prepare_streams() -> None:
    """Make stdout and stderr safe for logs: where ASCII is wanted, switch them to ASCII with attnlab's
    spellings (rich then draws its tables with ASCII too), so no character ends a run in a traceback."""
    import codecs
    import sys

    codecs.register_error("attnlab-ascii", _spell_in_ascii)
    for stream in (sys.stdout, sys.stderr):
        if ascii_wanted(stream) and hasattr(stream, "reconfigure"):
            stream.flush()
            stream.reconfigure(encoding="ascii", errors="attnlab-ascii")


# --- a batch of submissions ------------------------------------------------------------------


@contextmanager
def batch_progress(total: int) -> Iterator[Callable[[str], None]]:
    """A bar over submissions on stderr; in a log, one line as each submission finishes.

    Each line names a student's file, so it is shown (untrusted_text.py), on one line, never wrapped."""
    if not stderr.is_terminal:
        count = {"done": 0}

        def finished(description: str) -> None:
            count["done"] += 1
            stderr.print(
                f"[{count['done']}/{total}] {escape(shown(description))}",
                markup=True,
                soft_wrap=_whole(stderr),
                highlight=False,
            )

        yield finished
        return
    bar = RichProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )
    with bar:
        task = bar.add_task("grading submissions", total=total)
        yield lambda description: bar.update(task, advance=1, description=escape(shown(description)))


def batch_report(
    lab: str,
    rows: list[BatchRow],
    counts: list[tuple[int, str, int]],
    worst: int,
    course: list[CourseRow] | None = None,
) -> None:
    """The gradebook as a table (one row per submission; with `course`, one per student, with the score),
    then a line per exit code with its count."""
    table = Table(title=f"{lab}: {len(rows)} {'student' if course else 'submission'}{'s' if len(rows) != 1 else ''}")
    leading = ("student", "score") if course else ()
    for column in (*leading, "file", "verdict", "exit", "backend", "SPEEDUP", "gate", "first failing case", "s"):
        right = column in ("exit", "SPEEDUP", "s", "score")
        table.add_column(column, justify="right" if right else "left", overflow="fold")
    for i, row in enumerate(rows):
        style = "green" if row.verdict == Status.PASS else "bold red"
        skipped = f", {row.cases_skipped} skipped" if row.cases_skipped else ""  # a CPU pass is not a GPU pass
        who: tuple[str, ...] = ()
        if course:
            worth = course[i].score
            who = (
                escape(shown(course[i].student)),
                f"{worth.score_text} / {worth.max_score_text}" if worth.score_text else "",
            )
        table.add_row(
            *who,
            escape(shown(row.file)),
            f"[{style}]{escape(row.verdict)}[/]",
            str(row.exit_code),
            escape(row.backend + skipped) if row.backend else "",
            f"{row.speedup_text}x" if row.speedup_text else "",
            row.gate_met,
            escape(row.first_failing_case),
            row.seconds_text,
        )
    print_unwrapped(table)
    for note in sorted({c.score.unscored for c in course or [] if c.score.unscored}):
        stdout.print(escape(note), highlight=False, soft_wrap=_whole(stdout))
    for code, meaning, count in counts:
        stdout.print(f"exit {code} ({meaning}): {count} submission{'s' if count != 1 else ''}", highlight=False)
    stdout.print(f"exit {worst}: the batch exits with the worst submission's code.", highlight=False)
