"""`attnlab profile` from end to end without a GPU: a stand-in worker (the oracle's answer for the check, the
worker's real trace code on the stand-in GPU of test_trace) and a stand-in `ncu` that returns a lab-1 CSV.
Then the command line's refusals, which need no stand-in at all.
"""

from __future__ import annotations

import io
import json
import shlex

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console
from test_range_pass import stand_in_ncu
from test_trace import ClockGpu, FakeCupti

import labrunner.measure.gpu_facts as gpu_facts
import labrunner.pipeline.profile as profile_module
from labrunner.cli import main
from labrunner.cli.guard import reporter_for
from labrunner.labs import get_lab
from labrunner.labs.definition import Lab
from labrunner.measure.trace import run_trace
from labrunner.pipeline import backend as backend_module
from labrunner.pipeline import prepare as prepare_module
from labrunner.pipeline.grading_run import CaseOptions, GradingRun
from labrunner.pipeline.profile import ProfileRequest, profile_submission
from labrunner.records.device import DeviceFacts
from labrunner.report import terminal
from labrunner.report.reporter import silent
from labrunner.report.results import RunResult
from labrunner.run.worker import CaseRun
from labrunner.truth import oracle
from labrunner.truth.cases import Seed
from labrunner.truth.poison import CANARY_BITS, GUARD_ELEMENTS

H200_FACTS = {
    "sm_count": 132,
    "compute_capability": [9, 0],
    "max_sm_clock_mhz": 1980,
    "max_memory_clock_mhz": 3201,
    "memory_bus_width_bits": 6144,
    "measured_copy_bytes_per_s": None,
}
# one call of lab 1 at T = 2048: scores writes the 512 MiB matrix, softmax reads and writes it, the weighted sum
# reads it
LAB1_METRICS = [
    ("attn_scores", "1,500,000", "20,971,520", "536,870,912"),
    ("attn_softmax", "250,000", "536,870,912", "536,870,912"),
    ("attn_weighted_sum", "1,250,000", "541,065,216", "16,777,216"),
]


def judged_run(lab, submission, result):
    """A run whose cases were judged on the GPU, as `append_range_summary` follows one (no worker is asked)."""
    return GradingRun(lab, submission, "gpu", None, CaseOptions(Seed(1, "--seed")), reporter_for(result))


def lab1_csv() -> str:
    lines = [
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
    ]
    for index, (kernel, ns, read, write) in enumerate(LAB1_METRICS):
        for metric, unit, value in (
            ("gpu__time_duration.sum", "nsecond", ns),
            ("dram__bytes_read.sum", "byte", read),
            ("dram__bytes_write.sum", "byte", write),
            ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "50.00"),
        ):
            lines.append(
                f'"{index}","1","python3","host","{kernel}","1","7","(16, 16, 1)","(128, 128, 32)","0","9.0",'
                f'"Command line profiler metrics","{metric}","{unit}","{value}"'
            )
    return "\n".join(lines) + "\n"


