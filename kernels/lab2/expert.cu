// Lab 2 expert reference: flash prefill on the tensor cores, in TF32 with error compensation (3xTF32).
//
// Read this after solution.cu, which does the same work with FP32 multiply-adds and explains the
// online softmax. This file keeps that algorithm and moves both matrix products, S = Q K^T and
// O += P V, onto the tensor cores through the warp-wide `mma.sync` instruction.
//
// Why "3x". A tensor core multiplies TF32 numbers: float32's sign and 8 exponent bits, but only 10
// of its 23 mantissa bits. One TF32 product is accurate to about 5e-4, and a planted score of 128
// would come out wrong by about 0.06, far outside the pass rule. So every float32 x is split into
// big = x cut to TF32 and small = x - big; big + small carries 22 of float32's 24 mantissa bits.
// Then a*b = (aB + aS)(bB + bS) ~ aB*bB + aB*bS + aS*bB: three tensor-core products per float32
// product (aS*bS is below float32's own rounding and is dropped). CUTLASS calls this
// 3xTF32. The small terms are added first so they are not lost against the large one.
//
// Work split: one block serves 16 query rows of the 4 query heads of one KV group (warp w: head
// 4*g + w), so every K/V tile staged in shared memory feeds 64 (row, head) pairs, and all four
// warps stop at the same causal edge. Each warp keeps its 16 rows of Q in registers, already split,
// and walks the keys in tiles of 32:
//   S (16 x 32)  = Q (16 x 64 dims) K^T : 8 dim-steps x 4 key-blocks of m16n8k8, x3
//   online softmax on S's fragments (a row's values live in the 4 lanes of a quad: 2 shuffles)
//   O (16 x 64) += P (16 x 32 keys) V  : 4 key-steps x 8 dim-blocks of m16n8k8, x3
//
// The fragment layouts of mma.m16n8k8 for TF32 (PTX ISA, "Matrix Fragments for mma.m16n8k8"),
// with g = lane / 4 and t = lane % 4:
//   A (16 x 8, row-major): a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]
//   B (8 x 8, column):     b0 = B[t][g], b1 = B[t+4][g]
//   C, D (16 x 8):         c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
// Two choices make every fragment one 16-byte shared-memory load, and P need no shuffle at all:
//  - The dims of each 8-dim step are read in the order a thread needs them (t beside t+4), in Q and
//    K alike: a dot product does not care in which order its terms are summed.
//  - P's accumulator holds keys 2t and 2t+1, but the A operand of P V wants columns t and t+4. So
//    the key-step of P V reads its 8 keys in the order 0,2,4,6,1,3,5,7: column t is key 2t and
//    column t+4 is key 2t+1, exactly what the thread holds. V is staged in that order too
//    (b0 = V[key 2t][dim g], b1 = V[key 2t+1][dim g]), so P V sums the same terms as before.
// Each staged element is stored as (big, big, small, small) of its fragment pair; the row pitch,
// 144 floats, puts the 8 lanes of each quarter-warp on 8 different groups of 4 banks.
//
// What bounds it (H200, `attnlab bench lab2 kernels/lab2/expert.cu --vs sdpa`): 1.055 ms at C = P =
// 2048, 1.71x PyTorch's SDPA in float32 (1.70x to 1.72x, and 1.72x in another run), 49 TFLOP/s of
// float32 work from 75.5 million m16n8k8 products (three per float32 product): 147 TFLOP/s of TF32
// products, 46% of what `mma.sync` gives on this GPU at best (320 TFLOP/s with nothing else to do,
// `python scripts/mma_peak.py`). The step that mattered was latency, not arithmetic: loading each
// K/V tile from global memory straight into shared memory made every warp wait on those loads once
// a tile (1.43x); the next tile now travels in registers while this one is multiplied (1.66x), at
// about 240 registers a thread, two blocks of four warps per SM. Then the blocks were handed out
// longest first across all heads, not head after head (1.65x -> 1.72x in one run). Earlier steps:
// exp2f (1.32x to 1.40x), 32-key tiles (1.45x). Tried and not kept: the same prefetch at three blocks per SM (168
// registers: spills, 1.17x), the small products summed in their own accumulators (1.37x), K stored
// without the rotated slots (1.35x). What bounds it now is the instructions around the products
// (splits, shared-memory fragment loads, staging) that `mma.sync` needs in registers. The next step
// is Hopper's asynchronous warpgroup MMA (wgmma, operands read straight from shared memory, which
// inline PTX can reach and this file keeps out of scope), fed by TMA or cp.async.
constexpr int ROWS = 16;                // query rows per block (one m16 tile per warp)
constexpr int HEADS = GROUP;            // query heads per block: one KV group, one warp each
constexpr int THREADS = 32 * HEADS;
constexpr int BC = 32;                  // keys per K/V tile
constexpr float SCALE_LOG2E = 0.125f * 1.4426950408889634f;  // the contract's 1/8, times log2(e)
constexpr int PITCH = 144;              // floats per staged row: 128 of K's data (64 of V's), padded off the bank stride
constexpr int SMEM_FLOATS = BC * PITCH /*K: [key][dim pair][4]*/ + DH * PITCH /*V: [dim][key pair][4]*/;

