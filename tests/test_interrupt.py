"""Ctrl-C and a cancelled CI job: the run ends with its own exit code and verdict, keeps the cases
it finished in --json and --junit, and leaves no process and no temporary file behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from labrunner.run.cpu.module import cpu_compiler_available

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
STARTER = REPO / "kernels" / "lab2" / "starter.cu"

# The starter, right on every case but the third (C33-P31), where it spins forever: the run is
# interrupted while the worker is busy in a kernel, after two cases have finished.
SPIN = (
    "    if (chunkLen == 33) {  // the third case never returns\n"
    "        volatile float* watched = out;\n"
    "        while (watched[0] != 12345.0f) {\n"
    "        }\n"
    "    }\n"
)


def spinning_starter(folder: Path) -> Path:
    text = STARTER.read_text()
    anchor = "    const int h = blockIdx.y;\n"
    path = folder / "spins_on_c33.cu"
    path.write_text(text.replace(anchor, SPIN + anchor, 1))
    return path


def as_at_a_terminal() -> None:
    """SIGINT as a shell at a terminal leaves it for the command it runs: the default action. A test
    run started in the background by a shell without job control (`pytest ... &` in a script, as
    some CI runners do) inherits SIGINT ignored, and an ignored SIGINT is no Ctrl-C to test."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def descendants(pid: int) -> set[int]:
    """Every process below pid, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_grade_keeps_its_finished_cases_and_leaves_nothing_behind(tmp_path, signum, code):
    if cpu_compiler_available() is not None:
        pytest.skip("no C++ compiler for the CPU backend")
    kernel = spinning_starter(tmp_path)
    temp = tmp_path / "temp"
    temp.mkdir()
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    environment = {**os.environ, "TMPDIR": str(temp)}
    environment.pop("ATTNLAB_SEED", None)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "labrunner",
            "grade",
            "lab2",
            str(kernel),
            "--device",
            "cpu",
            "--json",
            str(report),
            "--junit",
            str(junit),
        ],
        cwd=REPO,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_at_a_terminal,
    )
    # Progress goes to stderr one line per case as it starts: wait for the third.
    seen = ""
    deadline = time.monotonic() + 300
    while "C33-P31" not in seen and time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        seen += line
    assert "C33-P31" in seen, seen
    time.sleep(1.0)  # inside the spinning kernel by now
    below = descendants(process.pid)
    assert below, "the worker process should be running"
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    name = "SIGINT" if signum == signal.SIGINT else "SIGTERM"
    assert stderr.rstrip().endswith(f"error: interrupted by {name}: 2 cases finished before it are kept")

    data = json.loads(report.read_text())
    assert (data["verdict"], data["exit_code"]) == ("interrupted", code)
    assert [(c["name"], c["status"]) for c in data["cases"]] == [("C1-P31", "pass"), ("C17-P31", "pass")]
    suite = ElementTree.parse(junit).getroot()
    assert [case.get("name") for case in suite.iter("testcase")] == ["C1-P31", "C17-P31", "interrupted"]

    time.sleep(0.5)
    assert [pid for pid in below if alive(pid)] == []
    # The CPU backend's build cache is meant to stay; nothing else may.
    assert sorted(p.name for p in temp.iterdir() if not p.name.startswith("attnlab-cpu-")) == []
