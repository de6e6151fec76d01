"""A submission is read as one regular file of at most 1 MiB, never through a link: a link, a FIFO,
a device, a folder or an oversized file is a usage error (exit 2) for that file alone, with a
message that says what it is.

The batch at the end is the whole attack at once: a folder holding a link to a secret, a FIFO, names
built to forge CI commands, rewrite the terminal, run as a spreadsheet formula or fail to decode,
with `/dev/zero` and a 1.5 GB sparse file named beside it. Every entry gets its row, the secret's
text appears in no output, no student's name reaches any output raw, and the grader's memory stays
small."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixture_suite import REPO

from labrunner.cli import main
from labrunner.compile.source import MAX_SOURCE_BYTES, read_source, read_source_bytes, submission_sha256
from labrunner.exit_codes import AttnlabError, ExitCode

KERNEL = "// a kernel file\n"
SPARSE_BYTES = 1536 * 1024 * 1024  # 1.5 GiB of holes: costs no disk
LINK = "is a symbolic link; grade the file itself, not a link to it"
LINKED_FOLDER = "a folder on its path is a symbolic link; name the file by its real path, not through a link"


def refusal(path, label: str = "f.cu") -> str:
    with pytest.raises(AttnlabError) as caught:
        read_source(Path(path), label)
    assert caught.value.exit_code == ExitCode.USAGE
    return caught.value.message


# --- read_source, one kind of file at a time ---------------------------------------------------


def test_a_regular_file_is_read_whole(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("k.cu").write_text(KERNEL)
    assert read_source(Path("k.cu"), "k.cu") == KERNEL
    assert read_source(tmp_path / "k.cu", "k.cu") == KERNEL
    assert read_source(Path("./sub/../k.cu"), "k.cu") == KERNEL  # normalised as written; `sub` need not exist


def test_a_link_to_a_file_is_refused_not_followed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("secret.txt").write_text("hunter2\n")
    os.symlink("secret.txt", "flash.cu")
    os.symlink("missing.txt", "dangling.cu")
    assert refusal("flash.cu", "flash.cu") == f"flash.cu: {LINK}"
    assert refusal("dangling.cu", "dangling.cu") == f"dangling.cu: {LINK}"  # not "no such file": it is a link
    assert refusal(tmp_path / "flash.cu") == f"f.cu: {LINK}"


def test_a_link_outside_the_working_folder_is_refused_too(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    (tmp_path / "secret.txt").write_text("hunter2\n")
    os.symlink(tmp_path / "secret.txt", tmp_path / "flash.cu")
    monkeypatch.chdir(tmp_path / "work")
    assert refusal("../flash.cu") == f"f.cu: {LINK}"


def test_a_linked_folder_below_the_working_folder_is_refused(tmp_path, monkeypatch):
    """`subs/*/kernels/flash.cu` must not reach through alice/kernels -> ../bob/kernels to Bob's file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "subs/bob/kernels").mkdir(parents=True)
    (tmp_path / "subs/alice").mkdir()
    Path("subs/bob/kernels/flash.cu").write_text(KERNEL)
    os.symlink("../bob/kernels", "subs/alice/kernels")
    assert refusal("subs/alice/kernels/flash.cu") == f"f.cu: {LINKED_FOLDER}"
    assert refusal(tmp_path / "subs/alice/kernels/flash.cu") == f"f.cu: {LINKED_FOLDER}"  # absolute, same walk
    assert read_source(Path("subs/bob/kernels/flash.cu"), "f.cu") == KERNEL


def test_folders_outside_the_working_folder_are_taken_as_named(tmp_path, monkeypatch):
    """Where the grader chose to look (a home folder on a shared disk, the installed package) is theirs."""
    (tmp_path / "real").mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / "real/k.cu").write_text(KERNEL)
    os.symlink(tmp_path / "real", tmp_path / "linked")
    monkeypatch.chdir(tmp_path / "work")
    assert read_source(Path("../linked/k.cu"), "k.cu") == KERNEL
    assert read_source(tmp_path / "linked/k.cu", "k.cu") == KERNEL


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    os.mkfifo(tmp_path / "pipe.cu")
    assert refusal(tmp_path / "pipe.cu", "pipe.cu") == "pipe.cu: is a FIFO, not a regular file"