extern "C" __constant__ int attnlab_threads = THREADS;
extern "C" __constant__ int attnlab_rows_per_block = ROWS;
extern "C" __constant__ int attnlab_heads_per_block = HEADS;
extern "C" __constant__ int attnlab_smem_bytes = SMEM_FLOATS * 4;  // 55,296 bytes; registers, not shared memory, allow two blocks per SM

// D += A * B for one warp: A 16 x 8 (4 registers), B 8 x 8 (2 registers), D 16 x 8 float32 (4 registers).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The three products of 3xTF32, small terms first.
__device__ __forceinline__ void mma_3xtf32(float (&d)[4], const unsigned (&aBig)[4], const unsigned (&aSmall)[4],
                                           const unsigned (&bBig)[2], const unsigned (&bSmall)[2]) {
    mma_tf32(d, aSmall, bBig);
    mma_tf32(d, aBig, bSmall);
    mma_tf32(d, aBig, bBig);
}

// x = big + small, both TF32 bit patterns.
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

// The next K/V tile, raw, in registers: loaded from global memory while the tensor cores work on the
// current tile, and written to shared memory (split) after the barrier. Loading straight into shared
// memory left every warp waiting on those loads at each tile (1.43x SDPA before, 1.66x after); the
// 32 registers this costs leave two blocks per SM instead of three, and it is still faster.
constexpr int TILE_ITEMS = BC * (DH / 8) / THREADS;  // K pieces (8 dims of a key) per thread: 2; V pieces too
struct StagedTile {
    float4 k[TILE_ITEMS][2];  // dims step*8 .. +3 and +4 .. +7 of key c
    float4 v[TILE_ITEMS][2];  // dims d4*4 .. +3 of keys 2p and 2p + 1
};

// Piece n of this thread's share of a tile. K: key c, dim-step `step`. V: key pair p, 4-dim chunk
// d4; within a quarter-warp the 8 lanes take 8 key pairs (8 bank groups when stored), and the 4
// quarters take 4 dim chunks of the same keys, so a warp reads 64 contiguous bytes of each of 8 keys.
struct Piece {
    int c, step, p, d4;
};
__device__ __forceinline__ Piece piece(int n) {
    const int item = threadIdx.x + n * THREADS;
    return {item / (DH / 8), item % (DH / 8), (item / 128) * 8 + item % 8, (item / 8) % 16};
}

__device__ __forceinline__ void load_tile(StagedTile& tile, const float* kCache, const float* vCache, int tileStart,
                                          int kvHead, int keys) {
#pragma unroll
    for (int n = 0; n < TILE_ITEMS; ++n) {
        const Piece at = piece(n);
        const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        tile.k[n][0] = tile.k[n][1] = tile.v[n][0] = tile.v[n][1] = zero;
        if (tileStart + at.c < keys) {
            const float4* src = reinterpret_cast<const float4*>(kCache + ((size_t)(tileStart + at.c) * HKV + kvHead) * DH + at.step * 8);
            tile.k[n][0] = src[0];
            tile.k[n][1] = src[1];
        }
        const int key = tileStart + 2 * at.p;
        if (key < keys) tile.v[n][0] = *reinterpret_cast<const float4*>(vCache + ((size_t)key * HKV + kvHead) * DH + at.d4 * 4);
        if (key + 1 < keys) tile.v[n][1] = *reinterpret_cast<const float4*>(vCache + ((size_t)(key + 1) * HKV + kvHead) * DH + at.d4 * 4);
    }
}

