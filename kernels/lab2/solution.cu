// Lab 2 reference solution: tiled flash prefill against a cached prefix.
//
// Read this after finishing your own. One block owns BR = 64 query rows of one head and keeps
// them resident; each K/V tile of BC = 64 keys is staged in shared memory once and consumed by
// all 64 rows before it is replaced, so every K/V byte fetched feeds 64 rows instead of one.
// Each row carries the online softmax state across tiles: the running max m, the running
// denominator l and a 64-wide accumulator, rescaled by alpha = exp(m_old - m_new) whenever a
// tile raises the max, and divided by l once at the very end.
//
// The work is plain FP32 multiply-adds (kernels/lab2/expert.cu does the same on the tensor
// cores). Prefill is compute-bound, so the levers are the ones that keep the FMA pipe fed:
//  - Register tiling. 128 threads as a 16 x 8 grid (ty, tx); each thread owns 4 rows x 8 keys
//    of the score tile and 4 rows x 8 dims of the accumulator: 32 multiply-adds for every three
//    16-byte shared loads (4 query values, and 4 values of each of two keys or value rows).
//  - A conflict-free shared layout. Q, K, V and P are stored row-major with a pitch of 68
//    floats: 16-byte aligned, and 68 = 4 (mod 32) shifts each row by four banks. A thread's
//    keys are tx, tx + 8, ..., tx + 56, so the 8 lanes that read K together read 8 rows that
//    start 4 banks apart: 8 x 16 bytes, every bank once. Its accumulator dims are tx*4 .. +3
//    and 32 + tx*4 .. +3: 8 lanes read 128 contiguous bytes of a V row. The 4 query rows of a
//    quarter-warp are the same for its 8 lanes, so Q and P reads are broadcasts.
//  - Only the work the mask leaves. The tile loop stops at the last key the block's last row
//    sees, and only the tiles that cross the diagonal pay for the per-element mask.
//  - Balanced causal work. Late rows see more keys; the GPU starts blocks in blockIdx order, so
//    the first blocks take the last 64 rows of every head, then the 64 before them, and so on: the
//    long blocks all start first and the short ones fill the tail of the grid. (Longest first
//    within each head, one head after another, leaves the long blocks of the last heads starting
//    late and running on alone at the end: 1.14x SDPA in the same run that gave this order 1.27x.)
//  - Occupancy: 128 threads, at most 128 registers each, and 52,224 bytes of shared memory per
//    block, four blocks per SM. P needs no buffer of its own: once every warp has its scores, the
//    K tile is dead, so P is written over it (one more barrier per tile buys a fourth block).
//  - One instruction per exponential. exp(x) = 2^(x * log2 e), and the GPU's exp2 is a single
//    instruction where expf is several. Folding log2(e) into the 1/8 that scales Q makes every
//    score log2(e) times larger, so exp2f of a difference of scores is the expf it replaces: the
//    probabilities, rescale factors and sums are the same numbers, to float32 rounding.
//
// What bounds it (H200, `attnlab bench lab2 --vs sdpa` and `attnlab profile lab2`): 1.436 ms at
// C = P = 2048, 35.9 TFLOP/s, 54% of the FP32 FMA peak (66.9 TFLOP/s), 1.25x PyTorch's SDPA in
// float32 in the same run (1.27x in another). Nsight Compute: FMA pipe 60% busy, 24% achieved
// occupancy (four blocks of four warps per SM), 9.1 million shared-memory bank conflicts (by the
// layout's arithmetic, P's stores: quarter-warps 0 and 2 write rows 544 floats apart, the same
// banks). Four warps per
// scheduler are still too few to hide every shared-memory load and barrier behind the
// multiply-adds. The next steps: double-buffer the K/V tiles (cp.async), so the loads of tile t + 1
// overlap the math of tile t, and share each K/V tile across the four heads of a KV group. Past
// the FMA pipe lie the tensor cores: expert.cu.
constexpr int BR = 64;         // query rows per block
constexpr int BC = 64;         // keys per K/V tile
constexpr int PAD = 68;        // row pitch in floats: 16-byte aligned, four banks off the 32-bank stride
constexpr int THREADS = 128;   // 16 x 8 threads
constexpr float SCALE_LOG2E = 0.125f * 1.4426950408889634f;  // the contract's 1/8, times log2(e)
constexpr int SMEM_FLOATS = BR * PAD /*q*/ + BC * PAD /*k, then p*/ + BC * PAD /*v*/;

