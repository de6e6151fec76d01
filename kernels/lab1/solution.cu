// Lab 1 reference solution: the full score matrix, three kernels, at the memory floor.
//
// Read this after finishing your own. The three kernels are the oracle made literal, and the
// [32][T][T] workspace between them is the point of the lab: at T = 2048 it is 512 MiB. What the
// pipeline must move is fixed by the contract, whatever the kernels look like:
//   attn_scores        writes the visible (causal) half of the matrix     T(T+1)/2 floats per head
//   attn_softmax       reads that half and writes every row whole          T(T+1)/2 + T*T
//   attn_weighted_sum  reads the visible half                              T(T+1)/2
// 2.5 T^2 floats per head: 1.25 GiB at T = 2048, a third of a millisecond at an H200's copy
// bandwidth. This file gets within reach of that floor, so the cost table shows what the matrix
// itself costs and not what slow kernels cost; `attnlab bench lab1` prints each kernel's GB/s.
//
// The two matmuls do 8.6 GFLOP each at T = 2048. On FP32 multiply-adds (67 TFLOP/s at best) that
// alone is about 0.13 ms per matmul, more than the bytes take. So they run on the tensor cores, in
// TF32 with error compensation (3xTF32, explained in kernels/lab2/expert.cu): each float32 operand
// is split into a TF32 big part and a TF32 remainder and three products are summed, which keeps
// float32's accuracy (the planted scores of 128 must come out right to 1e-3) at a third of the
// tensor cores' rate, still several times the FMA pipe's. The softmax is pure bandwidth.
//
// What bounds it (H200, `attnlab bench lab1 --vs torch`, T = 2048): the whole call 0.714 ms, 2.55x
// eager PyTorch (1.821 ms) and 2.13x the floor above (0.335 ms at the same run's 4.13 TB/s copy).
// The softmax moves its bytes at 95% of the copy's bandwidth (0.205 ms). The matmuls do not: scores
// 0.209 ms and weighted sum 0.305 ms, each 13 million m16n8k8 products, so 127 and 87 TFLOP/s of
// TF32 products: 40% and 27% of what `mma.sync` gives on this GPU at best (320 TFLOP/s with nothing
// else to do, `python scripts/mma_peak.py`).
//
// Both matmuls were bound by waiting: with each tile's global loads issued after the barrier, every
// warp stalled on them (the weighted sum took 0.415 ms). Now the next tile's K, V and P are loaded
// into registers while the current tile is multiplied, a scores block reuses its Q fragments for
// four K tiles, and the weighted sum does three products, not four, with 8-byte P loads (0.335 ms
// from those two alone). Both matmuls run three blocks per SM at 168 registers, and ptxas spills a
// few bytes in each (about 20 bytes a thread, to L1); uncapped they run two blocks per SM with no
// spills and were slower in back-to-back runs (weighted sum 0.312 ms against 0.303, scores 0.210
// against 0.205). What is left is the instructions around `mma.sync`: the splits, the shared-memory
// fragment loads and the staging, which `mma.sync` needs in registers.
//
// The floor's 1.3x (0.435 ms) would leave the two matmuls 0.23 ms together: 231 TFLOP/s of TF32
// products, 72% of `mma.sync`'s best with all of that work around it. The next step is Hopper's
// wgmma, which reads both operands straight from shared memory at a higher ceiling, with the
// staging done by the copy engine (TMA or cp.async).
//
// Launch geometry (read by the driver from these constants):
//   attn_scores:       one block of 4 warps per 64 rows x 256 keys of one head, in four 64-key steps
//   attn_softmax:      one warp per row, 8 rows per block
//   attn_weighted_sum: one block of 4 warps per 64 rows x all 64 dims of one head
extern "C" __constant__ int attnlab_scores_threads_x = 128;
extern "C" __constant__ int attnlab_scores_threads_y = 1;
extern "C" __constant__ int attnlab_scores_tile_keys = 256;
extern "C" __constant__ int attnlab_scores_tile_rows = 64;
extern "C" __constant__ int attnlab_scores_smem_bytes = 64 * 144 * 4;  // one 64-key K tile, split: 36,864 bytes
extern "C" __constant__ int attnlab_softmax_threads = 256;
extern "C" __constant__ int attnlab_softmax_rows_per_block = 8;
extern "C" __constant__ int attnlab_wsum_threads_x = 128;
extern "C" __constant__ int attnlab_wsum_threads_y = 1;
extern "C" __constant__ int attnlab_wsum_tile_dims = 64;
extern "C" __constant__ int attnlab_wsum_tile_rows = 64;
extern "C" __constant__ int attnlab_wsum_smem_bytes = 64 * 144 * 4;  // one 64-key V tile, split: 36,864 bytes