// K: each piece writes 4 slots of (big, big, small, small); the 8 lanes of a quarter-warp write their
// slots in rotated order, so each of the four stores hits 8 different groups of banks.
// V: each piece writes its 4 dims of the key pair.
__device__ __forceinline__ void store_tile(float* kS, float* vS, const StagedTile& tile) {
#pragma unroll
    for (int n = 0; n < TILE_ITEMS; ++n) {
        const Piece at = piece(n);
        const float lo[4] = {tile.k[n][0].x, tile.k[n][0].y, tile.k[n][0].z, tile.k[n][0].w};
        const float hi[4] = {tile.k[n][1].x, tile.k[n][1].y, tile.k[n][1].z, tile.k[n][1].w};
        float4* kDst = reinterpret_cast<float4*>(kS + at.c * PITCH + at.step * 16);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int slot = (j + at.step / 2) % 4;
            float first = lo[0], second = hi[0];  // selects, not a dynamic index: lo and hi stay in registers
#pragma unroll
            for (int i = 1; i < 4; ++i)
                if (slot == i) { first = lo[i]; second = hi[i]; }
            kDst[slot] = split_pair(first, second);
        }
        float* vDst = vS + (at.d4 * 4) * PITCH + at.p * 4;
        *reinterpret_cast<float4*>(vDst) = split_pair(tile.v[n][0].x, tile.v[n][1].x);
        *reinterpret_cast<float4*>(vDst + PITCH) = split_pair(tile.v[n][0].y, tile.v[n][1].y);
        *reinterpret_cast<float4*>(vDst + 2 * PITCH) = split_pair(tile.v[n][0].z, tile.v[n][1].z);
        *reinterpret_cast<float4*>(vDst + 3 * PITCH) = split_pair(tile.v[n][0].w, tile.v[n][1].w);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 2)
flash_prefill(const float* __restrict__ q, const float* __restrict__ kCache, const float* __restrict__ vCache,
              float* __restrict__ out, int chunkLen, int prefixLen) {
    extern __shared__ __align__(16) float smem[];
    float* kS = smem;               // [key][dim pair (step*4 + t)][big(t), big(t+4), small(t), small(t+4)]
    float* vS = kS + BC * PITCH;    // [dim][key pair p][big(2p), big(2p+1), small(2p), small(2p+1)]

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    // The blocks of the last rows see the most keys; the GPU starts blocks in blockIdx order, so
    // give the first blocks the longest work, across all heads at once, and let the short ones fill the tail.
    const int linear = blockIdx.x + gridDim.x * blockIdx.y;
    const int kvHead = linear % gridDim.y;
    const int h = kvHead * GROUP + warp;
    const int rowStart = (gridDim.x - 1 - linear / gridDim.y) * ROWS;

    // This warp's 16 rows of Q as A fragments, scaled by log2(e) / 8 (so that each exponential is one
    // exp2f, as in solution.cu) and split. Rows past the chunk are 0.
    unsigned qBig[DH / 8][4], qSmall[DH / 8][4];
#pragma unroll
    for (int step = 0; step < DH / 8; ++step) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = rowStart + g + (i % 2) * 8;           // a0, a2: row g; a1, a3: row g + 8
            const int dim = step * 8 + t + (i / 2) * 4;            // a0, a1: dim t; a2, a3: dim t + 4
            const float x = row < chunkLen ? q[((size_t)row * HQ + h) * DH + dim] * SCALE_LOG2E : 0.0f;
            split(x, qBig[step][i], qSmall[step][i]);
        }
    }

    // Online softmax state for the thread's two rows (g and g + 8), and its part of O.
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float o[DH / 8][4] = {};

    const int keys = prefixLen + chunkLen;
    const int lastVisible = prefixLen + min(rowStart + ROWS, chunkLen) - 1;  // the block's last row sees this far
    StagedTile next;
    load_tile(next, kCache, vCache, 0, kvHead, keys);
    for (int tileStart = 0; tileStart <= lastVisible; tileStart += BC) {
        __syncthreads();  // every warp is done with the previous tile
        store_tile(kS, vS, next);
        __syncthreads();
        if (tileStart + BC <= lastVisible) load_tile(next, kCache, vCache, tileStart + BC, kvHead, keys);  // lands during this tile's math

        // S = Q K^T for this tile: s[nb] holds keys nb*8 + 2t, 2t + 1 of rows g and g + 8.
        float s[BC / 8][4] = {};
#pragma unroll
        for (int step = 0; step < DH / 8; ++step) {
#pragma unroll
            for (int nb = 0; nb < BC / 8; ++nb) {
                const float4 kf = *reinterpret_cast<const float4*>(kS + (nb * 8 + g) * PITCH + step * 16 + t * 4);
                const unsigned bBig[2] = {__float_as_uint(kf.x), __float_as_uint(kf.y)};
                const unsigned bSmall[2] = {__float_as_uint(kf.z), __float_as_uint(kf.w)};
                mma_3xtf32(s[nb], qBig[step], qSmall[step], bBig, bSmall);
            }
        }

        // The causal edge, key <= prefixLen + row, cuts only the tiles that reach past the first row's limit.
        if (tileStart + BC - 1 > prefixLen + rowStart) {
#pragma unroll
            for (int nb = 0; nb < BC / 8; ++nb)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int key = tileStart + nb * 8 + 2 * t + (i % 2);
                    const int row = rowStart + g + (i / 2) * 8;
                    if (key > prefixLen + row) s[nb][i] = -INFINITY;
                }
        }

        // Online softmax, row g (r = 0: values 0, 1) and row g + 8 (r = 1: values 2, 3).
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float tileMax = -INFINITY;
#pragma unroll
            for (int nb = 0; nb < BC / 8; ++nb) tileMax = fmaxf(tileMax, fmaxf(s[nb][2 * r], s[nb][2 * r + 1]));
            tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, 1));
            tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, 2));
            // Key 0 is visible to every row, so m is finite after the first tile, and a tile with no
            // visible key for this row leaves mNew = m, alpha = 1 and every p = 0.
            const float mNew = fmaxf(m[r], tileMax);
            const float alpha = exp2f(m[r] - mNew);
            float rowSum = 0.0f;
