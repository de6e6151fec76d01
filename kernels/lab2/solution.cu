// Lab 2 reference solution: tiled flash prefill against a cached prefix.
//
// Read this after finishing your own. One block owns BR = 64 query rows of one head and keeps
// them resident; each K/V tile of BC = 64 keys is staged in shared memory once and consumed by
// all 64 rows before it is replaced, so every K/V byte fetched feeds 64 rows instead of one.
// Each row carries the online softmax state across tiles: the running max m, the running
// denominator l and a 64-wide accumulator, rescaled by alpha = exp(m_old - m_new) whenever a
// tile raises the max, and divided by l once at the very end.
//
// Work split: 256 threads as a 16 x 16 grid (ty, tx). For scores, thread (ty, tx) computes the
// 4 x 4 block rows ty*4 .. ty*4+3 by keys tx*4 .. tx*4+3; for the accumulator, the same rows
// by dims tx*4 .. tx*4+3. The 16 threads sharing a ty are 16 lanes of one warp, so a row's max
// and sum are reduced with four shuffles. Q and K are stored transposed ([dim][row], [dim][key])
// so each step of the dot product reads two float4s: 16 multiply-adds per 2 shared loads.
constexpr int BR = 64;         // query rows per block
constexpr int BC = 64;         // keys per K/V tile
constexpr int PAD = 68;        // row pitch of the transposed tiles: off the 32-bank stride, 16-byte aligned
constexpr int THREADS = 256;
constexpr int SMEM_FLOATS = DH * PAD /*qT*/ + DH * PAD /*kT*/ + BC * DH /*v*/ + BC * PAD /*pT*/;

extern "C" __constant__ int attnlab_threads = THREADS;
extern "C" __constant__ int attnlab_rows_per_block = BR;
extern "C" __constant__ int attnlab_heads_per_block = 1;
extern "C" __constant__ int attnlab_smem_bytes = SMEM_FLOATS * 4;  // 68,608 bytes: past 48 KB, so the driver raises the limit

extern "C" __global__ void __launch_bounds__(THREADS)
flash_prefill(const float* __restrict__ q, const float* __restrict__ kCache, const float* __restrict__ vCache,
              float* __restrict__ out, int chunkLen, int prefixLen) {
    extern __shared__ __align__(16) float smem[];
    float* qT = smem;                 // [DH][PAD]: q * 1/8, transposed
    float* kT = qT + DH * PAD;        // [DH][PAD]: this tile's keys, transposed
    float* vS = kT + DH * PAD;        // [BC][DH]:  this tile's values
    float* pT = vS + BC * DH;         // [BC][PAD]: this tile's probabilities, transposed

    const int h = blockIdx.y;
    const int g = h / GROUP;
    const int rowStart = blockIdx.x * BR;
    const int tx = threadIdx.x % 16;
    const int ty = threadIdx.x / 16;

    // Stage the block's queries once, scaled by 1/8 (a power of two: exact). Rows past the chunk are 0.
    for (int i = threadIdx.x; i < BR * DH; i += THREADS) {
        const int r = i / DH, d = i % DH;
        const int row = rowStart + r;
        qT[d * PAD + r] = row < chunkLen ? q[((size_t)row * HQ + h) * DH + d] * 0.125f : 0.0f;
    }

    float m[4], l[4], acc[4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        m[a] = -INFINITY;
        l[a] = 0.0f;
#pragma unroll
        for (int b = 0; b < 4; ++b) acc[a][b] = 0.0f;
    }

    const int keys = prefixLen + chunkLen;
    const int lastVisible = prefixLen + min(rowStart + BR, chunkLen) - 1;  // the block's last row sees this far
    for (int tileStart = 0; tileStart <= lastVisible; tileStart += BC) {
        __syncthreads();  // the previous tile's kT, vS and pT are no longer read
        for (int i = threadIdx.x; i < BC * DH; i += THREADS) {
            const int c = i / DH, d = i % DH;
            const int key = tileStart + c;
            const size_t at = ((size_t)key * HKV + g) * DH + d;
            kT[d * PAD + c] = key < keys ? kCache[at] : 0.0f;
            vS[c * DH + d] = key < keys ? vCache[at] : 0.0f;
        }
        __syncthreads();

        // Scores for rows ty*4+a, keys tx*4+b.
        float s[4][4] = {};
#pragma unroll 8
        for (int d = 0; d < DH; ++d) {
            const float4 qv = *reinterpret_cast<const float4*>(&qT[d * PAD + ty * 4]);
            const float4 kv = *reinterpret_cast<const float4*>(&kT[d * PAD + tx * 4]);
            const float qa[4] = {qv.x, qv.y, qv.z, qv.w};
            const float kb[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b) s[a][b] += qa[a] * kb[b];
        }

        // Online softmax per row: the causal edge is key <= prefixLen + row.
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            const int limit = prefixLen + rowStart + ty * 4 + a;
            float tileMax = -INFINITY;
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                if (tileStart + tx * 4 + b > limit) s[a][b] = -INFINITY;
                tileMax = fmaxf(tileMax, s[a][b]);
            }
            for (int offset = 8; offset > 0; offset >>= 1)
                tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, offset));
            // Key 0 is visible to every row, so after the first tile m is finite and a tile with
            // no visible key leaves mNew = m, alpha = 1 and p = 0.
            const float mNew = fmaxf(m[a], tileMax);
            const float alpha = expf(m[a] - mNew);
            float rowSum = 0.0f;
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                s[a][b] = expf(s[a][b] - mNew);
                rowSum += s[a][b];
            }
            for (int offset = 8; offset > 0; offset >>= 1) rowSum += __shfl_xor_sync(0xffffffffu, rowSum, offset);
            l[a] = alpha * l[a] + rowSum;
#pragma unroll
            for (int b = 0; b < 4; ++b) acc[a][b] *= alpha;
            m[a] = mNew;
        }
#pragma unroll
        for (int b = 0; b < 4; ++b)
            *reinterpret_cast<float4*>(&pT[(tx * 4 + b) * PAD + ty * 4]) = make_float4(s[0][b], s[1][b], s[2][b], s[3][b]);
        __syncthreads();

        // acc[rows ty*4+a][dims tx*4+b] += P V over this tile's keys.
#pragma unroll 8
        for (int c = 0; c < BC; ++c) {
            const float4 pv = *reinterpret_cast<const float4*>(&pT[c * PAD + ty * 4]);
            const float4 vv = *reinterpret_cast<const float4*>(&vS[c * DH + tx * 4]);
            const float pa[4] = {pv.x, pv.y, pv.z, pv.w};
            const float vb[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b) acc[a][b] += pa[a] * vb[b];
        }
    }

    // One division by l per row, at the very end.
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        const int row = rowStart + ty * 4 + a;
        if (row >= chunkLen) continue;
        const float inverse = 1.0f / l[a];
        const float4 result = make_float4(acc[a][0] * inverse, acc[a][1] * inverse, acc[a][2] * inverse, acc[a][3] * inverse);
        *reinterpret_cast<float4*>(&out[((size_t)row * HQ + h) * DH + tx * 4]) = result;
    }
}
