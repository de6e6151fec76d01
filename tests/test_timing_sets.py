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
from statistics import NormalDist

import numpy as np
import pytest

from labrunner.truth.timing_sets import (
    CUDA_KERNEL,
    CUDA_SOURCE,
    _log,
    make_set,
    normals,
    philox4x32,
    raw_bits,
    set_shapes,
)

KEY = (0x9ABC_DEF0, 0x8765_4321)


def test_a_set_has_the_cases_shapes_and_dtype():
    s = make_set(KEY, 0, 5, 7)
    assert {n: (a.shape, a.dtype) for n, a in s.items()} == {
        "q": ((5, 32, 64), np.float32),
        "k": ((12, 8, 64), np.float32),
        "v": ((12, 8, 64), np.float32),
    }
    assert set_shapes(5, 7) == {n: a.shape for n, a in s.items()}


# Random123's known answers for Philox4x32-10 (its kat_vectors): counter, key, result
PHILOX_KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize(("counter", "key", "expected"), PHILOX_KNOWN_ANSWERS)
def test_the_bits_are_philox4x32_10_as_random123_defines_it(counter, key, expected):
    assert tuple(int(word) for word in philox4x32(*counter, key)) == expected


def test_element_i_is_word_i_mod_4_of_block_i_div_4_and_any_element_can_be_made_alone():
    number = (7 << 32) + 3  # both words of the set number are in the counter
    whole = raw_bits(KEY, number, 0, 40)
    block = philox4x32(9, 0, 3, 7, KEY)  # elements 36 .. 39
    assert whole[36:40].tolist() == [int(word) for word in block]
    assert whole.dtype == np.uint32
    assert raw_bits(KEY, number, 13, 20).tolist() == whole[13:33].tolist()
    far = (1 << 32) + 5  # a block number past 32 bits uses the counter's second word
    assert raw_bits(KEY, 0, 4 * far, 4).tolist() == [int(word) for word in philox4x32(5, 1, 0, 0, KEY)]


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


def test_the_inverse_cdf_inverts_the_normal_cdf_to_float32s_precision():
    m = np.arange(0, 1 << 23, dtype=np.uint32)  # every uniform the generator can make, in order
    got = normals(m << np.uint32(9)).astype(np.float64)
    assert np.all(np.diff(got) > 0)  # strictly increasing: no two uniforms give one value
    assert np.array_equal(got, -got[::-1])  # and symmetric, bit for bit
    exact_u = (m.astype(np.float64) + 0.5) * 2.0**-23
    sample = np.concatenate([np.arange(0, 1 << 23, 4099), np.arange(3000), np.arange((1 << 23) - 3000, 1 << 23)])
    inverse = NormalDist()
    x_of_u = np.array([inverse.inv_cdf(float(p)) for p in exact_u[sample]])
    ulps = np.abs(got[sample] - x_of_u) / np.spacing(np.abs(x_of_u).astype(np.float32))
    assert ulps.max() < 6  # PPND7's 1e-7 and float32's rounding: a few units in the last place
    assert 5.2 < np.abs(got).max() < 5.4  # the smallest uniform, 2^-24, is 5.3 standard deviations out


def test_the_log_built_from_exact_operations_is_the_log_to_float32s_precision():
    x = np.geomspace(2.0**-24, 1.0, 20001).astype(np.float32)
    exact = np.log(x.astype(np.float64))
    ulps = np.abs(_log(x).astype(np.float64) - exact) / np.spacing(np.abs(exact).astype(np.float32))
    assert ulps.max() < 3


def test_a_key_must_be_two_32_bit_integers():
    with pytest.raises(ValueError, match=r"a timing-set key is two integers in \[0, 2\^32\), got \(1,\)"):
        make_set((1,), 0, 1, 0)
    with pytest.raises(ValueError, match=r"got \(1, 4294967296\)"):
        make_set((1, 1 << 32), 0, 1, 0)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the CUDA twin as C++")
def test_the_cuda_twin_compiled_as_cpp_writes_the_definitions_bits(tmp_path):
    source = tmp_path / "twin.cpp"
    source.write_text(CUDA_SOURCE)
    library = tmp_path / "twin.so"
    subprocess.run(["g++", "-O2", "-ffp-contract=off", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    fill = getattr(ctypes.CDLL(str(library)), CUDA_KERNEL)
    rows, prefix, number = 9, 23, (1 << 40) + 5  # a set number past 32 bits uses the counter's fourth word
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
    from labrunner.pipeline.timing_stage import CpuReferences
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