#pragma unroll
            for (int nb = 0; nb < BC / 8; ++nb) {
                s[nb][2 * r] = exp2f(s[nb][2 * r] - mNew);
                s[nb][2 * r + 1] = exp2f(s[nb][2 * r + 1] - mNew);
                rowSum += s[nb][2 * r] + s[nb][2 * r + 1];
            }
            rowSum += __shfl_xor_sync(0xffffffffu, rowSum, 1);
            rowSum += __shfl_xor_sync(0xffffffffu, rowSum, 2);
            l[r] = alpha * l[r] + rowSum;
            m[r] = mNew;
#pragma unroll
            for (int nb = 0; nb < DH / 8; ++nb) {
                o[nb][2 * r] *= alpha;
                o[nb][2 * r + 1] *= alpha;
            }
        }

        // O += P V. Key-step kb reads keys in the order 0,2,4,6,1,3,5,7, so A's column t is key 2t and
        // column t + 4 is key 2t + 1: a0 = P[g][2t], a1 = P[g+8][2t], a2 = P[g][2t+1], a3 = P[g+8][2t+1].
#pragma unroll
        for (int kb = 0; kb < BC / 8; ++kb) {
            unsigned pBig[4], pSmall[4];
            split(s[kb][0], pBig[0], pSmall[0]);
            split(s[kb][2], pBig[1], pSmall[1]);
            split(s[kb][1], pBig[2], pSmall[2]);
            split(s[kb][3], pBig[3], pSmall[3]);
#pragma unroll
            for (int nb = 0; nb < DH / 8; ++nb) {
                const float4 vf = *reinterpret_cast<const float4*>(vS + (nb * 8 + g) * PITCH + kb * 16 + t * 4);
                const unsigned bBig[2] = {__float_as_uint(vf.x), __float_as_uint(vf.y)};
                const unsigned bSmall[2] = {__float_as_uint(vf.z), __float_as_uint(vf.w)};
                mma_3xtf32(o[nb], pBig, pSmall, bBig, bSmall);
            }
        }
    }

    // One division by l per row, at the very end: o[nb] holds dims nb*8 + 2t, 2t + 1.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = rowStart + g + r * 8;
        if (row >= chunkLen) continue;
        const float inverse = 1.0f / l[r];
        float* dst = out + ((size_t)row * HQ + h) * DH + 2 * t;
#pragma unroll
        for (int nb = 0; nb < DH / 8; ++nb)
            *reinterpret_cast<float2*>(dst + nb * 8) = make_float2(o[nb][2 * r] * inverse, o[nb][2 * r + 1] * inverse);
    }
}
