"""--executor slurm on a real Slurm: a single-node cluster from Debian's packages, with slurmdbd so that
sacct answers (scripts/slurm_cluster.sh; CI starts it in .ci/run).

The batch graded there gets the gradebook the local executor gives, and each thing a cluster does to a
batch gives its submission a row that says what happened: a task cancelled while running and while
pending ("cancelled by the cluster"), one past its time limit ("time limit (60 s)"), a node that fails
under a task ("node failure", or the requeued task's own verdict with "node failure, requeued"), and
the driver interrupted (every job cancelled, the rows `interrupted`, exit 130). Nothing hangs, and
nothing is left in the queue.

Without a cluster these tests are skipped, saying so; with CI=true a missing cluster fails them, so a
broken cluster script cannot pass for a green run. Slurm counts time limits in minutes and checks them
every 30 s, so the time-limit batch is started first and runs beside the tests that follow."""

from __future__ import annotations

import csv
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import needed_in_ci
from fixture_suite import FIXTURES, REPO
from result_schema import validate_file

from labrunner.exit_codes import ExitCode
from labrunner.pipeline.batch import slurm, slurm_queue
from labrunner.pipeline.batch.grading import Grading
from labrunner.pipeline.batch.settings import BatchOptions
from labrunner.pipeline.batch.stop import BatchStop
from labrunner.pipeline.batch.submission import Outcome, SubmissionTask

SOLUTION = REPO / "kernels/lab2/solution.cu"
WRONG = FIXTURES / "lab2/wrong/scale_missing.cu"
COMPILE_ERROR = FIXTURES / "lab2/hostile/foreign_include.cu"
HANG = FIXTURES / "lab2/hostile/hang.cu"
# one small case, with the public seed said outright: these tests are about the cluster, not the kernels
QUICK = ("--device", "cpu", "--case", "C1-P31", "--public-seed")
HANGS = ("--timeout", "100")  # hang.cu's case would end at 100 s: a task that is still grading when the test acts
SCRIPT = REPO / "scripts/slurm_cluster.sh"


def cluster_problem() -> str | None:
    """Why no usable cluster is here, or None."""
    if not shutil.which("sbatch"):
        return "no sbatch on PATH"
    if subprocess.run(["scontrol", "ping"], capture_output=True, timeout=30).returncode != 0:
        return "slurmctld does not answer `scontrol ping`"
    states = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30).stdout.split()
    if not any(s.rstrip("*~#") in ("idle", "mix", "alloc") for s in states):
        return f"no node is up (sinfo: {' '.join(states) or 'none'})"
    if subprocess.run(["sacct", "-n", "-X", "-j", "1"], capture_output=True, timeout=30).returncode != 0:
        return "sacct does not answer (no slurmdbd)"
    from labrunner.run.cpu_device import cpu_backend_status

    if not cpu_backend_status()[0]:
        return "no CPU backend (a C++ compiler, bubblewrap) to grade on"
    return None


@pytest.fixture(scope="module")
def cluster():
    problem = cluster_problem()
    if problem:
        needed_in_ci(f"no Slurm cluster is up here ({problem}); `sudo scripts/slurm_cluster.sh start` brings one up")
    yield
    assert wait_for_empty_queue() == []


def named(test: str) -> str:
    """Each test's jobs get a name of their own (sbatch's own --job-name, given as an --sbatch-arg), so
    that what one test sees in the queue, and cancels, is its own: the time-limit batch runs beside them."""
    return f"--job-name=attnlab-{test}"


def our_jobs(test: str | None = None) -> list[str]:
    """This user's tasks still in the queue (COMPLETING ones too), of one test's jobs or of all."""
    argv = ["squeue", "--me", "-h", "-r", "-o", "%i"] + (["-n", f"attnlab-{test}"] if test else [])
    return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.split()


