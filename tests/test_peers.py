"""The PyTorch peers: checked against the oracle before they are timed, timed interleaved with the
student's kernel on the same input sets, reported with what their time includes, and left out, in
one line, where PyTorch cannot run.

The worker's real timing code runs in process on the numpy stand-in for the GPU (`gpu_standin`),
with a numpy stand-in for the peer, through the real wire; then the real PyTorch code, where
PyTorch is installed, on the CPU through the same path.
"""

from __future__ import annotations

import re
import sys
from dataclasses import replace

import numpy as np
import pytest
from gpu_standin import CountingTimer, InProcessWorker, NumpyGpu, NumpyPeer
from result_schema import timing_json, validate_result

import labrunner.measure.timed_runs as timed_runs
import labrunner.pipeline.timing_stage as benchmark
from labrunner.labs import get_lab
from labrunner.labs.definition import Lab
from labrunner.measure import peers
from labrunner.measure.sampling import TimingOptions
from labrunner.pipeline.timing_stage import (
    Contender,
    Contenders,
    CpuReferences,
    PeerContender,
    Sampling,
    TimedShape,
    WholeCall,
    check_peer,
    time_pipeline,
    time_speedup,
)
from labrunner.records.timing import PipelineTiming, SpeedupTiming
from labrunner.report.results import RunResult

LAB2, LAB1 = get_lab("lab2"), get_lab("lab1")
ROWS, PREFIX = 3, 31
KEY = [12345, 67890]
OPTIONS = TimingOptions(seed=3, min_samples=6, budget_s=0.05)
SDPA, EAGER = peers.SPECS["sdpa"], peers.SPECS["torch"]


@pytest.fixture
def in_process(monkeypatch):
    import labrunner.measure.gpu_timer
    import labrunner.measure.input_pool as input_pool

    monkeypatch.setattr(labrunner.measure.gpu_timer, "CupyTimer", CountingTimer)
    monkeypatch.setattr(input_pool, "CudaSets", input_pool.NumpySets)
    monkeypatch.setattr(benchmark, "MIN_COPY_BYTES", 1 << 20)  # the device copy every run times, kept small here


@pytest.fixture
def fixed_key(monkeypatch):
    monkeypatch.setattr(benchmark, "new_key", lambda: list(KEY))


def standin_peer(monkeypatch, peer: NumpyPeer) -> NumpyPeer:
    monkeypatch.setattr(timed_runs, "load_peer", lambda device, name: peer)
    return peer


def torch_on_the_cpu(monkeypatch):
    """The real PyTorch peers, on the stand-in's numpy buffers (so on the CPU)."""
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'attnlab[peers]')")
    monkeypatch.setattr(timed_runs, "load_peer", lambda device, name: peers.load(name, on_gpu=False))


def speedup_vs_peer(worker, rows=ROWS, prefix=PREFIX):
    constants = LAB2.constants({})
    return timing_json(
        time_speedup(
            LAB2,
            worker,
            Contenders(Contender("flash.cu", constants), PeerContender("sdpa", SDPA.label)),
            TimedShape(rows, prefix),
            Sampling(seed=3, options=OPTIONS, references=CpuReferences()),
        )
    )


# --- lab 2: the peer in the baseline's place ------------------------------------------------------


def test_lab2_vs_sdpa_times_the_peer_as_the_baseline_on_the_students_sets(in_process, monkeypatch):
    device = NumpyGpu(PREFIX)
    peer = standin_peer(monkeypatch, NumpyPeer())
    timing, failure = speedup_vs_peer(InProcessWorker(device))
    assert failure is None
    assert timing["baseline_label"] == "PyTorch SDPA fp32"
    enqueue = timing["peer"].pop("enqueue")
    assert enqueue["head_start_ms"] == 0.0  # the stand-in timer has no GPU to hold
    assert timing["peer"] == {
        "name": "sdpa",
        "label": "PyTorch SDPA fp32",
        "includes": SDPA.includes,
        "status": "timed",
        "median_ms": 1.0,
        "speedup": 1.0,
        "ci_low": 1.0,
        "ci_high": 1.0,
    }
    # interleaved and paired: the peer ran once per student call, on the very same sets, in order
    assert peer.seen == device.seen
    assert timing["verified_calls"]["baseline"] == timing["verified_calls"]["student"] >= 2