def test_devices_are_refused_before_a_byte_is_read():
    assert refusal("/dev/zero", "/dev/zero") == "/dev/zero: is a character device, not a regular file"
    assert refusal("/dev/null", "/dev/null") == "/dev/null: is a character device, not a regular file"


def test_a_socket_is_refused(tmp_path):
    import socket

    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "s.cu"))
        assert refusal(tmp_path / "s.cu", "s.cu") == "s.cu: is a socket, not a regular file"


def test_a_folder_and_a_missing_file_say_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub.cu").mkdir()
    Path("plain.cu").write_text(KERNEL)
    missing = "no such file; pass the path of your .cu file (`attnlab starter LAB` writes one)"
    assert refusal("sub.cu", "sub.cu") == "sub.cu: is a folder, not a .cu file"
    assert refusal(".", ".") == ".: is a folder, not a .cu file"
    assert refusal("nope.cu", "nope.cu") == f"nope.cu: {missing}"
    assert refusal("nope/k.cu", "nope/k.cu") == f"nope/k.cu: {missing}"
    assert refusal("plain.cu/k.cu", "plain.cu/k.cu") == f"plain.cu/k.cu: {missing}"  # a file where a folder would be


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_file_names_its_permissions(tmp_path):
    (tmp_path / "k.cu").write_text(KERNEL)
    (tmp_path / "k.cu").chmod(0)
    assert refusal(tmp_path / "k.cu", "k.cu") == "k.cu: cannot be read (Permission denied); check its permissions"


def test_the_size_limit_is_exact_and_a_sparse_giant_costs_nothing(tmp_path):
    exactly = tmp_path / "exactly.cu"
    exactly.write_bytes(b"/" * MAX_SOURCE_BYTES)
    assert len(read_source_bytes(exactly, "exactly.cu")) == MAX_SOURCE_BYTES
    one_more = tmp_path / "one_more.cu"
    one_more.write_bytes(b"/" * (MAX_SOURCE_BYTES + 1))
    assert (
        refusal(one_more, "one_more.cu")
        == "one_more.cu: 1048577 bytes is more than a kernel file needs (limit 1048576)"
    )
    sparse = tmp_path / "big.cu"
    os.truncate(os.open(sparse, os.O_CREAT | os.O_WRONLY), SPARSE_BYTES)
    assert refusal(sparse, "big.cu") == "big.cu: 1610612736 bytes is more than a kernel file needs (limit 1048576)"


def test_a_file_longer_than_its_size_says_is_cut_off_at_the_limit():
    """A file whose size says 0 but that reads on (a /proc file, or one growing as it is read) is read
    to the limit plus one byte, and refused there."""
    kallsyms = Path("/proc/kallsyms")
    try:
        if os.stat(kallsyms).st_size != 0 or len(kallsyms.read_bytes()) <= MAX_SOURCE_BYTES:
            pytest.skip("no /proc/kallsyms longer than the limit here")
    except OSError:
        pytest.skip("no readable /proc/kallsyms here")
    assert refusal(kallsyms, "k.cu") == (
        "k.cu: more than 1048576 bytes is more than a kernel file needs (limit 1048576)"
    )


def test_the_hash_is_of_what_a_grade_reads_and_none_where_it_refuses(tmp_path):
    import hashlib

    (tmp_path / "k.cu").write_text(KERNEL)
    os.symlink(tmp_path / "k.cu", tmp_path / "link.cu")
    assert submission_sha256(tmp_path / "k.cu") == hashlib.sha256(KERNEL.encode()).hexdigest()
    assert submission_sha256(tmp_path / "link.cu") is None
    assert submission_sha256(Path("/dev/zero")) is None


# --- one file on the command line -----------------------------------------------------------------


def grade_one(tmp_path, name: str, *more: str):
    return CliRunner().invoke(
        main, ["grade", "lab2", name, "--device", "cpu", "--json", str(tmp_path / "r.json"), *more]
    )


