"""The CPU build's one host-dependent flag, ATTNLAB_HOST_FMA: when it is given, and that it changes no bit.

`host_isa_flags` is read from /proc/cpuinfo, so each rule is checked on a written cpuinfo. On a host
with FMA the shipped solutions are built twice, with the flag and without it, and every output of a
case of each lab is compared bit for bit: the fused multiply-add instruction rounds once, as libm's
fmaf does, so the two builds must agree exactly. The FMA build is also shown to have taken the flag:
lab 2's solution (the one that writes fmaf) imports no fmaf from libm, where its portable build does.
"""

from __future__ import annotations

import numpy as np
import pytest

from labrunner.compile.gate import load_submission
from labrunner.labs import get_lab
from labrunner.pipeline.correctness import case_payload, resolved_cases
from labrunner.pipeline.grading_run import CaseOptions
from labrunner.run.cpu import module as cpu_module
from labrunner.run.cpu.module import CpuModule, cpu_compiler_available, host_isa_flags
from labrunner.run.cpu.object_check import read_elf
from labrunner.run.cpu_device import CpuDevice
from labrunner.run.worker_main import run_case
from labrunner.truth.cases import Seed

X86_FLAGS = "processor\t: 0\nflags\t\t: fpu vme sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2\n"


def test_fma_is_asked_for_where_an_x86_64_host_has_fma_and_avx():
    assert host_isa_flags("x86_64", X86_FLAGS) == ["-DATTNLAB_HOST_FMA"]


@pytest.mark.parametrize(
    ("machine", "cpuinfo"),
    [
        ("x86_64", X86_FLAGS.replace(" fma", "")),  # no FMA3 (an older x86-64)
        ("x86_64", X86_FLAGS.replace(" avx f16c", " f16c")),  # FMA without AVX: no VEX encoding to use
        ("x86_64", "processor\t: 0\n"),  # no flags line at all: unknown, the portable build
        ("aarch64", "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\n"),  # fused multiply-add is base ISA
    ],
)
def test_no_flag_where_the_host_lacks_it_or_needs_none(machine, cpuinfo):
    assert host_isa_flags(machine, cpuinfo) == []


needs_fma = pytest.mark.skipif(
    cpu_compiler_available() is not None or host_isa_flags() != ["-DATTNLAB_HOST_FMA"],
    reason="needs g++ on an x86-64 host with FMA",
)


def outputs_of(lab_name: str, case_name: str, cache, monkeypatch, flags: list[str]):
    """The case's output bytes from the lab's solution built with `flags`, and the built object's path."""
    monkeypatch.setattr(cpu_module, "CXXFLAGS", flags)
    lab = get_lab(lab_name)
    submission = load_submission(lab, lab.solution_path)
    (case,) = [c for c in resolved_cases(lab, lab.catalogue, submission.constants) if c.name == case_name]
    payload = case_payload(lab, submission, case, CaseOptions(seed=Seed(7, "--seed")))
    built = CpuModule.build(payload["source"], payload["filename"], payload["entry_types"], cache_dir=cache)
    reply = run_case(CpuDevice(), built, payload["request"])
    return reply["outputs"]["out"].tobytes(), built.so_path


@needs_fma
@pytest.mark.parametrize(
    ("lab_name", "case_name", "calls_fmaf"),
    [("lab1", "T33", False), ("lab2", "C33-P1000", True), ("lab3", "skewed", False)],  # only lab 2's writes fmaf
)
def test_the_fma_build_gives_the_portable_builds_bits(lab_name, case_name, calls_fmaf, tmp_path, monkeypatch):
    with_fma = list(cpu_module.CXXFLAGS)
    portable = [flag for flag in with_fma if flag != "-DATTNLAB_HOST_FMA"]
    assert portable != with_fma
    fused, fused_object = outputs_of(lab_name, case_name, tmp_path / "fma", monkeypatch, with_fma)
    plain, plain_object = outputs_of(lab_name, case_name, tmp_path / "portable", monkeypatch, portable)
    assert fused == plain
    assert "fmaf" not in read_elf(fused_object).undefined
    # lab 2's portable build calls libm's fmaf, its FMA build has the instruction: the flag made the difference
    assert ("fmaf" in read_elf(plain_object).undefined) is calls_fmaf


# Every way a kernel file may write CUDA's fused multiply-add. With a = 1 + 2^-12, a * a is 1 + 2^-11 + 2^-24,
# and c = -(1 + 2^-11): fused, a * a + c is exactly 2^-24; rounded first (an unfused product) it would be 0.
SPELLINGS = """
#include <cmath>
extern "C" __global__ void spell(float* o, double* d) {
    float a = o[0], c = o[1];
    o[2] = fmaf(a, a, c);
    o[3] = std::fmaf(a, a, c);
    o[4] = ::fmaf(a, a, c);
    o[5] = __fmaf_rn(a, a, c);
    double x = d[0], z = d[1];
    d[2] = fma(x, x, z);
    d[3] = std::fma(x, x, z);
    d[4] = __fma_rn(x, x, z);
}
"""


@pytest.mark.skipif(cpu_compiler_available() is not None, reason="needs g++")
@pytest.mark.parametrize("fused_instruction", [True, False], ids=["fma-instruction", "libm"])
def test_every_spelling_of_fmaf_and_fma_is_fused_on_either_build(fused_instruction, tmp_path, monkeypatch):
    if fused_instruction and host_isa_flags() != ["-DATTNLAB_HOST_FMA"]:
        pytest.skip("this host has no FMA instruction")
    flags = [f for f in cpu_module.CXXFLAGS if f != "-DATTNLAB_HOST_FMA"]
    monkeypatch.setattr(cpu_module, "CXXFLAGS", flags + (["-DATTNLAB_HOST_FMA"] if fused_instruction else []))
    source = '#include <attnlab/prelude.cuh>\n#line 1 "spell.cu"\n' + SPELLINGS
    built = CpuModule.build(source, "spell.cu", {"spell": ["float*", "double*"]}, cache_dir=tmp_path)
    assert ("fmaf" in read_elf(built.so_path).undefined) is not fused_instruction
    floats = np.array([1 + 2**-12, -(1 + 2**-11), 0, 0, 0, 0], dtype=np.float32)
    doubles = np.array([1 + 2**-27, -(1 + 2**-26), 0, 0, 0], dtype=np.float64)  # fused: exactly 2^-54
    built.launch("spell", (1, 1, 1), (1, 1, 1), 0, [floats, doubles])
    assert floats[2:].tolist() == [2**-24] * 4
    assert doubles[2:].tolist() == [2**-54] * 3
