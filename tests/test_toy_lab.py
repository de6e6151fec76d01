"""A lab defined from data alone, graded through the real command line.

The toy lab below is a `Lab` written here (one kernel, its launch, a timing strategy), a case file
(`tests/data/toy_lab/toy.toml`) and two kernels (`tests/data/toy_lab/toy/`): a correct one and the
same kernel without its causal mask. It is registered for the test and unregistered after it;
nothing in `labrunner/cli/` or `labrunner/pipeline/` knows it exists, yet `attnlab grade toy FILE`
checks it case by case like a shipped lab. It shares the attention-v1 contract's shapes (32 query
heads, 8 KV heads, 64 dims), so the oracle, the poison and the checker are the shipped ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from labrunner.cli import main
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.labs import LABS, get_lab, register, unregister
from labrunner.labs.definition import Lab, Launch, entry
from labrunner.labs.timing_strategy import AgainstBaseline
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS

TOY_DIR = Path(__file__).resolve().parent / "data" / "toy_lab"
SKIPPED = ("C64-P64", "skipped", "skipped: outside the CPU backend's time budget; --full runs it")


def plan_launches(constants: dict[str, int], rows: int, prefix: int) -> list[Launch]:
    """One block per (chunk row, query head), one thread per output dim."""
    return [Launch("toy_attention", (rows, QUERY_HEADS, 1), (HEAD_DIM, 1, 1), 0, ("q", "k", "v", "out", rows, prefix))]


TOY = Lab(
    name="toy",
    title="A toy chunked attention",
    teaches="that a lab is data: a definition, a case file and kernels, graded with nothing else changed",
    entry_points=(
        entry(
            "toy_attention",
            "const float* q, const float* kCache, const float* vCache, float* out, int chunkLen, int prefixLen",
            "out[i][h] = softmax over keys j <= prefixLen + i of (q[i][h] . kCache[j][h/4]) / 8, "
            "weighting vCache[j][h/4]",
        ),
    ),
    launch_defaults={},  # no launch constant: the geometry is fixed
    bounds={},
    plan_launches=plan_launches,
    timing_strategy=AgainstBaseline(),  # on a GPU: SPEEDUP against its starter at [timing]'s shape
    cases_dir=TOY_DIR,  # toy.toml
    kernels_dir=TOY_DIR,  # toy/solution.cu
)


@pytest.fixture
def toy_lab():
    lab = register(TOY)
    yield lab
    unregister(TOY.name)


def grade(file: Path, tmp_path: Path) -> tuple[object, dict]:
    report = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["grade", "toy", str(file), "--device", "cpu", "--json", str(report)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result, json.loads(report.read_text())


def test_the_toy_labs_catalogue_is_its_own_case_file_parsed_once(toy_lab):
    assert toy_lab.case_file == TOY_DIR / "toy.toml"
    assert toy_lab.catalogue is toy_lab.catalogue  # parsed once, then kept
    assert [(c.name, c.rows, c.prefix, c.planted, c.cpu) for c in toy_lab.catalogue.cases] == [
        ("C1-P3", 1, 3, (), True),
        ("C5-P7", 5, 7, (), True),
        ("planted-C4-P4", 4, 4, (1, 5), True),
        ("C64-P64", 64, 64, (), False),
    ]
    assert toy_lab.catalogue.timing == {"rows": 64, "prefix": 64}
    assert toy_lab.solution_path == TOY_DIR / "toy" / "solution.cu"


@pytest.mark.slow
def test_a_registered_toy_lab_grades_its_correct_kernel_pass_exit_0(toy_lab, tmp_path):
    result, data = grade(toy_lab.solution_path, tmp_path)
    assert (result.exit_code, data["verdict"], data["decisive_case"], data["lab"]) == (0, "pass", None, "toy")
    assert [(c["name"], c["status"], c["message"]) for c in data["cases"]] == [
        ("C1-P3", "pass", "all 2048 elements within the pass rule"),
        ("C5-P7", "pass", "all 10240 elements within the pass rule"),
        ("planted-C4-P4", "pass", "all 8192 elements within the pass rule"),
        SKIPPED,
    ]
    assert result.output.rstrip().endswith("PASS (1 case skipped on the CPU backend; --full runs them) (exit 0)")


@pytest.mark.slow
def test_a_registered_toy_lab_grades_its_kernel_without_the_causal_mask_wrong_exit_1(toy_lab, tmp_path):
    result, data = grade(TOY_DIR / "toy" / "wrong.cu", tmp_path)
    assert (result.exit_code, data["verdict"], data["decisive_case"]) == (1, "wrong", "C5-P7")
    # the one-row chunk sees every key, so it passes; every other row saw keys past its own position
    assert [(c["name"], c["status"], c["message"]) for c in data["cases"]] == [
        ("C1-P3", "pass", "all 2048 elements within the pass rule"),
        (
            "C5-P7",
            "wrong",
            "row 0, head 0, col 0: got 0.148688, expected -0.0479988 (|err| > 1e-4 + 1e-3*|ref|); "
            "8150 of 10240 elements wrong; rows 0-3 fail (4 of 5)",
        ),
        (
            "planted-C4-P4",
            "wrong",
            "row 0, head 0, col 0: got 0.42474, expected 0.216889 (|err| > 1e-4 + 1e-3*|ref|); "
            "6025 of 8192 elements wrong; rows 0-2 fail (3 of 4)",
        ),
        SKIPPED,
    ]
    assert result.output.rstrip().endswith(
        "WRONG (1 case skipped on the CPU backend; --full runs them) in case C5-P7 (exit 1)"
    )


def test_the_registry_refuses_a_taken_name_and_forgets_an_unregistered_lab():
    register(TOY)
    try:
        with pytest.raises(ValueError) as caught:
            register(TOY)
        assert str(caught.value) == "a lab named toy is registered already: unregister it first"
        assert get_lab("toy") is TOY
    finally:
        assert unregister("toy") is TOY
    assert list(LABS) == ["lab1", "lab2", "lab3"]
    with pytest.raises(AttnlabError) as unknown:
        get_lab("toy")
    assert (unknown.value.exit_code, str(unknown.value)) == (
        ExitCode.USAGE,
        "unknown lab 'toy': choose one of lab1, lab2, lab3 (`attnlab labs` lists them)",
    )
    with pytest.raises(ValueError) as again:
        unregister("toy")
    assert str(again.value) == "no lab named toy is registered"
