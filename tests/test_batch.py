"""A batch: many submissions in one command, graded as each is graded alone, with a gradebook, a
JSON and JUnit per submission, an aggregated JUnit, and the worst submission's exit code.

The batch runs through the real command line on the CPU backend (`--jobs 2 --device cpu`); the
Slurm path runs through submitit's local executor, which is the same submitit code."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import junitparser
import pytest
from click.testing import CliRunner
from fixture_suite import FIXTURES, REPO, load_fixtures
from result_schema import validate_file

from labrunner.cli import main
from labrunner.cli.options import passed_options
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.pipeline.batch import files as batch_files
from labrunner.pipeline.batch import grade_many as batch
from labrunner.pipeline.batch import slurm, submission
from labrunner.pipeline.batch.files import Found, NotGraded
from labrunner.pipeline.batch.grading import Executing
from labrunner.pipeline.batch.settings import BatchOptions

SOLUTION = REPO / "kernels/lab2/solution.cu"
COMPILE_ERROR = FIXTURES / "lab2/hostile/foreign_include.cu"
QUICK = ("--case", "C1-P31")  # one small case: these tests are about the batch, not the kernels


def cpu_backend_ready() -> bool:
    from labrunner.run.cpu_device import cpu_backend_status

    return cpu_backend_status()[0]


needs_cpu_backend = pytest.mark.skipif(not cpu_backend_ready(), reason="no C++ compiler for the CPU backend")


def attnlab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    environment.pop("ATTNLAB_SEED", None)
    return subprocess.run(
        [sys.executable, "-m", "labrunner", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )


def plain_fixtures(lab: str) -> list:
    """The fixtures graded on the CPU with the suite's default options (no per-file timeout or flags)."""
    return [
        f for f in load_fixtures(lab) if f.runs_on("cpu") and "timeout" not in f.expected and "args" not in f.expected
    ]


def with_a_compile_error(fixtures: list, count: int) -> list:
    """The first `count` of `fixtures`, the last of them the first that fails to compile."""
    compile_error = next(f for f in fixtures if f.expected["exit_code"] == 3)
    return [f for f in fixtures if f is not compile_error][: count - 1] + [compile_error]


# --- twenty submissions, graded together and alone --------------------------------------------


@pytest.fixture(scope="module")
def twenty(tmp_path_factory):
    """lab2's shipped kernels and first fixtures (18) and lab1's shipped kernels (2): two batches, 20
    submissions. The first 17 in expected.toml's order and its first compile error (the worst code a lab-2
    fixture gets), wherever new fixtures are added: the batch stays 20 and keeps every kind of verdict."""
    if not cpu_backend_ready():
        pytest.skip("no C++ compiler for the CPU backend")
    folder = tmp_path_factory.mktemp("batch")
    runs = {}
    for lab, fixtures in (
        ("lab2", with_a_compile_error(plain_fixtures("lab2"), 18)),
        ("lab1", [f for f in load_fixtures("lab1") if f.path.is_relative_to(REPO / "kernels")]),
    ):
        out = folder / lab / "reports" / "nested"  # created, parents too
        completed = attnlab(*twenty_command(lab, fixtures, out, folder / f"{lab}.csv"), cwd=folder)
        runs[lab] = (fixtures, completed, out, folder / f"{lab}.csv")
    return runs


def twenty_command(lab: str, fixtures: list, out: Path, csv_path: Path) -> tuple[str, ...]:
    files = (str(f.path) for f in fixtures)
    return ("grade", lab, *files, "--jobs", "2", "--device", "cpu", "--out-dir", str(out), "--csv", str(csv_path))


@pytest.mark.slow
def test_twenty_submissions_get_the_verdicts_they_get_alone(twenty):
    assert sum(len(fixtures) for fixtures, *_ in twenty.values()) == 20
    for fixtures, completed, out, _ in twenty.values():
        results = {r["file"]: r for r in (validate_file(p) for p in sorted(out.glob("*.json")))}
        assert sorted(results) == sorted(str(f.path) for f in fixtures), completed.stderr[-2000:]
        for fixture in fixtures:  # the expectations test_fixtures_cpu holds each file to when graded alone
            got = results[str(fixture.path)]
            decisive = next((c for c in got["cases"] if c["name"] == got["decisive_case"]), None)
            assert (got["verdict"], got["exit_code"]) == (fixture.expected["verdict"], fixture.expected["exit_code"]), (
                fixture.name
            )
            assert got["decisive_case"] == fixture.expected.get("case"), fixture.name
            if "row" in fixture.expected:
                assert decisive["first_bad"]["row"] == fixture.expected["row"], fixture.name
            assert got["options"]["device"] == "cpu" and got["sha256"] == batch_sha(fixture.path)


