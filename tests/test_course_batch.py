"""A course's batch: one points model in every output, one row per student, a roster, a learning-management
system's import, and the Triton files a folder holds.

The points are checked number by number against the lab's table; the batch at the end grades a folder
the way a course hands one in (flat files and a folder per student, `.cu` beside `.py`, a copy, a
student with two files, a link, an empty file, a roster with a student missing) and holds every row's
score to what `--gradescope` gives that file graded alone."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
from click.testing import CliRunner
from conftest import needed_in_ci
from fixture_suite import REPO
from headless_browser import Browser, chromium_path
from result_schema import validate_file

from labrunner.cli import main
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.pipeline.batch.files import CU_ONLY, WITH_TRITON, Found, NotGraded, expand_submissions, report_names
from labrunner.pipeline.batch.roster import RosterEntry, read_roster
from labrunner.pipeline.batch.students import group_students, with_students
from labrunner.records.gate import Gate
from labrunner.report.course_row import CourseRow
from labrunner.report.lms_gradebook import lms_rows
from labrunner.report.points import Score, score_result
from labrunner.report.results import CaseResult, RunResult
from labrunner.truth.catalogue import Points

CPU_UNSCORED = "the speed part (20 points) is not scored: the CPU backend checks correctness only"


def case(name: str, status: str = "pass") -> CaseResult:
    return CaseResult(name, status, "ok" if status == "pass" else "row 0: wrong", 1, 31)


# --- the points model --------------------------------------------------------------------------------


def test_a_cpu_pass_is_worth_the_case_points_and_says_the_speed_part_is_not_scored():
    data = RunResult("grade", "lab2", "a.cu", backend="cpu", cases=[case("C1-P31"), case("C17-P31")]).to_json()
    worth = score_result(data)
    assert (worth.score, worth.max_score, worth.unscored) == (8000, 8000, CPU_UNSCORED)
    assert [(p.name, p.score, p.max_score) for p in worth.parts] == [("C1-P31", 4000, 4000), ("C17-P31", 4000, 4000)]
    assert worth.to_json() == {"score": 80.0, "max_score": 80.0, "unscored": CPU_UNSCORED}
    assert (worth.score_text, worth.max_score_text) == ("80", "80")


def test_a_gpu_grade_that_failed_a_case_earns_its_passing_shares_and_no_speed_points():
    cases = [case("C1-P31"), case("C17-P31", "wrong"), case("C33-P31")]
    data = RunResult("grade", "lab2", "a.cu", backend="gpu", cases=cases).to_json()
    worth = score_result(data)
    # 80 points over 3 cases: 26.67, 26.67, 26.66 (the remainder to the first); the untimed speed part 0 of 20
    assert [(p.name, p.score, p.max_score) for p in worth.parts] == [
        ("C1-P31", 2667, 2667),
        ("C17-P31", 0, 2667),
        ("C33-P31", 2666, 2666),
        ("speed gate", 0, 2000),
    ]
    assert (worth.score, worth.max_score, worth.unscored) == (5333, 10000, "")
    assert (worth.score_text, worth.max_score_text) == ("53.33", "100")


def test_a_met_gate_earns_the_speed_points_and_no_timing_leaves_them_unscored():
    met = RunResult("grade", "lab2", "a.cu", backend="gpu", cases=[case("C1-P31")], gate=Gate("met", True, "met"))
    assert (score_result(met.to_json()).score, score_result(met.to_json()).max_score) == (10000, 10000)
    untimed = RunResult("grade", "lab2", "a.cu", backend="gpu", cases=[case("C1-P31")], options={"no_timing": True})
    worth = score_result(untimed.to_json())
    assert (worth.score, worth.max_score) == (8000, 8000)
    assert worth.unscored == "the speed part (20 points) is not scored: --no-timing"


def test_a_lab_without_a_speed_part_has_nothing_unscored():
    data = RunResult("grade", "lab1", "a.cu", backend="cpu", cases=[case("T1"), case("T17", "wrong")]).to_json()
    worth = score_result(data)
    assert (worth.score, worth.max_score, worth.unscored) == (5000, 10000, "")


def test_a_fault_of_the_grader_has_no_score_and_a_refusal_of_the_students_scores_zero():
    died = RunResult("grade", "lab2", "a.cu", error="the grading process died", error_code=ExitCode.ENVIRONMENT)
    assert score_result(died.to_json()).score is None
    assert score_result(died.to_json()).score_text == ""
    link = RunResult("grade", "lab2", "a.cu", error="a.cu: is a symbolic link", error_code=ExitCode.USAGE)
    assert score_result(link.to_json()).score is None  # typed on the command line: the command's
    assert score_result(link.to_json(), students_fault=True).score == 0  # found in a folder: the student's
    broken = RunResult("grade", "lab2", "a.cu", error="a.cu(1): error", error_code=ExitCode.COMPILE_ERROR)
    assert (score_result(broken.to_json()).score, score_result(broken.to_json()).max_score) == (0, 8000)


def test_given_points_decide_the_score_whatever_the_lab_says():
    data = RunResult("grade", "lab2", "a.cu", backend="cpu", cases=[case("C1-P31"), case("C17-P31", "wrong")])
    worth = score_result(data.to_json(), Points(cases=10.0, speed=0.0, shares={"C17-P31": 3}))
    assert (worth.score, worth.max_score, worth.score_text) == (250, 1000, "2.50")


# --- whose file is whose -----------------------------------------------------------------------------


def test_a_named_file_in_a_students_folder_carries_the_student_in_its_report_name():
    typed = (Path("subs/erin/flash.cu"), Path("subs/alice.cu"))
    found = with_students([Found(p) for p in typed], typed)
    assert found == [Found(Path("subs/erin/flash.cu"), "erin"), Found(Path("subs/alice.cu"))]
    assert report_names(found) == ["erin-flash", "alice"]
    glob = tuple(Path(f"subs/{s}/flash.cu") for s in ("ann", "ben"))
    assert [f.student for f in with_students([Found(p) for p in glob], glob)] == ["ann", "ben"]
    alone = (Path("subs/erin/flash.cu"),)
    assert with_students([Found(alone[0])], alone) == [Found(alone[0])]  # nothing says erin is a student folder


def test_two_candidate_files_make_one_student_who_is_not_graded():
    found = [Found(Path("subs/alice.cu")), Found(Path("subs/alice.py")), Found(Path("subs/bob/flash.cu"), "bob")]
    students = group_students(found, ())
    assert [(s.name, len(s.files), s.listed) for s in students] == [("alice", 2, True), ("bob", 1, True)]
    assert students[0].several == (
        "2 files for one student (alice.cu, alice.py): keep one and grade again; none of them was graded"
    )
    assert students[1].several == ""


def test_a_folder_takes_py_files_only_in_a_lab_that_takes_triton(tmp_path):
    (tmp_path / "mallory.py").write_text("")
    (tmp_path / "ann.cu").write_text("")
    found, skipped = expand_submissions((tmp_path,), WITH_TRITON)
    assert (found, skipped) == ([Found(tmp_path / "ann.cu"), Found(tmp_path / "mallory.py")], [])
    found, skipped = expand_submissions((tmp_path,), CU_ONLY)
    assert (found, skipped) == ([Found(tmp_path / "ann.cu")], [NotGraded(tmp_path / "mallory.py", "not a .cu file")])


def test_grade_help_says_a_folder_takes_py_files_where_the_lab_takes_triton():
    help_text = " ".join(CliRunner().invoke(main, ["grade", "--help"]).output.split())
    assert "its .py files in the labs that take Triton: lab2, lab3" in help_text


# --- the roster ---------------------------------------------------------------------------------------


def test_a_roster_is_read_in_its_order(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_bytes(b"\xef\xbb\xbfstudent_id,student,name,section,email\n7,ann,Ann A,S1,a@x\n3,ben,,,\n\n")
    assert read_roster(path) == [RosterEntry("7", "ann", "Ann A", "S1"), RosterEntry("3", "ben", "", "")]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "id,student\n1,ann\n",
            ": no student_id column (its header: id, student); the first line must name the "
            "columns student_id and student (name and section may follow)",
        ),
        (
            "student_id,student\n1,ann\n2,ann\n",
            ", line 3: student ann is listed again (first on line 2); list each student once",
        ),
        (
            "student_id,student\n1,ann\n1,ben\n",
            ", line 3: student_id 1 is listed again (first on line 2); each student needs an id of their own",
        ),
        ("student_id,student\n1,\n", ", line 2: the student cell is empty; every student needs both"),
        ("student_id,student\n", ": lists no student; write one line per student under the header"),
    ],
)
def test_a_roster_that_cannot_be_meant_is_a_usage_error_that_says_where(tmp_path, text, problem):
    path = tmp_path / "roster.csv"
    path.write_text(text)
    with pytest.raises(AttnlabError) as raised:
        read_roster(path)
    assert (raised.value.message, raised.value.exit_code) == (f"--roster {path}{problem}", ExitCode.USAGE)


# --- a learning-management system's layout -----------------------------------------------------------


def course_rows() -> list[CourseRow]:
    return [
        CourseRow("ann", Score((), 8000, 8000), "7", "Ann A", "S1"),
        CourseRow("ben", Score((), None, 8000), "3"),  # the grader could not finish: an empty cell
        CourseRow("=cmd", Score((), 0, 8000), "9"),  # a name a spreadsheet would run stays text
    ]


def test_canvas_gets_its_columns_and_a_points_possible_row():
    assert lms_rows("canvas", course_rows(), "Lab 2") == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lab 2"],
        ["Points Possible", "", "", "", "", "80"],
        ["Ann A", "", "7", "ann", "S1", "80"],
        ["ben", "", "3", "ben", "", ""],
        ["'=cmd", "", "9", "'=cmd", "", "0"],
    ]


def test_moodle_gets_an_id_number_column_to_map_users_on():
    assert lms_rows("moodle", course_rows(), "Lab 2") == [
        ["ID number", "Username", "Full name", "Group", "Lab 2"],
        ["7", "ann", "Ann A", "S1", "80"],
        ["3", "ben", "", "", ""],
        ["9", "'=cmd", "", "", "0"],
    ]


# --- a course's folder, graded on the CPU ------------------------------------------------------------

QUICK = ("--device", "cpu", "--no-timing", "--case", "C1-P31")


def attnlab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    environment.pop("ATTNLAB_SEED", None)
    return subprocess.run(
        [sys.executable, "-m", "labrunner", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    from labrunner.run.cpu_device import cpu_backend_status

    if not cpu_backend_status()[0]:
        pytest.skip("the CPU backend cannot run here (no C++ compiler or sandbox)")
    work = tmp_path_factory.mktemp("course")
    subs = work / "subs"
    (subs / "bob").mkdir(parents=True)
    (subs / "dave").mkdir()
    solution = (REPO / "kernels/lab2/solution.cu").read_bytes()
    (subs / "alice.cu").write_bytes(solution)
    (subs / "erin.cu").write_bytes(solution)  # a copy of alice's
    (subs / "bob/flash.cu").write_bytes((REPO / "tests/fixtures/lab2/wrong/causal_off_by_one.cu").read_bytes())
    (subs / "carol.py").write_bytes((REPO / "kernels/lab2/solution.py").read_bytes())
    (subs / "dave/a.cu").write_bytes((REPO / "kernels/lab2/starter.cu").read_bytes())
    (subs / "dave/b.cu").write_bytes(solution)
    os.symlink("alice.cu", subs / "frank.cu")
    (subs / "gina.cu").write_text("")
    (subs / "zed.cu").write_bytes(solution)  # not on the roster
    roster = "student_id,student,name,section\n" + "".join(
        f"{100 + i},{s},{s.title()} X,S{i % 2}\n"
        for i, s in enumerate(("hank", "alice", "bob", "carol", "dave", "erin", "frank", "gina"))
    )
    (work / "roster.csv").write_text(roster)
    completed = attnlab(
        "grade",
        "lab2",
        "subs",
        *QUICK,
        "--jobs",
        "2",
        "--out-dir",
        "out",
        "--csv",
        "g.csv",
        "--junit",
        "all.xml",
        "--roster",
        "roster.csv",
        "--html",
        "report.html",
        "--lms-csv",
        "canvas.csv",
        "--assignment",
        "Lab 2",
        cwd=work,
    )
    alone = {}
    for name in ("alice.cu", "erin.cu", "bob/flash.cu", "carol.py", "gina.cu", "zed.cu"):
        results = work / f"gs-{name.replace('/', '-')}.json"
        attnlab("grade", "lab2", f"subs/{name}", *QUICK, "--gradescope", str(results), cwd=work)
        alone[f"subs/{name}"] = json.loads(results.read_text())
    with open(work / "g.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return {"work": work, "completed": completed, "rows": rows, "alone": alone}


ROWS = [  # (student, student_id, file, verdict, exit code, score, max_score)
    ("hank", "100", "", "usage-error", "2", "0", "80"),
    ("alice", "101", "subs/alice.cu", "pass", "0", "80", "80"),
    ("bob", "102", "subs/bob/flash.cu", "wrong", "1", "0", "80"),
    ("carol", "103", "subs/carol.py", "pass", "0", "80", "80"),
    ("dave", "104", "subs/dave", "usage-error", "2", "0", "80"),
    ("erin", "105", "subs/erin.cu", "pass", "0", "80", "80"),
    ("frank", "106", "subs/frank.cu", "usage-error", "2", "0", "80"),
    ("gina", "107", "subs/gina.cu", "compile-error", "3", "0", "80"),
    ("zed", "", "subs/zed.cu", "pass", "0", "80", "80"),
]


@pytest.mark.slow
def test_the_gradebook_has_one_row_per_student_in_the_rosters_order(course):
    completed = course["completed"]
    assert completed.returncode == 3, completed.stderr[-3000:]  # gina's compile error; frank's link and dave's pair too
    got = [
        (r["student"], r["student_id"], r["file"], r["verdict"], r["exit_code"], r["score"], r["max_score"])
        for r in course["rows"]
    ]
    assert got == ROWS
    by_student = {r["student"]: r for r in course["rows"]}
    assert by_student["dave"]["not_graded"] == (
        "subs/dave: 2 files for one student (a.cu, b.cu): keep one and grade again; none of them was graded"
    )
    assert by_student["hank"]["not_graded"] == "no submission: no file of hank was among the files graded"
    assert (
        by_student["frank"]["not_graded"]
        == "subs/frank.cu: is a symbolic link; grade the file itself, not a link to it"
    )
    assert {r["unscored"] for r in course["rows"]} == {CPU_UNSCORED}
    # the copies are flagged for a person to judge; their verdicts and scores are their own
    assert [by_student[s]["similar_to"] for s in ("alice", "erin", "zed", "carol")] == [
        "erin (1.00); zed (1.00)",
        "alice (1.00); zed (1.00)",
        "alice (1.00); erin (1.00)",
        "",
    ]
    lines = completed.stdout.splitlines()
    assert [line for line in lines if line.startswith("exit ")] == [
        "exit 0 (pass): 4 submissions",
        "exit 1 (wrong answer): 1 submission",
        "exit 2 (usage error): 2 submissions",
        "exit 3 (compile error): 1 submission",
        "exit 3: the batch exits with the worst submission's code.",
    ]


@pytest.mark.slow
def test_each_score_is_what_gradescope_gives_that_file_alone(course):
    by_file = {r["file"]: r for r in course["rows"]}
    for file, results in course["alone"].items():
        assert float(by_file[file]["score"]) == results["score"], file
        assert float(by_file[file]["max_score"]) == sum(t["max_score"] for t in results["tests"]), file
        assert CPU_UNSCORED in results["output"].splitlines(), file


@pytest.mark.slow
def test_each_json_and_junit_names_its_student_id_and_score(course):
    out = course["work"] / "out"
    results = {r["student"]: r for r in (validate_file(p) for p in out.glob("*.json"))}
    assert sorted(results) == sorted(row[0] for row in ROWS)
    for student, student_id, _, verdict, code, score, most in ROWS:
        got = results[student]
        assert (got["verdict"], got["exit_code"], got["student_id"]) == (verdict, int(code), student_id or None)
        assert got["points"] == {"score": float(score), "max_score": float(most), "unscored": CPU_UNSCORED}
    assert results["erin"]["similar_to"] == [{"student": "alice", "share": 1.0}, {"student": "zed", "share": 1.0}]
    suites = ElementTree.parse(course["work"] / "all.xml").getroot().findall("testsuite")
    assert len(suites) == len(ROWS)
    for suite, row in zip(suites, ROWS):  # in the gradebook's order
        facts = {p.get("name"): p.get("value") for p in suite.iter("property")}
        assert (facts["student"], facts.get("student_id", ""), facts["score"], facts["max_score"]) == (
            row[0],
            row[1],
            row[5],
            row[6],
        )
    own = ElementTree.parse(out / "alice.xml").getroot()  # each submission's own report, rewritten
    assert {p.get("name"): p.get("value") for p in own.iter("property")} == {
        "backend": "cpu",
        "student": "alice",
        "student_id": "101",
        "score": "80",
        "max_score": "80",
        "unscored": CPU_UNSCORED,
        "similar_to": "erin (1.00); zed (1.00)",
    }


@pytest.mark.slow
def test_canvas_gets_every_rostered_student_and_those_not_on_it(course):
    with open(course["work"] / "canvas.csv", newline="") as handle:
        lines = list(csv.reader(handle))
    assert lines[:3] == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lab 2"],
        ["Points Possible", "", "", "", "", "80"],
        ["Hank X", "", "100", "hank", "S0", "0"],
    ]
    assert [(line[3], line[5]) for line in lines[2:]] == [(row[0], row[5]) for row in ROWS]


@pytest.mark.slow
def test_the_page_sorts_by_score_and_lists_the_similar_pairs_in_chromium(course):
    binary = chromium_path()
    if binary is None:
        needed_in_ci("Chromium is not installed (apt-get install chromium)")
    browser = Browser(binary)
    try:
        url = browser.open(course["work"] / "report.html")
        students = "Array.from(document.querySelectorAll('#gradebook tbody tr'), tr => tr.dataset.i)"
        assert browser.evaluate(students) == [str(i) for i in range(len(ROWS))]
        browser.evaluate("document.querySelector('#gradebook th[data-name=score] button').click()")
        order = [ROWS[int(i)] for i in browser.evaluate(students)]
        assert [row[5] for row in order] == sorted((row[5] for row in ROWS), key=float)
        pairs = "Array.from(document.querySelectorAll('#similar tbody tr'), tr => tr.textContent)"
        assert browser.evaluate(pairs) == ["aliceerin1.00", "alicezed1.00", "erinzed1.00"]
        assert browser.evaluate("document.querySelectorAll('svg.chart').length") == 1  # the scores' histogram
        assert browser.errors() == []
        assert browser.requests() == [url]
    finally:
        browser.close()


def test_only_files_with_code_of_their_own_are_compared(tmp_path):
    from labrunner.pipeline.batch.course import own_code, starters
    from labrunner.pipeline.batch.students import Student

    solution = (REPO / "kernels/lab2/solution.cu").read_bytes()
    files = {"ann.cu": solution, "ben.cu": (REPO / "kernels/lab2/starter.cu").read_bytes(), "cy.cu": b"int int x;\n"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    students = [Student(Path(n).stem, (Found(tmp_path / n),), listed=True) for n in files]
    assert own_code(students, starters("lab2")) == {"ann": solution}  # the unchanged starter and a line are not
