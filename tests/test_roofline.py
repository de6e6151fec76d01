"""The roofline arithmetic: the lesson's function to the digit, the FP32 peak from the hardware, the verdicts."""

from __future__ import annotations

import pytest

from labrunner.measure.roofline import (
    Point,
    ceilings_from_facts,
    fp32_lanes,
    fp32_peak_flops,
    hbm_bandwidth,
    lesson_roofline,
)
from labrunner.records.roofline import Ceilings

H200_FACTS = {
    "sm_count": 132,
    "compute_capability": [9, 0],
    "max_sm_clock_mhz": 1980,
    "max_memory_clock_mhz": 3201,
    "memory_bus_width_bits": 6144,
    "measured_copy_bytes_per_s": None,
}
LAB2_FLOPS = 51_547_996_160  # C = P = 2048: 4 * 64 * 32 * (2048 * 2048 + 2048 * 2049 / 2)


def test_the_lessons_roofline_prints_its_own_table():
    lines = []
    for name, flops, byts in [
        ("naive attention row", 2 * 4096 * 64, 4096 * 2),
        ("big fused GEMM", 2 * 4096**3, 3 * 4096**2 * 2),
    ]:
        ai, ridge, att, bound = lesson_roofline(flops, byts, 990e12, 3.35e12)
        lines.append(f"{name:22} AI={ai:8.1f} FLOP/B  ridge={ridge:6.1f}  -> {bound}")
        lines.append(f"{'':22} attainable={att / 1e12:7.1f} TFLOP/s")
    assert lines == [
        "naive attention row    AI=    64.0 FLOP/B  ridge= 295.5  -> memory-bound",
        "                       attainable=  214.4 TFLOP/s",
        "big fused GEMM         AI=  1365.3 FLOP/B  ridge= 295.5  -> compute-bound",
        "                       attainable=  990.0 TFLOP/s",
    ]


def test_the_h200_fp32_peak_is_sms_times_clock_times_lanes_times_two():
    assert fp32_lanes((9, 0)) == 128 and fp32_lanes((8, 0)) == 64 and fp32_lanes((6, 1)) is None
    assert fp32_peak_flops(132, 1.98e9, 128) == 132 * 1.98e9 * 128 * 2 == 66.90816e12


def test_hbm_bandwidth_is_both_clock_edges_across_the_bus():
    assert hbm_bandwidth(3201e6, 6144) == 3201e6 * 2 * 768  # 4.917 TB/s for an H200
    assert hbm_bandwidth(2619e6, 5120) == pytest.approx(3.35e12, rel=1e-3)  # an H100 SXM's datasheet figure


def test_the_ceilings_from_an_h200s_facts_and_where_each_came_from():
    ceilings, problem = ceilings_from_facts(H200_FACTS)
    assert problem is None
    assert ceilings.peak_flops == 66.90816e12
    assert ceilings.bandwidth == pytest.approx(4.917e12, rel=1e-4)
    assert f"{ceilings.ridge:.2f}" == "13.61"
    assert ceilings.peak_source == "132 SMs x 1980 MHz x 128 FP32 lanes x 2 FLOP per FMA"
    assert ceilings.bandwidth_source == "NVML: 3201 MHz x 2 (double data rate) x 6144-bit bus"


def test_without_nvmls_memory_facts_a_timed_copy_stands_in():
    facts = {**H200_FACTS, "max_memory_clock_mhz": None, "measured_copy_bytes_per_s": 4.3e12}
    ceilings, problem = ceilings_from_facts(facts)
    assert problem is None and ceilings.bandwidth == 4.3e12
    assert ceilings.bandwidth_source.startswith("a timed device-to-device copy")


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"compute_capability": [6, 1]}, "no FP32 lane count is known for compute capability [6, 1]"),
        ({"max_sm_clock_mhz": None}, "the GPU reported no SM count or clock, so its FP32 peak is unknown"),
        ({"memory_bus_width_bits": None}, "neither NVML nor a device copy gave this GPU's memory bandwidth"),
    ],
)
def test_missing_facts_give_no_ceilings_and_say_why(change, problem):
    assert ceilings_from_facts({**H200_FACTS, **change}) == (None, problem)