class HoldingTimer(CountingTimer):
    """Records each head start the GPU would get."""

    def __init__(self):
        self.holds = []

    def hold(self, microseconds):
        self.holds.append(microseconds)


def test_every_peer_call_gets_its_head_start_and_the_host_time_is_kept(in_process, monkeypatch):
    import labrunner.measure.gpu_timer

    timer = HoldingTimer()
    monkeypatch.setattr(labrunner.measure.gpu_timer, "CupyTimer", lambda: timer)
    peer = standin_peer(monkeypatch, NumpyPeer())
    timing, failure = speedup_vs_peer(InProcessWorker(NumpyGpu(PREFIX)))
    assert failure is None
    assert timer.holds == [1000.0] * peer.calls  # every peer call, warm-up included; the student's none
    enqueue = timing["peer"]["enqueue"]
    assert enqueue["head_start_ms"] == 1.0 and 0 < enqueue["median_ms"] <= enqueue["max_ms"]


def test_a_head_start_too_short_for_the_host_is_warned_about_with_its_numbers():
    assert (
        benchmark.head_start_warning("PyTorch SDPA fp32", {"median_ms": 0.9, "max_ms": 3.0, "head_start_ms": 1.0}) == []
    )
    assert benchmark.head_start_warning(
        "PyTorch eager fp32", {"median_ms": 1.25, "max_ms": 3.0, "head_start_ms": 1.0}, "T=512 "
    ) == [
        "T=512 PyTorch eager fp32: PyTorch took 1.250 ms (median) to queue a call, more than the 1.000 ms head "
        "start the GPU gave it: its time includes host overhead"
    ]


def test_the_peer_is_checked_against_the_oracle_before_it_is_timed(in_process, monkeypatch, fixed_key):
    peer = standin_peer(monkeypatch, NumpyPeer())
    worker = InProcessWorker(NumpyGpu(PREFIX))
    checked = check_peer("sdpa", worker, ROWS, PREFIX, CpuReferences())
    assert checked == {"name": "sdpa", "label": "PyTorch SDPA fp32", "includes": SDPA.includes, "status": "checked"}
    assert peer.calls == 1 and worker.keys == [KEY]


def test_a_peer_that_fails_the_check_is_reported_and_not_timed(in_process, monkeypatch, fixed_key):
    standin_peer(monkeypatch, NumpyPeer(wrong_after=0))  # one element off by one
    checked = check_peer("sdpa", InProcessWorker(NumpyGpu(PREFIX)), ROWS, PREFIX, CpuReferences())
    assert checked["status"] == "wrong"
    assert checked["message"] == (
        "PyTorch SDPA fp32 failed the oracle's check on a fresh input set: row 0, head 0, "
        "col 0: got 0.506866, expected -0.493134 (|err| > 1e-4 + 1e-3*|ref|); 1 of "
        "6144 elements wrong; it is not timed"
    )


def test_a_peer_wrong_on_a_timed_call_gets_no_time(in_process, monkeypatch, fixed_key):
    standin_peer(monkeypatch, NumpyPeer(wrong_after=3))  # right for the warm-up only
    timing, failure = speedup_vs_peer(InProcessWorker(NumpyGpu(PREFIX)))
    assert timing is None
    assert failure.status == "wrong"
    assert failure.message.startswith("PyTorch SDPA fp32: a timed call on fresh input set ")


def test_where_pytorch_is_missing_the_check_says_so_in_one_line(in_process, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # an import of torch now fails, as where it is not installed
    checked = check_peer("sdpa", InProcessWorker(NumpyGpu(PREFIX)), ROWS, PREFIX, CpuReferences())
    assert checked == {
        "name": "sdpa",
        "label": "PyTorch SDPA fp32",
        "includes": SDPA.includes,
        "status": "missing",
        "message": "--vs sdpa: PyTorch is not installed (pip install 'attnlab[peers]'); the bench "
        "goes on without the peer",
    }


def test_a_pytorch_without_cuda_is_missing_on_the_gpu():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'attnlab[peers]')")
    if torch.cuda.is_available():
        pytest.skip("this PyTorch has CUDA")
    with pytest.raises(
        peers.PeerMissing,
        match=rf"^PyTorch {re.escape(torch.__version__)} here has no CUDA \(a CPU-only build, "
        r"or no GPU it can use\): install a CUDA build \(pip install "
        r"'attnlab\[peers\]' from PyTorch's CUDA index\)$",
    ):
        peers.load("sdpa", on_gpu=True)


