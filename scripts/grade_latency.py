"""How long a whole `attnlab grade` takes, end to end, cold and warm, per lab; and a batch's throughput.

A benchmark, never a test: it prints figures. Each grade is a fresh process, as a student's is.

- cold: the first grade with every cache empty (a new HOME, so attnlab's cache, CuPy's kernel cache and
  the CUDA driver's JIT cache all start empty), as on a fresh machine; with --warm-up, after the install's
  warm-up step (`attnlab doctor --warm`, timed and printed on its own) in that same new HOME, where the
  tree has one;
- NVRTC alone: the same compile of the solution as the gate's (its options, its library), in one process
  with nothing around it, beside the grade's "compile student" phase;
- warm: the median of --runs grades after it, with those caches kept;
- where the time went: the phases (`--json`'s `timings`) of the cold grade and of the median warm one;
- --batch N: a folder of N files of one lab (the solution, the starter and wrong fixtures, mixed), graded
  as one batch with --jobs (default auto), warm: submissions per GPU-hour (per CPU-hour on the CPU), and
  its fraction of the timing lock's limit: 3,600 over the mean seconds a submission held the GPU alone
  (its "timing" phase and the phases inside it, `TIMING_PHASES`; a file that fails a case is never
  timed), the most a GPU could grade if nothing but the timing waited. On several GPUs (--gpus, as grade
  takes it; default all): submissions per hour for the host and for each GPU (by the PCI bus id each
  report names), and per GPU-hour the host's over the GPUs used.

    python scripts/grade_latency.py [--labs lab1,lab2,lab3] [--runs 5] [--device gpu|cpu] [--warm-up]
                                    [--against OTHER_CHECKOUT] [--batch 40 --batch-lab lab2 --jobs auto
                                    --gpus 0,1]

--against: another checkout (an earlier commit, unpacked) timed the same way in the same run, for a table
before and after; an older tree may write no `timings`, and its phases are then left out.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Wrong fixtures mixed into a batch (each fails a case; none hangs, so the figure is the grader's).
WRONG = {
    "lab1": ["tests/fixtures/lab1/wrong"],
    "lab2": ["tests/fixtures/lab2/wrong"],
    "lab3": ["tests/fixtures/lab3/wrong"],
}


def fresh_home(root: Path) -> dict[str, str]:
    """An environment whose caches all start empty (and stay, for the warm runs that follow)."""
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HOME": str(home), "CUDA_CACHE_PATH": str(home / ".nv")}
    for name in ("XDG_CACHE_HOME", "CUPY_CACHE_DIR", "ATTNLAB_CACHE_DIR"):
        env.pop(name, None)
    return env


def timed_attnlab(tree: Path, env: dict[str, str], *arguments: str) -> tuple[subprocess.CompletedProcess, float]:
    """`attnlab ARGUMENTS` from `tree`, as a fresh process: what it said on stderr, and its wall seconds."""
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "labrunner", *arguments],
        cwd=tree,
        env={**env, "PYTHONPATH": os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return completed, time.perf_counter() - started


def one_grade(tree: Path, env: dict[str, str], lab: str, path: str, device: str, report: Path) -> dict:
    completed, seconds = timed_attnlab(
        tree, env, "grade", lab, path, "--device", device, "--public-seed", "--json", str(report)
    )
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError):
        data = {}
    if completed.returncode != 0:
        print(f"  exit {completed.returncode}: {completed.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
    timing = data.get("timing") or {}
    return {
        "seconds": seconds,
        "exit": completed.returncode,
        "phases": data.get("timings"),
        "speedup": timing.get("speedup") if isinstance(timing, dict) else None,
    }


def warm_up(tree: Path, env: dict[str, str], device: str) -> float | None:
    """`attnlab doctor --warm` in this environment: its seconds, or None where the tree has no such step."""
    completed, seconds = timed_attnlab(tree, env, "doctor", "--warm", "--device", device)
    if completed.returncode == 2 and "--warm" in completed.stderr:  # an older tree: no warm-up step
        return None
    if completed.returncode != 0:
        print(f"  doctor --warm: exit {completed.returncode}: {completed.stderr.strip()[-400:]}", file=sys.stderr)
    return seconds


NVRTC_ALONE = """
import json, sys, time
from pathlib import Path
from labrunner.compile import nvrtc, nvrtc_child
from labrunner.compile.compiler_process import nvrtc_library
lab, arch = sys.argv[1], "sm_90"
label = f"kernels/{lab}/solution.cu"
options = [f"--gpu-architecture={arch}", "--std=c++17", "--no-source-include", *nvrtc.NVRTC_INCLUDE_OPTIONS,
           "--ptxas-options=-v", "-lineinfo"]
