"""The exploit conformance table (tests/fixtures/conformance.toml) and the fixtures agree.

The table is what a reader sees: every hostile fixture, the class of attack it stands for, where
that class was published, and the verdict each backend gives it. The verdicts themselves live in
each lab's expected.toml, where the fixture suite grades them. These tests hold the two together,
so neither can change without the other: a hostile fixture without a row, a row without a fixture,
or a verdict that differs from expected.toml fails here. They read files only; nothing is graded.
"""

from __future__ import annotations

import tomllib

import pytest
from fixture_suite import FIXTURES, REPO, load_fixtures

TABLE = FIXTURES / "conformance.toml"
BACKENDS = ("cpu", "gpu")
APPLIES = ("yes", "CPU backend only", "no")


def conformance() -> dict:
    with open(TABLE, "rb") as handle:
        return tomllib.load(handle)


def hostile_fixtures() -> dict:
    """Every fixture under tests/fixtures/<lab>/hostile/, by its path in the repository."""
    return {str(f.path.relative_to(REPO)): f for f in load_fixtures() if f.path.parent.name == "hostile"}


ROWS = conformance()["fixture"]


def test_every_hostile_fixture_has_exactly_one_row():
    listed = [row["fixture"] for row in ROWS]
    assert sorted(set(listed)) == sorted(listed), "a fixture is listed twice"
    on_disk = set(hostile_fixtures())
    assert sorted(on_disk - set(listed)) == [], "hostile fixtures missing from conformance.toml"
    assert sorted(set(listed) - on_disk) == [], "rows naming no hostile fixture"


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row["fixture"].removeprefix("tests/fixtures/"))
def test_a_row_gives_the_verdicts_expected_toml_gives(row):
    fixture = hostile_fixtures()[row["fixture"]]
    for backend in BACKENDS:
        if fixture.runs_on(backend):
            # an override such as `gpu_verdict` wins, as it does in the fixture suite
            want = fixture.expected.get(f"{backend}_verdict", fixture.expected["verdict"])
            assert row[backend] == want, f"{backend}: the table says {row[backend]!r}, expected.toml {want!r}"
        else:
            only = "GPU only" if backend == "cpu" else "CPU only"
            prefix = f"n/a ({only}): "
            assert row[backend].startswith(prefix), f"{backend}: the fixture does not run there: {prefix}<why>"
            assert row[backend].removeprefix(prefix).strip(), f"{backend}: say why the fixture does not run there"


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row["fixture"].removeprefix("tests/fixtures/"))
def test_a_row_names_its_class_source_and_what_stops_it(row):
    assert sorted(row) == ["class", "cpu", "fixture", "gpu", "source", "stopped_by"]
    assert all(row[key].strip() for key in ("class", "source", "stopped_by"))


PUBLISHED = conformance()["published"]


def test_each_published_exploit_is_listed_once():
    names = [entry["exploit"] for entry in PUBLISHED]
    assert sorted(set(names)) == sorted(names)
    # gpu-mode/pygpubench's exploits/ folder holds 22 exploits (besides its two controls)
    assert len([n for n in names if n.startswith("gpu-mode/pygpubench exploits/submission_")]) == 22


PYTHON_EXPLOIT = "gpu-mode/pygpubench exploits/submission_"
TRITON_KEYS = ["triton", "triton_fixtures", "triton_why"]


@pytest.mark.parametrize("entry", PUBLISHED, ids=lambda entry: entry["exploit"])
def test_a_published_exploit_says_whether_it_applies_and_names_real_rows(entry):
    # pygpubench's exploits are Python files: each also says what it can do as a Triton file
    python = entry["exploit"].startswith(PYTHON_EXPLOIT)
    assert sorted(entry) == sorted(["applies", "exploit", "fixtures", "why", *(TRITON_KEYS if python else [])])
    listed = {row["fixture"] for row in ROWS}
    for prefix in ("", "triton_") if python else ("",):
        applies = entry["triton" if prefix else "applies"]
        assert applies in APPLIES
        assert entry[prefix + "why"].strip()
        assert [f for f in entry[prefix + "fixtures"] if f not in listed] == []
        if applies != "no":  # what a submission can do has a fixture that does it
            assert entry[prefix + "fixtures"], f"an exploit a {prefix and 'Triton '}file can carry out needs a fixture"


def test_the_triton_fixtures_of_a_python_exploit_are_triton_files():
    named = {f for entry in PUBLISHED for f in entry.get("triton_fixtures", [])}
    assert named and all(f.endswith(".py") for f in named)


def test_every_published_source_of_a_fixture_is_in_the_published_list():
    covered = {f for entry in PUBLISHED for f in (*entry["fixtures"], *entry.get("triton_fixtures", []))}
    published = [row["fixture"] for row in ROWS if not row["source"].startswith("attnlab")]
    assert [f for f in published if f not in covered] == []


def test_the_readme_prints_the_table_as_rendered_from_the_data():
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location("conformance_table", REPO / "scripts" / "conformance_table.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    readme = (REPO / "README.md").read_text()
    printed = re.search(
        r"<!-- conformance table: rendered by scripts/conformance_table.py -->\n(.*?)\n"
        r"<!-- end of conformance table -->",
        readme,
        re.DOTALL,
    )
    assert printed is not None and printed.group(1) == script.render()
    python = re.search(
        r"<!-- python exploits table: rendered by scripts/conformance_table.py -->\n(.*?)\n"
        r"<!-- end of python exploits table -->",
        readme,
        re.DOTALL,
    )
    assert python is not None and python.group(1) == script.render_python()