def test_grading_a_link_is_exit_2_with_no_hash_and_no_trace_of_its_target(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("secret.txt").write_text("int x = hunter2;\n")
    os.symlink("secret.txt", "flash.cu")
    result = grade_one(tmp_path, "flash.cu")
    assert (result.exit_code, result.stderr) == (2, f"error: flash.cu: {LINK}\n")
    data = json.loads((tmp_path / "r.json").read_text())
    assert (data["verdict"], data["exit_code"], data["file"], data["sha256"]) == ("usage-error", 2, "flash.cu", None)
    assert "hunter2" not in result.stdout + result.stderr + (tmp_path / "r.json").read_text()


def test_grading_a_fifo_returns_at_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("flash.cu")
    result = grade_one(tmp_path, "flash.cu")
    assert (result.exit_code, result.stderr) == (2, "error: flash.cu: is a FIFO, not a regular file\n")


def test_a_hostile_name_is_shown_escaped_in_the_message_and_the_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = "a\n::error::pwned\x1b[2J.cu"
    os.mkfifo(name)
    result = grade_one(tmp_path, name)
    shown = "a\\x0a::error::pwned\\x1b[2J.cu"
    assert (result.exit_code, result.stderr) == (2, f"error: {shown}: is a FIFO, not a regular file\n")
    data = json.loads((tmp_path / "r.json").read_text())
    assert (data["file"], data["error"]) == (shown, f"{shown}: is a FIFO, not a regular file")


# --- the whole attack, as one batch -----------------------------------------------------------------

SECRET = "hunter2_e7c1"  # in the secret's text only: a followed link would carry it into some output
NEWLINE_NAME = "evil\n::error::pwned\n::stop-commands::tok.cu"
ESCAPE_NAME = "\x1b[2J\x1b[1;32mPASS\x1b[0m.cu"
FORMULA_NAME = "y;=1+1;.cu"
NOT_UTF8_NAME = os.fsdecode(b"\xff.cu")
BROKEN = "int int x;\n"  # a compile error: the fastest verdict that still runs the compiler over the name


def shown_name(name: str) -> str:
    return {
        NEWLINE_NAME: "evil\\x0a::error::pwned\\x0a::stop-commands::tok.cu",
        ESCAPE_NAME: "\\x1b[2J\\x1b[1;32mPASS\\x1b[0m.cu",
        NOT_UTF8_NAME: "\\xff.cu",
    }.get(name, name)


@pytest.fixture(scope="module")
def hostile_batch(tmp_path_factory):
    from labrunner.run.cpu_device import cpu_backend_status

    if not cpu_backend_status()[0]:
        pytest.skip("no C++ compiler for the CPU backend")
    work = tmp_path_factory.mktemp("hostile")
    subs = work / "subs"
    subs.mkdir()
    (work / "secret.txt").write_text(f"int {SECRET} = 1;\nint x = {SECRET};\n")
    os.symlink("../secret.txt", subs / "link.cu")
    os.mkfifo(subs / "fifo.cu")
    for name in (NEWLINE_NAME, ESCAPE_NAME, FORMULA_NAME, NOT_UTF8_NAME, "broken.cu"):
        (subs / name).write_text(BROKEN)
    os.truncate(os.open(work / "big.cu", os.O_CREAT | os.O_WRONLY), SPARSE_BYTES)
    # The batch runs under a small Python that reports the largest resident size of any process under
    # it (ru_maxrss of its children: the batch, every grade it started, and theirs, in KiB).
    measure = (
        "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)"
    )
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120"}
    environment.pop("ATTNLAB_SEED", None)
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            measure,
            sys.executable,
            "-m",
            "labrunner",
            "grade",
            "lab1",
            "subs",
            "/dev/zero",
            "big.cu",
            "--device",
            "cpu",
            "--no-timing",
            "--jobs",
            "2",
            "--out-dir",
            "out",
            "--csv",
            "gradebook.csv",
            "--junit",
            "all.xml",
            "--annotations",
            "github",
        ],
        cwd=work,
        env=environment,
        capture_output=True,
        timeout=600,
    )
    *stderr_lines, peak = completed.stderr.decode("utf-8", "replace").rstrip("\n").split("\n")
    names = sorted(os.listdir(subs))
    return {
        "work": work,
        "completed": completed,
        "stderr": "\n".join(stderr_lines) + "\n",
        "peak_kib": int(peak),
        "files": [f"subs/{n}" for n in names] + ["/dev/zero", "big.cu"],
    }


