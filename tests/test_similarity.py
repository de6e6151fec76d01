"""Identical and near-identical submissions (labrunner/report/similarity.py): what counts as shared, the
starter subtracted, and hostile files read in bounded work."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from labrunner.report.similarity import (
    DEFAULT_THRESHOLD,
    MAX_TOKENS,
    fingerprints,
    normalised_tokens,
    shared_fraction,
    similar_to,
)

ROOT = Path(__file__).resolve().parents[1]
LAB2 = ROOT / "kernels" / "lab2"
SOLUTION = (LAB2 / "solution.cu").read_bytes()
EXPERT = (LAB2 / "expert.cu").read_bytes()
STARTERS = [(LAB2 / "starter.cu").read_bytes(), (LAB2 / "starter.py").read_bytes()]

# Names a copier would change: the solution's own helpers, buffers and loop variables.
RENAMES = {
    "acc": "accum",
    "rowSum": "running",
    "tileStart": "kb",
    "mNew": "newMax",
    "alpha": "rescale",
    "dot4": "fourDot",
    "axpy8": "addScaled",
    "qS": "sharedQ",
    "kS": "sharedK",
    "vS": "sharedV",
    "pS": "sharedP",
    "lastVisible": "stopAt",
    "inverse": "recip",
    "tileMax": "best",
}


def disguised(source: str) -> str:
    """`source` as a copier hands it in: every comment gone and new ones written, names changed, `0.0f`
    spelled `0.f`, and the code between preprocessor lines joined onto one line with other spacing."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.S)
    code = re.sub(r"\b(" + "|".join(RENAMES) + r")\b", lambda m: RENAMES[m.group()], code)
    code = code.replace("0.0f", "0.f").replace("for (", "/* my loop */ for(")
    lines: list[str] = []
    joined: list[str] = []
    for line in code.splitlines():
        if line.lstrip().startswith("#"):
            lines += [" ".join(joined), line.strip()]
            joined = []
        else:
            joined.append(" ".join(line.split()))
    return "\n".join([*lines, " ".join(joined)]) + "\n"


def test_a_renamed_reflowed_recommented_copy_of_the_solution_shares_all_it_owns():
    copy = disguised(SOLUTION.decode()).encode()
    assert copy != SOLUTION
    assert b"acc" not in re.findall(rb"\w+", copy) and b"Scores for rows" not in copy
    assert list(normalised_tokens(copy)) == list(normalised_tokens(SOLUTION))
    assert similar_to({"alice": SOLUTION, "bob": copy}, STARTERS, DEFAULT_THRESHOLD) == {
        "alice": [("bob", 1.0)],
        "bob": [("alice", 1.0)],
    }


def test_a_copy_with_a_few_lines_added_still_shares_nearly_everything():
    # Three statements of the copier's own, in the middle of the tile loop.
    source = disguised(SOLUTION.decode())
    marker = "__syncwarp();"
    assert source.count(marker) == 1
    extra = "int spare = threadIdx.x * 3 + blockIdx.y; spare ^= 7; if (spare < 0) return; "
    copy = source.replace(marker, marker + " " + extra).encode()
    solution_own = fingerprints(SOLUTION) - fingerprints(STARTERS[0]) - fingerprints(STARTERS[1])
    copy_own = fingerprints(copy) - fingerprints(STARTERS[0]) - fingerprints(STARTERS[1])
    assert (len(solution_own), len(copy_own), len(solution_own & copy_own)) == (261, 266, 260)
    assert similar_to({"alice": SOLUTION, "bob": copy}, STARTERS, DEFAULT_THRESHOLD)["bob"] == [("alice", 260 / 261)]