constexpr int TILE = 64;          // rows per block; keys per staged K or V tile
constexpr int KEY_STEPS = 4;      // K tiles per scores block: 256 keys, one load of Q's rows for all of them
constexpr int THREADS = 128;      // both matmul kernels: 4 warps of 16 rows
constexpr int PITCH = 144;        // floats per staged row: 128 of data, padded off the bank stride
constexpr int STAGED_ITEMS = TILE * (DH / 8) / THREADS;  // 8-float pieces of a K or V tile per thread: 4

// -- 3xTF32 on mma.sync (the fragment layouts are spelled out in kernels/lab2/expert.cu) --------
// D += A * B for one warp: A 16 x 8 (4 registers), B 8 x 8 (2 registers), D 16 x 8 float32 (4 registers).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_3xtf32(float (&d)[4], const unsigned (&aBig)[4], const unsigned (&aSmall)[4],
                                           const unsigned (&bBig)[2], const unsigned (&bSmall)[2]) {
    mma_tf32(d, aSmall, bBig);
    mma_tf32(d, aBig, bSmall);
    mma_tf32(d, aBig, bBig);
}

// x = big + small. big is x with its low 13 mantissa bits cleared: a TF32 number, cut by truncation
// (one integer AND; a cvt.rna.tf32.f32 rounding would cost a slower conversion, twice per element).
// small = x - big is exact in float32; the tensor core reads it as TF32 in turn, dropping its last
// two bits, so big + small carries 22 of float32's 24 bits.
__device__ __forceinline__ void split(float x, unsigned& big, unsigned& small) {
    big = __float_as_uint(x) & 0xffffe000u;
    small = __float_as_uint(x - __uint_as_float(big));
}

__device__ __forceinline__ float4 split_pair(float first, float second) {
    unsigned b0, s0, b1, s1;
    split(first, b0, s0);
    split(second, b1, s1);
    return make_float4(__uint_as_float(b0), __uint_as_float(b1), __uint_as_float(s0), __uint_as_float(s1));
}

// A tile's raw K (or V) pieces, held in registers: the next tile is loaded from global memory while
// the tensor cores work on the current one, and written to shared memory (split) after the barrier.
// Loading straight into shared memory would leave every warp waiting on those loads each tile.
struct StagedTile {
    float4 first[STAGED_ITEMS], second[STAGED_ITEMS];
};

// Scores' K piece `item`: key c of the tile, dims step*8 .. step*8 + 7 (two float4).
__device__ __forceinline__ void load_k_tile(StagedTile& tile, const float* k, int firstKey, int g, int T) {
#pragma unroll
    for (int n = 0; n < STAGED_ITEMS; ++n) {
        const int item = threadIdx.x + n * THREADS;
        const int c = item / (DH / 8), step = item % (DH / 8);
        const int key = firstKey + c;
        tile.first[n] = tile.second[n] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (key < T) {
            const float4* src = reinterpret_cast<const float4*>(k + ((size_t)key * HKV + g) * DH + step * 8);
            tile.first[n] = src[0];
            tile.second[n] = src[1];
        }
    }
}