# --- lab 1: the peer interleaved with the whole call ----------------------------------------------


def test_lab1_vs_torch_interleaves_the_peer_with_the_whole_call(in_process, monkeypatch):
    device = NumpyGpu(prefix=0)
    peer = standin_peer(monkeypatch, NumpyPeer())
    timing, failure = timing_json(
        time_pipeline(
            LAB1,
            InProcessWorker(device),
            WholeCall(LAB1.constants({}), peer="torch"),
            [16, 32],
            Sampling(seed=3, options=OPTIONS, references=CpuReferences()),
        )
    )
    assert failure is None
    assert timing["peer"] == {
        "name": "torch",
        "label": "PyTorch eager fp32",
        "includes": EAGER.includes,
        "status": "timed",
    }
    for row in timing["rows"]:
        versus = row["peer"]
        assert (versus["median_ms"], versus["speedup"], versus["ci_low"], versus["ci_high"]) == (1.0, 1.0, 1.0, 1.0)
        assert versus["count"] == row["total"]["count"]  # one peer call per whole call
    # each whole call launches three kernels on one set; the peer ran once on each of those sets
    whole_calls = [device.seen[i] for i in range(len(device.seen)) if i % 3 == 2]
    assert set(peer.seen) <= set(whole_calls) and len(peer.seen) == sum(r["total"]["count"] + 3 for r in timing["rows"])


def test_lab1_without_a_peer_has_no_peer_columns(in_process):
    timing, failure = timing_json(
        time_pipeline(
            LAB1,
            InProcessWorker(NumpyGpu(prefix=0)),
            WholeCall(LAB1.constants({})),
            [16],
            Sampling(seed=3, options=OPTIONS, references=CpuReferences()),
        )
    )
    assert failure is None and "peer" not in timing and "peer" not in timing["rows"][0]


# --- the real PyTorch code, on the CPU -------------------------------------------------------------


@pytest.mark.parametrize("name, rows, prefix", [("sdpa", 17, 31), ("torch", 33, 0)])
def test_the_pytorch_peers_pass_the_oracles_check(in_process, monkeypatch, name, rows, prefix):
    torch_on_the_cpu(monkeypatch)
    checked = check_peer(name, InProcessWorker(NumpyGpu(prefix)), rows, prefix, CpuReferences())
    assert checked["status"] == "checked"


def test_the_real_sdpa_peer_times_through_the_worker_code(in_process, monkeypatch):
    torch_on_the_cpu(monkeypatch)
    timing, failure = speedup_vs_peer(InProcessWorker(NumpyGpu(PREFIX)))
    assert failure is None
    assert timing["peer"]["status"] == "timed" and timing["verified_calls"]["baseline"] >= 2


def test_the_real_eager_peer_times_through_the_worker_code(in_process, monkeypatch):
    torch_on_the_cpu(monkeypatch)
    timing, failure = timing_json(
        time_pipeline(
            LAB1,
            InProcessWorker(NumpyGpu(prefix=0)),
            WholeCall(LAB1.constants({}), peer="torch"),
            [17],
            Sampling(seed=3, options=OPTIONS, references=CpuReferences()),
        )
    )
    assert failure is None
    assert timing["rows"][0]["peer"]["count"] == timing["rows"][0]["total"]["count"] >= 2


def test_the_sdpa_peer_with_the_mask_aligned_top_left_fails_the_check(in_process, monkeypatch, fixed_key):
    # the check is not a formality: SDPA's default causal mask ignores the cached prefix
    torch_on_the_cpu(monkeypatch)
    import torch.nn.attention.bias as bias

    monkeypatch.setattr(bias, "causal_lower_right", bias.causal_upper_left)
    checked = check_peer("sdpa", InProcessWorker(NumpyGpu(PREFIX)), ROWS, PREFIX, CpuReferences())
    assert checked["status"] == "wrong"
    # row 0 saw key 0 alone, so its output is V's first row (-1.93341 in set 0 of KEY), not keys 0 .. 31's mean
    assert checked["message"].startswith(
        "PyTorch SDPA fp32 failed the oracle's check on a fresh input set: row 0, "
        "head 0, col 0: got -1.93341, expected -0.00426671"
    )