def batch_sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_the_batch_exits_with_the_worst_code_and_counts_each(twenty):
    fixtures, completed, _, _ = twenty["lab2"]
    codes = [f.expected["exit_code"] for f in fixtures]
    assert completed.returncode == 3  # a compile error outranks the misbehaving and wrong kernels
    lines = completed.stdout.splitlines()
    counted = [line for line in lines if line.startswith("exit ")]
    meaning = {0: "pass", 1: "wrong answer", 3: "compile error", 4: "misbehaving kernel"}
    assert counted == [
        f"exit {code} ({meaning[code]}): {codes.count(code)} submission{'s' if codes.count(code) != 1 else ''}"
        for code in sorted(set(codes))
    ] + ["exit 3: the batch exits with the worst submission's code."]
    fixtures, completed, _, _ = twenty["lab1"]
    assert completed.returncode == 1  # the unfilled starter


@pytest.mark.slow
def test_the_gradebook_has_a_row_per_submission_matching_its_json(twenty):
    for fixtures, _, out, csv_path in twenty.values():
        with open(csv_path, newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert [r["file"] for r in rows] == [str(f.path) for f in fixtures]
        results = {r["file"]: r for r in (validate_file(p) for p in out.glob("*.json"))}
        for entry, fixture in zip(rows, fixtures):
            assert (entry["verdict"], int(entry["exit_code"])) == (
                fixture.expected["verdict"],
                fixture.expected["exit_code"],
            )
            assert entry["sha256"] == batch_sha(fixture.path)
            assert entry["speedup"] == entry["gate_met"] == ""
            # the hints the grade gave (a passing file gets none), one cell
            hints = results[entry["file"]]["hints"]
            assert entry["hints"] == " | ".join(" ".join(h["text"].split()) for h in hints)
            assert (entry["hints"] == "") == (not hints) and (fixture.expected["verdict"] != "pass" or not hints)
            assert entry["first_hint"] == (" ".join(hints[0]["text"].split()) if hints else "")
            # where the verdict was reached and how many cases it rests on: a CPU pass is not a GPU pass
            data = results[entry["file"]]
            ran = sum(c["status"] not in ("skipped", "not-run") for c in data["cases"])
            assert (entry["backend"], entry["cases_run"], entry["cases_skipped"]) == (
                data["backend"] or "",
                str(ran),
                str(data["skipped"]),
            )
            assert float(entry["seconds"]) > 0
        assert (out / "gradebook.csv").read_text() == csv_path.read_text()  # --out-dir keeps one too


@pytest.mark.slow
def test_the_junit_reports_parse_and_add_up(twenty):
    fixtures, _, out, _ = twenty["lab2"]
    total = junitparser.JUnitXml.fromfile(str(out / "junit.xml"))
    suites = list(total)
    assert len(suites) == len(fixtures)
    assert total.tests == sum(s.tests for s in suites) and total.failures == sum(s.failures for s in suites)
    for fixture, suite in zip(fixtures, suites):
        (alone,) = list(junitparser.JUnitXml.fromfile(str(out / f"{fixture.path.stem}.xml")))
        assert (suite.name, suite.tests, suite.failures) == (alone.name, alone.tests, alone.failures)
        assert all(case.classname == f"attnlab.lab2.{fixture.path.stem}" for case in suite)
        assert (suite.failures + suite.errors == 0) == (fixture.expected["exit_code"] == 0), fixture.name
    assert (
        (out / "solution.log")
        .read_text()
        .rstrip()
        .endswith("PASS (3 cases skipped on the CPU backend; --full runs them) (exit 0)")
    )


# --- the submitit path, as on a Slurm cluster ---------------------------------------------------


@needs_cpu_backend
@pytest.mark.slow
def test_the_submitit_path_grades_like_the_local_one(tmp_path):
    completed = attnlab(
        "grade",
        "lab2",
        str(SOLUTION),
        str(COMPILE_ERROR),
        "--executor",
        "submitit-local",
        "--device",
        "cpu",
        *QUICK,
        "--out-dir",
        "out",
        cwd=tmp_path,
    )
    assert completed.returncode == 3, completed.stderr[-2000:]
    solution, failed = (validate_file(tmp_path / "out" / f"{name}.json") for name in ("solution", "foreign_include"))
    assert (
        solution["verdict"],
        solution["exit_code"],
        [c["name"] for c in solution["cases"] if c["status"] == "pass"],
    ) == ("pass", 0, ["C1-P31"])
    assert (failed["verdict"], failed["exit_code"]) == ("compile-error", 3)
    assert (tmp_path / "out" / "submitit").is_dir()  # submitit's own job files, where a TA can read them


@needs_cpu_backend
@pytest.mark.slow
def test_a_job_that_dies_costs_its_submission_only(tmp_path, monkeypatch):
    import batch_jobs
    import cloudpickle
    import submitit

    cloudpickle.register_pickle_by_value(batch_jobs)
    monkeypatch.chdir(tmp_path)
    options = BatchOptions(executor="submitit-local", out_dir=tmp_path / "out", device="cpu")
    code = batch.grade_batch(
        "lab2",
        (SOLUTION, COMPILE_ERROR),
        ("--device", "cpu", *QUICK),
        options,
        Executing(job=batch_jobs.dies_on_foreign_include, executor=submitit.LocalExecutor(folder=tmp_path / "jobs")),
    )
    assert code == ExitCode.ENVIRONMENT
    died = validate_file(tmp_path / "out" / "foreign_include.json")
    assert (died["verdict"], died["exit_code"], died["file"]) == ("environment-missing", 6, str(COMPILE_ERROR))
    assert died["error"].startswith("the grading job ") and " died: " in died["error"]
    graded = validate_file(tmp_path / "out" / "solution.json")
    assert (graded["verdict"], graded["exit_code"]) == ("pass", 0)
    with open(tmp_path / "out" / "gradebook.csv", newline="") as handle:
        assert [(r["verdict"], r["exit_code"]) for r in csv.DictReader(handle)] == [
            ("pass", "0"),
            ("environment-missing", "6"),
        ]


@needs_cpu_backend
def test_a_local_job_that_fails_costs_its_submission_only(tmp_path, monkeypatch):
    import batch_jobs

    monkeypatch.chdir(tmp_path)
    options = BatchOptions(jobs=2, out_dir=tmp_path / "out", device="cpu")
    code = batch.grade_batch(
        "lab2",
        (SOLUTION, COMPILE_ERROR),
        ("--device", "cpu", *QUICK),
        options,
        Executing(job=batch_jobs.raises_on_foreign_include),
    )
    assert code == ExitCode.ENVIRONMENT
    rows = list(csv.DictReader((tmp_path / "out" / "gradebook.csv").read_text().splitlines()))
    assert [(r["verdict"], r["exit_code"]) for r in rows] == [("pass", "0"), ("environment-missing", "6")]
    junit = junitparser.JUnitXml.fromfile(str(tmp_path / "out" / "junit.xml"))
    (case,) = list(list(junit)[1])
    assert (case.name, case.result[0].message) == ("environment-missing", "the grading job failed: node lost")


def test_a_grader_killed_by_a_signal_is_said_plainly():
    assert submission.ended_how(-9) == "was killed by SIGKILL"
    assert submission.ended_how(1) == "exited 1"


def test_slurm_without_a_cluster_is_exit_6_and_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("a.cu").write_text(SOLUTION.read_text())
    (tmp_path / "no-slurm").mkdir()  # a PATH with no srun (CI's machine has a cluster of its own)
    result = CliRunner().invoke(
        main,
        ["grade", "lab2", "a.cu", "--executor", "slurm", "--partition", "gpu"],
        env={"PATH": str(tmp_path / "no-slurm")},
    )
    assert result.exit_code == 6
    assert result.stderr == (
        'error: --executor slurm: Could not detect "srun", are you indeed on a slurm cluster? '
        "(submitit found no Slurm here); submit from a Slurm login node, or grade on this machine "
        "with --executor local\n"
    )


def test_slurm_options_become_submitit_parameters():
    options = BatchOptions(
        executor="slurm", jobs=8, partition="h200", gpus_per_job=1, time_limit_min=30, account="cs249"
    )
    assert slurm.slurm_parameters(options, 120) == {
        "time": 30,
        "gpus_per_node": 1,
        "ntasks_per_node": 1,
        "array_parallelism": 8,
        "job_name": "attnlab-grade",
        "partition": "h200",
        "account": "cs249",
        # submitit's USR2 (90 s before the limit, up to 60 s earlier still) made harmless: see slurm.py
        "additional_parameters": {"signal": "B:URG@1"},
    }
    assert slurm.slurm_parameters(BatchOptions(executor="slurm"), 120)["array_parallelism"] == 120


def test_a_slurm_task_asks_for_a_gpu_only_when_it_grades_on_one():
    def gpus(**given) -> dict:
        parameters = slurm.slurm_parameters(BatchOptions(executor="slurm", **given), 4)
        return {k: v for k, v in parameters.items() if k in ("gpus_per_node", "gres")}

    assert gpus(device="gpu") == {"gpus_per_node": 1}
    assert gpus(device="gpu", gpus_per_job=2) == {"gpus_per_node": 2}
    assert gpus(device="gpu", gres="gpu:h100:1") == {"gres": "gpu:h100:1"}  # typed, as given
    assert gpus(device="cpu") == gpus(device="auto") == gpus(device="gpu", gpus_per_job=0) == {}
    assert gpus(device="auto", gpus_per_job=1) == {"gpus_per_node": 1}


@pytest.mark.parametrize(
    "given, message",
    [
        (
            {"device": "cpu", "gres": "gpu:h100:1"},
            "--gres gpu:h100:1 with --device cpu: the CPU backend uses no GPU, so its tasks ask for none; "
            "drop the GPU request, or grade on GPUs with --device gpu",
        ),
        (
            {"device": "cpu", "gpus_per_job": 1},
            "--gpus-per-job 1 with --device cpu: the CPU backend uses no GPU, so its tasks ask for none; "
            "drop the GPU request, or grade on GPUs with --device gpu",
        ),
        (
            {"device": "auto", "gres": "gpu:a100:1"},
            "--gres gpu:a100:1: a typed GPU request is for --device gpu (with --device auto a node's GPU may "
            "go unused); add --device gpu",
        ),
        (
            {"device": "gpu", "gres": "gpu:a100:1", "gpus_per_job": 1},
            "--gres gpu:a100:1 and --gpus-per-job 1: give one GPU request",
        ),
        (
            {"sbatch_args": ("-w node3",)},
            "--sbatch-arg -w node3: give sbatch's long form, such as --sbatch-arg=--reservation=exam "
            "(a short one such as -w is not taken)",
        ),
    ],
)
def test_a_slurm_request_that_cannot_be_meant_is_a_usage_error(given, message):
    with pytest.raises(AttnlabError) as raised:
        slurm.slurm_parameters(BatchOptions(executor="slurm", **given), 4)
    assert (raised.value.message, raised.value.exit_code) == (message, ExitCode.USAGE)


def test_the_cluster_requests_and_sbatch_args_reach_the_job_script():
    options = BatchOptions(
        executor="slurm",
        device="cpu",
        mem="8G",
        cpus_per_task=4,
        qos="course",
        constraint="avx512",
        sbatch_args=("--reservation=exam", "--exclusive", "--mail-user you@uni.edu", "--time=0:30"),
    )
    parameters = slurm.slurm_parameters(options, 3)
    assert {k: parameters[k] for k in ("mem", "cpus_per_task", "qos", "constraint")} == {
        "mem": "8G",
        "cpus_per_task": 4,
        "qos": "course",
        "constraint": "avx512",
    }
    assert parameters["additional_parameters"] == {
        "signal": "B:URG@1",
        "reservation": "exam",
        "exclusive": True,
        "mail_user": "you@uni.edu",
        "time": "0:30",  # an --sbatch-arg takes the place of attnlab's own
    }
    from submitit.slurm.slurm import _make_sbatch_string

    script = _make_sbatch_string(command="true", folder="/shared/out/submitit", map_count=3, **parameters)
    assert [line for line in script.splitlines() if line.startswith("#SBATCH")] == [
        "#SBATCH --array=0-2%3",
        "#SBATCH --constraint=avx512",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --error=/shared/out/submitit/%A_%a_0_log.err",
        "#SBATCH --exclusive",
        "#SBATCH --job-name=attnlab-grade",
        "#SBATCH --mail-user=you@uni.edu",
        "#SBATCH --mem=8G",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --open-mode=append",
        "#SBATCH --output=/shared/out/submitit/%A_%a_0_log.out",
        "#SBATCH --qos=course",
        "#SBATCH --reservation=exam",
        "#SBATCH --signal=B:URG@1",
        "#SBATCH --time=0:30",
        "#SBATCH --wckey=submitit",
    ]


def test_a_slurm_out_dir_must_be_one_the_nodes_share(tmp_path, monkeypatch):
    from labrunner.pipeline.batch import slurm_queue

    with pytest.raises(AttnlabError) as raised:
        slurm.check_out_dir(BatchOptions(executor="slurm"))
    assert raised.value.exit_code == ExitCode.USAGE
    assert raised.value.message.startswith("--executor slurm needs --out-dir: the nodes write")
    monkeypatch.setattr(slurm_queue, "node_count", lambda partition: 12)
    with pytest.raises(AttnlabError) as raised:
        slurm.check_out_dir(BatchOptions(executor="slurm", partition="gpu", out_dir=Path("/tmp/grading/out")))
    assert (raised.value.message, raised.value.exit_code) == (
        "--out-dir /tmp/grading/out: a folder under /tmp is each node's own, and the partition gpu's 12 nodes "
        "would write their reports where this machine never sees them; give a folder on storage the nodes "
        "share (your home or a project folder)",
        ExitCode.USAGE,
    )
    slurm.check_out_dir(BatchOptions(executor="slurm", out_dir=Path("/home/course/out")))  # not node-local: taken
    monkeypatch.setattr(slurm_queue, "node_count", lambda partition: 1)
    slurm.check_out_dir(BatchOptions(executor="slurm", out_dir=Path("/tmp/grading/out")))  # one node: its own /tmp


# --- what a batch is made of -------------------------------------------------------------------


def test_the_grade_options_are_passed_on_and_a_secret_seed_never_is(monkeypatch):
    monkeypatch.setenv("ATTNLAB_SEED", "424242")
    grade = main.commands["grade"]
    context = grade.make_context(
        "grade",
        [
            "lab2",
            "a.cu",
            "b.cu",
            "--device",
            "cpu",
            "--jobs",
            "2",
            "--case",
            "C1-P31",
            "--case",
            "C17-P31",
            "--no-diagnose",
            "--timeout",
            "5",
            "--race-check",
            "--gates",
            "gates.json",
            "--out-dir",
            "out",
            "--annotations",
            "github",
        ],
    )
    forwarded = passed_options(
        grade, context.params, {"json_path", "junit_path", "annotations", "jobs", "executor", "out_dir", "csv_path"}
    )
    assert forwarded == (
        "--device",
        "cpu",
        "--timeout",
        "5.0",
        "--race-check",
        "--case",
        "C1-P31",
        "--case",
        "C17-P31",
        "--no-diagnose",
        "--gates",
        "gates.json",
    )


def test_report_names_are_unique_and_never_the_batchs_own():
    files = [Found(Path(p)) for p in ("a/x.cu", "b/x.cu", "junit.cu", "gradebook.cu", "x-2.cu", "X-2.cu")]
    assert batch_files.report_names(files) == ["a-x", "b-x", "junit-2", "gradebook-2", "x-2", "X-2-2"]


def test_a_folder_is_its_cu_files_sorted(tmp_path):
    for name in ("b.cu", "a.cu", "notes.txt", "c.cuh"):
        (tmp_path / name).write_text("")
    (tmp_path / "sub.cu").mkdir()
    found, skipped = batch_files.expand_submissions((tmp_path, Path("z.cu")))
    assert found == [Found(tmp_path / "a.cu"), Found(tmp_path / "b.cu"), Found(Path("z.cu"))]
    assert skipped == [
        NotGraded(tmp_path / "c.cuh", "a C++ source or header: a lab's kernels are graded from one .cu file"),
        NotGraded(tmp_path / "notes.txt", "not a .cu file"),
        NotGraded(tmp_path / "sub.cu", "a student's folder with no .cu file in it"),
    ]


def test_a_folder_without_cu_files_is_a_usage_error(tmp_path):
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(main, ["grade", "lab2", str(tmp_path / "empty"), "--device", "cpu"])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {tmp_path / 'empty'}: a folder with no .cu files, nor a folder per student holding them; "
        "name the submissions or their folder\n"
    )