def wait_for_empty_queue(test: str | None = None, seconds: float = 120.0) -> list[str]:
    """What is still queued once the queue is empty, or once `seconds` have passed: a job's processes can
    take a loaded node many seconds to end (COMPLETING), and returning at once when it is empty costs nothing."""
    until = time.monotonic() + seconds
    while (left := our_jobs(test)) and time.monotonic() < until:
        time.sleep(0.5)
    return left


def processes_mentioning(text: str) -> list[str]:
    """The command lines of processes that name `text` (the test's own folder): a grading left running."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        # pytest's own processes are left out by what they run, not by the word: the test's folder
        # (pytest's tmp_path) itself has "pytest" in its name.
        if any(Path(arg).name in ("pytest", "py.test") for arg in argv[:3]):
            continue
        line = " ".join(argv)
        if text in line:
            found.append(line)
    return found


def attnlab_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "labrunner", *args]


def environment() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    env.pop("ATTNLAB_SEED", None)
    return env


def attnlab(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        attnlab_command(*args), cwd=cwd, env=environment(), capture_output=True, text=True, timeout=timeout
    )


def start_attnlab(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        attnlab_command(*args), cwd=cwd, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_until(condition, seconds: float, what: str):
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"{what} did not happen within {seconds} s")


def grading_on_the_node(test: str, folder: Path, seconds: int = 3) -> None:
    """Waits (however long a loaded node takes) until the test's running task has its grading process up on
    the node, for `folder`, and has run `seconds` by squeue's clock: a task the test then acts on is one
    that was seen running, and its elapsed time is not 0."""
    wait_until(lambda: processes_mentioning(str(folder)), 120, "the task's grading process on the node")
    wait_until(lambda: any(used >= seconds for used in time_used(test).values()), 120, f"{seconds} s of running")


def time_used(test: str) -> dict[str, int]:
    """squeue's TimeUsed of each of the test's running tasks, in seconds."""
    out = subprocess.run(
        ["squeue", "--me", "-h", "-r", "-t", "RUNNING", "-n", f"attnlab-{test}", "-o", "%i|%M"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return {job: slurm_queue.seconds(used) or 0 for job, used in (line.split("|") for line in out.stdout.split())}


def sacct_attempts(job_ids: list[str]) -> list[tuple[str, str]]:
    """Every attempt of these jobs as sacct records it: (job id, state)."""
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "--duplicates", "-j", ",".join(job_ids), "-o", "JobID,State"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    lines = [line.strip().split("|") for line in out.stdout.splitlines() if line.strip()]
    return [(fields[0], fields[-1].split()[0] if fields[-1].split() else "") for fields in lines]


def node_failures(job_ids: list[str]) -> int:
    """How many attempts of these jobs sacct has recorded as ended by a node failure."""
    return sum(state == "NODE_FAIL" for _, state in sacct_attempts(job_ids))


def sacct_states(job_ids: list[str]) -> str:
    """Every attempt of these jobs as sacct records it, for a failure's message."""
    return "; ".join(f"{job} {state}" for job, state in sacct_attempts(job_ids)) or "(nothing)"


