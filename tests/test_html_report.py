"""The course report (`--html PATH`): the charts' numbers, the page's escaping, and the page in a browser.

The browser tests grade real submissions on the CPU backend in a batch (the lab-2 solution, a wrong
kernel and a compile error, under hostile file names), add synthetic GPU results built from the
timing and profile records (a SPEEDUP each, a gate, profiles for the roofline) to make twelve, and
open the page in headless Chromium (tests/headless_browser.py). The page's screenshot is kept as
this run's artifact: `$ATTNLAB_ARTIFACTS/html_report.png`, else tests/artifacts/html_report.png.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import needed_in_ci
from headless_browser import Browser, chromium_path

from labrunner.measure.roofline import Point, ceilings_from_facts
from labrunner.records.gate import Gate
from labrunner.records.profile import Profile, RangeContender, RangeReport
from labrunner.records.roofline import Ceilings, GpuFacts, RooflinePoint
from labrunner.records.timing import (
    Bandwidth,
    Comparison,
    CopyTimed,
    KernelBytes,
    PipelineRow,
    PipelineTiming,
    Series,
    SpeedupTiming,
)
from labrunner.report.batch_row import BatchRow
from labrunner.report.course_figures import Bin, RooflineDot, distributions, histogram, nice_step, roofline
from labrunner.report.html_report import column_type, columns_of, html_page, script_json, write_html_report

REPO = Path(__file__).resolve().parent.parent
H200: GpuFacts = {
    "sm_count": 132,
    "compute_capability": [9, 0],
    "max_sm_clock_mhz": 1980,
    "max_memory_clock_mhz": 3201,
    "memory_bus_width_bits": 6144,
}
A100: GpuFacts = {
    "sm_count": 108,
    "compute_capability": [8, 0],
    "max_sm_clock_mhz": 1410,
    "max_memory_clock_mhz": 1593,
    "memory_bus_width_bits": 5120,
}
IMG = "<img src=x onerror=alert(1)>.cu"
SCRIPT_BREAK = "</script><script>alert(1)</script>.cu"
ATTRIBUTE_BREAK = '"><svg onload=alert(2)>.cu'


# --- synthetic results, built from the records the pipeline writes --------------------------------


def base_result(file: str, verdict: str = "pass", exit_code: int = 0) -> dict:
    """A schema-true GPU result of lab 2 with one passing case; each test changes what it needs."""
    return {
        "schema": "attnlab.result/1",
        "command": "grade",
        "lab": "lab2",
        "file": file,
        "backend": "gpu",
        "device": {"name": "NVIDIA H200"},
        "seed": "secret",
        "verdict": verdict,
        "summary": verdict,
        "exit_code": exit_code,
        "error": None,
        "skipped": 0,
        "hints": [],
        "decisive_case": None,
        "oracle_proof": None,
        "compile": None,
        "cases": [
            {
                "name": "C1-P31",
                "status": "pass",
                "rows": 1,
                "prefix": 31,
                "max_abs_err": 3.3e-07,
                "nonfinite": 0,
                "bad_elements": 0,
                "first_bad": None,
                "failing_rows": [],
                "message": "",
                "diagnosis": None,
            }
        ],
        "timing": None,
        "gate": None,
        "notes": [],
        "kernel_output": [],
        "attnlab_version": "0.1.0",
        "sha256": hashlib.sha256(file.encode()).hexdigest(),
        "options": {},
        "gpu": "NVIDIA H200",
        "seconds": 12.5,
    }


def speedup_timing(speedup: float, fraction: float | None = None) -> dict:
    """SPEEDUP against the starter (10 ms): the student's median is 10 / speedup ms; a lab-3 timing
    carries the fraction of the device copy reached as its bandwidth."""
    student, baseline = Series({"median_ms": 10.0 / speedup}), Series({"median_ms": 10.0})
    bandwidth = None
    if fraction is not None:
        copies = [CopyTimed(bytes=2 * 10**9, median_ms=1.0)]  # 4 TB/s: each byte read and written
        moved = int(fraction * 4e12 * (10.0 / speedup) * 1e-3)
        bandwidth = Bandwidth.measured(moved, Comparison(student, baseline, speedup, speedup, speedup), copies)
    return SpeedupTiming(
        rows=1,
        prefix=31,
        gflop=0.5,
        student_label="student",
        baseline_label="kernels/lab2/starter.cu",
        comparison=Comparison(student, baseline, speedup, speedup * 0.98, speedup * 1.02),
        bandwidth=bandwidth,
    ).to_json()


def contender(
    label: str, role: str, flops: float, dram_bytes: float, seconds: float, facts: GpuFacts
) -> RangeContender:
    ceilings, _ = ceilings_from_facts(facts)
    assert ceilings is not None
    point = RooflinePoint.of(Point(flops, dram_bytes, seconds, ceilings))
    return RangeContender(label, role, [], seconds * 1e3, dram_bytes, flops, point)


def profiled(file: str, flops: float, dram_bytes: float, seconds: float, facts: GpuFacts = H200) -> dict:
    """`grade --profile`'s Range pass: the student's whole call and the starter's (4 GFLOP, 4 GB, 4 ms)."""
    contenders = [
        contender(file, "student", flops, dram_bytes, seconds, facts),
        contender("kernels/lab2/starter.cu", "starter", 4e9, 4e9, 4e-3, facts),
    ]
    return Profile(range=RangeReport(available=True, message=None, gpu_facts=facts, contenders=contenders)).to_json()