# --- the report and the JSON ----------------------------------------------------------------------


def test_a_timed_peer_and_a_missing_one_keep_the_json_schema():
    comparison = {
        "student": {"median_ms": 1.0},
        "baseline": {"median_ms": 1.9},
        "speedup": 1.9,
        "ci_low": 1.85,
        "ci_high": 1.95,
    }
    timed = {
        "kind": "speedup",
        "rows": 2048,
        "prefix": 2048,
        "speedup": 1.9,
        "comparison": comparison,
        "peer": {
            **benchmark.peer_record("sdpa"),
            "status": "timed",
            "median_ms": 1.9,
            "speedup": 1.9,
            "ci_low": 1.85,
            "ci_high": 1.95,
        },
    }
    validate_result(RunResult("bench", "lab2", timing=SpeedupTiming.from_json(timed)).to_json())
    missing = {
        "kind": "pipeline",
        "rows": [benchmark.pipeline_row(512, None).to_json()],
        "peer": {**benchmark.peer_record("torch"), "status": "missing", "message": "--vs torch: ..."},
    }
    validate_result(RunResult("bench", "lab1", timing=PipelineTiming.from_json(missing)).to_json())
    with pytest.raises(AssertionError, match=r"timing/peer: 'message' is a required property"):
        validate_result(
            RunResult(
                "bench",
                "lab1",
                timing=PipelineTiming.from_json(
                    {**missing, "peer": benchmark.peer_record("torch") | {"status": "wrong"}}
                ),
            ).to_json()
        )


# --- bench: where the peer stands in, and where it cannot ------------------------------------------


@pytest.fixture
def printed(monkeypatch):
    import io

    from rich.console import Console

    from labrunner.report import terminal

    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(terminal, "stdout", Console(file=out, width=400, highlight=False))
    monkeypatch.setattr(terminal, "stderr", Console(file=err, width=400, highlight=False))
    return out, err


def bench_timing(monkeypatch, peer: str | None, baseline=None, lab=LAB2, rows=ROWS, prefix=PREFIX):
    """`timing_module.run_lab_timing` as bench runs it, on the stand-in GPU, the references in numpy."""
    from labrunner.cli.guard import reporter_for
    from labrunner.compile.gate import load_submission
    from labrunner.pipeline import timing_stage as timing_module
    from labrunner.pipeline.grading_run import CaseOptions, GradingRun
    from labrunner.pipeline.timing_stage import TimingAsk
    from labrunner.truth.cases import Seed

    monkeypatch.setattr(benchmark, "gpu_references", CpuReferences)
    # the lab's own cases (the compile gate sizes their buffers), timed at a small shape
    small = replace(lab.catalogue, timing={"rows": rows, "prefix": prefix, "sizes": [16]})
    monkeypatch.setattr(Lab, "catalogue", property(lambda lab: small))
    submission = load_submission(lab, lab.solution_path, "solution.cu", "sm_90")
    result = RunResult("bench", lab.name)
    worker = InProcessWorker(NumpyGpu(None))
    worker.load("student", submission.module.composed_source, submission.label, lab.entry_point_types())
    run = GradingRun(lab, submission, "gpu", worker, CaseOptions(Seed(3, "--seed")), reporter_for(result))
    ask = TimingAsk(seed=3, options=OPTIONS, arch="sm_90", baseline=baseline, peer=peer)
    timing_module.run_lab_timing(run, result, ask)
    return result


@pytest.mark.slow
def test_bench_lab2_vs_sdpa_without_pytorch_times_against_the_starter(in_process, monkeypatch, printed):
    monkeypatch.setitem(sys.modules, "torch", None)
    result = bench_timing(monkeypatch, "sdpa")
    words = "--vs sdpa: PyTorch is not installed (pip install 'attnlab[peers]'); the bench goes on without the peer"
    # every note printed is a note recorded, in the same order
    assert result.notes == [words, "timing solution.cu against kernels/lab2/starter.cu at C = 3, P = 31, interleaved"]
    assert printed[1].getvalue() == "".join(f"note: {note}\n" for note in result.notes)
    assert result.timing.to_json()["baseline_label"].endswith("kernels/lab2/starter.cu")
    assert result.timing.to_json()["peer"] == {**benchmark.peer_record("sdpa"), "status": "missing", "message": words}
    validate_result(result.to_json())


