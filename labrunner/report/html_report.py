"""The course report: one self-contained HTML page over a batch's results (`--html PATH`).

What staff look at after a batch, in one file they can mail or open offline: the gradebook as a
table sorted by a click on any header (numbers as numbers, verdicts from the worst down), each
submission's cases behind a fold, the spread of the scores (report/points.py) where the batch scored
its rows, the pairs of similar submissions for a person to judge, the spread of the lab's graded
figure, and a roofline of the passing kernels that were profiled. The page carries its own style and
script and refers to nothing outside itself: no URL, no font, no library.

Everything a student controls reaches this page (file names, the compiler's and the kernel's
output, the messages and hints quoting them), so:

- every text is written through `html.escape(..., quote=True)`, in an element or an attribute alike;
- the data the script sorts by is JSON inside `<script type="application/json">`, with `<`, `>` and
  `&` written `\\u003c`, `\\u003e`, `\\u0026`, so no `</script>` in a file name can end that element;
  the script only reads it (`JSON.parse`) and moves the rows the page already has, never writing
  markup;
- the page's Content-Security-Policy lets run only the one script it carries (by its hash), loads
  nothing from anywhere, and so would stop a handler that escaping had missed.

Rows are read by column name, whichever columns the gradebook has, in its order.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from labrunner.compile.backend import Backend
from labrunner.labs import LABS
from labrunner.report.course_figures import Distribution, distributions, roofline
from labrunner.report.results import ResultJson
from labrunner.report.svg_charts import dot_text, figure_text, histogram_svg, roofline_svg, si
from labrunner.run.untrusted_text import shown, shown_text
from labrunner.truth.verdict import SEVERITY, Status

# How the gradebook's columns are headed; a column not named here is headed by its name.
COLUMN_LABELS = {
    "file": "file",
    "sha256": "sha256",
    "verdict": "verdict",
    "exit_code": "exit",
    "speedup": "SPEEDUP",
    "gate_met": "gate met",
    "first_failing_case": "first failing case",
    "first_hint": "first hint",
    "hints": "hints",
    "cases_run": "cases run",
    "cases_skipped": "skipped",
    "cluster_state": "cluster state",
    "cluster_elapsed_s": "cluster s",
    "cluster_reason": "cluster's reason",
    "seconds": "s",
    "student_id": "student id",
    "max_score": "of",
    "unscored": "not scored",
    "similar_to": "similar to",
}
# Columns that hold text even where every value looks like a number (a hash of digits, a case named 17).
TEXT_COLUMNS = {
    "file",
    "sha256",
    "verdict",
    "first_failing_case",
    "hints",
    "first_hint",
    "backend",
    "gate_met",
    "cluster_reason",
    "student",
    "student_id",
    "name",
    "section",
    "unscored",
    "similar_to",
}
# The verdict column sorts from the worst down: a grader that could not run, then the run's own errors,
# then the case statuses most severe first (truth/verdict.py's order), pass last.
VERDICT_ORDER: tuple[str, ...] = (
    Status.ENVIRONMENT_MISSING,
    Status.USAGE_ERROR,
    Status.ERROR,
    Status.INTERRUPTED,
    Status.COMPILE_ERROR,
    *SEVERITY,
)
RUN_ERRORS = {Status.ENVIRONMENT_MISSING, Status.USAGE_ERROR, Status.ERROR, Status.INTERRUPTED, Status.COMPILE_ERROR}
KERNEL_OUTPUT_LINES = 20  # of a kernel's printf shown per submission; the rest is counted

STYLE = """
:root { --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --soft: #f6f8fa; --ok: #1a7f37; --bad: #cf222e;
  --slow: #9a6700; --err: #6e4c9e; --accent: #0969da; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif; }
main { max-width: 1400px; margin: 0 auto; padding: 24px 24px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 10px; padding-bottom: 6px; border-bottom: 1px solid var(--line); }
h3 { font-size: 14px; margin: 18px 0 6px; }
p { margin: 6px 0; }
.muted { color: var(--muted); }
.counts { display: flex; flex-wrap: wrap; gap: 8px; margin: 12px 0 0; padding: 0; list-style: none; }
.chip { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600;
  white-space: nowrap; border: 1px solid currentColor; }
.chip.ok { color: var(--ok); background: #dafbe1; } .chip.bad { color: var(--bad); background: #ffebe9; }
.chip.slow { color: var(--slow); background: #fff8c5; } .chip.err { color: var(--err); background: #fbefff; }
.chip.none { color: var(--muted); background: var(--soft); }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: 5px 7px; border-bottom: 1px solid var(--line); }
#gradebook { font-size: 13px; }
th { background: var(--soft); font-weight: 600; vertical-align: bottom; }
.scroll { overflow-x: auto; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.wrap { max-width: 320px; overflow-wrap: break-word; }
td.short { white-space: nowrap; }
td.long { min-width: 170px; max-width: 210px; }
.clamp { display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: 2; overflow: hidden; }
td.file { overflow-wrap: anywhere; min-width: 120px; max-width: 260px; }
code, pre { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; }
pre { background: var(--soft); border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px;
  white-space: pre-wrap; overflow-wrap: anywhere; margin: 6px 0; }
#gradebook th button { all: unset; cursor: pointer; }
#gradebook th button::after { content: "\\00a0\\2195"; color: #a0a8b0; font-size: 11px; }
#gradebook th[aria-sort="ascending"] button::after { content: "\\00a0\\25B2"; color: var(--accent); }
#gradebook th[aria-sort="descending"] button::after { content: "\\00a0\\25BC"; color: var(--accent); }
#gradebook th button:focus-visible { outline: 2px solid var(--accent); }
#gradebook tbody tr:hover { background: #f0f6ff; }
a { color: var(--accent); text-decoration: none; } a:hover { text-decoration: underline; }
.chart { max-width: 100%; height: auto; display: block; margin: 4px 0 8px; }
.chart text { font-size: 12px; fill: var(--ink); }
.chart .tick { fill: var(--muted); font-size: 11px; } .chart .label { fill: var(--muted); }
.chart .grid { stroke: #eaeef2; } .chart .axis { stroke: #8c959f; }
.chart .bar { fill: #54aeff; stroke: #0969da; } .chart .bar:hover { fill: #0969da; }
.chart .count { font-size: 11px; font-weight: 600; }
.chart .gate { stroke: var(--bad); stroke-width: 1.5; stroke-dasharray: 5 4; }
.chart .gate-label { fill: var(--bad); font-size: 11px; font-weight: 600; }
table.points, table.kernels, table.cases { width: auto; min-width: 640px; }
.chart .roof { fill: none; stroke: var(--ink); stroke-width: 2.5; }
.chart .ridge { stroke: #8c959f; stroke-dasharray: 2 3; }
.chart .roof-label, .chart .ridge-label { font-size: 11px; fill: var(--muted); }
.chart .dot { stroke: #fff; stroke-width: 1.5; } .chart .dot.memory { fill: #0969da; }
.chart .dot.compute { fill: #bf3989; } .chart .starter { fill: none; stroke: var(--ink); stroke-width: 2; }
.legend { display: flex; gap: 18px; font-size: 12px; color: var(--muted); margin: 0 0 6px; }
.legend span::before { content: ""; display: inline-block; width: 10px; height: 10px; margin-right: 5px;
  vertical-align: -1px; border-radius: 50%; }
.legend .memory::before { background: #0969da; } .legend .compute::before { background: #bf3989; }
.legend .starter::before { border: 2px solid var(--ink); border-radius: 0; width: 8px; height: 8px; }
details.sub { border: 1px solid var(--line); border-left-width: 4px; border-radius: 6px; margin: 8px 0; }
details.sub.ok { border-left-color: var(--ok); } details.sub.bad { border-left-color: var(--bad); }
details.sub.slow { border-left-color: var(--slow); } details.sub.err { border-left-color: var(--err); }
details.sub.none { border-left-color: var(--line); }
details.sub > summary { cursor: pointer; padding: 8px 12px; display: flex; gap: 10px; align-items: baseline;
  flex-wrap: wrap; }
details.sub > summary .name { font-weight: 600; overflow-wrap: anywhere; }
details.sub[open] > summary { border-bottom: 1px solid var(--line); background: var(--soft); }
details.sub .body { padding: 8px 14px 12px; }
ul.hints { margin: 6px 0; padding-left: 20px; } ul.hints li { margin: 2px 0; }
table.cases td.status { white-space: nowrap; }
tr.quiet td { color: var(--muted); }
.tools { margin: 0 0 8px; } .tools button { font: inherit; font-size: 12px; padding: 2px 10px; margin-right: 6px;
  border: 1px solid var(--line); border-radius: 6px; background: var(--soft); cursor: pointer; }
"""

SCRIPT = """
(() => {
  "use strict";
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const table = document.getElementById("gradebook");
  if (table) {
    const body = table.tBodies[0];
    const byIndex = new Map(Array.from(body.rows, (tr) => [Number(tr.dataset.i), tr]));
    const rank = new Map(data.verdict_order.map((verdict, i) => [verdict, i]));
    const key = (type, value) => {
      if (value === null || value === "") return null;
      if (type === "number") return Number(value);
      if (type === "verdict") return rank.has(value) ? rank.get(value) : rank.size;
      return String(value);
    };
    let sorted = { column: -1, direction: 1 };
    const sortBy = (column) => {
      const direction = sorted.column === column ? -sorted.direction : 1;
      sorted = { column, direction };
      const type = data.columns[column].type;
      const order = data.rows.map((row, i) => ({ i, key: key(type, row[column]) }));
      order.sort((a, b) => {
        if (a.key === null || b.key === null) {
          return (a.key === null ? 1 : 0) - (b.key === null ? 1 : 0) || a.i - b.i;
        }
        const c = typeof a.key === "number" ? a.key - b.key
          : a.key.localeCompare(b.key, undefined, { numeric: true, sensitivity: "base" });
        return c * direction || a.i - b.i;
      });
      for (const { i } of order) body.appendChild(byIndex.get(i));
      table.querySelectorAll("thead th").forEach((th, c) => {
        th.setAttribute("aria-sort", c === column ? (direction > 0 ? "ascending" : "descending") : "none");
      });
    };
    table.querySelectorAll("thead th button").forEach((button) => {
      button.addEventListener("click", () => sortBy(Number(button.dataset.column)));
    });
    table.dataset.sortable = "ready";
  }
  const open = () => {
    const target = location.hash ? document.getElementById(location.hash.slice(1)) : null;
    if (target && target.tagName === "DETAILS") target.open = true;
  };
  window.addEventListener("hashchange", open);
  open();
  for (const [id, state] of [["expand-all", true], ["collapse-all", false]]) {
    const button = document.getElementById(id);
    if (button) {
      button.addEventListener("click", () => {
        document.querySelectorAll("details.sub").forEach((details) => { details.open = state; });
      });
    }
  }
})();
"""


def _hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


# Only the page's own style and script, by their hashes; nothing is loaded from anywhere.
POLICY = (
    f"default-src 'none'; style-src '{_hash(STYLE)}'; script-src '{_hash(SCRIPT)}'; "
    "img-src 'none'; base-uri 'none'; form-action 'none'"
)


def esc(value: object) -> str:
    """Any text, safe in an element and in a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def script_json(data: Any) -> str:
    """JSON that can sit inside a <script> element: no `<`, `>` or `&` left to end it or open a comment."""
    text = json.dumps(data, ensure_ascii=True, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def verdict_class(verdict: object) -> str:
    """A verdict's colour on the page, from a fixed set (a verdict's own text never becomes a class)."""
    if verdict == Status.PASS:
        return "ok"
    if verdict == Status.SPEED_GATE:
        return "slow"
    if verdict in RUN_ERRORS:
        return "err"
    if verdict in VERDICT_ORDER:
        return "bad"
    return "none"


def chip(verdict: object) -> str:
    return f'<span class="chip {verdict_class(verdict)}">{esc(verdict)}</span>'


# --- the gradebook -----------------------------------------------------------------------------


def columns_of(rows: list[dict[str, Any]]) -> list[str]:
    """Every column any row has, in the first row's order, then others as they first appear."""
    return list(dict.fromkeys(name for row in rows for name in row))


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def column_type(name: str, rows: list[dict[str, Any]]) -> str:
    """ "verdict", "number" (every value present reads as a finite number) or "text"."""
    if name == "verdict":
        return "verdict"
    if name in TEXT_COLUMNS:
        return "text"
    present = [row.get(name) for row in rows if row.get(name) not in (None, "")]
    if present and all(_as_number(value) is not None for value in present):
        return "number"
    return "text"


def sort_value(value: Any, kind: str) -> Any:
    """A cell as the script sorts it: a number, a verdict's name, a text, or null where it is empty."""
    if value is None or value == "":
        return None
    if kind == "number":
        return _as_number(value)
    return shown(str(value))


def common_folder(files: list[str]) -> str:
    """The folder every file is in ("/course/subs/"), which the table leaves out of each name; "" if none."""
    folders = [f.split("/")[:-1] for f in files]
    shared: list[str] = []
    for parts in zip(*folders):
        if any(part != parts[0] for part in parts):
            break
        shared.append(parts[0])
    return "/".join(shared) + "/" if [p for p in shared if p] else ""


def short_name(file: str, folder: str) -> str:
    return file[len(folder) :] if folder and file.startswith(folder) else file


def cell(name: str, value: Any, kind: str, index: int, folder: str) -> str:
    text = "" if value is None else shown(str(value))
    if name == "file":
        return (
            f'<td class="file"><a href="#s-{index}" title="{esc(text)}">{breakable(short_name(text, folder))}</a></td>'
        )
    if name == "sha256":
        return f'<td><code title="{esc(text)}">{esc(text[:8])}</code></td>'
    if kind == "verdict":
        return f"<td>{chip(text)}</td>" if text else "<td></td>"
    if kind == "number":
        return f'<td class="num">{esc(text)}</td>'
    if len(text) > 60:  # a hint: its first lines here, all of it on hover and in the submission's cases
        return f'<td class="long"><div class="clamp" title="{esc(text)}">{esc(text)}</div></td>'
    return f'<td class="{"short" if len(text) <= 24 else "wrap"}">{esc(text)}</td>'


def breakable(path: str) -> str:
    """A path, escaped, that a narrow cell breaks after a `/` rather than inside a name."""
    return "/<wbr>".join(esc(part) for part in path.split("/"))


def column_label(name: str) -> str:
    return COLUMN_LABELS.get(name, name.replace("_", " "))


def gradebook_section(rows: list[dict[str, Any]], folder: str) -> tuple[str, dict[str, Any]]:
    """The table, and the data its script sorts by. A column empty in every row is named, not drawn."""
    if not rows:
        return "<h2>Gradebook</h2><p>No submissions.</p>", {"columns": [], "rows": []}
    every = columns_of(rows)
    names = [n for n in every if n == "file" or any(row.get(n) not in (None, "") for row in rows)]
    empty = [n for n in every if n not in names]
    kinds = [column_type(name, rows) for name in names]
    numeric = ' class="num"'
    head = "".join(
        f'<th scope="col" aria-sort="none" data-name="{esc(name)}"{numeric if kind == "number" else ""}>'
        f'<button type="button" data-column="{c}">{esc(column_label(name))}</button></th>'
        for c, (name, kind) in enumerate(zip(names, kinds))
    )
    body = "".join(
        f'<tr data-i="{i}">'
        + "".join(cell(name, row.get(name), kind, i, folder) for name, kind in zip(names, kinds))
        + "</tr>"
        for i, row in enumerate(rows)
    )
    data = {
        "columns": [{"name": name, "type": kind} for name, kind in zip(names, kinds)],
        "rows": [[sort_value(row.get(name), kind) for name, kind in zip(names, kinds)] for row in rows],
    }
    notes = ["Click a header to sort by it (again to reverse); a file name opens its cases below."]
    if folder:
        notes.append(f"Every file is in {folder}.")
    if empty:
        notes.append(f"Empty for every submission, so not shown: {', '.join(column_label(n) for n in empty)}.")
    section = (
        "<h2>Gradebook</h2>"
        f'<p class="muted">{esc(" ".join(notes))}</p>'
        f'<div class="scroll"><table id="gradebook"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
    )
    return section, data


# --- the charts --------------------------------------------------------------------------------


def distribution_section(results: list[dict[str, Any]]) -> str:
    found = distributions(results)
    title = "<h2>Distribution</h2>"
    if not found:
        backends = Counter(str(r.get("backend")) for r in results if r.get("backend"))
        why = " (the CPU backend checks correctness only)" if backends and set(backends) == {Backend.CPU} else ""
        return f"{title}<p>No submission was timed{esc(why)}, so there is no figure to show the spread of.</p>"
    return title + "".join(_distribution(d) for d in found)


def score_section(rows: list[dict[str, Any]]) -> str:
    """The spread of the scores (report/points.py's, the gradebook's `score` column) where the batch scored
    its rows; a row the grader could not finish has no score and is counted apart."""
    scored = [(str(r.get("student") or r.get("file") or ""), _as_number(r.get("score"))) for r in rows if "score" in r]
    if not scored:
        return ""
    values = [(who, value) for who, value in scored if value is not None]
    most = sorted({str(r.get("max_score")) for r in rows if r.get("max_score") not in (None, "")})
    unscored = sorted({str(r["unscored"]) for r in rows if r.get("unscored")})
    figures = [f"{len(values)} scored", f"out of {' or '.join(most)}" if most else ""]
    if len(values) < len(scored):
        figures.append(f"{len(scored) - len(values)} with no score (the grader could not finish)")
    text = "; ".join(f for f in figures if f) + "." + "".join(f" {u[0].upper()}{u[1:]}." for u in unscored)
    chart = histogram_svg(Distribution("Scores", "score", values)) if values else ""
    return f'<h2>Scores</h2><p class="muted">{esc(text)}</p>{chart}'


def similar_section(results: list[dict[str, Any]], threshold: float | None) -> str:
    """The pairs of submissions that share at least the threshold (report/similarity.py), for a person to
    judge: the table changes no verdict and no points."""
    if threshold is None:
        return ""
    pairs: dict[tuple[str, str], float] = {}
    for result in results:
        who = str(result.get("student") or "")
        for other in result.get("similar_to") or []:
            if isinstance(other, dict) and who:
                pair = tuple(sorted((who, str(other.get("student")))))
                pairs[(pair[0], pair[1])] = max(pairs.get((pair[0], pair[1]), 0.0), float(other.get("share") or 0))
    title = "<h2>Similar submissions</h2>"
    rule = (
        f"Pairs whose files share at least {threshold:.2f} of the smaller one's own code (the starter taken out; "
        "1.00: identical bytes), for a person to judge: this changes no verdict and no points."
    )
    if not pairs:
        return f'{title}<p class="muted">{esc(rule)}</p><p>No pair is that close.</p>'
    body = "".join(
        f'<tr><td>{esc(shown(a))}</td><td>{esc(shown(b))}</td><td class="num">{share:.2f}</td></tr>'
        for (a, b), share in sorted(pairs.items(), key=lambda item: (-item[1], item[0]))
    )
    return (
        f'{title}<p class="muted">{esc(rule)}</p>'
        '<table class="points" id="similar"><thead><tr><th>student</th><th>student</th>'
        f'<th class="num">share</th></tr></thead><tbody>{body}</tbody></table>'
    )


def _distribution(d: Distribution) -> str:
    values = sorted(v for _, v in d.values)
    middle = statistics.median(values)
    figures = (
        f"{len(values)} timed submission{'s' if len(values) != 1 else ''}; median {figure_text(middle, d.percent)}, "
        f"lowest {figure_text(values[0], d.percent)}, highest {figure_text(values[-1], d.percent)}"
    )
    if d.threshold is not None:
        below = sum(1 for v in values if v < d.threshold)
        figures += f"; {below} below the gate ({d.threshold_text})"
    return f'<h3>{esc(d.title)}</h3><p class="muted">{esc(figures)}</p>{histogram_svg(d)}'


def roofline_section(results: list[dict[str, Any]], folder: str = "") -> str:
    chart = roofline(results)
    title = "<h2>Roofline</h2>"
    if chart is None:
        return (
            f"{title}<p>No passing submission has a profile, so there is no roofline to draw "
            "(grade with <code>--profile</code> on a GPU with Nsight Compute for one).</p>"
        )
    c = chart.ceilings
    lines = [
        title,
        f'<p class="muted">{len(chart.points)} passing kernel{"s" if len(chart.points) != 1 else ""}, '
        "each whole call as "
        f"Nsight Compute measured it, under this GPU's roofs: FP32 peak {esc(si(c.peak_flops, 'FLOP/s'))} "
        f"({esc(c.peak_source)}), HBM {esc(si(c.bandwidth, 'B/s'))} ({esc(c.bandwidth_source)}).</p>",
        '<div class="legend"><span class="memory">memory-bound</span><span class="compute">compute-bound</span>'
        + ('<span class="starter">the starter</span>' if chart.starter else "")
        + "</div>",
        roofline_svg(chart),
        '<table class="points"><thead><tr><th>file</th><th class="num">FLOP per DRAM byte</th>'
        '<th class="num">attained</th><th>bound</th><th class="num">of its roof</th></tr></thead><tbody>',
    ]
    for dot in chart.points + ([chart.starter] if chart.starter else []):
        name = short_name(dot.file, folder) if dot is not chart.starter else f"starter ({dot.label})"
        lines.append(
            f'<tr title="{esc(dot_text(dot))}"><td class="file">{esc(name)}</td>'
            f'<td class="num">{dot.intensity:.3g}</td>'
            f'<td class="num">{esc(si(dot.flops_per_s, "FLOP/s"))}</td><td>{esc(dot.bound)}</td>'
            f'<td class="num">{100 * dot.fraction_of_roof:.0f}%</td></tr>'
        )
    lines.append("</tbody></table>")
    if chart.left_out:
        lines.append(
            '<p class="muted">Not drawn:</p><ul>' + "".join(f"<li>{esc(t)}</li>" for t in chart.left_out) + "</ul>"
        )
    return "".join(lines)


# --- each submission ---------------------------------------------------------------------------


def _err(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:.3g}"
    return "" if value is None else str(value)


def cases_table(cases: list[dict[str, Any]]) -> str:
    if not cases:
        return ""
    head = (
        '<table class="cases"><thead><tr><th>case</th><th class="num">rows</th><th class="num">prefix</th>'
        '<th>status</th><th class="num">max |err|</th><th class="num">bad elements</th><th>message</th>'
        "</tr></thead><tbody>"
    )
    body = []
    for case in cases:
        status = case.get("status")
        quiet = ' class="quiet"' if status in (Status.SKIPPED, Status.NOT_RUN) else ""
        message = shown_text(str(case.get("message") or ""))
        diagnosis = case.get("diagnosis")
        message_html = f"{esc(message)}<pre>{esc(shown_text(str(diagnosis)))}</pre>" if diagnosis else esc(message)
        body.append(
            f'<tr{quiet}><td>{esc(case.get("name"))}</td><td class="num">{esc(case.get("rows"))}</td>'
            f'<td class="num">{esc(case.get("prefix"))}</td><td class="status">{chip(status)}</td>'
            f'<td class="num">{esc(_err(case.get("max_abs_err")))}</td>'
            f'<td class="num">{esc(case.get("bad_elements") or "")}</td><td class="wrap">{message_html}</td></tr>'
        )
    return head + "".join(body) + "</tbody></table>"


def timing_lines(timing: dict[str, Any] | None) -> str:
    """What the timing found, in one line (a comparison) or a small table (lab 1's kernels)."""
    if not isinstance(timing, dict):
        return ""
    if timing.get("kind") == "pipeline":
        measured = [row for row in timing.get("rows") or [] if row.get("kernels")]
        if not measured:
            return ""
        row = measured[-1]
        must = row.get("must_move") or {}
        lines = [
            f"<h3>Timing at T = {esc(row.get('T'))}</h3>"
            '<table class="kernels"><thead><tr><th>kernel</th><th class="num">median ms</th>'
            '<th class="num">GB/s (bytes it must move)</th><th class="num">of the device copy</th></tr></thead><tbody>'
        ]
        for kernel, series in (row.get("kernels") or {}).items():
            moved = must.get(kernel) or {}
            fraction = moved.get("copy_fraction")
            lines.append(
                f'<tr><td>{esc(kernel)}</td><td class="num">{esc(_err(series.get("median_ms")))}</td>'
                f'<td class="num">{esc(_err(moved.get("gb_s")))}</td>'
                f'<td class="num">{"" if fraction is None else f"{100 * fraction:.1f}%"}</td></tr>'
            )
        total = row.get("total") or {}
        floor = row.get("floor") or {}
        if total:
            times = f"{floor['times_floor']:.2f}x its floor" if floor.get("times_floor") else ""
            lines.append(
                f'<tr><td>whole call</td><td class="num">{esc(_err(total.get("median_ms")))}</td>'
                f'<td colspan="2" class="muted">{esc(times)}</td></tr>'
            )
        return "".join(lines) + "</tbody></table>"
    speedup = timing.get("speedup")
    if not isinstance(speedup, int | float):
        return ""
    comparison = timing.get("comparison") or {}
    interval = ""
    if isinstance(comparison.get("ci_low"), int | float) and isinstance(comparison.get("ci_high"), int | float):
        interval = f" (95% interval {comparison['ci_low']:.3f} to {comparison['ci_high']:.3f})"
    over = f" over {shown(str(timing['baseline_label']))}" if timing.get("baseline_label") else ""
    text = f"SPEEDUP {speedup:.3f}x{over}{interval}"
    bandwidth = timing.get("bandwidth") or {}
    if isinstance(bandwidth.get("copy_fraction"), int | float):
        text += (
            f"; {bandwidth['student_tb_s']:.2f} TB/s, {100 * bandwidth['copy_fraction']:.1f}% of the same run's "
            f"device copy ({bandwidth['copy_tb_s']:.2f} TB/s)"
        )
    return f"<p>{esc(text)}</p>"


def submission_details(index: int, row: dict[str, Any], result: dict[str, Any] | None, folder: str) -> str:
    result = result or {}
    verdict = result.get("verdict") or row.get("verdict") or ""
    name = short_name(shown(str(result.get("file") or row.get("file") or "?")), folder)
    summary = shown(str(result.get("summary") or ""))
    facts = [summary] if summary and summary != verdict else []
    if result.get("backend"):
        facts.append(f"{result['backend']} backend")
    seconds = row.get("seconds") or result.get("seconds")
    if seconds not in (None, ""):
        facts.append(f"{_as_number(seconds) or 0:.1f} s")
    parts = [
        f'<details class="sub {verdict_class(verdict)}" id="s-{index}"><summary>{chip(verdict)}'
        f'<span class="name">{esc(name)}</span><span class="muted">{esc(" · ".join(facts))}</span></summary>'
        '<div class="body">'
    ]
    if not result:
        parts.append("<p>No result was written for this submission.</p>")
    if result.get("error"):
        parts.append(f"<pre>{esc(shown_text(str(result['error'])))}</pre>")
    hints = result.get("hints") or []
    if hints:
        items = "".join(
            f"<li><b>{esc(h.get('hazard') or 'hint')}</b>: {esc(shown(str(h.get('text') or '')))}</li>"
            for h in hints
            if isinstance(h, dict)
        )
        parts.append(f'<ul class="hints">{items}</ul>')
    parts.append(cases_table(result.get("cases") or []))
    parts.append(timing_lines(result.get("timing")))
    gate = result.get("gate") or {}
    if gate.get("message"):
        parts.append(f'<p class="muted">gate: {esc(shown(str(gate["message"])))}</p>')
    for note in result.get("notes") or []:
        parts.append(f'<p class="muted">{esc(shown_text(str(note)))}</p>')
    output = [shown(str(line)) for line in result.get("kernel_output") or []]
    if output:
        more = len(output) - KERNEL_OUTPUT_LINES
        text = "\n".join(output[:KERNEL_OUTPUT_LINES]) + (f"\n... and {more} more lines" if more > 0 else "")
        parts.append(f"<h3>What the kernel printed</h3><pre>{esc(text)}</pre>")
    if result.get("sha256"):
        parts.append(f'<p class="muted">sha256 <code>{esc(result["sha256"])}</code></p>')
    parts.append("</div></details>")
    return "".join(parts)


def submissions_section(rows: list[dict[str, Any]], results: list[dict[str, Any]], folder: str) -> str:
    if not rows and not results:
        return ""
    count = max(len(rows), len(results))
    entries = "".join(
        submission_details(i, rows[i] if i < len(rows) else {}, results[i] if i < len(results) else None, folder)
        for i in range(count)
    )
    return (
        "<h2>Each submission's cases</h2>"
        '<p class="tools"><button type="button" id="expand-all">open all</button>'
        '<button type="button" id="collapse-all">close all</button></p>'
        f"{entries}"
    )


# --- the page ----------------------------------------------------------------------------------


def header(lab: str, rows: list[dict[str, Any]], results: list[dict[str, Any]]) -> str:
    known = LABS.get(lab)
    title = f"{lab}: {known.title}" if known else lab
    count = max(len(rows), len(results))
    facts = [f"{count} submission{'s' if count != 1 else ''}"]
    backends = Counter(str(r["backend"]) for r in results if r.get("backend"))
    if backends:
        facts.append("graded on " + ", ".join(f"{name.upper()} ({n})" for name, n in sorted(backends.items())))
    versions = sorted({str(r["attnlab_version"]) for r in results if r.get("attnlab_version")})
    if versions:
        facts.append("attnlab " + ", ".join(versions))
    seeds = sorted({str(r["seed"]) for r in results if r.get("seed")})
    if seeds:
        facts.append("seed " + ", ".join(seeds))
    verdicts = Counter(str(r.get("verdict") or "no verdict") for r in (rows or results))
    ordered = sorted(verdicts.items(), key=lambda kv: VERDICT_ORDER.index(kv[0]) if kv[0] in VERDICT_ORDER else -1)
    counts = "".join(
        f'<li><span class="chip {verdict_class(v)}">{esc(v)}: {n}</span></li>' for v, n in reversed(ordered)
    )
    return (
        f'<header><h1>{esc(title)}</h1><p class="muted">{esc(" · ".join(facts))}</p>'
        f'<ul class="counts">{counts}</ul></header>'
    )


def html_page(
    lab: str, rows: list[dict[str, Any]], results: list[dict[str, Any]], similar_above: float | None = None
) -> str:
    folder = common_folder([shown(str(r.get("file") or "")) for r in rows or results])
    gradebook, data = gradebook_section(rows, folder)
    data["verdict_order"] = list(VERDICT_ORDER)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(POLICY)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(f'attnlab {lab}: course report')}</title>"
        f"<style>{STYLE}</style></head><body><main>"
        + header(lab, rows, results)
        + gradebook
        + score_section(rows)
        + similar_section(results, similar_above)
        + distribution_section(results)
        + roofline_section(results, folder)
        + submissions_section(rows, results, folder)
        + "</main>"
        f'<script type="application/json" id="report-data">{script_json(data)}</script>'
        f"<script>{SCRIPT}</script>"
        "</body></html>\n"
    )


def write_html_report(
    lab: str, rows: list[dict[str, Any]], results: list[ResultJson], path: Path, similar_above: float | None = None
) -> None:
    """The page for a batch of `lab`: `rows` the gradebook's (BatchRow.to_json, with the course's cells where
    the batch adds them), `results` each submission's JSON result, in the same order; `similar_above` the
    threshold the similar submissions were found at (None: none were looked for)."""
    Path(path).write_text(html_page(lab, rows, results, similar_above), encoding="utf-8")
