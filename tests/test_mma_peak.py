"""scripts/mma_peak.py, which gpu_check runs on the GPU: its kernels compile to the instructions it
names, and where no GPU is it says so in one line with the documented exit."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import gpu_reason

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import mma_peak  # noqa: E402  (after the path it lives on)


def ptx_of(source: str) -> str:
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    _, program = nvrtc.nvrtcCreateProgram(source.encode(), b"mma_peak.cu", 0, [], [])
    (result,) = nvrtc.nvrtcCompileProgram(program, 1, [b"-arch=sm_90"])
    _, size = nvrtc.nvrtcGetProgramLogSize(program)
    log = bytearray(size)
    nvrtc.nvrtcGetProgramLog(program, log)
    assert result == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.decode(errors="replace")
    _, size = nvrtc.nvrtcGetPTXSize(program)
    ptx = bytearray(size)
    nvrtc.nvrtcGetPTX(program, ptx)
    return ptx.decode(errors="replace")


@pytest.mark.parametrize("accumulators", [4, 8])
def test_each_kernel_issues_its_own_mma_shape_once_per_accumulator(accumulators):
    ptx = ptx_of(mma_peak.KERNELS.replace("ACCUMULATORS", str(accumulators)))
    bodies = dict(re.findall(r"\.entry (peak_\w+)\((.*?)\n}\n", ptx, re.DOTALL))
    assert set(bodies) == set(mma_peak.SHAPES)
    shapes = {"peak_tf32": "m16n8k8.row.col.f32.tf32.tf32.f32", "peak_f16": "m16n8k16.row.col.f32.f16.f16.f32"}
    for name, shape in shapes.items():
        issued = re.findall(r"mma\.sync\.aligned\.(\S+)", bodies[name])
        # One product per accumulator per iteration; the compiler may unroll the iterations in turn.
        assert set(issued) == {shape} and len(issued) % accumulators == 0, (name, len(issued))


def test_without_a_gpu_it_says_so_and_exits_6():
    if gpu_reason() is None:
        pytest.skip("a GPU is here: the script measures instead")
    completed = subprocess.run(
        [sys.executable, "scripts/mma_peak.py"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 6
    assert completed.stdout == ""
    assert completed.stderr.startswith("mma_peak: no GPU through CuPy (")
    assert completed.stderr.count("\n") == 1