def timed(file: str, speedup: float, verdict: str = "pass", profile: dict | None = None) -> dict:
    result = base_result(file, verdict, 5 if verdict == "speed-gate" else 0)
    result["timing"] = speedup_timing(speedup)
    passed = verdict != "speed-gate"
    message = f"SPEEDUP {speedup:.2f} {'>=' if passed else '<'} 2.00 required for NVIDIA H200"
    result["gate"] = Gate("met" if passed else "missed", passed, message, 2.0, speedup).to_json()
    if profile is not None:
        result["profile"] = profile
    return result


def crashed(file: str) -> dict:
    result = base_result(file, "crash", 4)
    result["decisive_case"] = "C1-P31"
    result["cases"][0].update(
        status="crash",
        max_abs_err=None,
        message="the kernel crashed: an illegal memory access </script><b>",
        diagnosis="compute-sanitizer: Invalid __global__ write of size 4 at flash.cu:88 </script>",
    )
    result["hints"] = [{"hazard": "bounds", "text": "guard the last tile: <script>alert(4)</script>"}]
    result["kernel_output"] = [f"line {i} </script>" for i in range(25)]
    return result


def synthetic_batch() -> list[dict]:
    """Nine GPU results: eight timed (two above ten, so a text sort would misplace them), one missed
    gate, profiles for three passing kernels (one not placeable beside them), and a crash."""
    return [
        timed("bob.cu", 2.41, profile=profiled("bob.cu", 4e9, 2e9, 1e-3)),
        timed("carol.cu", 9.5, profile=profiled("carol.cu", 8e9, 1e9, 0.5e-3)),
        timed("dave.cu", 10.25, profile=profiled("dave.cu", 8e9, 0.25e9, 0.4e-3)),
        timed("erin.cu", 1.6, verdict="speed-gate", profile=profiled("erin.cu", 4e9, 4e9, 5e-3)),
        timed(SCRIPT_BREAK, 3.0),
        timed("frank.cu", 2.9, profile=profiled("frank.cu", 4e9, 1e9, 1e-3, facts=A100)),
        timed("grace.cu", 4.2),
        crashed("heidi.cu"),
        timed("ivan.cu", 2.2),
    ]


def rows_of(results: list[dict]) -> list[dict]:
    return [BatchRow.from_json(r).to_json() for r in results]


# --- the charts' numbers -----------------------------------------------------------------------


def test_histogram_bins_are_a_nice_width_with_every_value_in_its_bin():
    entries = [("a", 0.8), ("b", 1.2), ("c", 1.25), ("d", 2.0), ("e", 3.1)]
    bins = histogram(entries)
    assert nice_step(0.8, 3.1) == 0.25
    assert [(b.low, b.high) for b in bins] == [(0.75 + 0.25 * i, 1.0 + 0.25 * i) for i in range(10)]
    assert [b.files for b in bins] == [["a"], ["b"], ["c"], [], [], ["d"], [], [], [], ["e"]]


def test_histogram_keeps_a_value_on_an_edge_in_the_bin_it_opens():
    # 0.3 / 0.025 is 11.999999999999998 in floating point: 0.3 still opens the bin [0.3, 0.325)
    bins = histogram([("a", 0.1), ("b", 0.3)])
    assert nice_step(0.1, 0.3) == 0.025
    assert (bins[0].low, bins[-1].low, bins[-1].high, len(bins)) == (0.1, 0.3, 0.325, 9)
    assert [b.count for b in bins] == [1, 0, 0, 0, 0, 0, 0, 0, 1]
    assert histogram([("a", 2.0), ("b", 2.0)]) == [Bin(2.0, 2.1, ["a", "b"])]
    assert histogram([]) == []


