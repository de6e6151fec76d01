// Lab 3: decode against a paged KV cache.
//
// Serving a batch of conversations, an engine spends most of its time here: every sequence b of
// the batch has one new token, whose query (32 heads) attends to all seqLens[b] keys and values
// already in the cache, its own included. One query row against a long cache does 2 floating-point
// operations per K or V value it reads, 0.5 per byte: no cache, shared memory or tensor core can
// make that compute-bound. Decode is a memory-bandwidth problem, and this lab is graded on the
// bandwidth you reach: the bytes that must move, divided by your time, against a device-to-device
// copy of the same GPU timed in the same run.
//
// Where the bytes go. The cache is paged, as vLLM's PagedAttention keeps it: K and V live in pages
// of 16 token rows, [numPages][16][8][64] float32 each (a page is 16 rows of the attention-v1
// [keys][8][64] layout), and sequence b's logical key j sits in page blockTable[b][j / 16], row
// j % 16. Pages are handed out in any order, so the table is the only map. For one sequence of
// L keys a kernel must read L * 8 * 64 * 4 bytes of K and as many of V (4 KiB per key, both): at
// the timing shape (64 sequences, up to 32,768 keys each) that is about 4.3 GB, far beyond any
// cache. Q, the table and the output are noise beside it. Every K/V byte read twice, or read in
// pieces too small to fill a memory transaction, is bandwidth lost.
//
// This starter is correct and slow, on purpose. One warp owns one (sequence, query head) and walks
// all of that sequence's keys alone, with the online softmax of lab 2. Two things cost it:
//   1. The 4 query heads of a KV group (h / 4) each read the same K and V rows: 4x the bytes.
//      Load each K/V row once for the whole group, into registers, and use it 4 times.
//   2. One warp per (sequence, head) is 64 * 32 = 2,048 warps in all, and a long sequence keeps its
//      warp busy long after the short ones are done: the GPU idles behind the longest sequence.
//      Split each sequence into partitions of attnlab_partition_tokens keys (Flash-Decoding), one
//      block each, and combine the partitions' results afterwards.
//
// Two kernels, because the partitions of a sequence cannot wait for each other inside one launch:
//   decode_partial  computes, for each (sequence, query head, partition), a partial result
//                   (whatever you need: here the max m, the sum l of exp(s - m) and the unnormalised
//                   64-wide accumulator) into partOut, partMax and partSum.
//   decode_combine  merges each (sequence, query head)'s partitions into out. Partitions have
//                   different maxima, so a combine must rescale each by exp(m_part - m_global)
//                   before adding: this starter has a single partition, so it only divides.
// The driver allocates the partial buffers, fills them with NaN poison and guards their edges:
// what they hold is your business, only out is graded.
//
// The prelude the driver prepends gives HQ = 32 query heads, HKV = 8 KV heads, DH = 64 dims,
// GROUP = 4 (query head h reads KV head h / GROUP) and INFINITY.
//
// Launch geometry, read from these exported constants (change it here, never in Python). With
// maxParts = 1 when attnlab_partition_tokens is 0, else ceil(max(seqLens) / attnlab_partition_tokens):
//   decode_partial: grid = (maxParts, 32 / attnlab_heads_per_block, B), block = (attnlab_partial_threads),
//                   attnlab_partial_smem_bytes of dynamic shared memory (above 48 KB the limit is raised)
//                   block (p, y, b) serves query heads y * heads_per_block .. + heads_per_block - 1
//                   of sequence b, keys p * partition_tokens .. (p + 1) * partition_tokens - 1
//   decode_combine: grid = (32, B), block = (attnlab_combine_threads)
// attnlab_partition_tokens: 0 for one partition per sequence, else a multiple of 16 (whole pages).
// attnlab_heads_per_block: 1, 2 or 4 query heads of one KV group.
// Every constant has an upper bound; past it the file is a compile error that names it:
//   attnlab_partition_tokens    at most 32,768 keys, the longest sequence graded or timed: a larger
//                               partition is a whole sequence (0 says that), and the cases grow with it;
//   attnlab_heads_per_block     at most 4, one KV group;
//   attnlab_*_threads           at most 1,024, the threads a CUDA block holds;
//   attnlab_partial_smem_bytes  at most 232,448 (227 KiB), the most one block may have on Hopper.
extern "C" __constant__ int attnlab_partition_tokens = 0;     // at most 32768
extern "C" __constant__ int attnlab_heads_per_block = 1;      // at most 4
extern "C" __constant__ int attnlab_partial_threads = 32;     // at most 1024
extern "C" __constant__ int attnlab_partial_smem_bytes = 0;   // at most 232448
extern "C" __constant__ int attnlab_combine_threads = 64;     // at most 1024