@pytest.mark.slow
def test_bench_lab2_vs_sdpa_prints_the_peer_and_what_its_time_includes(in_process, monkeypatch, printed):
    standin_peer(monkeypatch, NumpyPeer())
    result = bench_timing(monkeypatch, "sdpa")
    assert result.notes == ["timing solution.cu against PyTorch SDPA fp32 at C = 3, P = 31, interleaved"]
    assert result.timing.to_json()["peer"]["status"] == "timed"
    assert printed[1].getvalue() == "note: timing solution.cu against PyTorch SDPA fp32 at C = 3, P = 31, interleaved\n"
    from labrunner.report import terminal

    terminal.timing_report(result)
    text = printed[0].getvalue()
    assert "│ PyTorch SDPA fp32 │" in text
    assert "SPEEDUP 1.00x (95% CI 1.00x to 1.00x, vs PyTorch SDPA fp32)\n" in text
    assert f"the peer's time (PyTorch SDPA fp32) includes: {SDPA.includes}\n" in text
    validate_result(result.to_json())


@pytest.mark.slow
def test_bench_lab1_vs_torch_adds_the_peers_columns(in_process, monkeypatch, printed):
    standin_peer(monkeypatch, NumpyPeer())
    result = bench_timing(monkeypatch, "torch", lab=LAB1)
    assert printed[1].getvalue() == "note: timing the pipeline at T = 16, interleaved with PyTorch eager fp32\n"
    from labrunner.report import terminal

    terminal.timing_report(result)
    text = printed[0].getvalue()
    row = next(line for line in text.splitlines() if line.startswith("│    16"))
    cells = [cell.strip() for cell in row.strip("│").split("│")]
    # T, MiB, tensors, ratio, three kernels, total, then the peer's ms and the whole call's SPEEDUP vs it
    assert cells[7:10] == ["1.000", "1.000", "1.00x"]
    assert (
        "SPEEDUP vs peer = PyTorch eager fp32's time / the whole call's time, each pair interleaved on the same "
        "fresh input sets (95% CI in --json)\n"
    ) in text
    assert f"the peer's time (PyTorch eager fp32) includes: {EAGER.includes}\n" in text
    validate_result(result.to_json())


@pytest.mark.slow
def test_bench_lab1_with_a_peer_that_fails_its_check_times_the_pipeline_alone(in_process, monkeypatch, printed):
    standin_peer(monkeypatch, NumpyPeer(wrong_after=0))
    result = bench_timing(monkeypatch, "torch", lab=LAB1)
    assert result.timing.to_json()["peer"]["status"] == "wrong" and "peer" not in result.timing.to_json()["rows"][0]
    assert (
        printed[1]
        .getvalue()
        .startswith(
            "error: PyTorch eager fp32 failed the oracle's check on a fresh input set: row 0, head 0, col 0: got "
        )
    )
    assert result.notes == [result.timing.to_json()["peer"]["message"], "timing the pipeline at T = 16"]
    assert result.decisive_case is None  # the student's kernel is not blamed for the peer


# --- the command line -------------------------------------------------------------------------------


@pytest.fixture
def cli(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from labrunner.cli import main

    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def invoke(*args: str):
        result = runner.invoke(main, list(args))
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
        return result

    return invoke


@pytest.fixture
def kernels_without_expert(tmp_path, monkeypatch):
    """A kernels folder like the shipped one before an expert reference lands in it."""
    import shutil

    import labrunner.labs.definition as definition

    folder = tmp_path / "kernels"
    shutil.copytree(definition.KERNELS_DIR, folder, ignore=shutil.ignore_patterns("expert.cu"))
    monkeypatch.setattr(definition, "KERNELS_DIR", folder)
    return folder


def test_bench_vs_expert_without_the_file_is_a_usage_error(cli, kernels_without_expert):
    result = cli("bench", "lab2", "--vs", "expert", "--device", "cpu")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --vs expert: lab2's expert reference (kernels/lab2/expert.cu) is not in this copy "
        "of attnlab; choose starter, solution, or a .cu file\n"
    )