def test_lab2_distribution_is_speedup_over_the_baseline_with_the_gate():
    found = distributions(synthetic_batch())
    assert len(found) == 1
    (spread,) = found
    assert spread.title == "SPEEDUP over kernels/lab2/starter.cu"
    assert spread.values == [
        ("bob.cu", 2.41),
        ("carol.cu", 9.5),
        ("dave.cu", 10.25),
        ("erin.cu", 1.6),
        (SCRIPT_BREAK, 3.0),
        ("frank.cu", 2.9),
        ("grace.cu", 4.2),
        ("ivan.cu", 2.2),
    ]
    assert (spread.threshold, spread.threshold_text, spread.percent) == (2.0, "2x", False)
    assert [(b.low, b.high, b.count) for b in histogram(spread.values)] == [
        (1.0, 2.0, 1),
        (2.0, 3.0, 3),
        (3.0, 4.0, 1),
        (4.0, 5.0, 1),
        (5.0, 6.0, 0),
        (6.0, 7.0, 0),
        (7.0, 8.0, 0),
        (8.0, 9.0, 0),
        (9.0, 10.0, 1),
        (10.0, 11.0, 1),
    ]


def test_lab3_distribution_is_the_fraction_of_the_device_copy():
    results = []
    for name, fraction in (("a.cu", 0.52), ("b.cu", 0.71), ("c.cu", 0.74)):
        result = base_result(name)
        result["lab"], result["timing"] = "lab3", speedup_timing(1.5, fraction)
        result["gate"] = Gate("met", True, "", required_fraction=0.6, copy_fraction=fraction).to_json()
        results.append(result)
    (spread,) = distributions(results)
    assert spread.title == "Fraction of the device copy's bandwidth reached"
    # the fraction as Bandwidth computes it from the bytes moved, the student's median and the copy
    assert [(f, round(v, 6)) for f, v in spread.values] == [("a.cu", 0.52), ("b.cu", 0.71), ("c.cu", 0.74)]
    assert (spread.threshold, spread.threshold_text, spread.percent) == (0.6, "60%", True)
    # a span of 0.22 in at most ten bins: 0.025 wide, from 0.5 to 0.75
    bins = histogram(spread.values)
    assert [(b.low, b.high) for b in bins] == [
        (0.5, 0.525),
        (0.525, 0.55),
        (0.55, 0.575),
        (0.575, 0.6),
        (0.6, 0.625),
        (0.625, 0.65),
        (0.65, 0.675),
        (0.675, 0.7),
        (0.7, 0.725),
        (0.725, 0.75),
    ]
    assert [b.files for b in bins] == [["a.cu"], [], [], [], [], [], [], [], ["b.cu"], ["c.cu"]]


def test_lab1_distributions_are_each_kernels_fraction_of_the_copy_at_the_largest_size_measured():
    def pipeline(fractions: dict[str, float]) -> dict:
        stats = {name: Series({"median_ms": 1.0}) for name in (*fractions, "total")}
        must = {k: KernelBytes(10**9, 1000.0, f) for k, f in fractions.items()}
        measured = replace(PipelineRow.at(4096, stats), must_move=must)
        smaller = replace(PipelineRow.at(1024, stats), must_move={k: KernelBytes(10**8, 10.0, 0.01) for k in fractions})
        return PipelineTiming(rows=[smaller, measured, PipelineRow.at(65536)]).to_json()

    results = []
    for name, scores, softmax in (("a.cu", 0.4, 0.2), ("b.cu", 0.6, 0.3)):
        result = base_result(name)
        result["lab"], result["timing"] = "lab1", pipeline({"scores": scores, "softmax": softmax})
        results.append(result)
    found = distributions(results)
    assert [(d.title, d.values, d.percent) for d in found] == [
        ("scores: fraction of the device copy's bandwidth at T = 4096", [("a.cu", 0.4), ("b.cu", 0.6)], True),
        ("softmax: fraction of the device copy's bandwidth at T = 4096", [("a.cu", 0.2), ("b.cu", 0.3)], True),
    ]


def test_nothing_timed_gives_no_distribution_and_says_why_in_one_line():
    results = [base_result("a.cu") | {"backend": "cpu", "gpu": None}]
    assert distributions(results) == []
    page = html_page("lab2", rows_of(results), results)
    assert (
        "<p>No submission was timed (the CPU backend checks correctness only), so there is no figure to show the "
        "spread of.</p>" in page
    )


