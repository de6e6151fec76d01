"""The ceiling the shipped tensor-core kernels run under: back-to-back `mma.sync` on this GPU.

The error-compensated kernels issue `mma.sync`: kernels/lab2/expert.cu m16n8k8 in TF32 (3xTF32),
kernels/lab1/solution.cu m16n8k16 in FP16 (3xFP16), and their headers quote their rate against
this one: a kernel that does nothing but independent products, every operand already in
registers, as many warps as fit. FP16's m16n8k16 runs at the same instruction rate as TF32's
m16n8k8 with twice the depth, so twice the products. Hopper's
`wgmma` is a different instruction with a higher ceiling; this measures only what `mma.sync` gives.

    python scripts/mma_peak.py        # needs a GPU and CuPy; a few seconds

Exit 0 with the table; 6 (the documented "no GPU" exit) where CuPy or a GPU is missing.
"""

from __future__ import annotations

import sys

KERNELS = r"""
#define PEAK_KERNEL(NAME, SHAPE, A_FIRST, B_FIRST)                                                        \
extern "C" __global__ void NAME(float* out, int iters) {                                                 \
    unsigned a[4], b[2];                                                                                 \
    for (int i = 0; i < 4; ++i) a[i] = (A_FIRST) + threadIdx.x + i;                                      \
    for (int i = 0; i < 2; ++i) b[i] = (B_FIRST) - threadIdx.x + i;                                      \
    float d[ACCUMULATORS][4] = {};                                                                       \
    for (int it = 0; it < iters; ++it) {                                                                 \
        _Pragma("unroll")                                                                                \
        for (int j = 0; j < ACCUMULATORS; ++j)                                                           \
            asm volatile("mma.sync.aligned." SHAPE " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n" \
                         : "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])                     \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));             \
    }                                                                                                    \
    float s = 0.0f;                                                                                      \
    for (int j = 0; j < ACCUMULATORS; ++j) s += d[j][0] + d[j][1] + d[j][2] + d[j][3];                   \
    if (s == 1234.5f) out[threadIdx.x] = s; /* never true: keeps the products from being dropped */      \
}
PEAK_KERNEL(peak_tf32, "m16n8k8.row.col.f32.tf32.tf32.f32", 0x3f800000u, 0x3f800000u)
PEAK_KERNEL(peak_f16, "m16n8k16.row.col.f32.f16.f16.f32", 0x3c003c00u, 0x3c003c00u)
"""

SHAPES = {"peak_tf32": ("TF32 m16n8k8", 2 * 16 * 8 * 8), "peak_f16": ("FP16 m16n8k16", 2 * 16 * 8 * 16)}
ITERATIONS = 4096
REPEATS = 5


def main() -> int:
    try:
        import cupy as cp

        device = cp.cuda.Device()
        sms = device.attributes["MultiProcessorCount"]
        clock_hz = device.attributes["ClockRate"] * 1e3
    except Exception as exc:  # ImportError, or CuPy's own error where no driver or GPU answers
        print(f"mma_peak: no GPU through CuPy ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 6
    out = cp.zeros(1024, cp.float32)
    print(
        f"{'instruction':14} {'accumulators':>12} {'warps/SM':>8} {'TFLOP/s':>8} {'cycles per mma per scheduler':>29}"
    )
    for accumulators in (4, 8):
        module = cp.RawModule(code=KERNELS.replace("ACCUMULATORS", str(accumulators)), options=("-arch=sm_90",))
        for name, (label, flop) in SHAPES.items():
            kernel = module.get_function(name)
            for warps_per_block, blocks_per_sm in ((4, 2), (4, 4), (8, 4)):
                grid, block = (sms * blocks_per_sm,), (32 * warps_per_block,)
                kernel(grid, block, (out, cp.int32(ITERATIONS)))  # warm-up: module load, clocks
                start, stop = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                for _ in range(REPEATS):
                    kernel(grid, block, (out, cp.int32(ITERATIONS)))
                stop.record()
                stop.synchronize()
                seconds = cp.cuda.get_elapsed_time(start, stop) * 1e-3 / REPEATS
                products = grid[0] * warps_per_block * ITERATIONS * accumulators
                cycles = seconds * clock_hz / (products / (sms * 4))  # 4 schedulers (and tensor cores) per SM
                print(
                    f"{label:14} {accumulators:12} {warps_per_block * blocks_per_sm:8} "
                    f"{products * flop / seconds / 1e12:8.1f} {cycles:29.2f}"
                )
    print(f"{sms} SMs at {clock_hz / 1e6:.0f} MHz (the driver's maximum clock; the cycles assume it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
