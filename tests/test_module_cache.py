"""The grader's own kernel files compiled once: the starter from the cache is the starter compiled, and a
change to what the compile read is a new entry, never a stale one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labrunner.compile import module_cache
from labrunner.compile.compiler_process import CompileLimits
from labrunner.compile.gate import load_submission
from labrunner.grader_cache import CACHE_VARIABLE
from labrunner.labs import get_lab
from labrunner.pipeline import timing_stage
from labrunner.pipeline.timing_stage import compile_baseline

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    monkeypatch.chdir(REPO)  # the label a message shows is the path as written from here
    return tmp_path / "cache" / "modules"


def counted_compiles(monkeypatch) -> list[str]:
    compiled: list[str] = []
    real = timing_stage.load_submission

    def compile_and_count(lab, path, *rest):  # type: ignore[no-untyped-def]
        compiled.append(path.name)
        return real(lab, path, *rest)

    monkeypatch.setattr(timing_stage, "load_submission", compile_and_count)
    return compiled


def test_the_starter_is_compiled_once_and_the_kept_one_is_the_compiled_one(cache, monkeypatch):
    lab = get_lab("lab2")
    compiled = counted_compiles(monkeypatch)
    first = compile_baseline(lab, lab.starter_path, "sm_90", CompileLimits())
    second = compile_baseline(lab, lab.starter_path, "sm_90", CompileLimits())
    assert compiled == ["starter.cu"]  # the second came from the cache
    assert second == first
    fresh = load_submission(lab, lab.starter_path, first.label, "sm_90", CompileLimits())
    assert second == fresh and second.module.cubin == fresh.module.cubin and len(second.module.cubin) > 1000
    assert len(list(cache.glob("*.json"))) == 1


def test_another_architecture_is_another_entry_and_a_file_outside_the_lab_s_folder_is_never_kept(
    cache, monkeypatch, tmp_path
):
    lab = get_lab("lab2")
    compiled = counted_compiles(monkeypatch)
    compile_baseline(lab, lab.starter_path, "sm_90", CompileLimits())
    compile_baseline(lab, lab.starter_path, "sm_80", CompileLimits())
    copy = tmp_path / "starter.cu"
    copy.write_bytes(lab.starter_path.read_bytes())  # a user's --baseline: compiled every time
    compile_baseline(lab, copy, "sm_90", CompileLimits())
    compile_baseline(lab, copy, "sm_90", CompileLimits())
    assert compiled == ["starter.cu"] * 4
    assert len(list(cache.glob("*.json"))) == 2


def test_an_entry_that_is_not_what_the_cache_writes_is_compiled_again_and_rewritten(cache, monkeypatch):
    lab = get_lab("lab3")
    compiled = counted_compiles(monkeypatch)
    made = compile_baseline(lab, lab.starter_path, "sm_90", CompileLimits())
    (entry,) = cache.glob("*.json")
    entry.write_text(json.dumps({"label": made.label, "module": {"cubin": "not base64!"}}))
    again = compile_baseline(lab, lab.starter_path, "sm_90", CompileLimits())
    assert compiled == ["starter.cu", "starter.cu"] and again == made
    assert module_cache.read_entry(entry, lab.starter_path) == made  # rewritten whole
