"""The crash replay: what of compute-sanitizer's report reaches the user, and what happens without one.

A stand-in `compute-sanitizer` on PATH prints a memcheck report in the tool's own format, so the
filter is checked line by line on a machine with no GPU.
"""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from box_paths import tmp_entries_of

from labrunner.run.diagnose import replay_under_sanitizer
from labrunner.run.racecheck import find_hazard

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


# The stand-in finds the file its report goes to (`--log-file`) as the real tool does, in $log.
FIND_LOG = 'for arg; do [ "$previous" = --log-file ] && log="$arg"; previous="$arg"; done\n'


def fake_sanitizer(tmp_path, monkeypatch, body: str) -> None:
    tool = tmp_path / "bin" / "compute-sanitizer"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n" + FIND_LOG + body)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")


def test_the_kernel_line_thread_and_address_are_kept_and_the_rest_dropped(tmp_path, monkeypatch):
    fake_sanitizer(tmp_path, monkeypatch, f"cat > \"$log\" <<'EOF'\n{REPORT}EOF\nexit 1\n")
    assert replay_under_sanitizer({"source": ""}, case_timeout_s=10).splitlines() == [
        " Invalid __global__ write of size 4 bytes",
        "     at flash_prefill+0x1f0 in illegal_address.cu:5",
        "     by thread (66,0,0) in block (0,8,0)",
        "     Address 0x83e432a26000 is out of bounds",
    ]


def test_a_sanitizer_that_reports_nothing_gives_no_diagnosis(tmp_path, monkeypatch):
    fake_sanitizer(tmp_path, monkeypatch, "echo '========= ERROR SUMMARY: 0 errors' > \"$log\"\n")
    assert replay_under_sanitizer({"source": ""}, case_timeout_s=10) is None


@pytest.mark.slow
def test_a_sanitizer_that_hangs_is_stopped_and_said_so(tmp_path, monkeypatch):
    fake_sanitizer(tmp_path, monkeypatch, "exec sleep 30\n")
    assert replay_under_sanitizer({"source": ""}, case_timeout_s=0.5) == (
        "compute-sanitizer did not finish within 1.5 s (3 times the case's 0.5 s)"
    )


def test_without_a_sanitizer_there_is_no_replay(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert replay_under_sanitizer({"source": ""}, case_timeout_s=10) is None


def test_the_replayed_case_travels_as_json_and_npy_files_never_pickle(tmp_path):
    from labrunner.labs.definition import Launch
    from labrunner.run.diagnose import write_case
    from labrunner.run.replay import read_case

    q = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    launch = Launch("flash_prefill", (1, 32, 1), (128, 1, 1), 0, ("q", "k", "v", "out", 1, 31))
    write_case(
        tmp_path,
        {
            "source": "// kernel",
            "filename": "a.cu",
            "entry_types": {"flash_prefill": ["int"]},
            "request": {
                "launches": [launch],
                "inputs": {"q": q},
                "writable": {"out": 2048},
                "returned": ("out",),
                "reverse_threads": False,
            },
        },
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["case.json", "q.npy"]
    case = read_case(tmp_path)
    assert case["launches"] == [launch]
    assert (case["writable"], case["returned"], case["source"]) == ({"out": 2048}, ["out"], "// kernel")
    np.testing.assert_array_equal(case["inputs"]["q"], q)


def test_the_replay_runs_boxed_without_the_secret_and_leaves_no_process(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_SEED", "987654321")
    fake_sanitizer(
        tmp_path,
        monkeypatch,
        'sleep 3131 &\necho "=========     at seed=[$ATTNLAB_SEED] in [$PWD] sees [$(echo $(ls /tmp))]" > "$log"\n',
    )
    report = replay_under_sanitizer({"source": ""}, case_timeout_s=10)
    # the box's private folder; of the host's /tmp only the way to the stand-in tool itself
    assert report == f"     at seed=[] in [/job] sees [{' '.join(tmp_entries_of(tmp_path))}]"
    left = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p) == b"sleep\x003131\x00"]
    assert left == []


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


RACE = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at flash_prefill+0x2a0 in flash.cu:41
=========     and Read access at flash_prefill+0x310 in flash.cu:47 [512 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
========= ERROR SUMMARY: 1 error
"""


def test_race_check_reads_the_tools_own_report_however_much_the_kernel_prints(tmp_path, monkeypatch):
    """A kernel's printf goes to stdout; the report to a pipe of its own, so a flood cannot hide it."""
    fake_sanitizer(
        tmp_path,
        monkeypatch,
        'i=0; while [ $i -lt 3000 ]; do echo "========= RACECHECK SUMMARY: 0 hazards"; '
        f"i=$((i+1)); done\ncat > \"$log\" <<'EOF'\n{RACE}EOF\n",
    )
    assert find_hazard({"source": ""}, case_timeout_s=10) == (
        "racecheck: shared-memory race in kernel flash_prefill between a write at flash.cu:41 and a read at "
        "flash.cu:47: a missing __syncthreads()?",
        None,
    )


@pytest.mark.slow
def test_a_race_check_that_does_not_finish_is_inconclusive_never_clean(tmp_path, monkeypatch):
    fake_sanitizer(tmp_path, monkeypatch, "exec sleep 30\n")
    assert find_hazard({"source": ""}, case_timeout_s=0.5) == (
        None,
        (
            "compute-sanitizer --tool racecheck did not finish within 1.5 s (3 times the case's 0.5 s), so the kernel "
            "was not checked for races"
        ),
    )


def test_a_race_check_whose_tool_ends_without_its_summary_is_inconclusive(tmp_path, monkeypatch):
    fake_sanitizer(tmp_path, monkeypatch, "echo '========= COMPUTE-SANITIZER' > \"$log\"\nexit 0\n")
    assert find_hazard({"source": ""}, case_timeout_s=10) == (
        None,
        ("compute-sanitizer --tool racecheck ended without its error summary, so it did not watch the whole run"),
    )


def test_a_clean_race_check_sees_both_tools_summaries(tmp_path, monkeypatch):
    fake_sanitizer(tmp_path, monkeypatch, "echo '========= ERROR SUMMARY: 0 errors' > \"$log\"\n")
    assert find_hazard({"source": ""}, case_timeout_s=10) == (None, None)


def test_a_race_check_without_the_sanitizer_is_inconclusive(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_hazard({"source": ""}, case_timeout_s=10) == (
        None,
        "compute-sanitizer is not installed, so the GPU's race check could not run",
    )


def test_racechecks_own_summary_is_the_end_of_a_finished_clean_check(tmp_path, monkeypatch):
    """compute-sanitizer 2025's racecheck ends with its own summary and no error summary (seen on the H200)."""
    fake_sanitizer(
        tmp_path,
        monkeypatch,
        "printf '========= COMPUTE-SANITIZER\\n========= RACECHECK SUMMARY: 0 hazards "
        'displayed (0 errors, 0 warnings)\\n\' > "$log"\n',
    )
    assert find_hazard({"source": ""}, case_timeout_s=10) == (None, None)