def test_json_for_a_batch_is_a_usage_error_that_names_out_dir(tmp_path):
    result = CliRunner().invoke(main, ["grade", "lab2", "a.cu", "b.cu", "--json", "r.json"])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --json r.json: one result per file; for a batch, --out-dir writes a JSON per submission\n"
    )


def test_the_worst_code_puts_the_grader_before_the_students():
    assert batch.worst_code([0, 1, 5]) == ExitCode.WRONG_ANSWER
    assert batch.worst_code([1, 4, 3]) == ExitCode.COMPILE_ERROR
    assert batch.worst_code([0, 6, 4]) == ExitCode.ENVIRONMENT
    assert batch.worst_code([0, 0]) == ExitCode.PASS
    assert batch.code_counts([1, 0, 1, 4]) == [(0, "pass", 1), (1, "wrong answer", 2), (4, "misbehaving kernel", 1)]


def test_a_submission_named_like_an_option_is_still_a_file():
    task = submission.SubmissionTask(
        "lab2", "-rf.cu", ("--device", "cpu"), "/o/a.json", "/o/a.xml", None, "/w", python="py"
    )
    assert task.argv() == [
        "py",
        "-m",
        "labrunner",
        "grade",
        "--json",
        "/o/a.json",
        "--junit",
        "/o/a.xml",
        "--device",
        "cpu",
        "--",
        "lab2",
        "-rf.cu",
    ]