// kS: [key][dim pair (step*4 + t)][big(t), big(t+4), small(t), small(t+4)], each dim t beside t + 4
// as the B fragment wants them. The 8 lanes of a quarter-warp write their four slots in rotated
// order: 8 bank groups per store.
__device__ __forceinline__ void store_k_tile(float* kS, const StagedTile& tile) {
#pragma unroll
    for (int n = 0; n < STAGED_ITEMS; ++n) {
        const int item = threadIdx.x + n * THREADS;
        const int c = item / (DH / 8), step = item % (DH / 8);
        const float lo[4] = {tile.first[n].x, tile.first[n].y, tile.first[n].z, tile.first[n].w};
        const float hi[4] = {tile.second[n].x, tile.second[n].y, tile.second[n].z, tile.second[n].w};
        float4* dst = reinterpret_cast<float4*>(kS + c * PITCH + step * 16);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int slot = (j + step / 2) % 4;
            float first = lo[0], second = hi[0];  // selects, not a dynamic index: lo and hi stay in registers
#pragma unroll
            for (int i = 1; i < 4; ++i)
                if (slot == i) { first = lo[i]; second = hi[i]; }
            dst[slot] = split_pair(first, second);
        }
    }
}

// Scores: S = Q K^T / 8 for 64 rows x 256 keys of one head, in four 64-key tiles. Each warp keeps
// its 16 rows of Q in registers, split once for all four tiles, and computes 16 x 64 scores a tile.
// Tiles wholly above the diagonal write nothing: the softmax never reads there, and it writes the
// zeros itself.
extern "C" __global__ void __launch_bounds__(THREADS, 3) attn_scores(const float* q, const float* k, float* scores, int T) {
    extern __shared__ __align__(16) float kS[];
    const int h = blockIdx.z;
    const int g = h / GROUP;  // grouped-query attention: four query heads share one KV head, by index
    const int firstRow = blockIdx.y * TILE;
    const int blockFirstKey = blockIdx.x * TILE * KEY_STEPS;
    const int lastKey = min(T - 1, firstRow + TILE - 1);  // the block's last row sees this far
    if (blockFirstKey > lastKey) return;

    StagedTile next;
    load_k_tile(next, k, blockFirstKey, g, T);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int gr = lane / 4, t = lane % 4;
    const int rowBase = firstRow + warp * 16;
    unsigned qBig[DH / 8][4], qSmall[DH / 8][4];
#pragma unroll
    for (int step = 0; step < DH / 8; ++step)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = rowBase + gr + (i % 2) * 8;
            const int dim = step * 8 + t + (i / 2) * 4;
            const float x = row < T ? q[((size_t)row * HQ + h) * DH + dim] * 0.125f : 0.0f;  // 1/8: exact
            split(x, qBig[step][i], qSmall[step][i]);
        }

    for (int firstKey = blockFirstKey; firstKey < blockFirstKey + TILE * KEY_STEPS && firstKey <= lastKey; firstKey += TILE) {
        __syncthreads();  // every warp is done with the previous tile
        store_k_tile(kS, next);
        __syncthreads();
        if (firstKey + TILE < blockFirstKey + TILE * KEY_STEPS && firstKey + TILE <= lastKey) load_k_tile(next, k, firstKey + TILE, g, T);

        float s[TILE / 8][4] = {};
#pragma unroll
        for (int step = 0; step < DH / 8; ++step)
#pragma unroll
            for (int nb = 0; nb < TILE / 8; ++nb) {
                const float4 kf = *reinterpret_cast<const float4*>(kS + (nb * 8 + gr) * PITCH + step * 16 + t * 4);
                const unsigned bBig[2] = {__float_as_uint(kf.x), __float_as_uint(kf.y)};
                const unsigned bSmall[2] = {__float_as_uint(kf.z), __float_as_uint(kf.w)};
                mma_3xtf32(s[nb], qBig[step], qSmall[step], bBig, bSmall);
            }

        // s[nb] holds keys nb*8 + 2t, 2t + 1 of rows gr and gr + 8. Above the diagonal inside this tile
        // the values are real products, not -INFINITY: the contract leaves that part to the softmax.
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = rowBase + gr + r * 8;
            if (row >= T) continue;
            float* dst = scores + ((size_t)h * T + row) * T;
#pragma unroll
            for (int nb = 0; nb < TILE / 8; ++nb) {
                const int key = firstKey + nb * 8 + 2 * t;
                if (T % 2 == 0 && key + 1 < T) {  // a quad writes 32 contiguous bytes: one whole sector
                    *reinterpret_cast<float2*>(dst + key) = make_float2(s[nb][2 * r], s[nb][2 * r + 1]);
                } else {
                    if (key < T) dst[key] = s[nb][2 * r];
                    if (key + 1 < T) dst[key + 1] = s[nb][2 * r + 1];
                }
            }
        }
    }
}