def expected_row(file: str) -> tuple[str, str, int, str | None]:
    """(shown name, verdict, exit code, the exact error where the verdict is a usage error)."""
    name = file.removeprefix("subs/")
    shown = ("subs/" + shown_name(name)) if file.startswith("subs/") else file
    usage = {
        "subs/link.cu": LINK,
        "subs/fifo.cu": "is a FIFO, not a regular file",
        "/dev/zero": "is a character device, not a regular file",
        "big.cu": "1610612736 bytes is more than a kernel file needs (limit 1048576)",
    }
    if file in usage:
        return shown, "usage-error", 2, f"{shown}: {usage[file]}"
    return shown, "compile-error", 3, None


def every_output(batch) -> dict[str, bytes]:
    work = batch["work"]
    outputs = {"stdout": batch["completed"].stdout, "stderr": batch["completed"].stderr}
    for path in [*sorted((work / "out").rglob("*")), work / "gradebook.csv", work / "all.xml"]:
        if path.is_file():
            outputs[str(path.relative_to(work))] = path.read_bytes()
    return outputs


@pytest.mark.slow
def test_every_entry_has_its_row_and_the_batch_ends_on_the_worst(hostile_batch):
    completed = hostile_batch["completed"]
    assert completed.returncode == 2, hostile_batch["stderr"][-3000:]  # usage errors outrank compile errors
    assert len(hostile_batch["files"]) == 9
    with open(hostile_batch["work"] / "gradebook.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["file"], r["verdict"], r["exit_code"]) for r in rows] == [
        (spreadsheet(shown), verdict, str(code))
        for shown, verdict, code, _ in map(expected_row, hostile_batch["files"])
    ]
    counts = [line for line in completed.stdout.decode().splitlines() if line.startswith("exit ")]
    assert counts == [
        "exit 2 (usage error): 4 submissions",
        "exit 3 (compile error): 5 submissions",
        "exit 2: the batch exits with the worst submission's code.",
    ]


def spreadsheet(shown: str) -> str:
    return shown.replace(";=", ";'=")  # the one cell here a spreadsheet could run


@pytest.mark.slow
def test_each_refusal_is_its_exact_message_and_each_name_is_shown(hostile_batch):
    out = hostile_batch["work"] / "out"
    results = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    by_file = {r["file"]: r for r in results}
    for file in hostile_batch["files"]:
        shown, verdict, code, error = expected_row(file)
        got = by_file[shown]
        assert (got["verdict"], got["exit_code"]) == (verdict, code), file
        if error:
            assert (got["error"], got["sha256"]) == (error, None), file
        else:  # the compiler's lines name the file as shown: the name went through the compiler escaped
            assert got["error"].startswith(f"{shown}(1): error: "), got["error"]


@pytest.mark.slow
def test_the_secret_appears_in_no_output(hostile_batch):
    for where, data in every_output(hostile_batch).items():
        assert SECRET.encode() not in data, where


@pytest.mark.slow
def test_no_students_name_reaches_an_output_raw(hostile_batch):
    """No escape sequence, no carriage return, no byte that is not UTF-8, and no line a CI runner
    would read as a workflow command but the annotations attnlab writes itself."""
    outputs = every_output(hostile_batch)
    assert set(outputs) >= {"stdout", "stderr", "gradebook.csv", "all.xml", "out/gradebook.csv", "out/junit.xml"}
    for where, data in outputs.items():
        text = data.decode("utf-8")  # every output decodes: the \xff byte never reaches one
        if where.endswith(".csv"):
            text = text.replace("\r\n", "\n")  # the CSV's own line ends (RFC 4180), not a student's CR
        for raw in ("\x1b", "\r", "\x9b", NOT_UTF8_NAME, "##["):
            assert raw not in text, (where, raw)
        for line in text.split("\n"):
            if line.lstrip().startswith("::"):
                ours = line.startswith(("::error file=", "::notice title=attnlab lab1::"))
                assert where == "stdout" and ours, (where, line)


