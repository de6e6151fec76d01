// Lab 2: flash prefill against a cached prefix.
//
// A serving engine cuts a long prompt into chunks and runs each chunk against everything
// already in the KV cache. This kernel is that step: a chunk of C = chunkLen new tokens at
// positions P .. P + C - 1 (P = prefixLen) attends causally to the cached keys and values at
// positions 0 .. P + C - 1, so chunk row i sees keys j <= P + i. No score matrix exists.
//
// This starter is correct and already online: one warp per (query row, head) carries a running
// max m, a running denominator l and a 64-value accumulator, rescaled by exp(m_old - m_new)
// whenever the max moves. Its cost is architectural: every query row walks its whole K/V
// prefix through the memory system on its own. Your job is the tiled version: keep a tile of
// query rows resident in one block, stage each K/V tile in shared memory once, and let every
// resident row consume it before it is replaced.
//
// The prelude the driver prepends gives HQ = 32 query heads, HKV = 8 KV heads, DH = 64 dims,
// GROUP = 4 (query head h reads KV head h / GROUP) and INFINITY.
//
// Launch geometry: the driver reads these exported constants from your compiled module, so you
// change the launch here, never in Python.
//   grid  = (ceil(chunkLen / attnlab_rows_per_block), 32 / attnlab_heads_per_block, 1)
//           attnlab_rows_per_block = 0 means one block over all rows: grid.x = 1, for a kernel
//           whose block walks every row of its head itself (no magic number standing for "all")
//   block = (attnlab_threads, 1, 1), with attnlab_smem_bytes of dynamic shared memory
//           (above 48 KB the driver raises the kernel's limit for you; Hopper allows 227 KB).
// Every constant has an upper bound; past it the file is a compile error that names it:
//   attnlab_threads          at most 1,024, the threads a CUDA block holds;
//   attnlab_rows_per_block   at most 1,024: the longest chunk graded or timed is 2,048 rows, so a
//                            larger tile leaves it one block (0 says that), and a block owning more
//                            rows than threads walks them in a loop;
//   attnlab_heads_per_block  at most 32 (all of them), and it must divide 32;
//   attnlab_smem_bytes       at most 232,448 (227 KiB), the most one block may have on Hopper.
extern "C" __constant__ int attnlab_threads = 256;          // at most 1024
extern "C" __constant__ int attnlab_rows_per_block = 64;    // at most 1024; 0: one block over all rows
extern "C" __constant__ int attnlab_heads_per_block = 1;    // at most 32, a divisor of 32
extern "C" __constant__ int attnlab_smem_bytes = 0;         // at most 232448

// q:      [chunkLen][32][64] float32, the chunk's queries (row i is position prefixLen + i)
// kCache: [prefixLen + chunkLen][8][64] float32, every visible key
// vCache: [prefixLen + chunkLen][8][64] float32, every visible value
// out:    [chunkLen][32][64] float32, poisoned by the driver: write every element
// The scale is exactly 1/8.
extern "C" __global__ void flash_prefill(const float* q, const float* kCache, const float* vCache,
                                         float* out, int chunkLen, int prefixLen) {
    // One block per 64 query rows of one head. Each warp walks its 8 rows one at a time,
    // and every row re-reads its whole K/V prefix from global memory: correct, online, slow.
    const int h = blockIdx.y;
    const int g = h / GROUP;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    for (int r = 0; r < 8; ++r) {
        const int row = blockIdx.x * 64 + warp * 8 + r;
        if (row >= chunkLen) return;
        const int pos = prefixLen + row;
        const float* qRow = q + (size_t)row * HQ * DH + h * DH;
        const float q0 = qRow[lane];
        const float q1 = qRow[lane + 32];
        float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
        for (int j = 0; j <= pos; ++j) {
            const float* kRow = kCache + (size_t)j * HKV * DH + g * DH;
            const float* vRow = vCache + (size_t)j * HKV * DH + g * DH;
            float dot = q0 * kRow[lane] + q1 * kRow[lane + 32];
            for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
            const float s = dot * 0.125f;
            const float mNew = fmaxf(m, s);
            const float alpha = expf(m - mNew);
            const float p = expf(s - mNew);
            l = alpha * l + p;
            acc0 = alpha * acc0 + p * vRow[lane];
            acc1 = alpha * acc1 + p * vRow[lane + 32];
            m = mNew;
        }
        float* outRow = out + (size_t)row * HQ * DH + h * DH;
        outRow[lane] = acc0 / l;
        outRow[lane + 32] = acc1 / l;
    }
}
