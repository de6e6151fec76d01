"""The timing input sets: distinct, standard normal, and the CUDA twin bit for bit the numpy definition.

The twin's source is compiled here as plain C++ (what it is without __CUDA_ARCH__) and must
write exactly the numpy definition's bits; on a GPU it is compiled by NVRTC, run by the worker's
pool and by the driver's oracle, and held to the same bits (the tests marked gpu).
"""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess

import numpy as np
import pytest

from labrunner.truth.timing_sets import CUDA_KERNEL, CUDA_SOURCE, _log, make_set, normals, raw_bits, set_shapes

KEY = (0x1234_5678_9ABC_DEF0, 0x0FED_CBA9_8765_4321)


def test_a_set_has_the_cases_shapes_and_dtype():
    s = make_set(KEY, 0, 5, 7)
    assert {n: (a.shape, a.dtype) for n, a in s.items()} == {
        "q": ((5, 32, 64), np.float32),
        "k": ((12, 8, 64), np.float32),
        "v": ((12, 8, 64), np.float32),
    }
    assert set_shapes(5, 7) == {n: a.shape for n, a in s.items()}


def test_the_bits_are_numpys_philox_and_any_element_can_be_made_alone():
    whole = raw_bits(KEY, 3, 0, 40)
    assert whole.tolist() == np.random.Philox(key=list(KEY), counter=3 << 192).random_raw(40).tolist()
    assert raw_bits(KEY, 3, 13, 20).tolist() == whole[13:33].tolist()


def test_no_two_sets_share_a_tensor():
    seen = {name: set() for name in ("q", "k", "v")}
    for key in (KEY, (KEY[0], KEY[1] + 1)):
        for number in range(50):
            for name, values in make_set(key, number, 2, 3).items():
                seen[name].add(values.tobytes())
    assert {name: len(found) for name, found in seen.items()} == {"q": 100, "k": 100, "v": 100}


def test_the_values_are_standard_normal():
    values = normals(raw_bits(KEY, 0, 0, 1 << 20)).astype(np.float64)
    assert abs(values.mean()) < 0.005 and abs(values.std() - 1.0) < 0.005
    # Kolmogorov-Smirnov distance to the normal CDF: about 1e-3 is what a million true draws show
    ordered = np.sort(values)
    cdf = 0.5 * np.array([math.erfc(-x / math.sqrt(2.0)) for x in ordered[::64]])
    empirical = (np.arange(0, ordered.size, 64) + 1) / ordered.size
    assert np.max(np.abs(cdf - empirical)) < 3e-3
    assert 4.0 < np.abs(values).max() < 6.5  # the tails are there, as in a million true draws


def test_the_inverse_cdf_inverts_the_normal_cdf():
    x = np.linspace(-8.0, 0.0, 4001)  # the lower half, where the CDF itself is exact enough to compare
    u = np.array([0.5 * math.erfc(-t / math.sqrt(2.0)) for t in x])
    # u as the generator would make it: bits whose top 52 give (m + 1/2) * 2^-52 closest to u
    m = np.clip(np.floor(u * 2.0**52 - 0.5), 0, 2**52 - 1).astype(np.uint64)
    got = normals(m << np.uint64(12)).astype(np.float64)
    exact_u = (m.astype(np.float64) + 0.5) * 2.0**-52
    x_of_u = np.array([_inverse_by_bisection(p) for p in exact_u[::200]])
    assert np.max(np.abs(got[::200] - x_of_u)) < 1e-6  # float32's own rounding, nothing more


def _inverse_by_bisection(p: float) -> float:
    low, high = -40.0, 40.0
    for _ in range(200):
        mid = (low + high) / 2
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def test_the_log_built_from_exact_operations_is_the_log():
    x = np.geomspace(1e-300, 0.5, 5001)
    assert np.max(np.abs(_log(x) - np.log(x)) / np.abs(np.log(x))) < 1e-15


def test_a_key_must_be_two_63_bit_integers():
    with pytest.raises(ValueError, match=r"a timing-set key is two integers in \[0, 2\^63\), got \(1,\)"):
        make_set((1,), 0, 1, 0)
    with pytest.raises(ValueError, match=r"got \(1, 9223372036854775808\)"):
        make_set((1, 1 << 63), 0, 1, 0)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the CUDA twin as C++")
def test_the_cuda_twin_compiled_as_cpp_writes_the_definitions_bits(tmp_path):
    source = tmp_path / "twin.cpp"
    source.write_text(CUDA_SOURCE)
    library = tmp_path / "twin.so"
    subprocess.run(["g++", "-O2", "-ffp-contract=off", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    fill = getattr(ctypes.CDLL(str(library)), CUDA_KERNEL)
    rows, prefix, number = 9, 23, (1 << 40) + 5  # a set number past 32 bits uses the counter's top word whole
    expected = make_set(KEY, number, rows, prefix)
    got = {n: np.full(a.shape, np.nan, dtype=np.float32) for n, a in expected.items()}
    u64, pointer = ctypes.c_ulonglong, ctypes.c_void_p
    fill(
        *(pointer(got[n].ctypes.data) for n in ("q", "k", "v")),
        u64(got["q"].size),
        u64(got["k"].size),
        u64(KEY[0]),
        u64(KEY[1]),
        u64(number),
    )
    for name in expected:
        assert np.array_equal(got[name].view(np.uint32), expected[name].view(np.uint32)), name


@pytest.mark.gpu
def test_the_gpu_makes_the_timing_shapes_sets_bit_for_bit():
    import cupy

    from labrunner.measure.input_pool import CudaSets

    rows, prefix = 2048, 2048
    maker = CudaSets(None, KEY, rows, prefix)
    buffers = {n: cupy.empty(shape, dtype=np.float32) for n, shape in set_shapes(rows, prefix).items()}
    for number in (0, 1, 977):
        maker.fill(buffers, number)
        expected = make_set(KEY, number, rows, prefix)
        for name in expected:
            differing = int(
                np.count_nonzero(cupy.asnumpy(buffers[name]).view(np.uint32) != expected[name].view(np.uint32))
            )
            assert differing == 0, f"set {number}, {name}: {differing} elements differ"


@pytest.mark.gpu
def test_the_gpu_oracle_proves_itself_and_judges_like_the_checker():
    from labrunner.pipeline.timing import CpuReferences
    from labrunner.run.gpu_oracle import GpuOracle

    gpu = GpuOracle()
    assert gpu.proof["golden_max_error"] <= 1e-12 and gpu.proof["cpu_gpu_max_difference"] <= 1e-12
    rows, prefix = 300, 700
    cpu_reference = CpuReferences().reference(KEY, 4, rows, prefix)
    gpu_reference = gpu.reference(KEY, 4, rows, prefix)
    assert float(np.max(np.abs(gpu_reference.get() - cpu_reference))) <= 1e-12
    right = cpu_reference.astype(np.float32)
    assert gpu.check(right, gpu_reference).passed
    wrong = right.copy()
    wrong[7, 3, 5] += 0.01
    checked = gpu.check(wrong, gpu_reference)
    assert (checked.status, checked.bad_elements, checked.first_bad["row"]) == ("wrong", 1, 7)