// Softmax: one warp per row. The max is subtracted first because planted positions score 128
// against each other and expf overflows near 88; exp(s - max) is at most 1. It reads the visible
// keys 0 .. row and writes the whole row, zeros past the diagonal: nothing more can be moved.
extern "C" __global__ void __launch_bounds__(256) attn_softmax(float* scores, int T) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + warp;
    const int h = blockIdx.y;
    if (row >= T) return;
    float* s = scores + ((size_t)h * T + row) * T;
    const int visible = row + 1;  // keys 0 .. row

    // Rows of up to KEPT * 128 keys, 16-byte aligned (T % 4 == 0), are read once into registers
    // (16 float4 per lane, all loads in flight at once): max, sum and the written probabilities all
    // come from there. A second read of the row would come from DRAM, not L2: thousands of rows are
    // in flight, far more than L2 holds.
    constexpr int KEPT = 16;
    if (T % 4 == 0 && T <= 128 * KEPT) {
        float4 kept[KEPT];
        float m = -INFINITY;
#pragma unroll
        for (int i = 0; i < KEPT; ++i) {
            const int j = 4 * lane + 128 * i;
            float4 x = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
            if (j < visible) x = *reinterpret_cast<const float4*>(s + j);  // past the diagonal: never read
            // Keys past the diagonal in this float4 hold whatever the scores kernel left there.
            if (j + 1 >= visible) x.y = -INFINITY;
            if (j + 2 >= visible) x.z = -INFINITY;
            if (j + 3 >= visible) x.w = -INFINITY;
            kept[i] = x;
            m = fmaxf(m, fmaxf(fmaxf(x.x, x.y), fmaxf(x.z, x.w)));
        }
        for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
        float l = 0.0f;
#pragma unroll
        for (int i = 0; i < KEPT; ++i) {
            kept[i] = make_float4(expf(kept[i].x - m), expf(kept[i].y - m), expf(kept[i].z - m), expf(kept[i].w - m));
            l += (kept[i].x + kept[i].y) + (kept[i].z + kept[i].w);  // exp(-inf - m) = 0 past the diagonal
        }
        for (int offset = 16; offset > 0; offset >>= 1) l += __shfl_xor_sync(0xffffffffu, l, offset);
        const float inverse = 1.0f / l;
#pragma unroll
        for (int i = 0; i < KEPT; ++i) {
            const int j = 4 * lane + 128 * i;
            if (j < T)
                *reinterpret_cast<float4*>(s + j) =
                    make_float4(kept[i].x * inverse, kept[i].y * inverse, kept[i].z * inverse, kept[i].w * inverse);
        }
        return;
    }

    // Any other row: one read for the max and the sum (an online pair, as lab 2 carries it), a
    // second to write. A lane that saw no key holds m = -inf and l = 0: its term must vanish.
    float m = -INFINITY, l = 0.0f;
    for (int j = lane; j < visible; j += 32) {
        const float x = s[j];
        const float mNew = fmaxf(m, x);
        l = l * expf(m - mNew) + expf(x - mNew);  // a lane's first key: m = -inf, so exp(-inf) = 0
        m = mNew;
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float mOther = __shfl_xor_sync(0xffffffffu, m, offset);
        const float lOther = __shfl_xor_sync(0xffffffffu, l, offset);
        const float mNew = fmaxf(m, mOther);
        l = (m == -INFINITY ? 0.0f : l * expf(m - mNew)) + (mOther == -INFINITY ? 0.0f : lOther * expf(mOther - mNew));
        m = mNew;
    }
    // With T = 1 the single probability is exp(0) * (1 / 1) = 1 exactly, as the lab requires.
    const float inverse = 1.0f / l;
    for (int j = lane; j < T; j += 32) s[j] = j < visible ? expf(s[j] - m) * inverse : 0.0f;
}