extern "C" __constant__ int attnlab_threads = THREADS;
extern "C" __constant__ int attnlab_rows_per_block = BR;
extern "C" __constant__ int attnlab_heads_per_block = 1;
extern "C" __constant__ int attnlab_smem_bytes = SMEM_FLOATS * 4;  // 52,224 bytes: past 48 KB, so the driver raises the limit

// s += x . y over four dims, as four fused multiply-adds.
__device__ __forceinline__ float dot4(float s, const float4& x, const float4& y) {
    s = fmaf(x.x, y.x, s);
    s = fmaf(x.y, y.y, s);
    s = fmaf(x.z, y.z, s);
    return fmaf(x.w, y.w, s);
}

// acc[0..3] += p * lo, acc[4..7] += p * hi.
__device__ __forceinline__ void axpy8(float (&acc)[8], float p, const float4& lo, const float4& hi) {
    acc[0] = fmaf(p, lo.x, acc[0]);
    acc[1] = fmaf(p, lo.y, acc[1]);
    acc[2] = fmaf(p, lo.z, acc[2]);
    acc[3] = fmaf(p, lo.w, acc[3]);
    acc[4] = fmaf(p, hi.x, acc[4]);
    acc[5] = fmaf(p, hi.y, acc[5]);
    acc[6] = fmaf(p, hi.z, acc[6]);
    acc[7] = fmaf(p, hi.w, acc[7]);
}

extern "C" __global__ void __launch_bounds__(THREADS, 4)
flash_prefill(const float* __restrict__ q, const float* __restrict__ kCache, const float* __restrict__ vCache,
              float* __restrict__ out, int chunkLen, int prefixLen) {
    extern __shared__ __align__(16) float smem[];
    float* qS = smem;              // [BR][PAD]: q * log2(e) / 8
    float* kS = qS + BR * PAD;     // [BC][PAD]: this tile's keys
    float* vS = kS + BC * PAD;     // [BC][PAD]: this tile's values
    float* pS = kS;                // [BR][PAD]: this tile's probabilities, over K once scores are done

    const int linear = blockIdx.x + gridDim.x * blockIdx.y;  // start order; longest rows first across all heads
    const int h = linear % gridDim.y;
    const int g = h / GROUP;
    const int rowStart = (gridDim.x - 1 - linear / gridDim.y) * BR;
    const int tx = threadIdx.x % 8;   // 8 lanes of a quarter-warp share a ty
    const int ty = threadIdx.x / 8;
    const int row0 = ty * 4;          // this thread's rows: row0 .. row0 + 3

    // Stage the block's queries once, scaled by log2(e) / 8, so scores come out in base 2 and every
    // exponential is one exp2f (see the header). Rows past the chunk are 0.
    for (int i = threadIdx.x; i < BR * DH / 4; i += THREADS) {
        const int r = i / (DH / 4), d = (i % (DH / 4)) * 4;
        const int row = rowStart + r;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row < chunkLen) {
            x = *reinterpret_cast<const float4*>(&q[((size_t)row * HQ + h) * DH + d]);
            x = make_float4(x.x * SCALE_LOG2E, x.y * SCALE_LOG2E, x.z * SCALE_LOG2E, x.w * SCALE_LOG2E);
        }
        *reinterpret_cast<float4*>(&qS[r * PAD + d]) = x;
    }

    float m[4], l[4], acc[4][8];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        m[a] = -INFINITY;
        l[a] = 0.0f;