request = {"source": nvrtc.compose_source(Path(label).read_text(), label), "name": label, "options": options}
library = nvrtc_child.load_nvrtc(nvrtc_library())
seconds = []
for _ in range(4):
    started = time.perf_counter()
    reply = nvrtc_child.compile_once(library, request)
    seconds.append(time.perf_counter() - started)
assert reply["result"] == "NVRTC_SUCCESS", reply["result"]
print(json.dumps(sorted(seconds[1:])[1]))
"""


# What a grade does while it holds the GPU alone: the "timing" phase and the phases inside it (a phase's
# row is its own time, without the phases nested in it), all in the main thread.
TIMING_PHASES = ("timing", "compile starter", "load baseline", "timed runs", "timed calls checked",
                 "waiting for the GPU oracle")  # fmt: skip


def nvrtc_alone(tree: Path, lab: str) -> float | None:
    """The median of three warm NVRTC compiles of the lab's solution, in one bare process (the gate's options)."""
    completed = subprocess.run(
        [sys.executable, "-c", NVRTC_ALONE, lab], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True, text=True,
    )  # fmt: skip
    try:
        return float(completed.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


class Machine:
    """A fresh machine for one tree: a new HOME whose caches start empty. With the warm-up, one HOME for
    every lab (`doctor --warm` builds for all labs at once, as after an install); without it, a new HOME
    for each lab, so that each lab's first grade starts from nothing."""

    def __init__(self, tree: Path, device: str, with_warm_up: bool) -> None:
        self.tree, self.device, self.with_warm_up = tree, device, with_warm_up
        self.shared: tempfile.TemporaryDirectory | None = None
        self.warm_up_s: float | None = None

    def home(self) -> tuple[Path, dict[str, str], tempfile.TemporaryDirectory | None]:
        """A scratch folder and its environment; the folder to remove afterwards, where it is the lab's own."""
        if not self.with_warm_up:
            own = tempfile.TemporaryDirectory(prefix="attnlab-latency-")
            return Path(own.name), fresh_home(Path(own.name)), own
        if self.shared is None:
            self.shared = tempfile.TemporaryDirectory(prefix="attnlab-latency-")
            self.warm_up_s = warm_up(self.tree, fresh_home(Path(self.shared.name)), self.device)
            if self.warm_up_s is None:  # an older tree without the step: a new HOME for each lab after all
                self.shared.cleanup()
                self.shared, self.with_warm_up = None, False
                return self.home()
        return Path(self.shared.name), fresh_home(Path(self.shared.name)), None