// Weighted sum: out = P V for 64 rows x 64 dims of one head; each warp owns 16 rows. Keys past the
// block's last row have probability 0, so the loop stops at the diagonal. P is read straight from
// global memory into A fragments: key-step kb reads its 8 keys in the order 0,2,4,6,1,3,5,7, so a
// lane's two columns are the neighbouring keys 2t and 2t + 1 (one 8-byte load per row; 32
// contiguous bytes per row across a quad), and V is staged in the same order: b0 = V[2t][dim],
// b1 = V[2t + 1][dim]. The next tile's P and V are loaded while this tile is multiplied.
//
// Row 0 sees key 0 alone, with probability exactly 1, and must return V's first row exactly. 3xTF32
// carries 22 of float32's 24 bits, so that row is one product done in float32 instead, P[0][0] V[0].

// This tile's probabilities for rows pA and pB, as four A fragments' worth of values per key-step.
__device__ __forceinline__ void load_p(float (&p)[TILE / 8][4], const float* pA, const float* pB, int tileStart,
                                       int lastKey, int t, bool pairs) {
#pragma unroll
    for (int kb = 0; kb < TILE / 8; ++kb) {
        const int key = tileStart + kb * 8 + 2 * t;
        if (pairs) {  // T even: key is even, so (key, key + 1) is 8-byte aligned and inside the row
            float2 a = make_float2(0.0f, 0.0f), b = a;
            if (key <= lastKey) {
                a = *reinterpret_cast<const float2*>(pA + key);
                b = *reinterpret_cast<const float2*>(pB + key);
            }
            if (key + 1 > lastKey) a.y = b.y = 0.0f;
            p[kb][0] = a.x; p[kb][1] = b.x; p[kb][2] = a.y; p[kb][3] = b.y;  // a0 = P[gr][2t], a1 = P[gr+8][2t], ...
        } else {
            p[kb][0] = key <= lastKey ? pA[key] : 0.0f;
            p[kb][1] = key <= lastKey ? pB[key] : 0.0f;
            p[kb][2] = key + 1 <= lastKey ? pA[key + 1] : 0.0f;
            p[kb][3] = key + 1 <= lastKey ? pB[key + 1] : 0.0f;
        }
    }
}

// V piece `item`: key pair p, dims d4*4 .. d4*4 + 3 of both keys. A quarter-warp's 8 lanes take 8 key
// pairs (8 bank groups when stored); the 4 quarters take 4 dim chunks of the same keys.
__device__ __forceinline__ void v_piece(int item, int& p, int& d4) {
    p = (item / 128) * 8 + item % 8;
    d4 = (item / 8) % 16;
}

__device__ __forceinline__ void load_v_tile(StagedTile& tile, const float* v, int tileStart, int g, int T) {
#pragma unroll
    for (int n = 0; n < STAGED_ITEMS; ++n) {
        int p, d4;
        v_piece(threadIdx.x + n * THREADS, p, d4);
        const int key = tileStart + 2 * p;
        tile.first[n] = tile.second[n] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (key < T) tile.first[n] = *reinterpret_cast<const float4*>(v + ((size_t)key * HKV + g) * DH + d4 * 4);
        if (key + 1 < T) tile.second[n] = *reinterpret_cast<const float4*>(v + ((size_t)(key + 1) * HKV + g) * DH + d4 * 4);
    }
}