class StandInWorker:
    """The Worker's interface: the check answered with the oracle's own output, the trace by the real trace code."""

    def __init__(self, backend: str, cupti: FakeCupti | None = None):
        self.backend = backend
        self.cupti = cupti

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def load(self, *args, **kwargs):
        pass

    def run_case(self, role, launches, inputs, writable, returned, timeout_s, reverse_threads=False, quiet=False):
        rows = inputs["q"].shape[0]
        out = oracle.attention(inputs["q"], inputs["k"], inputs["v"], prefix=inputs["k"].shape[0] - rows)
        band = np.full(GUARD_ELEMENTS, CANARY_BITS, dtype=np.uint32).view(np.float32)
        return CaseRun(
            {"out": out.astype(np.float32).ravel()},
            {name: (band, band) for name in writable},
            {name: array.copy() for name, array in inputs.items()},
        )

    def trace(self, request, timeout_s):
        return run_trace(ClockGpu(self.cupti), {"student": {}}, request, flush=lambda: None)

    def kernel_output(self):
        return []


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    csv_file = tmp_path / "lab1.csv"
    csv_file.write_text(lab1_csv())
    args_file = stand_in_ncu(tmp_path, monkeypatch, f'cp {shlex.quote(str(csv_file))} "$log"\n')
    monkeypatch.setattr(prepare_module, "resolve_backend", lambda device, unsafe_cpu=False: ("gpu", []))
    monkeypatch.setattr(backend_module, "gpu_status", lambda: (True, "NVIDIA H200"))  # profile asks first
    monkeypatch.setattr(profile_module, "device_facts", lambda backend: DeviceFacts("NVIDIA H200"))
    monkeypatch.setattr(gpu_facts, "read_gpu_facts", lambda *a, **k: dict(H200_FACTS))
    monkeypatch.setitem(__import__("sys").modules, "cupti", None)  # no cupti-python: the trace uses events
    monkeypatch.setattr(profile_module, "Worker", StandInWorker)
    printed = io.StringIO()
    monkeypatch.setattr(terminal, "stdout", Console(file=printed, width=250, highlight=False, color_system=None))
    return printed, args_file