def test_a_folder_lists_links_fifos_and_odd_names_without_following_any(tmp_path):
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret/s.cu").write_text("")
    folder = tmp_path / "subs"
    folder.mkdir()
    (folder / "a.cu").write_text("")
    os.symlink("../secret/s.cu", folder / "link.cu")
    os.symlink("../secret", folder / "folder_link.cu")  # a link to a folder is listed, never entered
    os.mkfifo(folder / "pipe.cu")
    (folder / "real_folder.cu").mkdir()  # a folder is not a submission: it is a student's folder
    not_utf8 = os.fsdecode(b"\xff.cu")
    (folder / not_utf8).write_text("")
    found, skipped = batch_files.expand_submissions((folder,))
    assert found == [Found(folder / n) for n in ("a.cu", "folder_link.cu", "link.cu", "pipe.cu", not_utf8)]
    assert skipped == [NotGraded(folder / "real_folder.cu", "a student's folder with no .cu file in it")]


def test_report_names_are_safe_file_names():
    files = [
        Path("evil\n::error::x.cu"),
        Path("\x1b[2J.cu"),
        Path(os.fsdecode(b"\xff.cu")),
        Path("y;=1+1;.cu"),
        Path(".hidden.cu"),
        Path("-rf.cu"),
        Path("A.cu"),
        Path("a.cu"),
        Path("Junit.cu"),
        Path("a" * 300 + ".cu"),
    ]
    assert batch_files.report_names([Found(f) for f in files]) == [
        "evil___error__x",
        "__2J",
        "_",
        "y__1_1_",
        "_hidden",
        "_rf",
        "A",
        "a-2",
        "Junit-2",
        "a" * 100,
    ]


@pytest.mark.slow
def test_an_unchanged_rerun_of_the_batch_reuses_every_report_in_seconds(twenty):
    """Last in this file: it grades nothing, but writes the gradebook again (the seconds from the reports)."""
    fixtures, first, out, csv_path = twenty["lab2"]
    before = {
        r["file"]: {k: v for k, v in r.items() if k != "seconds"}
        for r in csv.DictReader(csv_path.read_text().splitlines())
    }
    started = time.monotonic()
    again = attnlab(*twenty_command("lab2", fixtures, out, csv_path), cwd=out.parents[2])
    seconds = time.monotonic() - started
    assert again.returncode == first.returncode
    assert f"note: reused {len(fixtures)} of {len(fixtures)} reports" in " ".join(again.stderr.split())
    assert seconds < 10, f"{seconds:.1f} s"
    after = {
        r["file"]: {k: v for k, v in r.items() if k != "seconds"}
        for r in csv.DictReader(csv_path.read_text().splitlines())
    }
    assert after == before