@pytest.mark.slow
def test_the_disguised_copy_is_still_a_kernel_the_compiler_takes(tmp_path):
    copy = tmp_path / "flash.cu"
    copy.write_text(disguised(SOLUTION.decode()))
    done = subprocess.run(
        [sys.executable, "-m", "labrunner", "check", "lab2", str(copy)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_solution_and_the_expert_kernel_share_little():
    found = similar_to({"solution": SOLUTION, "expert": EXPERT}, STARTERS, 0.0)
    # 39 of the solution's 261 own fingerprints (the expert has 402) are among the expert's.
    assert found == {"expert": [("solution", 39 / 261)], "solution": [("expert", 39 / 261)]}
    assert similar_to({"solution": SOLUTION, "expert": EXPERT}, STARTERS, DEFAULT_THRESHOLD) == {
        "expert": [],
        "solution": [],
    }


def test_the_starter_shares_nothing_with_a_file_built_on_it():
    starter = STARTERS[0]
    built_on = starter.replace(b"return;", b"{ out[0] = q[0] * 2.0f + kCache[1]; return; }")
    assert built_on != starter
    assert similar_to({"as_handed_out": starter, "built_on": built_on}, STARTERS, 0.0) == {
        "as_handed_out": [("built_on", 0.0)],
        "built_on": [("as_handed_out", 0.0)],
    }


def test_two_files_that_share_only_the_starter_share_nothing():
    starter = STARTERS[0]
    one = starter.replace(b"return;", b"{ out[0] = q[0] * 2.0f + kCache[1]; return; }")
    other = starter + b"\n__device__ float twice(float v) { for (int i = 0; i < 3; ++i) v = v * v - 1.0f; return v; }\n"
    # Without the starter taken out, 66 of the 70 fingerprints of the smaller would count as shared;
    # with it, each keeps only its own few (4 and 9), and none of those is the other's.
    assert shared_fraction(fingerprints(one), fingerprints(other)) == 66 / 70
    starter_prints = fingerprints(STARTERS[0]) | fingerprints(STARTERS[1])
    assert (len(fingerprints(one) - starter_prints), len(fingerprints(other) - starter_prints)) == (4, 9)
    assert similar_to({"a": one, "b": other}, STARTERS, 0.0) == {"a": [("b", 0.0)], "b": [("a", 0.0)]}


def test_identical_files_share_one_even_with_nothing_of_their_own():
    empty_pair = similar_to({"erin": b"", "frank": b"", "grace": SOLUTION}, STARTERS, 1.0)
    assert empty_pair == {"erin": [("frank", 1.0)], "frank": [("erin", 1.0)], "grace": []}
    starter_pair = similar_to({"a": STARTERS[0], "b": STARTERS[0]}, STARTERS, 1.0)
    assert starter_pair == {"a": [("b", 1.0)], "b": [("a", 1.0)]}


def test_pairs_come_highest_share_first_then_by_name():
    copy = disguised(SOLUTION.decode()).encode()
    found = similar_to({"dan": SOLUTION, "cat": copy, "bea": SOLUTION, "amy": EXPERT}, STARTERS, 0.1)
    assert found == {
        "amy": [("bea", 39 / 261), ("cat", 39 / 261), ("dan", 39 / 261)],
        "bea": [("cat", 1.0), ("dan", 1.0), ("amy", 39 / 261)],
        "cat": [("bea", 1.0), ("dan", 1.0), ("amy", 39 / 261)],
        "dan": [("bea", 1.0), ("cat", 1.0), ("amy", 39 / 261)],
    }


def test_a_renamed_copy_of_the_triton_solution_shares_all_and_the_cuda_one_little():
    solution_py = (LAB2 / "solution.py").read_text()
    code = re.sub(r"#[^\n]*|\"\"\".*?\"\"\"", "", solution_py, flags=re.S)
    renamed = code.replace("m_new", "top").replace("alpha", "fix").replace("acc", "total").replace("sees", "limit")
    copy = renamed.replace("\n\n", "\n").encode()
    found = similar_to({"py": solution_py.encode(), "copy": copy, "cu": SOLUTION}, STARTERS, 0.0)
    assert found["copy"] == [("py", 1.0), ("cu", 0.0)]


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        (b"x = 1.5f; // a comment\n", [b"I", b"=", b"N", b";"]),
        (b"/* one */ a /* two\n lines */ b", [b"I", b"I"]),
        (b"#include <cfloat>\n#pragma unroll 4\n", [b"#include", b"<", b"I", b">", b"#pragma", b"I", b"N"]),
        (b"# a Python comment\ntotal = f'{x}' + '''doc''' + r\"raw\"\n", [b"I", b"=", b"S", b"+", b"S", b"+", b"S"]),
        (b"int n = 1'000'000, h = 0x1p-3;", [b"int", b"I", b"=", b"N", b",", b"I", b"=", b"N", b";"]),
        (b"__syncthreads(); tl.load(p)", [b"__syncthreads", b"(", b")", b";", b"I", b".", b"load", b"(", b"I", b")"]),
        (b'"unclosed\nx', [b"S", b"I"]),
        (b"a /* never closed", [b"I"]),
        (b'"""never closed \\""" x', [b"S"]),
        (b"\x00\xff\x80abc", [b"\x00", b"I"]),
    ],
)
def test_what_a_file_reads_as(text, tokens):
    assert list(normalised_tokens(text)) == tokens


def _repeated(unit: bytes) -> bytes:
    return (unit * ((1 << 20) // len(unit) + 1))[: 1 << 20]


# Files of 1 MiB a student could hand in to make the reader slow or large, with the number of
# fingerprints each gives: a file of one repeated unit has a periodic token stream, so few distinct ones.
# Each takes under a second; three stay in the fast suite.
ADVERSARIAL = [
    pytest.param(random.Random(40).randbytes(1 << 20), 9090, id="random bytes"),
    pytest.param(b"/*" + _repeated(b"x")[2:], 0, id="one unclosed comment"),
    pytest.param(_repeated(b"#\n"), 0, id="hash lines"),
    pytest.param(_repeated(b"f(a,"), 1, id="one huge line of calls", marks=pytest.mark.slow),
    pytest.param(_repeated(b"{[("), 1, id="deep nesting", marks=pytest.mark.slow),
    pytest.param(_repeated(b"/*"), 1, id="comment openers", marks=pytest.mark.slow),
    pytest.param(_repeated(b'"'), 1, id="quotes", marks=pytest.mark.slow),
    pytest.param(b'"""' + _repeated(b"\\")[3:], 0, id="unclosed triple quote of backslashes", marks=pytest.mark.slow),
    pytest.param(_repeated(b"#if "), 1, id="directives", marks=pytest.mark.slow),
    pytest.param(_repeated(b"1'"), 0, id="digit separators", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("data", "expected"), ADVERSARIAL)
def test_a_hostile_mebibyte_is_read_in_bounded_work(data, expected):
    assert len(data) == 1 << 20
    assert len(fingerprints(data)) == expected


@pytest.mark.slow
def test_only_the_first_tokens_of_a_long_file_count():
    # Past MAX_TOKENS tokens nothing is read, so what follows cannot make two files alike.
    head = b"x = y + 1;\n" * MAX_TOKENS
    one, other = head + SOLUTION, head + EXPERT
    assert sum(1 for _ in normalised_tokens(one)) == MAX_TOKENS
    assert fingerprints(one) == fingerprints(other)