def test_the_lab2_solution_is_compute_bound_at_35_percent_of_the_fp32_roof():
    ceilings, _ = ceilings_from_facts(H200_FACTS)
    point = Point(LAB2_FLOPS, 52_428_800, 2.17664e-3, ceilings)
    assert point.bound == "compute-bound"
    assert f"{point.intensity:.1f}" == "983.2"
    assert point.attainable == ceilings.peak_flops
    assert point.verdict == "compute-bound: 23.7 TFLOP/s, 35% of the FP32 roof"


def test_a_kernel_past_the_fp32_roof_is_named_as_running_on_the_tensor_cores():
    """Lab 1's scores at T = 2048: 8.59 GFLOP of float32 products in 0.114 ms is past any FP32 FMA
    pipe, so the verdict must not read as a percentage of that roof left to gain."""
    ceilings, _ = ceilings_from_facts(H200_FACTS)
    flops = 2 * 32 * 2048 * 2048 * 64 / 2 * (2049 / 2048)  # the causal half of Q K^T, diagonal included
    point = Point(flops, 289_406_976, 0.114e-3, ceilings)
    assert point.bound == "compute-bound"
    assert f"{point.fraction_of_roof:.3f}" == "1.127"  # 75.42 of 66.91 TFLOP/s
    assert point.verdict == (
        "compute-bound: 75.4 TFLOP/s, above the FP32 roof (113%): the tensor cores did the "
        "products, and their roof is not drawn here"
    )


def test_a_kernel_left_of_the_ridge_is_memory_bound_and_measured_against_bandwidth():
    ceilings = Ceilings(66.9e12, 4.9e12, "peak", "bandwidth")
    seconds = 1e9 / (0.78 * 4.9e12)  # a gigabyte at 78% of the bandwidth
    point = Point(0.5e9, 1e9, seconds, ceilings)
    assert point.bound == "memory-bound"
    assert point.attainable == pytest.approx(0.5 * 4.9e12)
    assert point.verdict == "memory-bound: 0.5 FLOP/B, 78% of HBM bandwidth"


def test_exactly_at_the_ridge_is_compute_bound_as_in_the_lesson():
    ceilings = Ceilings(10e12, 1e12, "peak", "bandwidth")
    assert Point(10e9, 1e9, 1e-3, ceilings).bound == "compute-bound"
    assert lesson_roofline(10e9, 1e9, 10e12, 1e12)[3] == "compute-bound"


def fake_gpu_modules(monkeypatch, clock_rate=None, bus_width=6144):
    """CuPy and NVML as an H200 answers them (CUDA 13's properties have no clockRate; NVML has the clocks)."""
    import sys
    import types

    properties = {
        "multiProcessorCount": 132,
        "major": 9,
        "minor": 0,
        **({"clockRate": clock_rate} if clock_rate else {}),
    }
    cupy = types.SimpleNamespace(
        cuda=types.SimpleNamespace(
            runtime=types.SimpleNamespace(getDeviceProperties=lambda i: properties),
            Device=lambda i: types.SimpleNamespace(pci_bus_id="0000:19:00.0"),
        )
    )

    def bus(handle):
        if bus_width is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return bus_width

    nvml = types.SimpleNamespace(
        NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByPciBusId=lambda bus_id: ("handle", bus_id),
        nvmlDeviceGetMaxClockInfo=lambda handle, kind: {1: 1980, 2: 3201}[kind],
        nvmlDeviceGetMemoryBusWidth=bus,
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)


def test_the_gpu_facts_come_from_cupy_and_nvml(monkeypatch):
    from labrunner.measure.gpu_facts import read_gpu_facts

    fake_gpu_modules(monkeypatch)
    assert read_gpu_facts() == H200_FACTS


def test_a_fact_nvml_refuses_is_none_and_the_others_stay(monkeypatch):
    import labrunner.measure.gpu_facts as gpu_facts

    fake_gpu_modules(monkeypatch, clock_rate=1_755_000, bus_width=None)
    monkeypatch.setattr(gpu_facts, "measured_copy_bandwidth", lambda: 4.3e12)
    facts = gpu_facts.read_gpu_facts()
    assert (facts["max_sm_clock_mhz"], facts["max_memory_clock_mhz"], facts["memory_bus_width_bits"]) == (
        1980,
        3201,
        None,
    )
    assert facts["measured_copy_bytes_per_s"] == 4.3e12
    assert ceilings_from_facts(facts)[0].bandwidth == 4.3e12