// vS: [dim][key pair p][big(2p), big(2p+1), small(2p), small(2p+1)]
__device__ __forceinline__ void store_v_tile(float* vS, const StagedTile& tile) {
#pragma unroll
    for (int n = 0; n < STAGED_ITEMS; ++n) {
        int p, d4;
        v_piece(threadIdx.x + n * THREADS, p, d4);
        float* dst = vS + (d4 * 4) * PITCH + p * 4;
        *reinterpret_cast<float4*>(dst) = split_pair(tile.first[n].x, tile.second[n].x);
        *reinterpret_cast<float4*>(dst + PITCH) = split_pair(tile.first[n].y, tile.second[n].y);
        *reinterpret_cast<float4*>(dst + 2 * PITCH) = split_pair(tile.first[n].z, tile.second[n].z);
        *reinterpret_cast<float4*>(dst + 3 * PITCH) = split_pair(tile.first[n].w, tile.second[n].w);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 3)
attn_weighted_sum(const float* scores, const float* v, float* out, int T) {
    extern __shared__ __align__(16) float vS[];
    const int h = blockIdx.z;
    const int g = h / GROUP;
    const int firstRow = (gridDim.y - 1 - blockIdx.y) * TILE;  // the longest rows first: short blocks fill the tail
    const int lastKey = min(T - 1, firstRow + TILE - 1);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int gr = lane / 4, t = lane % 4;
    const int rowA = firstRow + warp * 16 + gr, rowB = rowA + 8;
    const float* pA = scores + ((size_t)h * T + min(rowA, T - 1)) * T;  // clamped: rows past T compute, never store
    const float* pB = scores + ((size_t)h * T + min(rowB, T - 1)) * T;
    const bool pairs = T % 2 == 0;

    float o[DH / 8][4] = {};
    float p[TILE / 8][4];
    StagedTile next;
    load_p(p, pA, pB, 0, lastKey, t, pairs);
    load_v_tile(next, v, 0, g, T);
    for (int tileStart = 0; tileStart <= lastKey; tileStart += TILE) {
        __syncthreads();  // every warp is done with the previous V tile
        store_v_tile(vS, next);
        __syncthreads();
        float pNext[TILE / 8][4];
        load_p(pNext, pA, pB, tileStart + TILE, lastKey, t, pairs);  // all zeros, no load, past the last tile
        if (tileStart + TILE <= lastKey) load_v_tile(next, v, tileStart + TILE, g, T);

#pragma unroll
        for (int kb = 0; kb < TILE / 8; ++kb) {
            unsigned aBig[4], aSmall[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) split(p[kb][i], aBig[i], aSmall[i]);
#pragma unroll
            for (int nb = 0; nb < DH / 8; ++nb) {
                const float4 vf = *reinterpret_cast<const float4*>(vS + (nb * 8 + gr) * PITCH + kb * 16 + t * 4);
                const unsigned bBig[2] = {__float_as_uint(vf.x), __float_as_uint(vf.y)};
                const unsigned bSmall[2] = {__float_as_uint(vf.z), __float_as_uint(vf.w)};
                mma_3xtf32(o[nb], aBig, aSmall, bBig, bSmall);
            }
        }
#pragma unroll
        for (int kb = 0; kb < TILE / 8; ++kb)
#pragma unroll
            for (int i = 0; i < 4; ++i) p[kb][i] = pNext[kb][i];
    }

    if (rowA == 0) {  // row 0: one visible key, one float32 product per dim (see above)
        const float p00 = pA[0];
#pragma unroll
        for (int nb = 0; nb < DH / 8; ++nb) {
            const float2 v0 = *reinterpret_cast<const float2*>(v + (size_t)g * DH + nb * 8 + 2 * t);
            o[nb][0] = p00 * v0.x;
            o[nb][1] = p00 * v0.y;
        }
    }

    // o[nb] holds dims nb*8 + 2t, 2t + 1 of rows rowA (values 0, 1) and rowB (values 2, 3).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = r == 0 ? rowA : rowB;
        if (row >= T) continue;
        float* dst = out + ((size_t)row * HQ + h) * DH + 2 * t;
#pragma unroll
        for (int nb = 0; nb < DH / 8; ++nb) *reinterpret_cast<float2*>(dst + nb * 8) = make_float2(o[nb][2 * r], o[nb][2 * r + 1]);
    }
}