def task_states(test: str) -> dict[str, str]:
    out = subprocess.run(
        ["squeue", "--me", "-h", "-r", "-n", f"attnlab-{test}", "-o", "%i|%T"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return dict(line.split("|") for line in out.stdout.split())


def result(out: Path, name: str) -> dict:
    return validate_file(out / f"{name}.json")


def gradebook(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


# --- started first: a task past its time limit (Slurm checks limits every 30 s, so about 90 s) -----------


@pytest.fixture(scope="module")
def time_limited(cluster, tmp_path_factory):
    """hang.cu graded under a 1-minute limit with a 200 s case timeout: the limit ends it. Started as the
    module's first test begins; read by the test near its end."""
    folder = tmp_path_factory.mktemp("time-limit")
    process = start_attnlab(
        "grade", "lab2", str(HANG), "--executor", "slurm", *QUICK, "--timeout", "200", "--time-limit", "1",
        f"--sbatch-arg={named('time-limit')}", "--out-dir", "out", cwd=folder,
    )  # fmt: skip
    yield folder, process
    if process.poll() is None:  # a part of the module was run, without the test that reads it
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)


# --- without a cluster: how a batch is cut into arrays and let out ---------------------------------


class FakeSlurm:
    """submitit's SlurmExecutor as the batch uses it: each array it is given is recorded (its size and
    its %parallelism), and its tasks end at once with a result, as a fast cluster's would."""

    def __init__(self, folder: Path, parallelism: int):
        self.folder = folder
        self.parameters = {"array_parallelism": parallelism}
        self.arrays: list[tuple[int, int]] = []

    @staticmethod
    def name() -> str:
        return "slurm"

    def update_parameters(self, **parameters) -> None:
        self.parameters.update(parameters)

    def map_array(self, function, tasks):
        from submitit.core.utils import cloudpickle_dump

        array = 100 + len(self.arrays)
        self.arrays.append((len(tasks), self.parameters["array_parallelism"]))
        jobs = []
        for index, task in enumerate(tasks):
            job = FakeJob(f"{array}_{index}", self.folder / f"{array}_{index}_result.pkl")
            cloudpickle_dump(
                ("success", Outcome(task, {"verdict": "pass", "exit_code": 0}, 1.0)), job.paths.result_pickle
            )
            jobs.append(job)
        return jobs


class FakeJob:
    def __init__(self, job_id: str, result_pickle: Path):
        self.job_id = job_id
        self.paths = type("Paths", (), {"result_pickle": result_pickle, "folder": result_pickle.parent})()


@pytest.fixture
def fake_queue(monkeypatch):
    """The cluster's answers: MaxArraySize 5; every task ended COMPLETED after 1 s."""
    monkeypatch.setattr(slurm_queue, "max_array_size", lambda: 5)
    monkeypatch.setattr(slurm_queue, "queued", dict)
    monkeypatch.setattr(
        slurm_queue, "poll", lambda ids: {i: slurm_queue.TaskState(i, "COMPLETED", 1, 3600) for i in ids}
    )


@pytest.mark.parametrize(
    "jobs, arrays",
    [
        (None, [(5, 5), (5, 5), (2, 2)]),  # 12 files under MaxArraySize 5: 3 arrays, all submitted at once
        (3, [(5, 3), (5, 3), (2, 2)]),  # --jobs 3: one array at a time, never more than 3 tasks running
        (8, [(5, 5), (5, 3), (2, 2)]),  # --jobs 8: the first two arrays share the 8; the third waits
    ],
)
def test_a_batch_is_cut_at_max_array_size_and_held_to_jobs(tmp_path, fake_queue, jobs, arrays):
    tasks = tasks_for(tmp_path, [SOLUTION] * 12, QUICK)
    executor = FakeSlurm(tmp_path, jobs or len(tasks))
    outcomes = slurm.run_submitit(tasks, executor)
    assert executor.arrays == arrays
    assert [o.task for o in outcomes] == tasks
    assert [o.result["cluster"]["job_id"] for o in outcomes] == [
        f"{array}_{index}" for array, size in zip((100, 101, 102), (5, 5, 2)) for index in range(size)
    ]


def test_slurms_durations_and_array_records_are_read():
    assert [slurm_queue.seconds(t) for t in ("00:01:17", "1:17", "1-02:00:05", "00:00:00", "UNLIMITED", "")] == [
        77,
        77,
        93605,
        0,
        None,
        None,
    ]
    assert slurm_queue.task_ids("12_[1-3,7%2]") == ["12_1", "12_2", "12_3", "12_7"]
    assert slurm_queue.task_ids("12_4") == ["12_4"] and slurm_queue.task_ids("13") == ["13"]


def test_a_task_requeued_after_a_node_failure_says_so_while_it_waits(monkeypatch):
    """squeue has the requeued task pending again; sacct has its failed attempt (and, a moment later, the new)."""
    monkeypatch.setattr(slurm_queue, "queued", lambda: {"7_0": "PENDING", "7_1": "PENDING"})
    monkeypatch.setattr(
        slurm_queue,
        "accounted",
        lambda arrays: {"7_0": [("NODE_FAIL", 28, 120)], "7_1": [("NODE_FAIL", 28, 120), ("PENDING", 0, 120)]},
    )
    states = slurm_queue.poll(["7_0", "7_1"])
    assert [(s.state, s.queued, s.earlier, s.requeued_after_node_failure) for s in states.values()] == [
        ("PENDING", True, ["NODE_FAIL"], True)
    ] * 2


def test_a_task_still_completing_has_the_state_sacct_gives_its_end(monkeypatch):
    """A cancelled task whose processes a busy node is still ending: squeue says COMPLETING, sacct CANCELLED;
    the row is to say how it ended. One still running in sacct keeps squeue's word."""
    monkeypatch.setattr(slurm_queue, "queued", lambda: {"8_0": "COMPLETING", "8_1": "COMPLETING", "8_2": "RUNNING"})
    monkeypatch.setattr(
        slurm_queue,
        "accounted",
        lambda arrays: {"8_0": [("CANCELLED", 14, 3600)], "8_1": [("RUNNING", 3, 3600)], "8_2": [("RUNNING", 9, 60)]},
    )
    states = slurm_queue.poll(["8_0", "8_1", "8_2"])
    assert [(s.state, s.elapsed_s, s.queued, s.earlier, s.live) for s in states.values()] == [
        ("CANCELLED", 14, True, [], True),
        ("COMPLETING", 3, True, [], True),
        ("RUNNING", 9, True, [], True),
    ]


# --- the same gradebook as the local executor ------------------------------------------------------


@pytest.mark.slow
def test_slurm_gives_the_gradebook_local_gives(cluster, time_limited, tmp_path):
    files = [str(SOLUTION), str(WRONG), str(COMPILE_ERROR)]
    local = attnlab("grade", "lab2", *files, *QUICK, "--jobs", "2", "--out-dir", "local", cwd=tmp_path)
    started = time.monotonic()
    on_slurm = attnlab("grade", "lab2", *files, "--executor", "slurm", *QUICK, "--out-dir", "slurm", cwd=tmp_path)
    took = time.monotonic() - started
    assert (local.returncode, on_slurm.returncode) == (3, 3), on_slurm.stderr[-3000:]
    assert re.search(r"^note: submitted 3 submissions as Slurm job \d+$", on_slurm.stderr, re.MULTILINE)
    ignored = {"seconds", "cluster_state", "cluster_elapsed_s", "cluster_reason"}
    local_rows, slurm_rows = gradebook(tmp_path / "local/gradebook.csv"), gradebook(tmp_path / "slurm/gradebook.csv")
    assert [{k: v for k, v in r.items() if k not in ignored} for r in slurm_rows] == [
        {k: v for k, v in r.items() if k not in ignored} for r in local_rows
    ]
    assert [(r["file"], r["verdict"], r["exit_code"]) for r in slurm_rows] == [
        (files[0], "pass", "0"),
        (files[1], "wrong", "1"),
        (files[2], "compile-error", "3"),
    ]
    # sacct's word on each task reaches the gradebook; the local one has none
    assert [r["cluster_state"] for r in slurm_rows] == ["COMPLETED"] * 3
    assert all(0 <= int(r["cluster_elapsed_s"]) <= took for r in slurm_rows)
    assert [(r["cluster_state"], r["cluster_elapsed_s"]) for r in local_rows] == [("", "")] * 3
    record = result(tmp_path / "slurm", "solution")["cluster"]
    assert re.fullmatch(r"\d+_0", record["job_id"])
    assert {k: record[k] for k in ("state", "time_limit_s", "requeued", "reason")} == {
        "state": "COMPLETED",
        "time_limit_s": 3600,
        "requeued": 0,
        "reason": None,
    }
    # every per-file report is there, and the nodes' logs, where the --out-dir is
    assert (tmp_path / "slurm/solution.log").read_text().rstrip().endswith("(exit 0)")
    assert list((tmp_path / "slurm/submitit").glob("*_0_log.out"))


# --- what a cluster does to a batch ---------------------------------------------------------------


@pytest.mark.slow
def test_scancel_of_a_running_and_of_a_pending_task_is_cancelled_by_the_cluster(cluster, time_limited, tmp_path):
    # --jobs 1: hang.cu runs, the solution waits in the queue behind it
    batch = start_attnlab(
        "grade", "lab2", str(HANG), str(SOLUTION), "--executor", "slurm", *QUICK, *HANGS, "--jobs", "1",
        f"--sbatch-arg={named('cancel')}", "--out-dir", "out", cwd=tmp_path,
    )  # fmt: skip
    states = wait_until(
        lambda: (s := task_states("cancel")) and sorted(s.values()) == ["PENDING", "RUNNING"] and s,
        120,
        "one task running, one pending",
    )
    running = next(j for j, s in states.items() if s == "RUNNING")
    pending = next(j for j, s in states.items() if s == "PENDING")
    assert (running[-2:], pending[-2:]) == ("_0", "_1")  # hang.cu first, the solution behind it
    subprocess.run(["scancel", pending], check=True, timeout=30)
    grading_on_the_node("cancel", tmp_path)  # and still grading: hang.cu's case hangs for 100 s
    subprocess.run(["scancel", running], check=True, timeout=30)
    cancelled = time.monotonic()
    _, stderr = batch.communicate(timeout=60)
    assert batch.returncode == ExitCode.ENVIRONMENT, stderr[-3000:]
    assert time.monotonic() - cancelled < 30  # noticed within a few polls, never waited for
    hang, solution = result(tmp_path / "out", "hang"), result(tmp_path / "out", "solution")
    assert (hang["verdict"], hang["exit_code"], hang["cluster"]["state"]) == ("environment-missing", 6, "CANCELLED")
    assert re.fullmatch(
        rf"cancelled by the cluster: Slurm job {running} was cancelled \(scancel, or an administrator\) "
        r"after \d+ s running",
        hang["error"],
    ), hang["error"]
    assert (solution["verdict"], solution["exit_code"]) == ("environment-missing", 6)
    assert solution["error"] in (
        f"cancelled by the cluster: Slurm job {pending} was cancelled (scancel, or an administrator) before it ran",
        # where sacct has no record of a task that never started, it simply left the queue
        f"cancelled by the cluster: Slurm job {pending} left the queue before it ran, with no record in sacct "
        "(scancel of a pending task)",
    )
    assert {hang["cluster"]["reason"], solution["cluster"]["reason"]} == {"cancelled by the cluster"}
    assert [(r["verdict"], r["exit_code"]) for r in gradebook(tmp_path / "out/gradebook.csv")] == [
        ("environment-missing", "6"),
        ("environment-missing", "6"),
    ]
    assert wait_for_empty_queue("cancel") == []
    # the grading process and its boxed worker ended with the job
    wait_until(lambda: not processes_mentioning(str(tmp_path)), 60, "the cancelled grading ending")


@pytest.mark.slow
def test_sigint_on_the_driver_cancels_every_job_and_exits_130(cluster, time_limited, tmp_path):
    batch = start_attnlab(
        "grade", "lab2", str(HANG), str(SOLUTION), "--executor", "slurm", *QUICK, *HANGS, "--jobs", "1",
        f"--sbatch-arg={named('sigint')}", "--out-dir", "out", cwd=tmp_path,
    )  # fmt: skip
    wait_until(lambda: "RUNNING" in task_states("sigint").values(), 120, "hang.cu running")
    grading_on_the_node("sigint", tmp_path, seconds=2)
    sent = time.monotonic()
    batch.send_signal(signal.SIGINT)
    _, stderr = batch.communicate(timeout=30)
    assert (batch.returncode, time.monotonic() - sent < 10) == (ExitCode.INTERRUPTED, True), stderr[-3000:]
    assert re.search(r"^note: cancelled Slurm job \d+ \(the batch was interrupted by SIGINT\)$", stderr, re.MULTILINE)
    for name in ("hang", "solution"):
        row = result(tmp_path / "out", name)
        assert (row["verdict"], row["exit_code"], row["error"]) == (
            "interrupted",
            130,
            "not graded: the batch was interrupted by SIGINT",
        )
    assert wait_for_empty_queue("sigint") == []
    wait_until(lambda: not processes_mentioning(str(tmp_path)), 60, "the interrupted grading ending")


@pytest.mark.slow
def test_a_stopped_batch_cancels_its_arrays_and_reports_the_rest_interrupted(cluster, time_limited, tmp_path):
    """The same, through run_submitit: the batch's deadline (a BatchStop) passing while hang.cu grades."""
    options = BatchOptions(executor="slurm", device="cpu", out_dir=tmp_path, sbatch_args=(named("stopped"),))
    tasks = tasks_for(tmp_path, (HANG, SOLUTION), (*QUICK, *HANGS))
    executor = slurm.submitit_executor(options, tmp_path / "submitit", len(tasks))
    executor.update_parameters(array_parallelism=1)
    stop = BatchStop(deadline_s=12)
    started = time.monotonic()
    outcomes = slurm.run_submitit(tasks, executor, Grading(stop=stop))
    assert 12 <= time.monotonic() - started < 60  # the deadline, not hang.cu's 100 s case
    assert [(o.result["verdict"], o.exit_code, o.result["error"]) for o in outcomes] == [
        ("interrupted", 143, "not graded: the batch's deadline (--batch-timeout 12 s) passed first")
    ] * 2
    assert outcomes[0].result["cluster"]["state"] == "CANCELLED"  # as sacct has it once the stop cancelled it
    assert wait_for_empty_queue("stopped") == []


@pytest.mark.slow
def test_sbatch_refusing_a_gpu_request_is_exit_6_with_its_message(cluster, tmp_path):
    completed = attnlab(
        "grade", "lab2", str(SOLUTION), str(WRONG), "--executor", "slurm", "--device", "gpu", "--gres", "gpu:h100:1",
        "--out-dir", "out", cwd=tmp_path,
    )  # fmt: skip
    assert completed.returncode == ExitCode.ENVIRONMENT
    assert completed.stderr == (
        "error: --executor slurm: sbatch refused the job array: Invalid generic resource (gres) specification; "
        "a GPU request the partition cannot meet (--device cpu asks for none; a typed one is --gres gpu:TYPE:N, "
        "the types as `sinfo -o %G` lists them)\n"
    )
    (script,) = (tmp_path / "out/submitit").glob(".submission_file_*.sh")
    assert "#SBATCH --gres=gpu:h100:1\n" in script.read_text()  # the typed request, as given


@pytest.mark.slow
def test_slurm_without_an_out_dir_is_a_usage_error(cluster, tmp_path):
    completed = attnlab("grade", "lab2", str(SOLUTION), str(WRONG), "--executor", "slurm", *QUICK, cwd=tmp_path)
    assert completed.returncode == ExitCode.USAGE
    assert completed.stderr == (
        "error: --executor slurm needs --out-dir: the nodes write each submission's report and log, and "
        "submitit's job files, into it, so it must be a folder on storage they share with this machine "
        "(your home or a project folder), such as --out-dir ~/grading/lab2\n"
    )


def tasks_for(folder: Path, files, options) -> list[SubmissionTask]:
    return [
        SubmissionTask(
            "lab2",
            str(path),
            tuple(options),
            str(folder / f"{i}.json"),
            str(folder / f"{i}.xml"),
            str(folder / f"{i}.log"),
            str(folder),
        )
        for i, path in enumerate(files)
    ]


@pytest.mark.slow
def test_a_batch_is_split_at_the_clusters_max_array_size(cluster, time_limited, tmp_path):
    import cloudpickle
    import slurm_jobs

    cloudpickle.register_pickle_by_value(slurm_jobs)
    size = slurm_queue.max_array_size()
    if size != 5:
        pytest.skip(f"this cluster's MaxArraySize is {size}; scripts/slurm_cluster.sh's is 5")
    tasks = tasks_for(tmp_path, [COMPILE_ERROR] * 12, QUICK)
    options = BatchOptions(executor="slurm", device="cpu", out_dir=tmp_path, sbatch_args=(named("split"),))
    executor = slurm.submitit_executor(options, tmp_path / "submitit", len(tasks))
    outcomes = slurm.run_submitit(tasks, executor, Grading(job=slurm_jobs.says_where_it_ran))
    ran_as = [o.result["error"].removeprefix("ran as ") for o in outcomes]
    assert ran_as == [o.result["cluster"]["job_id"] for o in outcomes]
    arrays = [job_id.split("_")[0] for job_id in ran_as]
    assert [arrays.count(a) for a in dict.fromkeys(arrays)] == [5, 5, 2]  # 12 files, 3 arrays
    assert [int(job_id.split("_")[1]) for job_id in ran_as] == [0, 1, 2, 3, 4] * 2 + [0, 1]
    assert our_jobs("split") == []


# --- read last: the time limit; then the node failure, which takes the node away from everything -----


@pytest.mark.slow
def test_a_task_past_its_time_limit_is_ended_at_the_limit_not_before(time_limited):
    folder, process = time_limited
    _, stderr = process.communicate(timeout=200)
    assert process.returncode == ExitCode.ENVIRONMENT, stderr[-3000:]
    hang = result(folder / "out", "hang")
    assert (hang["verdict"], hang["exit_code"]) == ("environment-missing", 6)
    match = re.fullmatch(
        r"time limit \(60 s\): Slurm job (\d+) ran past its limit and was ended after (\d+) s; "
        r"give it more with --time-limit MINUTES",
        hang["error"],
    )
    assert match, hang["error"]
    # the limit is honest: the task ran its whole minute, not 24 s, and Slurm's limit ended it, not the
    # 200 s case timeout (by Slurm's own clock: the driver's wall time depends on how loaded the machine is)
    assert 60 <= int(match.group(2)) < 200
    assert {k: hang["cluster"][k] for k in ("job_id", "state", "time_limit_s", "reason")} == {
        "job_id": match.group(1),
        "state": "TIMEOUT",
        "time_limit_s": 60,
        "reason": "time limit (60 s)",
    }
    assert wait_for_empty_queue() == []
    assert processes_mentioning(str(folder)) == []


@pytest.fixture
def node_comes_back():
    yield
    subprocess.run([str(SCRIPT), "node-up"], check=True, timeout=60)
    wait_until(lambda: "idle" in subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True).stdout,
               180, "the node back in service")  # fmt: skip


@pytest.mark.slow
def test_a_node_failure_requeues_the_task_or_says_it_was_lost(cluster, time_limited, tmp_path, node_comes_back):
    import cloudpickle
    import slurm_jobs

    if slurm_queue.config_value("ClusterName") != "attnlab-test" or os.geteuid() != 0:
        pytest.skip("stops slurmd: only on scripts/slurm_cluster.sh's own cluster (attnlab-test), as root")
    cloudpickle.register_pickle_by_value(slurm_jobs)
    time_limited[1].wait(timeout=200)  # the node goes away from every job on it: the time-limit batch ends first
    outcomes: dict[str, list] = {}

    def batch(name: str, sbatch_args: tuple[str, ...]) -> None:
        folder = tmp_path / name
        folder.mkdir()
        options = BatchOptions(
            executor="slurm", device="cpu", out_dir=folder, sbatch_args=(*sbatch_args, named("node"))
        )
        executor = slurm.submitit_executor(options, folder / "submitit", 1)
        outcomes[name] = slurm.run_submitit(
            tasks_for(folder, [SOLUTION], QUICK), executor, Grading(job=slurm_jobs.graded_once_requeued)
        )

    threads = [
        threading.Thread(target=functools.partial(batch, "requeued", ())),
        threading.Thread(target=functools.partial(batch, "lost", ("--no-requeue",))),
    ]
    for thread in threads:
        thread.start()
    jobs = wait_until(
        lambda: (s := task_states("node")) and list(s.values()) == ["RUNNING"] * 2 and list(s),
        180,
        "both tasks running",
    )
    # RUNNING is the controller's word at allocation; the node may still be launching the batch script, and
    # a slurmd stopped then ends the job as FAILED (exit 233): the node fails once both gradings are up on it
    for name in ("requeued", "lost"):
        grading_on_the_node("node", tmp_path / name, seconds=1)
    subprocess.run([str(SCRIPT), "node-down"], check=True, timeout=60)
    wait_until(
        lambda: "down" in subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True).stdout,
        120,
        "the node declared down",
    )
    # and its jobs taken off it (the lost one ended, the other requeued), with sacct's record of both
    # failures written, before it comes back: a slurmd back sooner finds the first job's step still running,
    # and its end is recorded as FAILED instead. A loaded controller and slurmdbd take their time: what is
    # waited for is the state itself.
    wait_until(lambda: "RUNNING" not in task_states("node").values(), 120, "the node's jobs taken off it")
    # at least two: each attempt the node's failure ended is one, and a controller that starts the requeued
    # task again before it has declared the node down can end a second; what follows judges both batches' rows
    try:
        wait_until(lambda: node_failures(jobs) >= 2, 240, "sacct's NODE_FAIL record of both tasks")
    except AssertionError as late:
        raise AssertionError(f"{late}; sacct says: {sacct_states(jobs)}") from None
    subprocess.run([str(SCRIPT), "node-up"], check=True, timeout=60)
    until = time.monotonic() + 600  # the requeued task starts again (11 s on) and grades, on a loaded node
    for thread in threads:
        thread.join(timeout=max(0.0, until - time.monotonic()))
    assert [t.is_alive() for t in threads] == [False, False], "a batch did not end within 600 s of the node's return"
    assert sorted(outcomes) == ["lost", "requeued"]
    (requeued,), (lost,) = outcomes["requeued"], outcomes["lost"]
    # requeued: graded again from its start, and its verdict stands, with the requeue said
    assert (requeued.result["verdict"], requeued.exit_code) == ("pass", 0)
    assert {k: requeued.result["cluster"][k] for k in ("state", "requeued", "reason")} == {
        "state": "COMPLETED",
        "requeued": 1,
        "reason": "node failure, requeued",
    }
    # not requeued (--sbatch-arg=--no-requeue): its row says the node failed under it
    assert (lost.result["verdict"], lost.exit_code, lost.result["cluster"]["state"]) == (
        "environment-missing",
        6,
        "NODE_FAIL",
    )
    assert re.fullmatch(
        r"node failure: Slurm job \d+'s node failed after \d+ s, and the job was not requeued; grade the file again",
        lost.result["error"],
    ), lost.result["error"]
    assert json.loads(Path(lost.task.json_path).read_text())["error"] == lost.result["error"]
    assert wait_for_empty_queue() == []