def test_bench_vs_expert_resolves_to_the_labs_expert_file(kernels_without_expert):
    from labrunner.pipeline.bench import resolve_baseline

    expert = kernels_without_expert / "lab2" / "expert.cu"
    expert.write_text("// the expert reference\n")
    assert resolve_baseline(LAB2, "expert") == expert
    assert resolve_baseline(LAB2, "solution") == kernels_without_expert / "lab2" / "solution.cu"


def test_bench_lab2_vs_an_unknown_word_names_every_choice(cli):
    result = cli("bench", "lab2", "--vs", "torch", "--device", "cpu")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --vs torch: choose starter, solution, expert, sdpa, or the path of an existing .cu file\n"
    )


def test_bench_lab1_takes_its_peer_and_then_needs_a_gpu(cli):
    result = cli("bench", "lab1", "--vs", "torch", "--device", "cpu")
    assert result.exit_code == 6
    assert result.stderr == (
        "error: bench needs a GPU: --device cpu chose the CPU backend, which takes no timings; check "
        "correctness on the CPU with `attnlab grade lab1 FILE`\n"
    )


def test_bench_lab1_vs_lab2s_peer_is_a_usage_error(cli):
    result = cli("bench", "lab1", "--vs", "sdpa", "--device", "cpu")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --vs applies to lab2's SPEEDUP; lab1 times its pipeline at fixed sizes (its "
        "--vs takes torch only: PyTorch beside the whole call)\n"
    )


def test_the_hold_kernel_compiles_for_every_gpu_the_labs_target():
    from cuda.bindings import nvrtc

    from labrunner.measure.gpu_timer import HOLD_KERNEL_SOURCE

    for arch in (b"sm_80", b"sm_90"):
        _, program = nvrtc.nvrtcCreateProgram(HOLD_KERNEL_SOURCE.encode(), b"hold.cu", 0, [], [])
        (result,) = nvrtc.nvrtcCompileProgram(program, 1, [b"--gpu-architecture=" + arch])
        assert result == nvrtc.nvrtcResult.NVRTC_SUCCESS


# --- on the GPU: the real peers, the real worker, the driver's GPU oracle --------------------------


def cuda_torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'attnlab[peers]')")
    if not torch.cuda.is_available():
        pytest.skip(f"PyTorch {torch.__version__} has no CUDA here")


@pytest.mark.gpu
@pytest.mark.parametrize("lab, word", [("lab2", "sdpa"), ("lab1", "torch")])
def test_bench_vs_the_peer_on_the_gpu(tmp_path, lab, word):
    import json
    import os
    import subprocess
    from pathlib import Path

    cuda_torch()
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "labrunner",
            "bench",
            lab,
            "--vs",
            word,
            "--budget",
            "0.3",
            "--json",
            str(tmp_path / "r.json"),
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo), "COLUMNS": "250"},
        timeout=600,
    )
    print(done.stdout, done.stderr)
    assert done.returncode == 0
    timing = json.loads((tmp_path / "r.json").read_text())["timing"]
    assert timing["peer"]["status"] == "timed"
    assert f"the peer's time ({peers.SPECS[word].label}) includes: " in done.stdout
    speedups = [timing["peer"]["speedup"]] if lab == "lab2" else [row["peer"]["speedup"] for row in timing["rows"]]
    assert all(s > 0 for s in speedups) and len(speedups) == (1 if lab == "lab2" else 3)


class AnsweringWorker:
    """A worker whose reply to the peer's check is given: what a broken or hostile worker could send."""

    def __init__(self, reply):
        self.reply = reply

    def check_peer(self, request, timeout_s):
        return self.reply


def test_a_peers_missing_reason_is_shown_never_interpreted():
    checked = check_peer(
        "sdpa",
        AnsweringWorker({"available": False, "why": "\x1b[32mPASS\x1b[0m\rno torch"}),
        ROWS,
        PREFIX,
        CpuReferences(),
    )
    assert checked["message"] == ("--vs sdpa: \\x1b[32mPASS\\x1b[0m\\x0dno torch; the bench goes on without the peer")


@pytest.mark.parametrize(
    "checked",
    [None, {"sets": np.array([3]), "outputs": np.zeros((1, ROWS * 32 * 64), dtype=np.float32)}],
    ids=["no output", "another set than the one drawn"],
)
def test_a_peer_check_reply_the_check_cannot_make_is_refused(checked):
    reply = {"available": True} if checked is None else {"available": True, "checked": checked}
    result = check_peer("torch", AnsweringWorker(reply), ROWS, 0, CpuReferences())
    assert (result["status"], result["message"]) == (
        "failed",
        "PyTorch eager fp32: the worker's reply to its check is not one the check makes; the bench goes on without it",
    )