@pytest.mark.slow
def test_profile_lab1_traces_every_call_runs_the_range_pass_and_places_each_kernel(stand_ins, tmp_path):
    printed, args_file = stand_ins
    lab = get_lab("lab1")
    trace_path, csv_path = tmp_path / "trace1.json", tmp_path / "saved.csv"
    result = RunResult("profile", "lab1", "solution.cu")
    profile_submission(
        ProfileRequest(lab="lab1", file=lab.solution_path, seed=3, trace_path=trace_path, ncu_csv_path=csv_path),
        result,
        reporter_for(result),
    )
    profile = result.profile.to_json()
    assert (result.verdict, int(result.exit_code)) == ("pass", 0)
    assert profile["schema"] == "attnlab.profile/1"
    trace = profile["trace"]
    assert (trace["source"], trace["why_not_cupti"], trace["calls"]) == (
        "events",
        "cupti-python is not installed (pip install 'attnlab[profile]')",
        5,
    )
    assert trace["shapes"] == ["T = 512", "T = 1024", "T = 2048"]
    per_call = {}
    for s in trace["slices"]:
        per_call.setdefault((s["shape"], s["call"]), []).append(s["kernel"])
    assert per_call == {
        (shape, call): ["attn_scores", "attn_softmax", "attn_weighted_sum"]
        for shape in trace["shapes"]
        for call in range(5)
    }
    # events know no registers: they come from the compile gate's report
    assert all(isinstance(s["registers"], int) and s["registers"] > 0 for s in trace["slices"])
    events = json.loads(trace_path.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == 45
    # the Range pass: T = 2048, the solution's three kernels after three warm-up calls, no starter row
    args = args_file.read_text().splitlines()
    assert args[args.index("-k") + 1] == "regex:^(attn_scores|attn_softmax|attn_weighted_sum)$"
    assert (args[args.index("--launch-skip") + 1], args[args.index("--launch-count") + 1]) == ("9", "3")
    report = profile["range"]
    assert report["available"] and report["shape"] == {"label": "T = 2048", "rows": 2048, "prefix": 0}
    (contender,) = report["contenders"]
    scores, softmax, wsum = contender["kernels"]
    assert scores["point"]["verdict"] == "compute-bound: 5.7 TFLOP/s, 9% of the FP32 roof"
    assert softmax["point"]["verdict"] == "memory-bound: 0.0 FLOP/B, 87% of HBM bandwidth"
    assert contender["duration_ms"] == 3.0 and contender["dram_bytes"] == 2_189_426_688
    assert profile["no_starter_row"] == (
        "lab1's starter has empty kernel bodies, so the Range pass has no starter row to compare with"
    )
    assert profile["traffic"]["naive_bytes"] == 2_189_426_688  # the model's naive figure, byte for byte
    assert csv_path.read_text() == lab1_csv()
    text = printed.getvalue()
    assert f"  measured DRAM, {lab.solution_path}: 2189.43 MB = 52.20x flash, 1.000x naive" in text
    assert "  attn_softmax: memory-bound: 0.0 FLOP/B, 87% of HBM bandwidth" in text
    assert text.splitlines()[-1] == "PASS on the GPU (exit 0)"
    from labrunner.report.results import write_json

    write_json(result, tmp_path / "profile.json")  # strict JSON: no NaN or infinity anywhere in the profile
    written = json.loads((tmp_path / "profile.json").read_text())
    assert (written["command"], written["profile"]["schema"], len(written["profile"]["trace"]["slices"])) == (
        "profile",
        "attnlab.profile/1",
        45,
    )


@pytest.mark.slow
def test_cupti_records_are_the_traces_source_where_cupti_python_is_there(stand_ins, monkeypatch):
    cupti = FakeCupti()
    monkeypatch.setitem(__import__("sys").modules, "cupti", type("module", (), {"cupti": cupti}))
    monkeypatch.setattr(profile_module, "Worker", lambda backend: StandInWorker(backend, cupti))
    result = RunResult("profile", "lab1", "solution.cu")
    profile_submission(
        ProfileRequest(lab="lab1", file=get_lab("lab1").solution_path, calls=2, range_pass=False),
        result,
        reporter_for(result),
    )
    trace = result.profile.to_json()["trace"]
    assert (trace["source"], trace["why_not_cupti"], len(trace["slices"])) == ("cupti", None, 3 * 2 * 3)
    assert {s["registers"] for s in trace["slices"]} == {40}  # the driver's figure, not the compile gate's
    assert result.profile.to_json()["range"] == {
        "available": False,
        "message": "the Range pass was not asked for (--no-range)",
    }


# --- the command line ------------------------------------------------------------------------


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return CliRunner(env={"COLUMNS": "200"})


def test_profile_without_a_gpu_is_exit_6_in_one_line(runner, monkeypatch):
    monkeypatch.setattr(backend_module, "gpu_status", lambda: (False, "no GPU found"))
    result = runner.invoke(main, ["profile", "lab2", str(get_lab("lab2").solution_path)])
    assert result.exit_code == 6
    assert result.stderr == (
        "error: profile needs a GPU: no GPU found; check correctness on the CPU with "
        f"`attnlab grade lab2 {get_lab('lab2').solution_path}`\n"
    )


def test_an_unwritable_trace_path_is_refused_before_any_work(runner):
    result = runner.invoke(main, ["profile", "lab2", "missing.cu", "--trace", "no/such/folder/t.json"])
    assert result.exit_code == 2
    assert result.stderr == "error: --trace no/such/folder/t.json: cannot write (No such file or directory)\n"


def test_profile_of_a_file_that_does_not_compile_is_exit_3(runner, tmp_path, monkeypatch):
    # on a machine with a GPU (without one, profile says so before it reads the file)
    monkeypatch.setattr(backend_module, "gpu_status", lambda: (True, "NVIDIA H200"))
    broken = tmp_path / "broken.cu"
    broken.write_text('extern "C" __global__ void flash_prefill(const float* q) { nope; }\n')
    result = runner.invoke(main, ["profile", "lab2", str(broken), "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 3
    data = json.loads((tmp_path / "r.json").read_text())
    assert (data["command"], data["verdict"], data["exit_code"]) == ("profile", "compile-error", 3)
    assert "profile" not in data  # nothing was profiled


@pytest.mark.slow
def test_grade_profile_appends_the_range_pass_in_one_line(tmp_path, monkeypatch):
    from test_range_pass import DATA

    # this stand-in also answers for the target program: it writes the GPU's facts where the payload says
    facts = json.dumps(H200_FACTS)
    stand_in_ncu(
        tmp_path,
        monkeypatch,
        f'cp {shlex.quote(str(DATA))} "$log"\n'
        'for last in "$@"; do :; done\n'
        f"{shlex.quote(__import__('sys').executable)} -c 'import json, sys; "
        f'json.dump(json.loads(sys.argv[2]), open(json.load(open(sys.argv[1]))["facts_path"], "w"))\' '
        f'"$last" {shlex.quote(facts)}\n',
    )
    printed = io.StringIO()
    monkeypatch.setattr(terminal, "stdout", Console(file=printed, width=400, highlight=False, color_system=None))
    lab = get_lab("lab2")
    from labrunner.compile.gate import load_submission

    result = RunResult("grade", "lab2", "solution.cu", backend="gpu")
    profile_module.append_range_summary(
        judged_run(lab, load_submission(lab, lab.solution_path, "solution.cu"), result), result, "sm_90", 1
    )
    starter = prepare_module.display_path(lab.starter_path)
    assert printed.getvalue() == (
        "Range pass at C = 2048, P = 2048 (ncu): solution.cu 2.177 ms, DRAM 52.4 MB, SM 74%, compute-bound: "
        f"23.7 TFLOP/s, 35% of the FP32 roof | {starter} 28.413 ms, DRAM 65.0 MB, SM 55%, compute-bound: "
        "1.8 TFLOP/s, 3% of the FP32 roof\n"
    )
    profile = result.profile.to_json()
    assert profile["schema"] == "attnlab.profile/1" and profile["range"]["available"]


@pytest.mark.slow
def test_grade_profile_on_the_cpu_says_there_is_no_range_pass(monkeypatch, capsys):
    lab = get_lab("lab2")
    from labrunner.compile.gate import load_submission

    result = RunResult("grade", "lab2", "solution.cu", backend="cpu")
    profile_module.append_range_summary(
        judged_run(lab, load_submission(lab, lab.solution_path, "solution.cu"), result), result, "sm_90", 1
    )
    assert result.profile is None
    assert capsys.readouterr().err == "note: --profile: no Range pass, since the kernel was not timed on the GPU\n"


@pytest.mark.slow
def test_a_worker_that_dies_with_cupti_on_is_traced_again_with_events(stand_ins, monkeypatch):
    from labrunner.run.worker import WorkerFailure

    class DiesUnderCupti(StandInWorker):
        def trace(self, request, timeout_s):
            if request["use_cupti"]:
                raise WorkerFailure("crash", "the worker process died (SIGSEGV)")
            return super().trace(request, timeout_s)

    monkeypatch.setattr(profile_module, "Worker", DiesUnderCupti)
    result = RunResult("profile", "lab1", "solution.cu")
    profile_submission(
        ProfileRequest(lab="lab1", file=get_lab("lab1").solution_path, calls=1, range_pass=False),
        result,
        reporter_for(result),
    )
    trace = result.profile.to_json()["trace"]
    assert trace["source"] == "events" and len(trace["slices"]) == 9
    assert trace["why_not_cupti"] == (
        "the worker died with CUPTI on (the worker process died (SIGSEGV)); the trace was taken again with events"
    )


def test_plot_without_matplotlib_is_refused_before_any_work(runner, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    result = runner.invoke(main, ["profile", "lab2", str(get_lab("lab2").solution_path), "--plot", "r.png"])
    assert result.exit_code == 6
    assert result.stderr == "error: --plot needs matplotlib, which is not installed: pip install 'attnlab[profile]'\n"


def test_the_roofline_plot_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in the profile extra, not the dev one")
    from labrunner.measure.roofline import Point, ceilings_from_facts
    from labrunner.report.roofline_plot import plot_roofline

    ceilings, _ = ceilings_from_facts(H200_FACTS)
    point = Point(51_547_996_160, 52_428_800, 2.17664e-3, ceilings)
    path = tmp_path / "roofline.png"
    plot_roofline(ceilings.to_json(), [{"label": "solution.cu", **point.to_json()}], "lab2", path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_malformed_trace_from_the_worker_is_an_error_with_its_reason_not_a_traceback(stand_ins, monkeypatch):
    from labrunner.exit_codes import AttnlabError

    class Malformed(StandInWorker):
        def trace(self, request, timeout_s):
            reply = super().trace(request, timeout_s)
            reply["slices"][0]["kernel"] = "cupy_fill"
            return reply

    monkeypatch.setattr(profile_module, "Worker", Malformed)
    with pytest.raises(AttnlabError, match="malformed") as caught:
        profile_submission(
            ProfileRequest(lab="lab1", file=get_lab("lab1").solution_path, calls=1, range_pass=False),
            RunResult("profile", "lab1", "solution.cu"),
            silent(),
        )
    assert (caught.value.message, int(caught.value.exit_code)) == (
        "the trace came back malformed: the trace names a kernel the lab never launched: 'cupy_fill'",
        4,
    )


# --- lab 3: decode against a paged cache, memory-bound ------------------------------------------

LAB3_CSV = __import__("pathlib").Path(__file__).parent / "data" / "ncu_lab3_solution_starter.csv"
LAB3_SEED = 20261129  # the public default: the layout bench times unless --seed says otherwise


def saving_ncu(tmp_path, monkeypatch, csv_file) -> tuple:
    """A stand-in ncu that answers with `csv_file`, writes the GPU's facts where the payload says (as the
    target program does), and keeps what the target program was given: its payload and the paged
    layout's arrays beside it (the Range pass's own folder is gone once it returns)."""
    tmp_path.mkdir(exist_ok=True)
    payload, fixed = tmp_path / "payload.json", tmp_path / "fixed.npz"
    script = (
        f'cp {shlex.quote(str(csv_file))} "$log"\n'
        'for last in "$@"; do :; done\n'
        f'cp "$last" {shlex.quote(str(payload))}\n'
        f"{shlex.quote(__import__('sys').executable)} -c 'import json, shutil, sys; "
        'payload = json.load(open(sys.argv[1])); sets = payload.get("sets"); '
        'json.dump(json.loads(sys.argv[3]), open(payload["facts_path"], "w")); '
        'sets and shutil.copy(sets["fixed_path"], sys.argv[2])\' '
        f'"$last" {shlex.quote(str(fixed))} {shlex.quote(json.dumps(H200_FACTS))}\n'
    )
    return stand_in_ncu(tmp_path, monkeypatch, script), payload, fixed


def lab3_contenders():
    from labrunner.compile.gate import load_submission

    lab = get_lab("lab3")
    starter = prepare_module.display_path(lab.starter_path)
    return lab, [
        ("solution.cu", "student", load_submission(lab, lab.solution_path, "solution.cu")),
        (starter, "starter", load_submission(lab, lab.starter_path, starter)),
    ]


def test_decode_at_lab3s_timing_shape_does_2_flop_per_byte_that_must_move():
    lab = get_lab("lab3")
    layout = lab.timing_layout(64, 32768, LAB3_SEED)
    keys = int(layout["fixed"]["seqLens"].sum())
    assert (keys, layout["pages"]) == (1_161_730, 72_639)
    # per sequence, per query head, per visible key: 2 * 64 for q . k and 2 * 64 for p * v
    assert lab.flops(64, 32768, layout) == keys * 32 * 256 == 9_516_892_160
    # K and V once per KV head, q and out once, every table entry in use once, the 64 lengths
    assert (
        lab.bytes_to_move(64, 32768, layout)
        == 4 * (2 * keys * 8 * 64 + 2 * 64 * 32 * 64 + 72_639 + 64)
        == 4_759_785_468
    )
    assert (lab.shape_label(64, 32768), kernel_flops_of(lab)) == ("B = 64, longest 32,768", (9_516_892_160, 0.0))


def kernel_flops_of(lab):
    """The partial kernel does every q . k and p * v; the combine's rescaling counts for none."""
    from labrunner.pipeline.profile import kernel_flops

    return kernel_flops(lab, "decode_partial", 9_516_892_160.0), kernel_flops(lab, "decode_combine", 9_516_892_160.0)


@pytest.mark.slow
def test_the_range_pass_over_a_decode_csv_is_memory_bound_and_sends_the_paged_layout_not_its_values(
    tmp_path, monkeypatch
):
    from labrunner.measure.roofline import ceilings_from_facts
    from labrunner.pipeline.profile import PROFILE_KEY_WORD, RangeAt, range_pass

    _, payload_file, fixed_file = saving_ncu(tmp_path, monkeypatch, LAB3_CSV)
    lab, contenders = lab3_contenders()
    ceilings, _ = ceilings_from_facts(H200_FACTS)
    report = range_pass(lab, contenders, RangeAt("B = 64, longest 32,768", 64, 32768, LAB3_SEED), ceilings).to_json()
    assert report["available"], report["message"]
    solution, starter = report["contenders"]
    assert (
        [k["kernel"] for k in solution["kernels"]]
        == [k["kernel"] for k in starter["kernels"]]
        == ["decode_partial", "decode_combine"]
    )
    assert (solution["flops"], solution["dram_bytes"], solution["duration_ms"]) == (
        9_516_892_160,
        4_796_350_464,
        1.142048,
    )
    assert solution["point"]["verdict"] == "memory-bound: 2.0 FLOP/B, 85% of HBM bandwidth"
    assert starter["point"]["verdict"] == "memory-bound: 1.5 FLOP/B, 5% of HBM bandwidth"
    partial, combine = solution["kernels"]
    assert (partial["flops"], combine["flops"]) == (9_516_892_160, 0.0)
    assert combine["point"]["verdict"] == "memory-bound: 0.0 FLOP/B, 26% of HBM bandwidth"
    # the target program gets the timing-set request bench sends, never 4.8 GB of values
    payload = json.loads(payload_file.read_text())
    assert payload["sets"] == {
        "key": [LAB3_SEED, PROFILE_KEY_WORD],
        "rows": 64,
        "prefix": 32768,
        "pages": 72_639,
        "fixed_path": payload["sets"]["fixed_path"],
    }
    layout = lab.timing_layout(64, 32768, LAB3_SEED)
    with np.load(fixed_file) as fixed:
        assert sorted(fixed.files) == ["blockTable", "seqLens"]
        assert np.array_equal(fixed["blockTable"], layout["fixed"]["blockTable"])
        assert np.array_equal(fixed["seqLens"], layout["fixed"]["seqLens"])
    # each contender its own partial buffers: 32 partitions of 1,024 keys for the solution, one for the starter
    assert [c["workspace"]["partMax"] for c in payload["contenders"]] == [64 * 32 * 32, 64 * 32]
    assert payload_file.stat().st_size < 1_000_000


class DecodeStandInWorker(StandInWorker):
    """The check answered with the decode oracle's own output; the trace by the real trace code, whose
    timing-set fill runs on the numpy definition. Keeps every trace request it was given."""

    requests: list = []

    def run_case(self, role, launches, inputs, writable, returned, timeout_s, reverse_threads=False, quiet=False):
        from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS

        q = inputs["q"].reshape(-1, QUERY_HEADS, HEAD_DIM)
        out = oracle.decode_attention(
            q, inputs["k"], inputs["v"], inputs["blockTable"].reshape(q.shape[0], -1), inputs["seqLens"]
        )
        band = np.full(GUARD_ELEMENTS, CANARY_BITS, dtype=np.uint32).view(np.float32)
        return CaseRun(
            {"out": out.astype(np.float32).ravel()},
            {name: (band, band) for name in writable},
            {name: array.copy() for name, array in inputs.items()},
        )

    def trace(self, request, timeout_s):
        self.requests.append(request)
        return super().trace(request, timeout_s)


@pytest.fixture
def lab3_stand_ins(stand_ins, tmp_path, monkeypatch):
    """Lab 3 at a small timing shape (B = 3, longest 40), so the numpy fill of its pages is quick."""
    import test_trace

    import labrunner.measure.input_pool as input_pool
    from labrunner.truth.cases import Case, Catalogue

    catalogue = Catalogue(
        lab="lab3",
        cases=(Case("small", rows=0, lengths=(1, 17, "p+3")),),
        timing={"rows": 3, "prefix": 40, "copy_fraction": 0.8},
    )
    monkeypatch.setattr(Lab, "catalogue", property(lambda lab: catalogue))
    monkeypatch.setattr(input_pool, "CudaSets", input_pool.NumpySets)
    monkeypatch.setitem(test_trace.DURATION_NS, "decode_partial", 40_000)
    monkeypatch.setitem(test_trace.DURATION_NS, "decode_combine", 5_000)
    monkeypatch.setattr(DecodeStandInWorker, "requests", [])
    monkeypatch.setattr(profile_module, "Worker", DecodeStandInWorker)
    _, payload_file, _ = saving_ncu(tmp_path / "ncu", monkeypatch, LAB3_CSV)
    return stand_ins[0], payload_file


@pytest.mark.slow
def test_profile_lab3_traces_both_kernels_of_every_call_on_paged_inputs_made_in_the_worker(lab3_stand_ins, tmp_path):
    from result_schema import validate_file

    from labrunner.report.results import write_json
    from labrunner.truth.paged_cache import bytes_to_move

    printed, payload_file = lab3_stand_ins
    lab = get_lab("lab3")
    trace_path = tmp_path / "trace3.json"
    result = RunResult("profile", "lab3", "solution.cu")
    profile_submission(
        ProfileRequest(lab="lab3", file=lab.solution_path, seed=7, trace_path=trace_path), result, reporter_for(result)
    )
    assert (result.verdict, int(result.exit_code)) == ("pass", 0)
    assert [(c.name, c.rows, c.prefix) for c in result.cases] == [("small", 3, 1027)]  # p + 3 at the solution's p
    (request,) = DecodeStandInWorker.requests
    (shape,) = request["shapes"]
    layout = lab.timing_layout(3, 40, 7)
    # the paged inputs go as bench's timing-set request (key, shape, pages, table, lengths), not as values
    assert "inputs" not in shape and shape["sets"]["pages"] == layout["pages"]
    assert (shape["sets"]["key"], shape["sets"]["rows"], shape["sets"]["prefix"]) == ([7, 0x70F11E], 3, 40)
    assert np.array_equal(shape["sets"]["fixed"]["blockTable"], layout["fixed"]["blockTable"])
    assert np.array_equal(shape["sets"]["fixed"]["seqLens"], layout["fixed"]["seqLens"])
    profile = result.profile.to_json()
    trace = profile["trace"]
    assert trace["shapes"] == ["B = 3, longest 40"]
    per_call: dict = {}
    for s in trace["slices"]:
        per_call.setdefault(s["call"], []).append(s["kernel"])
    assert per_call == {call: ["decode_partial", "decode_combine"] for call in range(5)}
    assert sum(e["ph"] == "X" for e in json.loads(trace_path.read_text())["traceEvents"]) == 10
    # the lab's own model beside ncu's bytes, in place of the prefill's traffic model
    must_move = bytes_to_move(layout["fixed"]["seqLens"].tolist(), 32, 8, 64)
    assert "traffic" not in profile and profile["must_move"] == {"label": "B = 3, longest 40", "bytes": must_move}
    assert [c["point"]["bound"] for c in profile["range"]["contenders"]] == ["memory-bound", "memory-bound"]
    text = printed.getvalue()
    assert (
        f"bytes one call must move at B = 3, longest 40 (the lab's model, as bench counts them): "
        f"{must_move / 1e6:,.2f} MB" in text
    )
    assert (
        f"  measured DRAM, {lab.solution_path}: 4,796.35 MB = {4_796_350_464 / must_move:.3f}x the bytes that "
        "must move" in text
    )
    assert "  call 5  " in text and text.splitlines()[-1] == "PASS on the GPU (exit 0)"
    # the target program was sent the same layout, filled there on the GPU
    assert json.loads(payload_file.read_text())["sets"]["pages"] == layout["pages"]
    write_json(result, tmp_path / "profile3.json")
    written = validate_file(tmp_path / "profile3.json")
    assert (written["command"], written["lab"], len(written["profile"]["trace"]["slices"])) == ("profile", "lab3", 10)


@pytest.mark.slow
def test_grade_profile_of_lab3_appends_the_range_pass_in_one_line(tmp_path, monkeypatch):
    saving_ncu(tmp_path, monkeypatch, LAB3_CSV)
    printed = io.StringIO()
    monkeypatch.setattr(terminal, "stdout", Console(file=printed, width=400, highlight=False, color_system=None))
    lab, ((_, _, solution), (starter, _, _)) = lab3_contenders()
    result = RunResult("grade", "lab3", "solution.cu", backend="gpu")
    profile_module.append_range_summary(judged_run(lab, solution, result), result, "sm_90", LAB3_SEED)
    assert printed.getvalue() == (
        "Range pass at B = 64, longest 32,768 (ncu): solution.cu 1.142 ms, DRAM 4796.4 MB, SM 32%/18%, "
        f"memory-bound: 2.0 FLOP/B, 85% of HBM bandwidth | {starter} 24.883 ms, DRAM 6220.1 MB, SM 7%/4%, "
        "memory-bound: 1.5 FLOP/B, 5% of HBM bandwidth\n"
    )


@pytest.mark.slow
def test_ncus_target_fills_the_paged_cache_from_the_key_and_gives_each_contender_its_own_partials(
    tmp_path, monkeypatch
):
    import labrunner.measure.input_pool as input_pool
    import labrunner.run.profile_target as target
    from labrunner.pipeline.profile import RangeAt, range_pass
    from labrunner.truth.timing_sets import make_set

    _, payload_file, fixed_file = saving_ncu(tmp_path, monkeypatch, LAB3_CSV)
    lab, contenders = lab3_contenders()
    range_pass(lab, contenders, RangeAt("B = 3, longest 1,100", 3, 1100, 7), None)
    payload = json.loads(payload_file.read_text())
    payload["facts_path"] = str(tmp_path / "facts.json")  # the range pass's own folder is gone by now
    payload["sets"]["fixed_path"] = str(fixed_file)
    payload_file.write_text(json.dumps(payload))
    launched = []

    class NumpyTargetGpu:
        def compile(self, source, filename, entry_types):
            return filename

        def upload(self, array):
            return array.copy()

        def launch(self, kernels, launch, buffers):
            launched.append((kernels, launch.kernel, buffers))

        def synchronize(self):
            pass

    monkeypatch.setattr(target, "GpuDevice", NumpyTargetGpu)
    monkeypatch.setattr(target, "read_gpu_facts", lambda: {"sm_count": 132})
    monkeypatch.setattr(input_pool, "CudaSets", input_pool.NumpySets)
    target.main(str(payload_file))
    layout = lab.timing_layout(3, 1100, 7)
    made = make_set((7, 0x70F11E), 0, 3, 1100, layout["pages"])  # set 0 of the profile's key, as the worker's trace
    # three warm-up rounds and ncu's one, each the solution's two kernels then the starter's two
    assert [(who, kernel) for who, kernel, _ in launched] == [
        ("solution.cu", "decode_partial"),
        ("solution.cu", "decode_combine"),
        (prepare_module.display_path(lab.starter_path), "decode_partial"),
        (prepare_module.display_path(lab.starter_path), "decode_combine"),
    ] * 4
    solution, starter = launched[0][2], launched[2][2]
    for name in ("q", "k", "v"):
        assert np.array_equal(solution[name], made[name]) and solution[name] is starter[name]
    assert np.array_equal(solution["blockTable"], layout["fixed"]["blockTable"])
    assert np.array_equal(solution["seqLens"], layout["fixed"]["seqLens"])
    # the solution's two 1,024-key partitions and the starter's one: partial buffers of their own sizes
    assert (solution["partMax"].size, starter["partMax"].size) == (3 * 32 * 2, 3 * 32 * 1)
    assert solution["out"] is not starter["out"]
