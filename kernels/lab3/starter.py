"""Lab 3 in Triton: decode against a paged KV cache.

Serving a batch of conversations, an engine spends most of its time here: every sequence b of the
batch has one new token, whose query (32 heads) attends to all seqLens[b] keys and values already in
the cache, its own included. One query row against a long cache does 2 floating-point operations per
K or V value it reads: decode is a memory-bandwidth problem, and this lab is graded on the bandwidth
you reach (the bytes that must move, divided by your time) against a device copy timed in the same run.

The cache is paged, as vLLM's PagedAttention keeps it: K and V live in pages of 16 token rows,
[numPages][16][8][64] float32 each, and sequence b's logical key j sits in page blockTable[b][j // 16],
row j % 16. Pages are handed out in any order, so the table is the only map.

This starter is correct and slow, on purpose: one program per (sequence, query head) walks all of the
sequence's keys alone, with lab 2's online softmax. Two things cost it:
  1. The 4 query heads of a KV group (h // 4) each read the same K and V rows: 4x the bytes. Load each
     K/V tile once for the whole group (attnlab_heads_per_block = 4).
  2. One program per (sequence, head) leaves the GPU idle behind the longest sequence. Split each
     sequence into partitions of attnlab_partition_tokens keys (Flash-Decoding), one program each,
     and let decode_combine merge the partitions, rescaling each by exp(m_part - m_global).

Two kernels, because the partitions of a sequence cannot wait for each other inside one launch:
  decode_partial  for each (sequence, query head, partition), a partial result (whatever you need:
                  here the max m, the sum l of exp(s - m) and the unnormalised 64-wide accumulator)
                  into partOut [B][32][maxParts][64], partMax and partSum [B][32][maxParts];
  decode_combine  merges each (sequence, query head)'s partitions into out [B][32][64].
The driver poisons and guards the partial buffers: what they hold is your business, only out is graded.
q is [B][32][64], blockTable [B][maxPages] and seqLens [B] are int32; the scale is exactly 1/8.

What attnlab reads of this file (README, "Triton submissions"):
  - the kernels: @triton.jit functions named decode_partial and decode_combine, each taking the lab's
    parameters in the lab's order, then only tl.constexpr ones;
  - the grids, from the lab's constants, as for a .cu file (maxParts = 1 when
    attnlab_partition_tokens is 0, else ceil(max(seqLens) / attnlab_partition_tokens)):
      decode_partial: grid = (maxParts, 32 / attnlab_heads_per_block, B); program (p, y, b) serves query
                      heads y * heads_per_block .. + heads_per_block - 1 of sequence b, keys
                      p * partition_tokens .. (p + 1) * partition_tokens - 1
      decode_combine: grid = (32, B)
    attnlab_partition_tokens: 0, or a multiple of 16 (whole pages) up to 32,768;
    attnlab_heads_per_block: 1, 2 or 4;
  - attnlab_num_warps and attnlab_num_stages (one value, or {kernel: value}): a program runs
    32 x attnlab_num_warps threads with the shared memory Triton's compiler allots;
  - attnlab_constexprs = {kernel: {name: value}}: the values of its tl.constexpr parameters.
The file is imported only inside attnlab's compile box: nothing else of it runs on a GPU machine.
"""

import triton
import triton.language as tl

BLOCK_N = 32  # keys per tile: two pages
attnlab_partition_tokens = 0  # one partition per sequence
attnlab_heads_per_block = 1
attnlab_num_warps = 1
attnlab_num_stages = 2
attnlab_constexprs = {"decode_partial": {"BLOCK_N": BLOCK_N}}


@triton.jit
def decode_partial(
    q, kCache, vCache, blockTable, seqLens, partOut, partMax, partSum, maxPages, maxParts, BLOCK_N: tl.constexpr
):
    h = tl.program_id(1)  # the query head; it reads KV head h // 4
    b = tl.program_id(2)
    length = tl.load(seqLens + b)
    d = tl.arange(0, 64)
    qh = tl.load(q + (b * 32 + h) * 64 + d) * 0.125
    m = float("-inf")
    l = 0.0
    acc = tl.zeros([64], tl.float32)
    for first in range(0, length, BLOCK_N):
        key = first + tl.arange(0, BLOCK_N)
        real = key < length  # a masked key is never loaded: its slot may hold NaN
        page = tl.load(blockTable + b * maxPages + key // 16, mask=real, other=0)
        at = ((page.to(tl.int64) * 16 + key % 16) * 8 + h // 4) * 64
        kt = tl.load(kCache + at[:, None] + d[None, :], mask=real[:, None], other=0.0)
        s = tl.where(real, tl.sum(kt * qh[None, :], 1), float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        l = l * alpha + tl.sum(p, 0)
        vt = tl.load(vCache + at[:, None] + d[None, :], mask=real[:, None], other=0.0)
        acc = acc * alpha + tl.sum(p[:, None] * vt, 0)
        m = m_new
    slot = (b * 32 + h) * maxParts  # the only partition
    tl.store(partOut + slot * 64 + d, acc)
    tl.store(partMax + slot, m)
    tl.store(partSum + slot, l)


@triton.jit
def decode_combine(partOut, partMax, partSum, seqLens, out, maxParts):
    h = tl.program_id(0)
    b = tl.program_id(1)
    slot = (b * 32 + h) * maxParts  # one partition: only the division is left
    d = tl.arange(0, 64)
    tl.store(out + (b * 32 + h) * 64 + d, tl.load(partOut + slot * 64 + d) / tl.load(partSum + slot))