static constexpr int PAGE = 16;  // token rows per page

// q:          [B][32][64] float32, the new token's query of every sequence
// kCache:     [numPages][16][8][64] float32, key pages; rows past a sequence's length hold garbage (NaN)
// vCache:     [numPages][16][8][64] float32, value pages, laid out like kCache
// blockTable: [B][maxPages] int32, sequence b's pages in logical order; unused entries are -1
// seqLens:    [B] int32, keys of sequence b (at least 1): its new token sees keys 0 .. seqLens[b] - 1
// partOut:    [B][32][maxParts][64] float32, partMax and partSum: [B][32][maxParts] float32, yours
// The scale is exactly 1/8.
extern "C" __global__ void decode_partial(const float* q, const float* kCache, const float* vCache,
                                          const int* blockTable, const int* seqLens, float* partOut,
                                          float* partMax, float* partSum, int maxPages, int maxParts) {
    // One warp per (sequence b, query head h): lane holds dims lane and lane + 32 of q and of the
    // accumulator, and the warp walks every key of the sequence one at a time.
    const int b = blockIdx.z;
    const int h = blockIdx.y;
    const int g = h / GROUP;
    const int lane = threadIdx.x;
    const int len = seqLens[b];
    const float* qRow = q + ((size_t)b * HQ + h) * DH;
    const float q0 = qRow[lane];
    const float q1 = qRow[lane + 32];
    float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    for (int j = 0; j < len; ++j) {
        const int page = blockTable[(size_t)b * maxPages + j / PAGE];
        const size_t row = (((size_t)page * PAGE + j % PAGE) * HKV + g) * DH;
        float dot = q0 * kCache[row + lane] + q1 * kCache[row + lane + 32];
        for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        const float s = dot * 0.125f;
        const float mNew = fmaxf(m, s);
        const float alpha = expf(m - mNew);  // exp(-inf) = 0 on the first key
        const float p = expf(s - mNew);
        l = alpha * l + p;
        acc0 = alpha * acc0 + p * vCache[row + lane];
        acc1 = alpha * acc1 + p * vCache[row + lane + 32];
        m = mNew;
    }
    // One partition: slot 0 of this (sequence, head).
    const size_t slot = ((size_t)b * HQ + h) * maxParts;
    partOut[slot * DH + lane] = acc0;
    partOut[slot * DH + lane + 32] = acc1;
    if (lane == 0) {
        partMax[slot] = m;
        partSum[slot] = l;
    }
}

// partOut, partMax, partSum: what decode_partial wrote; out: [B][32][64] float32, poisoned by the
// driver: write every element.
extern "C" __global__ void decode_combine(const float* partOut, const float* partMax, const float* partSum,
                                          const int* seqLens, float* out, int maxParts) {
    // One block per (query head, sequence), one thread per dim: a single partition needs no
    // rescaling, only the division by its sum.
    const int h = blockIdx.x;
    const int b = blockIdx.y;
    const int d = threadIdx.x;
    const size_t slot = ((size_t)b * HQ + h) * maxParts;
    out[((size_t)b * HQ + h) * DH + d] = partOut[slot * DH + d] / partSum[slot];
}