def lab_latency(machine: Machine, lab: str, runs: int) -> dict:
    tree, device = machine.tree, machine.device
    root, env, own = machine.home()
    scratch = root / lab
    scratch.mkdir(exist_ok=True)
    try:
        path = f"kernels/{lab}/solution.cu"
        warm_up_s = machine.warm_up_s
        grades = [one_grade(tree, env, lab, path, device, scratch / f"run{i}.json") for i in range(runs + 1)]
    finally:
        if own is not None:
            own.cleanup()
    warm = sorted(grades[1:], key=lambda g: g["seconds"])
    median = warm[len(warm) // 2]
    compile_phases = [phase_seconds(g["phases"], "compile student") for g in warm]
    known = [c for c in compile_phases if c is not None]
    return {
        "warm_up": warm_up_s,
        "nvrtc_alone": nvrtc_alone(tree, lab),
        "compile_phase_median": statistics.median(known) if known else None,
        "cold": grades[0],
        "warm_median": statistics.median(g["seconds"] for g in warm),
        "warm_min": warm[0]["seconds"],
        "warm_max": warm[-1]["seconds"],
        "median_run": median,
        "exits": sorted({g["exit"] for g in grades}),
        "speedups": [g["speedup"] for g in grades if g["speedup"] is not None],
    }


def phase_seconds(table: list | None, name: str) -> float | None:
    for row in table or []:
        if row["phase"] == name:
            return float(row["seconds"])
    return None


def phase_rows(cold: list | None, warm: list | None) -> list[tuple[str, str, str]]:
    names: list[str] = []
    for table in (cold or [], warm or []):
        names += [row["phase"] for row in table if row["phase"] not in names]
    as_dict = [{row["phase"]: row["seconds"] for row in table or []} for table in (cold, warm)]
    return [(name, *(f"{d[name]:.3f}" if name in d else "" for d in as_dict)) for name in names]  # type: ignore[misc]


def batch_folder(root: Path, lab: str, count: int) -> Path:
    """count files, the solution, the starter and the lab's wrong fixtures in turn, each under a name of its own."""
    sources = [REPO / f"kernels/{lab}/solution.cu", REPO / f"kernels/{lab}/starter.cu"]
    for folder in WRONG[lab]:
        sources += sorted((REPO / folder).glob("*.cu"))[:6]
    folder = root / "submissions"
    folder.mkdir(parents=True)
    for i in range(count):
        source = sources[i % len(sources)]
        shutil.copyfile(source, folder / f"s{i:03d}-{source.stem}.cu")
    return folder


def batch_throughput(tree: Path, lab: str, count: int, jobs: str, device: str, gpus: str | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="attnlab-batch-latency-") as scratch:
        root = Path(scratch)
        env = fresh_home(root)
        one_grade(tree, env, lab, f"kernels/{lab}/solution.cu", device, root / "warmup.json")  # fills the caches
        folder = batch_folder(root, lab, count)
        gradebook = root / "gradebook.csv"
        results = root / "results"
        completed, seconds = timed_attnlab(
            tree,
            env,
            "grade",
            lab,
            str(folder),
            "--device",
            device,
            "--jobs",
            jobs,
            *(("--gpus", gpus) if gpus else ()),
            "--csv",
            str(gradebook),
            "--out-dir",
            str(results),
            "--public-seed",
        )
        rows = list(csv.DictReader(gradebook.open())) if gradebook.exists() else []
        timed_s = []  # each submission's seconds holding the GPU alone (0 for one never timed)
        slowest = []  # (seconds, file, verdict, its three longest phases)
        by_gpu: dict[str, int] = {}  # submissions graded on each GPU, by its PCI bus id
        for report in sorted(results.glob("*.json")):
            try:
                data = json.loads(report.read_text())
            except (OSError, ValueError):
                continue
            if not isinstance(data, dict):
                continue
            phases = data.get("timings") or []
            on = (data.get("gpu") or {}).get("pci_bus_id") or "(no GPU named)"
            by_gpu[on] = by_gpu.get(on, 0) + 1
            timed_s.append(sum(phase_seconds(phases, name) or 0.0 for name in TIMING_PHASES))
            total = sum(row["seconds"] for row in phases if "(ahead)" not in row["phase"])
            top = sorted(phases, key=lambda row: -row["seconds"])[:3]
            slowest.append(
                (total, report.stem, data.get("verdict"), ", ".join(f"{r['phase']} {r['seconds']:.2f}" for r in top))
            )
        # each timed file graded alone too, once, in the same environment: its SPEEDUP beside the batch's
        alone = {
            stem: one_grade(tree, env, lab, f"kernels/{lab}/{stem}.cu", device, root / f"alone-{stem}.json")["speedup"]
            for stem in ("solution", "starter")
        }
    verdicts: dict[str, int] = {}
    deviations: dict[str, float] = {}
    for row in rows:
        verdicts[row["verdict"]] = verdicts.get(row["verdict"], 0) + 1
        stem = row["file"].rsplit("-", 1)[-1].removesuffix(".cu")
        if row.get("speedup") and alone.get(stem):
            gap = abs(float(row["speedup"]) / alone[stem] - 1)
            deviations[stem] = max(deviations.get(stem, 0.0), gap)
    return {
        "seconds": seconds,
        "mean_timed_s": statistics.mean(timed_s) if timed_s else None,
        "slowest": sorted(slowest, reverse=True)[:6],
        "rows": len(rows),
        "exit": completed.returncode,
        "verdicts": verdicts,
        "alone": alone,
        "largest_gap_from_alone": deviations,
        "by_gpu": by_gpu,
    }


def seconds_or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labs", default="lab1,lab2,lab3")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    parser.add_argument("--against", type=Path, default=None, help="an earlier checkout, timed the same way")
    parser.add_argument("--against-labs", default=None, help="labs for --against (default: --labs)")
    parser.add_argument("--batch", type=int, default=0, help="files in the throughput batch (0: none)")
    parser.add_argument("--batch-lab", default="lab2")
    parser.add_argument("--jobs", default="auto")
    parser.add_argument("--gpus", default=None, help="the batch's GPUs, as grade's --gpus takes them (default: all)")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure here")
    parser.add_argument("--warm-up", action="store_true", help="run `attnlab doctor --warm` before the first grade")
    arguments = parser.parse_args()
    trees = [("this tree", REPO, arguments.labs.split(","))]
    if arguments.against:
        trees.append(
            (arguments.against.name, arguments.against.resolve(), (arguments.against_labs or arguments.labs).split(","))
        )
    figures: dict = {"device": arguments.device, "runs": arguments.runs, "latency": [], "batch": None}
    for name, tree, labs in trees:
        machine = Machine(tree, arguments.device, arguments.warm_up)
        for lab in labs:
            measured = lab_latency(machine, lab, arguments.runs)
            figures["latency"].append({"tree": name, "lab": lab, **measured})
            warmed = "" if measured["warm_up"] is None else f"doctor --warm {measured['warm_up']:.1f} s, then "
            print(
                f"{name}: grade {lab} solution --device {arguments.device}: {warmed}first grade "
                f"{measured['cold']['seconds']:.2f} s, warm median {measured['warm_median']:.2f} s (min "
                f"{measured['warm_min']:.2f}, max {measured['warm_max']:.2f}), exits {measured['exits']}; "
                f"compile student {seconds_or_dash(measured['compile_phase_median'])} beside NVRTC alone "
                f"{seconds_or_dash(measured['nvrtc_alone'])}",
                flush=True,
            )
    for entry in figures["latency"]:
        rows = phase_rows(entry["cold"]["phases"], entry["median_run"]["phases"])
        if rows:
            print(f"\nwhere the time went: {entry['tree']}, {entry['lab']} (seconds)")
            print(f"  {'phase':28} {'cold':>8} {'warm':>8}")
            for phase, cold, warm in rows:
                print(f"  {phase:28} {cold:>8} {warm:>8}")
    if arguments.batch:
        batch = batch_throughput(
            REPO, arguments.batch_lab, arguments.batch, arguments.jobs, arguments.device, arguments.gpus
        )
        host_per_hour = 3600 * batch["rows"] / batch["seconds"] if batch["seconds"] else 0.0
        gpus_used = len(batch["by_gpu"]) if arguments.device == "gpu" else 1
        per_hour = host_per_hour / max(1, gpus_used)
        figures["batch"] = {**batch, "per_hour": per_hour, "host_per_hour": host_per_hour}
        unit = "GPU" if arguments.device == "gpu" else "CPU"
        print(
            f"\nbatch: {batch['rows']} {arguments.batch_lab} files, --jobs {arguments.jobs}: {batch['seconds']:.1f} s, "
            f"{per_hour:.0f} submissions per {unit}-hour; verdicts {batch['verdicts']}; exit {batch['exit']}"
        )
        if arguments.device == "gpu":
            print(f"  the host: {host_per_hour:.0f} submissions per hour on {gpus_used} GPU(s)")
            for bus_id, count in sorted(batch["by_gpu"].items()):
                print(f"  GPU {bus_id}: {count} submissions, {3600 * count / batch['seconds']:.0f} per hour")
        if batch["mean_timed_s"]:
            limit = 3600 / batch["mean_timed_s"]
            figures["batch"]["timing_lock_limit_per_hour"] = limit
            print(
                f"  the timing lock's limit: {batch['mean_timed_s']:.3f} s timed per submission on average, "
                f"{limit:.0f} per hour; the batch ran at {per_hour / limit:.0%} of it"
            )
        for total, name, verdict, top in batch["slowest"]:
            print(f"  slow: {name} ({verdict}) {total:.1f} s: {top}")
        for stem, gap in batch["largest_gap_from_alone"].items():
            print(f"  {stem}: SPEEDUP alone {batch['alone'][stem]:.3f}x; largest gap of a batch row from it {gap:.2%}")
    # SPEEDUP over every grade of the lab (each a fresh process), and its spread: largest over smallest, less 1
    print(f"\n{'tree':14} {'lab':5} {'cold s':>7} {'warm s':>7} {'speedup':>8} {'spread':>8}")
    for entry in figures["latency"]:
        speedups = entry["speedups"]
        median = f"{statistics.median(speedups):.2f}x" if speedups else "-"
        spread = f"{max(speedups) / min(speedups) - 1:.2%}" if speedups else "-"
        cold, warm = entry["cold"]["seconds"], entry["warm_median"]
        print(f"{entry['tree']:14} {entry['lab']:5} {cold:7.2f} {warm:7.2f} {median:>8} {spread:>8}")
    if arguments.json:
        arguments.json.write_text(json.dumps(figures, indent=2))
    return 0 if all(e["exits"] == [0] for e in figures["latency"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