def test_roofline_points_are_the_passing_profiled_calls_against_the_gpus_roofs():
    chart = roofline(synthetic_batch())
    assert chart is not None
    # 132 SMs x 1980 MHz x 128 FP32 lanes x 2; 3201 MHz x 2 x 6144 bits / 8
    assert (chart.ceilings.peak_flops, chart.ceilings.bandwidth) == (66908160000000.0, 4916736000000.0)
    bandwidth = 4916736000000.0
    assert chart.points == [
        RooflineDot("bob.cu", "bob.cu", 2.0, 4e9 / 1e-3, "memory-bound", 2e9 / 1e-3 / bandwidth),
        RooflineDot("carol.cu", "carol.cu", 8.0, 8e9 / 0.5e-3, "memory-bound", 1e9 / 0.5e-3 / bandwidth),
        RooflineDot("dave.cu", "dave.cu", 32.0, 8e9 / 0.4e-3, "compute-bound", 8e9 / 0.4e-3 / 66908160000000.0),
    ]
    assert chart.starter == RooflineDot(
        "starter", "kernels/lab2/starter.cu", 1.0, 4e9 / 4e-3, "memory-bound", 4e9 / 4e-3 / bandwidth
    )
    assert chart.left_out == [
        "erin.cu: profiled, but its verdict is speed-gate",
        "frank.cu: profiled on a GPU with other ceilings (19.5 TFLOP/s, 2.04 TB/s)",
    ]


def test_roofline_reads_attnlab_profiles_own_ceilings_and_says_why_a_profile_is_left_out():
    no_pass = base_result("a.cu")
    no_pass["profile"] = Profile(range=RangeReport(available=False, message="ncu is not installed")).to_json()
    written = base_result("b.cu")
    written["profile"] = profiled("b.cu", 4e9, 2e9, 1e-3, facts=A100)
    written["profile"]["ceilings"] = Ceilings(1e13, 1e12, "given", "given").to_json()
    chart = roofline([no_pass, written])
    assert chart is not None
    assert (chart.ceilings.peak_flops, chart.ceilings.bandwidth) == (1e13, 1e12)
    assert chart.left_out == ["a.cu: no Range pass (ncu is not installed)"]
    assert roofline([base_result("c.cu")]) is None


def test_page_without_a_profile_says_so_in_one_line_and_draws_no_roofline():
    results = synthetic_batch()
    for result in results:
        result.pop("profile", None)
    page = html_page("lab2", rows_of(results), results)
    assert (
        "<h2>Roofline</h2><p>No passing submission has a profile, so there is no roofline to draw (grade with "
        "<code>--profile</code> on a GPU with Nsight Compute for one).</p>" in page
    )
    assert page.count("<svg") == 1  # the histogram only


# --- what the page holds -----------------------------------------------------------------------


