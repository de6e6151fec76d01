"""The crash replay: what of compute-sanitizer's report reaches the user, and what happens without one.

A stand-in `compute-sanitizer` on PATH prints a memcheck report in the tool's own format, so the
filter is checked line by line on a machine with no GPU.
"""

from __future__ import annotations

import os
import stat

import numpy as np

from labrunner.run.diagnose import replay_under_sanitizer

REPORT = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at flash_prefill+0x1f0 in illegal_address.cu:5
=========     by thread (66,0,0) in block (0,8,0)
=========     Address 0x83e432a26000 is out of bounds
=========     and is 8,589,934,592 bytes after the nearest allocation at 0x7f0000000000 of size 262,144 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2a7d5f] in libcuda.so.1
=========
========= ERROR SUMMARY: 1 error
"""


def fake_sanitizer(tmp_path, monkeypatch, body: str) -> None:
    tool = tmp_path / "bin" / "compute-sanitizer"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")


def test_the_kernel_line_thread_and_address_are_kept_and_the_rest_dropped(tmp_path, monkeypatch):
    fake_sanitizer(tmp_path, monkeypatch, f"cat <<'EOF'\n{REPORT}EOF\nexit 1\n")
    assert replay_under_sanitizer({"source": ""}, case_timeout_s=10).splitlines() == [
        " Invalid __global__ write of size 4 bytes",
        "     at flash_prefill+0x1f0 in illegal_address.cu:5",
        "     by thread (66,0,0) in block (0,8,0)",
        "     Address 0x83e432a26000 is out of bounds",
    ]


def test_a_sanitizer_that_reports_nothing_gives_no_diagnosis(tmp_path, monkeypatch):
    fake_sanitizer(tmp_path, monkeypatch, "echo '========= ERROR SUMMARY: 0 errors'\n")
    assert replay_under_sanitizer({"source": ""}, case_timeout_s=10) is None


def test_a_sanitizer_that_hangs_is_stopped_and_said_so(tmp_path, monkeypatch):
    fake_sanitizer(tmp_path, monkeypatch, "exec sleep 30\n")
    assert replay_under_sanitizer({"source": ""}, case_timeout_s=0.5) == (
        "compute-sanitizer did not finish within 1.5 s (3 times the case's 0.5 s)")


def test_without_a_sanitizer_there_is_no_replay(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert replay_under_sanitizer({"source": ""}, case_timeout_s=10) is None


def test_the_replayed_case_travels_as_json_and_npy_files_never_pickle(tmp_path):
    from labrunner.labs.definition import Launch
    from labrunner.run.diagnose import write_case
    from labrunner.run.replay import read_case

    q = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    launch = Launch("flash_prefill", (1, 32, 1), (128, 1, 1), 0, ("q", "k", "v", "out", 1, 31))
    write_case(tmp_path, {"source": "// kernel", "filename": "a.cu", "entry_types": {"flash_prefill": ["int"]},
                          "request": {"launches": [launch], "inputs": {"q": q}, "writable": {"out": 2048},
                                      "returned": ("out",), "reverse_threads": False}})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["case.json", "q.npy"]
    case = read_case(tmp_path)
    assert case["launches"] == [launch]
    assert (case["writable"], case["returned"], case["source"]) == ({"out": 2048}, ["out"], "// kernel")
    np.testing.assert_array_equal(case["inputs"]["q"], q)


def test_the_replay_runs_boxed_without_the_secret_and_leaves_no_process(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_SEED", "987654321")
    fake_sanitizer(tmp_path, monkeypatch, 'sleep 3131 &\necho "=========     at seed=[$ATTNLAB_SEED] in [$PWD]"\n')
    report = replay_under_sanitizer({"source": ""}, case_timeout_s=10)
    assert report.startswith("     at seed=[] in [") and "/attnlab-diagnose-" in report
    left = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p) == b"sleep\x003131\x00"]
    assert left == []


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""
