"""Lab 2 reference solution in Triton: flash prefill against a cached prefix, K/V shared by the KV group.

Read this after finishing your own. Each program owns BLOCK_M query rows of the four query heads of
one KV group (attnlab_heads_per_block = 4), stacked as one tile of 4 * BLOCK_M rows: every K/V tile
it loads serves all four heads, so the KV group's re-read is gone, and the tile is tall enough for
the tensor cores. Scores and the weighted sum are `tl.dot`s carrying the online softmax across key
tiles, as FlashAttention-2 does.

Precision: Triton's fp32 `tl.dot` defaults to TF32, which keeps 10 of a float's 23 mantissa bits;
over a 4,096-key softmax that error is several times what lab 2 allows. "tf32x3" splits each operand
into a TF32 part and a TF32 remainder and adds three products, which is as accurate as fp32 for
these sizes and still runs on the tensor cores.

Measured on an H200 at C = P = 2048 (tiles swept over BLOCK_M 16/32/64, BLOCK_N 32/64, 4 or 8 warps,
2 or 3 stages, timed with CUDA events beside PyTorch's SDPA in one run): 1.33 ms against SDPA's
2.49 ms, max error 4.9e-7 against float64 (SDPA's: 5.5e-7). Through the grader,
`attnlab bench lab2 kernels/lab2/solution.py --vs sdpa`: 1.264 ms against SDPA's 1.803 ms, SPEEDUP 1.43x.

The launch, as attnlab reads it from this file (README, "Triton submissions"):
  grid  = (ceil(chunkLen / attnlab_rows_per_block), 32 / attnlab_heads_per_block, 1)
  block = 32 x attnlab_num_warps threads, with the shared memory Triton's compiler allots
  constexprs: attnlab_constexprs[kernel], passed to the kernel's tl.constexpr parameters.
"""

import triton
import triton.language as tl

BLOCK_M = 32  # query rows of the chunk per program
BLOCK_N = 64  # keys per tile
attnlab_rows_per_block = BLOCK_M
attnlab_heads_per_block = 4  # one KV group: query heads 4g .. 4g + 3
attnlab_num_warps = 8
attnlab_num_stages = 3
attnlab_constexprs = {"flash_prefill": {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "HEADS": attnlab_heads_per_block}}


@triton.jit
def flash_prefill(
    q, kCache, vCache, out, chunkLen, prefixLen, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEADS: tl.constexpr
):
    # q, out: [chunkLen][32][64]; kCache, vCache: [prefixLen + chunkLen][8][64]; row i sees keys j <= prefixLen + i
    R: tl.constexpr = BLOCK_M * HEADS
    first = tl.program_id(0) * BLOCK_M
    g = tl.program_id(1)  # the KV group
    r = tl.arange(0, R)
    row = first + r // HEADS  # tile row r is chunk row `row` of query head g * HEADS + r % HEADS
    head = g * HEADS + r % HEADS
    d = tl.arange(0, 64)
    at = (row[:, None] * 32 + head[:, None]) * 64 + d[None, :]
    inside = row < chunkLen
    qt = tl.load(q + at, mask=inside[:, None], other=0.0) * 0.125  # the contract's 1/8: exact
    m = tl.full([R], float("-inf"), tl.float32)
    l = tl.zeros([R], tl.float32)
    acc = tl.zeros([R, 64], tl.float32)
    sees = prefixLen + row  # the last key each row sees
    end = tl.minimum(prefixLen + first + BLOCK_M, prefixLen + chunkLen)  # keys this program needs
    for start in range(0, end, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        real = n < end
        kt = tl.load(kCache + (n[None, :] * 8 + g) * 64 + d[:, None], mask=real[None, :], other=0.0)
        s = tl.dot(qt, kt, input_precision="tf32x3")
        s = tl.where(n[None, :] <= sees[:, None], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        vt = tl.load(vCache + (n[:, None] * 8 + g) * 64 + d[None, :], mask=real[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p, vt, input_precision="tf32x3")
        m = m_new
    tl.store(out + at, acc / l[:, None], mask=inside[:, None])