class Elements(HTMLParser):
    """Every element the page's markup makes, with its attributes, and each <script>'s text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def elements(page: str) -> Elements:
    parsed = Elements()
    parsed.feed(page)
    return parsed


def test_the_page_refers_to_nothing_outside_itself():
    results = synthetic_batch()
    page = html_page("lab2", rows_of(results), results)
    assert not re.search(r"https?:|ftp:|//[a-z0-9]", page, re.IGNORECASE)
    assert "url(" not in page and "@import" not in page
    parsed = elements(page)
    assert not [t for t, _ in parsed.tags if t in ("link", "img", "iframe", "object", "embed", "base", "image")]
    references = [(t, a) for t, a in parsed.tags for name in a if name in ("src", "href", "xlink:href", "srcset")]
    assert references and all(a["href"].startswith("#s-") for _, a in references)  # links to its own details


def test_hostile_names_and_texts_appear_only_escaped():
    results = synthetic_batch()
    results[0]["file"] = IMG
    results[1]["file"] = ATTRIBUTE_BREAK
    rows = rows_of(results)
    page = html_page("lab2", rows, results)
    for raw in (IMG, SCRIPT_BREAK, ATTRIBUTE_BREAK, "<script>alert(4)</script>", "</script><b>"):
        assert raw not in page
    assert "&lt;img src=x onerror=alert(1)&gt;.cu" in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;.cu" in page
    assert "&quot;&gt;&lt;svg onload=alert(2)&gt;.cu" in page
    assert "guard the last tile: &lt;script&gt;alert(4)&lt;/script&gt;" in page
    parsed = elements(page)
    assert [t for t, _ in parsed.tags if t == "script"] == ["script", "script"]
    assert [t for t, _ in parsed.tags if t == "img"] == []
    assert [t for t, _ in parsed.tags if t == "svg"] == ["svg", "svg"]  # the histogram and the roofline
    assert not [name for _, a in parsed.tags for name in a if name.startswith("on")]
    assert page.count("</script>") == 2
    data, _ = parsed.scripts
    assert "<" not in data and ">" not in data and "&" not in data
    assert [row[0] for row in json.loads(data)["rows"]] == [r["file"] for r in rows]
    # the kernel's printf is cut at twenty lines, and the rest counted
    assert "line 19 &lt;/script&gt;\n... and 5 more lines</pre>" in page


def test_script_json_cannot_end_its_element():
    assert script_json({"f": "</script><!--&"}) == '{"f": "\\u003c/script\\u003e\\u003c!--\\u0026"}'
    assert json.loads(script_json({"f": "</script><!--&"})) == {"f": "</script><!--&"}


def test_columns_are_read_by_name_in_the_rows_order_whatever_they_are():
    rows = [
        {"file": "a.cu", "verdict": "pass", "backend": "cpu", "cases_run": 7, "cases_skipped": "3", "first_hint": ""},
        {"file": "b.cu", "verdict": "wrong", "backend": "gpu", "cases_run": 10, "cases_skipped": "0", "extra": "x"},
    ]
    rows[1]["first_hint"], rows[1]["cluster_state"] = "subtract the row max", ""
    assert columns_of(rows) == [
        "file",
        "verdict",
        "backend",
        "cases_run",
        "cases_skipped",
        "first_hint",
        "extra",
        "cluster_state",
    ]
    types = [column_type(name, rows) for name in columns_of(rows)]
    assert types == ["text", "verdict", "text", "number", "number", "text", "text", "text"]
    page = html_page("lab2", rows, [])
    heads = re.findall(r'<button type="button" data-column="\d+">([^<]*)</button>', page)
    assert heads == ["file", "verdict", "backend", "cases run", "skipped", "first hint", "extra"]
    assert "Empty for every submission, so not shown: cluster state.</p>" in page
    assert page.count('<tr data-i="') == 2


# --- a real batch, and the page in Chromium ----------------------------------------------------


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> tuple[Path, list[dict]]:
    """A batch graded on the CPU with --html: the solution, a wrong kernel and a compile error whose
    compiler message quotes a `</script>`, under hostile names. (The page, and each file's result.)"""
    from labrunner.run.cpu_device import cpu_backend_status

    if not cpu_backend_status()[0]:
        pytest.skip("the CPU backend cannot run here (no C++ compiler or sandbox)")
    folder = tmp_path_factory.mktemp("html-batch")
    subs, out = folder / "subs", folder / "out"
    subs.mkdir()
    (subs / "alice.cu").write_bytes((REPO / "kernels/lab2/solution.cu").read_bytes())
    (subs / IMG).write_bytes((REPO / "tests/fixtures/lab2/wrong/causal_off_by_one.cu").read_bytes())
    (subs / ATTRIBUTE_BREAK).write_text("#error </script><script>alert(3)</script>\n")
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    environment.pop("ATTNLAB_SEED", None)
    command = ["grade", "lab2", str(subs), "--device", "cpu", "--case", "C1-P31", "--jobs", "2"]
    completed = subprocess.run(
        [sys.executable, "-m", "labrunner", *command, "--out-dir", str(out), "--html", str(folder / "report.html")],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 3, completed.stderr  # the worst: the compile error
    written = [json.loads(path.read_text()) for path in out.glob("*.json")]
    by_name = {Path(r["file"]).name: r for r in written if r.get("schema") == "attnlab.result/1"}
    return folder / "report.html", [by_name[name] for name in (ATTRIBUTE_BREAK, IMG, "alice.cu")]


@pytest.fixture(scope="module")
def browser():
    binary = chromium_path()
    if binary is None:
        needed_in_ci("Chromium is not installed (apt-get install chromium)")
    opened = Browser(binary)
    yield opened
    opened.close()


def artifact_path() -> Path:
    folder = Path(os.environ.get("ATTNLAB_ARTIFACTS") or REPO / "tests" / "artifacts")
    return folder / "html_report.png"


FILES_IN_ORDER = "Array.from(document.querySelectorAll('#gradebook tbody td.file'), td => td.textContent)"


def click(browser: Browser, selector: str) -> None:
    browser.evaluate(f"document.querySelector({json.dumps(selector)}).click()")


@pytest.mark.slow
def test_the_batchs_page_in_chromium(graded, browser):
    page, _ = graded
    browser.events.clear()
    url = browser.open(page)
    text = page.read_text()
    assert "&lt;/script&gt;&lt;script&gt;alert(3)&lt;/script&gt;" in text  # the compiler's message, escaped
    # every file is in the same folder, which the table says once and leaves out of each name
    assert browser.evaluate(FILES_IN_ORDER) == [ATTRIBUTE_BREAK, IMG, "alice.cu"]
    assert f"Every file is in {page.parent / 'subs'}/." in browser.evaluate("document.body.textContent")
    assert browser.evaluate("document.querySelectorAll('img, [onerror], [onload]').length") == 0
    assert browser.evaluate("document.scripts.length") == 2
    assert browser.errors() == []
    assert browser.requests() == [url]


@pytest.mark.slow
def test_twelve_submissions_in_chromium_sort_open_and_are_kept_as_a_screenshot(graded, browser, tmp_path):
    _, real = graded
    results = real + synthetic_batch()
    rows = rows_of(results)
    page = tmp_path / "report.html"
    write_html_report("lab2", rows, results, page)
    browser.events.clear()
    url = browser.open(page)
    names = [r["file"] for r in results]
    assert browser.evaluate("document.querySelectorAll('#gradebook tbody tr').length") == 12
    assert browser.evaluate("document.querySelectorAll('details.sub').length") == 12
    assert browser.evaluate("document.getElementById('gradebook').dataset.sortable") == "ready"
    assert browser.evaluate(FILES_IN_ORDER) == names
    # numbers sort as numbers (9.5 before 10.25), the unscored last in the batch's order, either way
    unscored = [names[0], names[1], names[2], "heidi.cu"]
    click(browser, '#gradebook th[data-name="speedup"] button')
    by_speedup = ["erin.cu", "ivan.cu", "bob.cu", "frank.cu", SCRIPT_BREAK, "grace.cu", "carol.cu", "dave.cu"]
    assert browser.evaluate(FILES_IN_ORDER) == by_speedup + unscored
    assert (
        browser.evaluate("document.querySelector('#gradebook th[data-name=speedup]').getAttribute('aria-sort')")
        == "ascending"
    )
    click(browser, '#gradebook th[data-name="speedup"] button')
    assert browser.evaluate(FILES_IN_ORDER) == by_speedup[::-1] + unscored
    # verdicts from the worst down: the compile error, the crash, the wrong answer, the missed gate, the passes
    click(browser, '#gradebook th[data-name="verdict"] button')
    passes = [n for n, r in zip(names, results) if r["verdict"] == "pass"]
    assert browser.evaluate(FILES_IN_ORDER) == [names[0], "heidi.cu", names[1], "erin.cu", *passes]
    # a file's link opens its cases
    assert browser.evaluate("document.getElementById('s-1').open") is False
    browser.evaluate("document.querySelector('#gradebook a[href=\"#s-1\"]').click()")
    assert browser.evaluate("document.getElementById('s-1').open") is True
    assert browser.evaluate("document.querySelectorAll('#s-1 table.cases tbody tr').length") == 1
    assert browser.evaluate("document.querySelectorAll('svg.chart').length") == 2
    assert browser.evaluate("document.querySelectorAll('svg.chart circle.dot').length") == 3
    assert browser.errors() == []
    assert browser.requests() == [url]
    browser.evaluate("document.getElementById('s-10').open = true")  # the crash, with its diagnosis and output
    shot = browser.screenshot(artifact_path())
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"the course report's screenshot: {shot}")


@pytest.mark.slow
def test_the_browser_check_sees_an_uncaught_error_a_console_error_and_a_blocked_load(browser, tmp_path):
    """The check above would be worthless if it could not fail: a page that throws, logs an error and
    tries to load an image under a policy that forbids it gives all three."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" content="img-src \'none\'">'
        '</head><body><img src="x.png"><script>console.error("said"); undefinedName();</script></body></html>'
    )
    browser.events.clear()
    browser.open(page)
    errors = browser.errors()
    assert any(e.startswith("Uncaught ReferenceError: undefinedName is not defined") for e in errors), errors
    assert "console.error: said" in errors
    assert any("Content Security Policy" in e and "x.png" in e for e in errors), errors
