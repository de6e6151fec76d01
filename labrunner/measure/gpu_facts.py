"""What the roofline needs to know about a GPU, read on the GPU side (the worker, or the program ncu watches).

SM count and compute capability from CuPy; the maximum SM and memory clocks and the memory bus
width from NVML. Each fact is None where it cannot be read, and nothing here ever raises: a
missing fact costs the roofline its verdict (it says why), never the profile. See `roofline` for
how the facts become the two ceilings.
"""

from __future__ import annotations

from labrunner.measure.device_state import nvml_handle, nvml_read
from labrunner.records.roofline import GpuFacts


def read_gpu_facts(device_index: int = 0, measure_copy: bool = True) -> GpuFacts:
    """What the ceilings need, from CuPy and NVML, each fact None where it cannot be read; never raises.

    Runs on the GPU side (the worker, or the process Nsight Compute watches), never in the driver.
    """
    facts: GpuFacts = {
        "sm_count": None,
        "compute_capability": None,
        "max_sm_clock_mhz": None,
        "max_memory_clock_mhz": None,
        "memory_bus_width_bits": None,
        "measured_copy_bytes_per_s": None,
    }
    try:
        import cupy

        properties = cupy.cuda.runtime.getDeviceProperties(device_index)
        facts["sm_count"] = int(properties["multiProcessorCount"])
        facts["compute_capability"] = [int(properties["major"]), int(properties["minor"])]
        if properties.get("clockRate"):  # kHz; CUDA 13 dropped it from the properties, NVML below has it
            facts["max_sm_clock_mhz"] = int(properties["clockRate"]) // 1000
    except Exception:
        return facts
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        pynvml = None
    if pynvml is not None:
        try:
            # the NVML handle of the GPU CUDA calls `device_index` (found by PCI address, as device_state does)
            handle = nvml_handle(pynvml, nvml_read(lambda: cupy.cuda.Device(device_index).pci_bus_id), device_index)
            if handle is not None:
                facts["max_sm_clock_mhz"] = (
                    nvml_read(lambda: int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)))
                    or facts["max_sm_clock_mhz"]
                )
                facts["max_memory_clock_mhz"] = nvml_read(
                    lambda: int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM))
                )
                facts["memory_bus_width_bits"] = nvml_read(lambda: int(pynvml.nvmlDeviceGetMemoryBusWidth(handle)))
        finally:
            nvml_read(pynvml.nvmlShutdown)
    if measure_copy and not (facts["max_memory_clock_mhz"] and facts["memory_bus_width_bits"]):
        facts["measured_copy_bytes_per_s"] = measured_copy_bandwidth()
    return facts


def measured_copy_bandwidth(nbytes: int = 1 << 30, repeats: int = 5) -> float | None:
    """Bytes read plus written per second by the fastest of a few 1 GiB device-to-device copies."""
    try:
        import cupy

        source = cupy.empty(nbytes, dtype=cupy.uint8)
        target = cupy.empty_like(source)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        best: float | None = None
        for _ in range(repeats):
            start.record()
            target.data.copy_from_device_async(source.data, nbytes)
            end.record()
            end.synchronize()
            ms = cupy.cuda.get_elapsed_time(start, end)
            best = ms if best is None else min(best, ms)
        return None if best is None else 2 * nbytes / (best * 1e-3)
    except Exception:
        return None