# --- `attnlab bench ... --vs <peer>` end to end, on the stand-in GPU ---------------------------------


@pytest.fixture
def standin_bench(monkeypatch, tmp_path):
    """`--device gpu` finds a GPU whose worker runs on the numpy stand-in (as in test_gpu_path.py)."""
    import labrunner.measure.gpu_timer
    import labrunner.measure.input_pool as input_pool
    from labrunner.measure import device_state
    from labrunner.pipeline import backend as backend_module
    from labrunner.pipeline import bench as bench_pipeline
    from labrunner.pipeline import grade as grade_pipeline
    from labrunner.truth.cases import Case, Catalogue

    catalogues = {
        "lab2": Catalogue(lab="lab2", cases=(), timing={"rows": ROWS, "prefix": PREFIX}),
        "lab1": Catalogue(lab="lab1", cases=(), timing={"sizes": [16, 32]}),
    }
    monkeypatch.setattr(backend_module, "gpu_status", lambda: (True, "NVIDIA H200"))
    monkeypatch.setattr(grade_pipeline, "Worker", lambda backend: InProcessWorker(NumpyGpu()))
    monkeypatch.setattr(bench_pipeline, "Worker", lambda backend: InProcessWorker(NumpyGpu()))
    monkeypatch.setattr(Lab, "catalogue", property(lambda lab: catalogues[lab.name]))
    checks = {"lab2": Case("C3-P31", ROWS, PREFIX), "lab1": Case("T16", 16, 0)}  # small: the stand-in is the oracle
    monkeypatch.setattr(
        bench_pipeline,
        "bench_check_case",
        lambda lab, constants=None, chunk=None, prefix=None: checks[lab.name],
    )
    monkeypatch.setattr(
        device_state,
        "read_device_state",
        lambda index=0: device_state.DeviceState(name="NVIDIA H200", sm_clock_mhz=1980),
    )
    monkeypatch.setattr(labrunner.measure.gpu_timer, "CupyTimer", CountingTimer)
    monkeypatch.setattr(input_pool, "CudaSets", input_pool.NumpySets)
    monkeypatch.setattr(benchmark, "gpu_references", CpuReferences)
    monkeypatch.chdir(tmp_path)


def bench(*args: str):
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from labrunner.cli import main

    result = CliRunner(env={"COLUMNS": "250"}).invoke(
        main, ["bench", *args, "--device", "gpu", "--budget", "0.05", "--json", "r.json", "--junit", "r.xml"]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result, validate_result(json.loads(Path("r.json").read_text())), Path("r.xml").read_text()


@pytest.mark.slow
def test_bench_lab2_vs_sdpa_end_to_end(standin_bench, monkeypatch):
    standin_peer(monkeypatch, NumpyPeer())
    result, report, junit = bench("lab2", "--vs", "sdpa")
    assert result.exit_code == 0
    assert (report["verdict"], report["timing"]["peer"]["status"], report["timing"]["speedup"]) == (
        "pass",
        "timed",
        1.0,
    )
    assert report["options"]["versus"] == "sdpa"
    assert "SPEEDUP 1.00x (95% CI 1.00x to 1.00x, vs PyTorch SDPA fp32)" in result.stdout
    assert result.stdout.rstrip().endswith("PASS on the GPU (exit 0)")
    assert 'tests="1"' in junit  # the one correctness check; the peer adds no test case


@pytest.mark.slow
def test_bench_lab1_vs_torch_end_to_end_without_pytorch(standin_bench, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    result, report, junit = bench("lab1", "--vs", "torch")
    assert result.exit_code == 0
    words = "--vs torch: PyTorch is not installed (pip install 'attnlab[peers]'); the bench goes on without the peer"
    assert f"note: {words}\n" in result.stderr
    assert report["notes"] == [words, "timing the pipeline at T = 16, T = 32"]
    assert report["timing"]["peer"]["status"] == "missing"
    assert [row["T"] for row in report["timing"]["rows"]] == [16, 32]
    assert "peer ms" not in result.stdout