@pytest.mark.slow
def test_the_annotations_name_each_file_in_one_escaped_property(hostile_batch):
    stdout = hostile_batch["completed"].stdout.decode()
    notice, *annotations = [line for line in stdout.splitlines() if line.startswith("::")]
    assert notice == "::notice title=attnlab lab1::9 submissions: 4 usage error, 5 compile error"
    files = [re.match(r"::error file=([^,:]*)[,:]", line).group(1) for line in annotations]
    assert len(files) == len(set(files)) == 9  # one line per submission
    assert "subs/y;=1+1;.cu" in files and "subs/\\xff.cu" in files
    assert "subs/evil\\x0a%3A%3Aerror%3A%3Apwned\\x0a%3A%3Astop-commands%3A%3Atok.cu" in files
    assert "subs/\\x1b[2J\\x1b[1;32mPASS\\x1b[0m.cu" in files
    (link,) = [line for line in annotations if line.startswith("::error file=subs/link.cu,")]
    assert link == f"::error file=subs/link.cu,title=attnlab lab1%3A usage-error::subs/link.cu: {LINK}"


@pytest.mark.slow
def test_the_progress_lines_name_each_file_escaped(hostile_batch):
    progress = [line for line in hostile_batch["stderr"].splitlines() if re.match(r"\[\d/9\] ", line)]
    assert sorted(line.split("] ", 1)[1] for line in progress) == sorted(
        f"{shown}: {verdict} (exit {code})" for shown, verdict, code, _ in map(expected_row, hostile_batch["files"])
    )


@pytest.mark.slow
def test_the_csv_quotes_every_field_and_keeps_the_formula_as_text(hostile_batch):
    lines = (hostile_batch["work"] / "gradebook.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == (
        '"file","sha256","verdict","exit_code","backend","cases_run","cases_skipped","speedup","gate_met",'
        '"first_failing_case","first_hint","hints","cluster_state","cluster_elapsed_s","cluster_reason","seconds",'
        '"student","student_id","name","section","score","max_score","unscored","not_graded","similar_to"'
    )
    (formula,) = [line for line in lines if "1+1" in line]
    assert formula.startswith('"subs/y;\'=1+1;.cu","')
    assert ',"compile-error","3","","0","0","","","compile",' in formula


@pytest.mark.slow
def test_the_reports_have_safe_file_names(hostile_batch):
    names = sorted(p.name for p in (hostile_batch["work"] / "out").iterdir() if p.suffix == ".json")
    assert names == [
        "_.json",
        "__2J__1_32mPASS__0m.json",
        "big.json",
        "broken.json",
        "evil___error__pwned___stop-commands__tok.json",
        "fifo.json",
        "link.json",
        "y__1_1_.json",
        "zero.json",
    ]
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", p.name) for p in (hostile_batch["work"] / "out").iterdir())


@pytest.mark.slow
def test_the_batch_stays_small_in_memory(hostile_batch):
    assert hostile_batch["peak_kib"] * 1024 < 200 * 1000 * 1000, f"{hostile_batch['peak_kib']} KiB"


@pytest.mark.slow
def test_a_correct_kernel_under_a_long_hostile_name_is_graded_as_itself(tmp_path):
    """A name whose escaped form is longer than a file name may be (70 control characters, each
    written as four) builds and passes on the CPU like the same file under a plain name."""
    name = "a" * 60 + "\x01" * 70 + ".cu"
    (tmp_path / name).write_text((REPO / "kernels" / "lab2" / "solution.cu").read_text())
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "labrunner",
            "grade",
            "lab2",
            name,
            "--device",
            "cpu",
            "--no-timing",
            "--case",
            "C1-P31",
            "--json",
            "r.json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    result = json.loads((tmp_path / "r.json").read_text())
    assert (completed.returncode, result["verdict"]) == (0, "pass"), completed.stderr[-500:]
    assert result["file"] == "a" * 60 + "\\x01" * 70 + ".cu"
