"""The Range pass without a GPU: ncu's CSV read back, the command it is given, and what is said when it cannot run.

`data/ncu_lab2_solution_starter.csv` is written in the format `ncu --csv --print-units base --metrics ...`
produces (its `--log-file`, `==PROF==` notes included) for the lab-2 solution and starter at C = P = 2048;
`attnlab profile lab2 ... --ncu-csv FILE` on a GPU records a real one to put in its place. A stand-in `ncu`
on PATH (like the stand-in compute-sanitizer of test_diagnose.py) plays the tool: it copies that file to its
`--log-file`, or prints Nsight Compute's permission error, and writes down the arguments it was given.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import stat
import sys
from pathlib import Path

import pytest
from box_paths import tmp_entries_of

from labrunner import box as boxes
from labrunner.compile.gate import load_submission
from labrunner.labs import get_lab
from labrunner.measure.range_pass import METRICS, RangePassUnavailable, parse_ncu_csv, parse_number, run_ncu
from labrunner.measure.roofline import ceilings_from_facts
from labrunner.pipeline.profile import RangeAt, range_pass
from labrunner.records.profile import Profile

DATA = Path(__file__).parent / "data" / "ncu_lab2_solution_starter.csv"
H200, _ = ceilings_from_facts(
    {
        "sm_count": 132,
        "compute_capability": [9, 0],
        "max_sm_clock_mhz": 1980,
        "max_memory_clock_mhz": 3201,
        "memory_bus_width_bits": 6144,
    }
)
PERMISSION = (
    "ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): run attnlab as root or with "
    "CAP_SYS_ADMIN, or let every user read them with the driver option NVreg_RestrictProfilingToAdminUsers=0 "
    "(see https://developer.nvidia.com/ERR_NVGPUCTRPERM); the trace above did not need them"
)
MISSING = (
    "Nsight Compute's `ncu` is not on PATH, so there is no Range pass: install Nsight Compute (it comes with "
    "the CUDA toolkit) and put its folder on PATH; the trace above did not need it"
)


def stand_in_ncu(tmp_path: Path, monkeypatch, body: str) -> Path:
    """An `ncu` on PATH running `body` (sh); $log is its --log-file; its arguments go to args.txt."""
    tool = tmp_path / "bin" / "ncu"
    tool.parent.mkdir()
    args_file = tmp_path / "args.txt"
    tool.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$@\" > {shlex.quote(str(args_file))}\n"
        'log=; prev=\nfor a in "$@"; do [ "$prev" = --log-file ] && log=$a; prev=$a; done\n' + body
    )
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    # These tests read what a stand-in ncu leaves on the host (its arguments, a recorded CSV), which a
    # box would keep from it: the box itself is `test_ncu_and_its_target_run_in_the_box`'s.
    monkeypatch.setattr(boxes, "availability", lambda: "no box, for a stand-in ncu")
    return args_file


@pytest.mark.skipif(boxes.availability() is not None, reason=f"no box here: {boxes.availability()}")
@pytest.mark.slow
def test_ncu_and_its_target_run_in_the_box(tmp_path, monkeypatch):
    """The Range pass's ncu (and so the target that runs the student's kernels) starts in a PROFILE box:
    its report goes to /job (a host folder the driver reads), and it sees nothing else of the host."""
    tool = tmp_path / "bin" / "ncu"
    tool.parent.mkdir()
    tool.write_text(
        '#!/bin/sh\nlog=; prev=\nfor a in "$@"; do [ "$prev" = --log-file ] && log=$a; prev=$a; done\n'
        'echo "seen: log=$log pwd=$(pwd) home=$HOME seed=[$ATTNLAB_SEED] tmp=[$(echo $(ls /tmp))]" >&2\nexit 3\n'
    )
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ATTNLAB_SEED", "4242")
    lab, contenders = lab2_contenders()
    report = range_pass(lab, contenders, RangeAt("C = 17, P = 31", 17, 31, 1), ceilings=H200).to_json()
    assert report["available"] is False
    # of the host's /tmp only the way to the stand-in tool: not the driver's folder for the Range pass
    assert report["message"] == (
        "ncu exited with status 3 and no counters: seen: log=/job/ncu.csv pwd=/job "
        f"home=/job seed=[] tmp=[{' '.join(tmp_entries_of(tmp_path))}]"
    )


def test_the_recorded_csv_gives_every_metric_of_both_launches_in_base_units():
    solution, starter = parse_ncu_csv(DATA.read_text())
    assert (solution.index, solution.kernel, solution.block, solution.grid) == (
        0,
        "flash_prefill",
        "(128, 1, 1)",
        "(32, 32, 1)",
    )
    assert solution.values == {
        "duration_ns": 2_176_640.0,
        "sm_throughput_pct": 74.12,
        "dram_read_bytes": 35_651_584.0,
        "dram_write_bytes": 16_777_216.0,
        "l2_hit_rate_pct": 71.3,
        "achieved_occupancy_pct": 24.81,
        "registers_per_thread": 128.0,
        "shared_bank_conflicts": 1204.0,
        "fma_pipe_pct": 38.52,
    }
    assert solution.dram_bytes == 52_428_800.0
    assert (starter.index, starter.values["duration_ns"], starter.values["registers_per_thread"]) == (
        1,
        28_412_928.0,
        32.0,
    )
    assert set(starter.values) == set(METRICS.values())


def test_scaled_units_na_and_missing_metrics_are_read_as_ncu_means_them():
    text = (
        '"ID","Kernel Name","Block Size","Grid Size","Metric Name","Metric Unit","Metric Value"\n'
        '"0","k","(1, 1, 1)","(1, 1, 1)","gpu__time_duration.sum","msecond","2.18"\n'
        '"0","k","(1, 1, 1)","(1, 1, 1)","dram__bytes_read.sum","Mbyte","52.43"\n'
        '"0","k","(1, 1, 1)","(1, 1, 1)","dram__bytes_write.sum","","n/a"\n'
        '"0","k","(1, 1, 1)","(1, 1, 1)","some__other_metric.sum","","7"\n'
    )
    (launch,) = parse_ncu_csv(text)
    assert launch.values["duration_ns"] == pytest.approx(2.18e6)
    assert launch.values["dram_read_bytes"] == pytest.approx(52.43e6)
    assert launch.values["dram_write_bytes"] is None and launch.dram_bytes is None
    assert launch.values["l2_hit_rate_pct"] is None


def test_text_without_a_csv_header_is_no_launches():
    assert parse_ncu_csv('==PROF== Connected to process 1\n"solution","fake"\n') == []
    assert parse_number("1,205.00") == 1205.0 and parse_number("n/a") is None


def test_ncu_is_told_to_leave_the_clocks_and_to_profile_only_the_chosen_launches(tmp_path, monkeypatch):
    args_file = stand_in_ncu(tmp_path, monkeypatch, f'cp {shlex.quote(str(DATA))} "$log"\n')
    run = run_ncu(["flash_prefill", "flash_prefill"], 6, 2, [sys.executable, "-c", "pass"], timeout_s=30)
    assert [m.kernel for m in run.launches] == ["flash_prefill", "flash_prefill"]
    args = args_file.read_text().splitlines()
    assert args[:2] == ["--clock-control", "none"]
    assert args[args.index("--metrics") + 1] == ",".join(METRICS)
    assert args[args.index("-k") + 1] == "regex:^(flash_prefill)$"
    assert (args[args.index("--launch-skip") + 1], args[args.index("--launch-count") + 1]) == ("6", "2")
    assert args[args.index("--print-units") + 1] == "base" and "--csv" in args
    assert args[-3:] == [sys.executable, "-c", "pass"]
    assert run.raw_csv == DATA.read_text()


def test_counters_not_permitted_say_exactly_that_and_how_to_enable_them(tmp_path, monkeypatch):
    stand_in_ncu(
        tmp_path,
        monkeypatch,
        "echo '==PROF== Connected to process 1' > \"$log\"\n"
        "echo '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
        "Performance Counters on the target device 0. For instructions on enabling permissions and to get "
        'more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM\' >> "$log"\nexit 0\n',
    )
    with pytest.raises(RangePassUnavailable, match="ERR_NVGPUCTRPERM") as caught:
        run_ncu(["flash_prefill"], 3, 1, [sys.executable, "-c", "pass"], timeout_s=30)
    assert str(caught.value) == PERMISSION


def test_without_ncu_the_range_pass_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RangePassUnavailable, match="not on PATH") as caught:
        run_ncu(["flash_prefill"], 3, 1, [sys.executable, "-c", "pass"], timeout_s=30)
    assert str(caught.value) == MISSING


def test_an_ncu_error_is_quoted_in_one_line(tmp_path, monkeypatch):
    stand_in_ncu(tmp_path, monkeypatch, "echo '==ERROR== The application returned an error code (1).' >&2\nexit 1\n")
    with pytest.raises(RangePassUnavailable, match="application returned") as caught:
        run_ncu(["flash_prefill"], 3, 1, [sys.executable, "-c", "pass"], timeout_s=30)
    assert str(caught.value) == "ncu failed: The application returned an error code (1)."


def test_a_hanging_ncu_is_stopped_at_its_time_limit(tmp_path, monkeypatch):
    stand_in_ncu(tmp_path, monkeypatch, "exec sleep 30\n")
    with pytest.raises(RangePassUnavailable, match="did not finish") as caught:
        run_ncu(["flash_prefill"], 3, 1, [sys.executable, "-c", "pass"], timeout_s=0.5)
    assert str(caught.value) == "ncu did not finish within 0.5 s; it was stopped"


def lab2_contenders():
    lab = get_lab("lab2")
    return lab, [
        ("solution.cu", "student", load_submission(lab, lab.solution_path, "solution.cu")),
        ("starter.cu", "starter", load_submission(lab, lab.starter_path, "starter.cu")),
    ]


@pytest.mark.slow
def test_the_range_report_places_both_kernels_under_the_roofline(tmp_path, monkeypatch):
    args_file = stand_in_ncu(tmp_path, monkeypatch, f'cp {shlex.quote(str(DATA))} "$log"\n')
    lab, contenders = lab2_contenders()
    csv_copy = tmp_path / "saved.csv"
    report = range_pass(
        lab, contenders, RangeAt("C = 2048, P = 2048", 2048, 2048, 1), ceilings=H200, csv_path=csv_copy
    ).to_json()
    assert report["available"] is True and report["message"] is None
    args = args_file.read_text().splitlines()
    # three warm-up calls of both contenders are skipped, then one launch of each is profiled
    assert (args[args.index("--launch-skip") + 1], args[args.index("--launch-count") + 1]) == ("6", "2")
    assert args[-3:-1] == ["-m", "labrunner.run.profile_target"]
    solution, starter = report["contenders"]
    assert (solution["label"], solution["role"], starter["label"], starter["role"]) == (
        "solution.cu",
        "student",
        "starter.cu",
        "starter",
    )
    assert solution["flops"] == 51_547_996_160
    assert solution["duration_ms"] == 2.17664 and solution["dram_bytes"] == 52_428_800
    assert solution["point"]["verdict"] == "compute-bound: 23.7 TFLOP/s, 35% of the FP32 roof"
    assert starter["point"]["verdict"] == "compute-bound: 1.8 TFLOP/s, 3% of the FP32 roof"
    assert solution["kernels"][0]["registers_per_thread"] == 128
    assert csv_copy.read_text() == DATA.read_text()


@pytest.mark.slow
def test_launches_that_are_not_the_ones_made_give_no_report(tmp_path, monkeypatch):
    swapped = DATA.read_text().replace('"flash_prefill"', '"attn_scores"')
    recorded = tmp_path / "other.csv"
    recorded.write_text(swapped)
    stand_in_ncu(tmp_path, monkeypatch, f'cp {shlex.quote(str(recorded))} "$log"\n')
    lab, contenders = lab2_contenders()
    report = range_pass(lab, contenders, RangeAt("C = 2048, P = 2048", 2048, 2048, 1), ceilings=H200).to_json()
    assert report["available"] is False
    assert report["message"] == "ncu profiled attn_scores, attn_scores where flash_prefill, flash_prefill were launched"


@pytest.mark.slow
def test_the_range_report_without_permission_carries_the_message(tmp_path, monkeypatch):
    stand_in_ncu(tmp_path, monkeypatch, "echo '==ERROR== ERR_NVGPUCTRPERM - no permission' > \"$log\"\nexit 1\n")
    lab, contenders = lab2_contenders()
    report = range_pass(lab, contenders, RangeAt("C = 2048, P = 2048", 2048, 2048, 1), ceilings=H200).to_json()
    assert (report["available"], report["message"]) == (False, PERMISSION)


def test_a_metric_ncu_does_not_know_is_dropped_and_the_rest_collected(tmp_path, monkeypatch):
    # the first run refuses the FMA-pipe metric by name; the second, without it, answers
    args_file = stand_in_ncu(
        tmp_path,
        monkeypatch,
        'case "$*" in *sm__pipe_fma_cycles*) echo "==ERROR== Failed to find metric '
        'sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active" >&2; exit 1;; esac\n'
        f'cp {shlex.quote(str(DATA))} "$log"\n',
    )
    run = run_ncu(["flash_prefill"], 6, 2, [sys.executable, "-c", "pass"], timeout_s=30)
    assert run.dropped_metrics == ["sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"]
    args = args_file.read_text().splitlines()
    assert "sm__pipe_fma_cycles" not in args[args.index("--metrics") + 1]
    assert len(run.launches) == 2


@pytest.mark.slow
def test_the_target_warms_up_then_makes_one_call_of_each_contender_and_runs_no_other_kernel(tmp_path, monkeypatch):
    import labrunner.run.profile_target as target

    saved = tmp_path / "payload.json"
    stand_in_ncu(
        tmp_path,
        monkeypatch,
        f'for last in "$@"; do :; done\ncp "$last" {shlex.quote(str(saved))}\ncp {shlex.quote(str(DATA))} "$log"\n',
    )
    lab, contenders = lab2_contenders()
    range_pass(lab, contenders, RangeAt("C = 2048, P = 2048", 33, 31, 1), ceilings=H200)
    calls = []

    class RecordingGpu:
        def compile(self, source, filename, entry_types):
            return filename

        def upload(self, array):
            calls.append(("upload", array.size))
            return array

        def launch(self, kernels, launch, buffers):
            calls.append((kernels, launch.kernel, launch.args))

        def synchronize(self):
            calls.append("sync")

    monkeypatch.setattr(target, "GpuDevice", RecordingGpu)
    monkeypatch.setattr(target, "read_gpu_facts", lambda: {"sm_count": 132})
    payload = json.loads(saved.read_text())
    payload["facts_path"] = str(tmp_path / "facts.json")  # the range pass's own folder is gone by now
    saved.write_text(json.dumps(payload))
    target.main(str(saved))
    assert json.loads((tmp_path / "facts.json").read_text()) == {"sm_count": 132}
    uploads = [c for c in calls if c[0] == "upload"]
    # q, k, v, then the poisoned output: copied up, never filled by a kernel
    assert [size for _, size in uploads] == [33 * 32 * 64, 64 * 8 * 64, 64 * 8 * 64, 33 * 32 * 64]
    launches = [c for c in calls if c not in uploads and c != "sync"]
    args = ("q", "k", "v", "out", 33, 31)
    assert launches == [("solution.cu", "flash_prefill", args), ("starter.cu", "flash_prefill", args)] * 4
    assert calls[-1] == "sync" and calls.index("sync") == len(uploads) + 6  # three warm-up rounds, then ncu's


@pytest.mark.parametrize("recorded", sorted(DATA.parent.glob("ncu_*.csv")), ids=lambda p: p.name)
def test_every_recorded_ncu_csv_parses_whole(recorded):
    """Each ncu CSV under tests/data (a real one saved with `attnlab profile ... --ncu-csv` belongs here too):
    every launch has all nine counters, in base units."""
    launches = parse_ncu_csv(recorded.read_text())
    assert launches and [m.index for m in launches] == list(range(len(launches)))
    for launch in launches:
        missing = [key for key, value in launch.values.items() if value is None]
        assert missing == [], f"{recorded.name} launch {launch.index} lacks {missing}"
        assert launch.values["duration_ns"] > 1_000  # nanoseconds, not milliseconds
        assert launch.dram_bytes > 1_000_000  # bytes, not megabytes
        assert 0 <= launch.values["sm_throughput_pct"] <= 100


def test_the_range_table_puts_each_file_on_its_own_row_and_never_cuts_a_kernels_name(monkeypatch):
    """Two files of two kernels each at a CI log's width (150 columns): each file on a row of its own,
    its kernels under it whole, one line each; a long path wraps on its own row, and no figure is lost."""
    from rich.console import Console

    from labrunner.report import terminal

    def kernel(name: str, ms: float) -> dict:
        return {
            "kernel": name,
            "duration_ns": ms * 1e6,
            "sm_throughput_pct": 44.0,
            "dram_read_bytes": 4.7599e9,
            "dram_write_bytes": 1.2e7,
            "l2_hit_rate_pct": 1.0,
            "achieved_occupancy_pct": 31.0,
            "registers_per_thread": 96,
            "shared_bank_conflicts": 71807,
            "fma_pipe_pct": 21.0,
            "point": None,
        }

    def rendered(labels: tuple[str, str]) -> list[str]:
        printed = io.StringIO()
        monkeypatch.setattr(terminal, "stdout", Console(file=printed, width=150, highlight=False, color_system=None))
        report = {
            "available": True,
            "shape": {"label": "B = 64, longest 32,768"},
            "dropped_metrics": [],
            "contenders": [
                {
                    "label": label,
                    "point": None,
                    "kernels": [kernel("attn_weighted_sum", 1.09), kernel("decode_combine", 0.011)],
                }
                for label in labels
            ],
        }
        terminal.range_report(
            Profile.from_json({"range": report, "ceilings": None, "ceilings_problem": "no GPU facts"})
        )
        return printed.getvalue().splitlines()

    lines = rendered(("kernels/lab3/solution.cu", "kernels/lab3/starter.cu"))
    cells = [line.split("│")[1].strip() for line in lines if line.startswith("│")]
    assert cells == [
        "kernels/lab3/solution.cu",
        "attn_weighted_sum",
        "decode_combine",
        "kernels/lab3/starter.cu",
        "attn_weighted_sum",
        "decode_combine",
    ]
    assert all(len(line) <= 150 for line in lines)
    assert sum(line.count("1.090") for line in lines) == 2 and sum(line.count("71,807") for line in lines) == 4

    long_path = "submissions/section-b/a-student-with-a-long-name/attention-final-final.cu"
    lines = rendered((long_path, "kernels/lab3/starter.cu"))
    cells = [line.split("│")[1].strip() for line in lines if line.startswith("│")]
    assert "attn_weighted_sum" in cells and "".join(cells).startswith(long_path.replace(" ", ""))
    assert all(len(line) <= 150 for line in lines)
    assert sum(line.count("1.090") for line in lines) == 2 and sum(line.count("71,807") for line in lines) == 4