#pragma unroll
        for (int b = 0; b < 8; ++b) acc[a][b] = 0.0f;
    }

    const int keys = prefixLen + chunkLen;
    const int lastVisible = prefixLen + min(rowStart + BR, chunkLen) - 1;  // the block's last row sees this far
    for (int tileStart = 0; tileStart <= lastVisible; tileStart += BC) {
        __syncthreads();  // the previous tile's K, V and P are no longer read
        for (int i = threadIdx.x; i < BC * DH / 4; i += THREADS) {
            const int c = i / (DH / 4), d = (i % (DH / 4)) * 4;
            const int key = tileStart + c;
            const size_t at = ((size_t)key * HKV + g) * DH + d;
            const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            *reinterpret_cast<float4*>(&kS[c * PAD + d]) = key < keys ? *reinterpret_cast<const float4*>(&kCache[at]) : zero;
            *reinterpret_cast<float4*>(&vS[c * PAD + d]) = key < keys ? *reinterpret_cast<const float4*>(&vCache[at]) : zero;
        }
        __syncthreads();

        // Scores for rows row0 + a and keys tx + 8b, four dims at a time.
        float s[4][8] = {};
#pragma unroll 4
        for (int d = 0; d < DH; d += 4) {
            float4 qv[4], kv[8];
#pragma unroll
            for (int a = 0; a < 4; ++a) qv[a] = *reinterpret_cast<const float4*>(&qS[(row0 + a) * PAD + d]);
#pragma unroll
            for (int b = 0; b < 8; ++b) kv[b] = *reinterpret_cast<const float4*>(&kS[(tx + 8 * b) * PAD + d]);
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 8; ++b) s[a][b] = dot4(s[a][b], qv[a], kv[b]);
        }

        // The causal edge, key <= prefixLen + row, cuts only the tiles that reach past the block's first row.
        if (tileStart + BC - 1 > prefixLen + rowStart) {
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 8; ++b)
                    if (tileStart + tx + 8 * b > prefixLen + rowStart + row0 + a) s[a][b] = -INFINITY;
        }

        __syncthreads();  // P overwrites K's tile: every warp must be done reading K first
        // Online softmax per row; a row's 64 scores live in the 8 lanes of one quarter-warp.
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            float tileMax = -INFINITY;
#pragma unroll
            for (int b = 0; b < 8; ++b) tileMax = fmaxf(tileMax, s[a][b]);
            for (int offset = 4; offset > 0; offset >>= 1)
                tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, offset));
            // Key 0 is visible to every row, so after the first tile m is finite and a tile with
            // no visible key leaves mNew = m, alpha = 1 and p = 0.
            const float mNew = fmaxf(m[a], tileMax);
            const float alpha = exp2f(m[a] - mNew);
            float rowSum = 0.0f;
#pragma unroll
            for (int b = 0; b < 8; ++b) {
                const float p = exp2f(s[a][b] - mNew);
                pS[(row0 + a) * PAD + tx + 8 * b] = p;  // 8 lanes, 8 consecutive floats
                rowSum += p;
            }
            for (int offset = 4; offset > 0; offset >>= 1) rowSum += __shfl_xor_sync(0xffffffffu, rowSum, offset);
            l[a] = alpha * l[a] + rowSum;
#pragma unroll
            for (int b = 0; b < 8; ++b) acc[a][b] *= alpha;
            m[a] = mNew;
        }
        // A row's probabilities are written and read by the same 8 lanes (one ty), inside one warp:
        // a warp barrier orders them, and no other warp waits.
        __syncwarp();

        // acc[row0 + a][dims tx*4 .. +3 and 32 + tx*4 .. +3] += P V, four keys at a time.
#pragma unroll 2
        for (int c = 0; c < BC; c += 4) {
            float4 pv[4];
#pragma unroll
            for (int a = 0; a < 4; ++a) pv[a] = *reinterpret_cast<const float4*>(&pS[(row0 + a) * PAD + c]);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float4 lo = *reinterpret_cast<const float4*>(&vS[(c + j) * PAD + tx * 4]);
                const float4 hi = *reinterpret_cast<const float4*>(&vS[(c + j) * PAD + 32 + tx * 4]);
#pragma unroll
                for (int a = 0; a < 4; ++a) {
                    const float p = j == 0 ? pv[a].x : j == 1 ? pv[a].y : j == 2 ? pv[a].z : pv[a].w;
                    axpy8(acc[a], p, lo, hi);
                }
            }
        }
    }

    // One division by l per row, at the very end.
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        const int row = rowStart + row0 + a;
        if (row >= chunkLen) continue;
        const float inverse = 1.0f / l[a];
        float* dst = &out[((size_t)row * HQ + h) * DH];
        *reinterpret_cast<float4*>(&dst[tx * 4]) =
            make_float4(acc[a][0] * inverse, acc[a][1] * inverse, acc[a][2] * inverse, acc[a][3] * inverse);
        *reinterpret_cast<float4*>(&dst[32 + tx * 4]) =
            make_float4(acc[a][4] * inverse, acc[a][5] * inverse, acc[a][6] * inverse, acc[a][7] * inverse);
    }
}
