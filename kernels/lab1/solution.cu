// Lab 1 reference solution: the full score matrix, three kernels, near the memory floor.
//
// Read this after finishing your own. The three kernels are the oracle made literal, and the
// [32][T][T] workspace between them is the point of the lab: at T = 2048 it is 512 MiB. What the
// pipeline must move is fixed by the contract, whatever the kernels look like:
//   attn_scores        writes the visible (causal) half of the matrix     T(T+1)/2 floats per head
//   attn_softmax       reads that half and writes every row whole          T(T+1)/2 + T*T
//   attn_weighted_sum  reads the visible half                              T(T+1)/2
// 2.5 T^2 floats per head: 1.25 GiB at T = 2048, a third of a millisecond at an H200's copy
// bandwidth. This file gets close to that floor, so the cost table shows what the matrix itself
// costs and not what slow kernels cost; `attnlab bench lab1` prints each kernel's GB/s.
//
// The two matmuls do 8.6 GFLOP each at T = 2048. On FP32 multiply-adds (67 TFLOP/s at best) that
// alone is about 0.13 ms per matmul, more than the bytes take. So they run on the tensor cores with
// error compensation: each float32 operand x is split into big = x cut to 11 significant bits and
// small = x - big, and a*b ~ aSmall*bBig + aBig*bSmall + aBig*bBig, three tensor-core products per
// float32 product (aSmall*bSmall is below float32's own rounding and is dropped). big + small
// carries 22 of float32's 24 bits, which keeps the pass rule's accuracy (the planted scores of 128
// must come out right to 1e-3). kernels/lab2/expert.cu explains the method on TF32 (CUTLASS's
// 3xTF32); this file does the same with FP16 operands, on mma.sync's m16n8k16 shape:
//  - FP16 and TF32 have the same 11-bit significand, so big and small are exactly as precise, but
//    one FP16 mma.sync does twice the products of a TF32 one in the same issue slot (646 against
//    323 TFLOP/s on an H200, `python scripts/mma_peak.py`), and half-size operands halve the
//    shared-memory traffic of every fragment.
//  - The price is FP16's range: 5 exponent bits, largest value 65504. big is x with its low 13
//    mantissa bits cleared, exact in FP16 for |x| in [2^-14, 65504]; the contract's inputs are
//    normal draws (planted ones are 4.0), far inside. Inputs of 65520 or more would turn big into
//    infinity: this kernel is not for such data. A probability p is in [0, 1] and can be tiny, so
//    P is scaled by 2^14 before the split and the sum by 2^-14 after (both exact): the remainders of
//    small probabilities then stay out of FP16's subnormals.
// The softmax is pure bandwidth.
//
// What bounds it (H200, `attnlab bench lab1 --vs torch`, T = 2048): the whole call 0.427 ms, 4.26x
// eager PyTorch (1.820 ms) and 1.27x the floor above (0.335 ms at the same run's 4.13 TB/s copy).
// The softmax moves its bytes at 95% of the copy's bandwidth (0.205 ms); the scores take 0.114 ms
// (61%) and the weighted sum 0.109 ms (64%). Each matmul issues 6.5 million m16n8k16 products, so
// they run their FP16 products at about 234 and 244 TFLOP/s: 36% and 38% of what `mma.sync` gives
// at best (646 TFLOP/s, `python scripts/mma_peak.py`). What was measured on the way, each change
// timed against the last in one run:
//  - 3xTF32 on m16n8k8 (this file's first tensor-core form): scores 0.208 ms, weighted sum 0.302 ms.
//  - The same kernels in 3xFP16: 0.154 and 0.238 ms.
//  - Scores written through shared memory, so each row of a warp's 16 x 64 tile left as 256
//    contiguous bytes (the fragments' float2 touched 8 rows per store: Nsight Compute had the L1 at
//    92% of its throughput), and K staged from whole rows: 0.120 ms.
//  - Weighted sum at three blocks per SM with V staged one tile ahead and P read straight into
//    fragments: 0.196 ms. Nsight Compute then had its L1 at 92%, and each of V's loads touched 16
//    key rows for 32 bytes apiece. V now arrives as whole 256-byte rows and is stored with an XOR on
//    its slots to keep the shared-memory banks apart: 0.147 ms.
//  - Scores' keys interleaved across each pair of 8-key blocks (see attn_scores), so every lane
//    holds four consecutive keys and stores them as one float4 with no trip through shared memory:
//    0.122 -> 0.114 ms. Nsight Compute had the scores' L1 at 83% of its throughput (its data pipe
//    at 79%): of 21.8 million wavefronts, 10.9 million were shared-memory loads (mostly the K
//    fragments every warp reads) and 4.4 million shared-memory stores (mostly the staging, now gone).
//  - Weighted sum with P copied by cp.async one tile ahead into slots of each thread's own, instead of
//    loaded into registers at each tile's start: 0.146 -> 0.136 ms. Nsight Compute had "long
//    scoreboard" (waiting on global loads) as the largest stall, 2.3 of 6.5 cycles per instruction.
//  - Weighted-sum blocks handed out longest first across all heads (they ran longest first within
//    each head, one head after another, so the long blocks of the last heads started late and ran
//    on alone at the end): 0.136 -> 0.110 ms. Without the cp.async step the same order gives 0.120 ms.
//  - Tried and not kept: P staged through shared memory from whole rows (0.32 to 0.39 ms: the
//    extra shared-memory traffic lands on the same L1), the next tile's P loaded into the registers
//    each k-step frees (0.266 ms), four or five blocks per SM without the V prefetch (0.158 ms with
//    V's whole-row loads), double-buffered K and V tiles with one barrier a tile (0.129 and 0.151
//    ms), 512 keys per scores block and 32-row warps sharing every K fragment between two m16
//    tiles (both 0.123 ms: halving the fragment loads changed nothing), streaming cache hints on P
//    and S (within 2%), scores at four blocks per SM loading K at each tile's start, and the
//    softmax reading the rows the scores wrote last first, for what L2 still holds (both within 1%);
//    K copied by cp.async so the scores run four blocks per SM (0.118 ms), P three and four tiles
//    ahead (0.141 and 0.142 ms before the block order changed; 0.116 ms after it), and the three
//    products of each fragment grouped across all eight blocks, or the V fragments' addresses cut
//    to two per-lane bases plus immediates (0.140 and 0.139 ms against 0.136: the SASS shows ptxas
//    already interleaving the products of different blocks); after the block-order change, scores
//    blocks mapped so the causal chunks of all heads come first and the empty ones last, and 512
//    keys per scores block again (0.115 and 0.113 ms, within 1%).
// Both matmuls run three blocks of four warps per SM, the most their registers allow, and both are
// bound by the L1 now: Nsight Compute has it at 83% of its throughput in the scores and 81% in the
// weighted sum (its data pipe at 78% and 77%), the tensor pipe at 37% and 41%. Shared-memory loads
// are the largest share (8.8 and 10.8 million wavefronts), because every warp still reads the whole K
// or V tile as its B fragments. The next step is wgmma, Hopper's warp-group MMA, which reads B
// straight from shared memory through a descriptor: no B fragments through the L1 for every warp.
//
// Launch geometry (read by the driver from these constants):
//   attn_scores:       one block of 4 warps per 64 rows x 256 keys of one head, in four 64-key steps
//   attn_softmax:      one warp per row, 8 rows per block
//   attn_weighted_sum: one block of 4 warps per 64 rows x all 64 dims of one head
extern "C" __constant__ int attnlab_scores_threads_x = 128;
extern "C" __constant__ int attnlab_scores_threads_y = 1;
extern "C" __constant__ int attnlab_scores_tile_keys = 256;
extern "C" __constant__ int attnlab_scores_tile_rows = 64;
extern "C" __constant__ int attnlab_scores_smem_bytes = 64 * 80 * 4;  // one 64-key K tile, split: 20,480 bytes
extern "C" __constant__ int attnlab_softmax_threads = 256;
extern "C" __constant__ int attnlab_softmax_rows_per_block = 8;
extern "C" __constant__ int attnlab_wsum_threads_x = 128;
extern "C" __constant__ int attnlab_wsum_threads_y = 1;
extern "C" __constant__ int attnlab_wsum_tile_dims = 64;
extern "C" __constant__ int attnlab_wsum_tile_rows = 64;
extern "C" __constant__ int attnlab_wsum_smem_bytes = 64 * 80 * 4 + 2 * 8 * 128 * 16;  // V tile, split; two tiles of P: 53,248 bytes

constexpr int TILE = 64;          // rows per block; keys per staged K or V tile
constexpr int KEY_STEPS = 4;      // K tiles per scores block: 256 keys, one load of Q's rows for all of them
constexpr int THREADS = 128;      // both matmul kernels: 4 warps of 16 rows
constexpr int PITCH = 80;         // 32-bit words per staged K key or V dim: 64 of FP16 pairs, padded off the bank stride
constexpr int STAGED = TILE * DH / 4 / THREADS;  // float4 of a 64 x 64 K or V tile per thread: 8
constexpr float P_SCALE = 16384.0f, P_UNSCALE = 1.0f / 16384.0f;  // 2^14 and back, both exact

// -- 3xFP16 on mma.sync ----------------------------------------------------------------------
// D += A * B for one warp: A 16 x 16, B 16 x 8 (FP16, two per 32-bit register, the lower index in
// the low half), D 16 x 8 float32. With g = lane / 4 and t = lane % 4 (PTX ISA, "Matrix Fragments
// for mma.m16n8k16"):
//   A: a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9]
//   B: b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]
//   D: d0 = D[g][2t], d1 = D[g][2t+1], d2 = D[g+8][2t], d3 = D[g+8][2t+1]
// A dot product does not care in which order its terms are summed, so every 16-long k-step hands
// lane t the four consecutive elements 4t .. 4t+3 as its k-slots 2t, 2t+1, 2t+8, 2t+9, in both
// operands alike: one 16-byte load feeds a lane's whole fragment, big and small.
__device__ __forceinline__ void mma_f16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The small terms first, so they are not lost against the large one.
__device__ __forceinline__ void mma_3xf16(float (&d)[4], const unsigned (&aBig)[4], const unsigned (&aSmall)[4],
                                          const unsigned (&bBig)[2], const unsigned (&bSmall)[2]) {
    mma_f16(d, aSmall, bBig);
    mma_f16(d, aBig, bSmall);
    mma_f16(d, aBig, bBig);
}

// Two floats to one register of two FP16, rounded to nearest even; `low` goes in the low half.
__device__ __forceinline__ unsigned half2_bits(float low, float high) {
    unsigned d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(high), "f"(low));
    return d;
}

// x = big + small for two neighbours. big is x with its low 13 mantissa bits cleared (one integer
// AND): 11 significant bits, which FP16 holds exactly, so its conversion rounds nothing. small =
// x - big is exact in float32 and is rounded to FP16's 11 bits in turn.
__device__ __forceinline__ void split2(float x0, float x1, unsigned& big, unsigned& small) {
    const float b0 = __uint_as_float(__float_as_uint(x0) & 0xffffe000u);
    const float b1 = __uint_as_float(__float_as_uint(x1) & 0xffffe000u);
    big = half2_bits(b0, b1);
    small = half2_bits(x0 - b0, x1 - b1);
}

// Four consecutive elements as one lane's fragment words: {big(x,y), big(z,w), small(x,y), small(z,w)}.
__device__ __forceinline__ uint4 split4(float4 x) {
    uint4 w;
    split2(x.x, x.y, w.x, w.z);
    split2(x.z, x.w, w.y, w.w);
    return w;
}

// A tile's raw K (or V) in registers: the next tile is loaded from global memory while the tensor
// cores work on the current one, and written to shared memory (split) after the barrier. Loading
// straight into shared memory would leave every warp waiting on those loads each tile.
struct StagedTile {
    float4 x[STAGED];
};

// K: float4 number f = i * THREADS + threadIdx.x of the tile is key f / 16, dims 4 (f % 16) .. + 3,
// so a warp's load covers two whole 256-byte key rows. It is stored split at kS[key][f % 16]:
// k-step (f % 16) / 4, lane slot f % 4, exactly the 16 bytes lane t = f % 4 reads as its B fragment.
// The 8 lanes of a quarter-warp store 8 consecutive slots of one key: 8 different bank groups.
__device__ __forceinline__ void load_k_tile(StagedTile& tile, const float* k, int firstKey, int g, int T) {
#pragma unroll
    for (int i = 0; i < STAGED; ++i) {
        const int f = i * THREADS + threadIdx.x;
        const int key = firstKey + f / 16;
        tile.x[i] = key < T ? *reinterpret_cast<const float4*>(k + ((size_t)key * HKV + g) * DH + (f % 16) * 4)
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

__device__ __forceinline__ void store_k_tile(unsigned* kS, const StagedTile& tile) {
#pragma unroll
    for (int i = 0; i < STAGED; ++i) {
        const int f = i * THREADS + threadIdx.x;
        *reinterpret_cast<uint4*>(kS + (f / 16) * PITCH + (f % 16) * 4) = split4(tile.x[i]);
    }
}

// Scores: S = Q K^T / 8 for 64 rows x 256 keys of one head, in four 64-key tiles. Each warp keeps
// its 16 rows of Q in registers, split once for all four tiles, and computes 16 x 64 scores a tile.
// Tiles wholly above the diagonal write nothing: the softmax never reads there, and it writes the
// zeros itself. The 1/8 is applied to the sums (exact: a power of two).
//
// Which key feeds which column of an 8-key block is ours to choose, as long as the stores agree. Lane
// (g, t) ends with columns 2t, 2t + 1 of each block, so block 2m takes keys 16m + {0,1, 4,5, 8,9,
// 12,13} and block 2m + 1 keys 16m + {2,3, 6,7, 10,11, 14,15}: column c of block 2m + b is key
// 16m + 4 (c / 2) + 2b + c % 2. Lane t then holds keys 16m + 4t .. 4t + 3 of its two rows, one
// float4 each, and writes them straight to global memory (a quad covers 64 contiguous bytes of a row).
__device__ __forceinline__ int interleaved_key(int nb, int column) { return 16 * (nb / 2) + 4 * (column / 2) + 2 * (nb % 2) + column % 2; }

extern "C" __global__ void __launch_bounds__(THREADS, 3) attn_scores(const float* q, const float* k, float* scores, int T) {
    extern __shared__ __align__(16) unsigned kS[];
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
    unsigned qBig[DH / 16][4], qSmall[DH / 16][4];
    {
        const int rowA = rowBase + gr, rowB = rowA + 8;
        const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int step = 0; step < DH / 16; ++step) {
            const float4 a = rowA < T ? *reinterpret_cast<const float4*>(q + ((size_t)rowA * HQ + h) * DH + step * 16 + 4 * t) : zero;
            const float4 b = rowB < T ? *reinterpret_cast<const float4*>(q + ((size_t)rowB * HQ + h) * DH + step * 16 + 4 * t) : zero;
            split2(a.x, a.y, qBig[step][0], qSmall[step][0]);
            split2(b.x, b.y, qBig[step][1], qSmall[step][1]);
            split2(a.z, a.w, qBig[step][2], qSmall[step][2]);
            split2(b.z, b.w, qBig[step][3], qSmall[step][3]);
        }
    }

    for (int firstKey = blockFirstKey; firstKey < blockFirstKey + TILE * KEY_STEPS && firstKey <= lastKey; firstKey += TILE) {
        __syncthreads();  // every warp is done with the previous tile
        store_k_tile(kS, next);
        __syncthreads();
        if (firstKey + TILE < blockFirstKey + TILE * KEY_STEPS && firstKey + TILE <= lastKey) load_k_tile(next, k, firstKey + TILE, g, T);

        float s[TILE / 8][4] = {};
#pragma unroll
        for (int step = 0; step < DH / 16; ++step)
#pragma unroll
            for (int nb = 0; nb < TILE / 8; ++nb) {
                const uint4 kf = *reinterpret_cast<const uint4*>(kS + interleaved_key(nb, gr) * PITCH + step * 16 + t * 4);
                const unsigned bBig[2] = {kf.x, kf.y};
                const unsigned bSmall[2] = {kf.z, kf.w};
                mma_3xf16(s[nb], qBig[step], qSmall[step], bBig, bSmall);
            }

        // s[2m][0..1] and s[2m + 1][0..1] are keys 16m + 4t .. 4t + 3 of row gr; [2..3] the same of row
        // gr + 8. Above the diagonal inside this tile the values are real products, not -INFINITY: the
        // contract leaves that part to the softmax.
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = rowBase + gr + 8 * r;
            if (row >= T) continue;
            float* dstRow = scores + ((size_t)h * T + row) * T;
#pragma unroll
            for (int m = 0; m < TILE / 16; ++m) {
                const int key = firstKey + 16 * m + 4 * t;
                const float4 x = make_float4(s[2 * m][2 * r] * 0.125f, s[2 * m][2 * r + 1] * 0.125f,
                                             s[2 * m + 1][2 * r] * 0.125f, s[2 * m + 1][2 * r + 1] * 0.125f);
                float* dst = dstRow + key;
                if (T % 4 == 0) {  // rows start 16-byte aligned and key + 3 < T
                    if (key < T) *reinterpret_cast<float4*>(dst) = x;
                } else {
                    if (key < T) dst[0] = x.x;
                    if (key + 1 < T) dst[1] = x.y;
                    if (key + 2 < T) dst[2] = x.z;
                    if (key + 3 < T) dst[3] = x.w;
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
// block's last row have probability 0, so the loop stops at the diagonal. k-step ks covers keys
// 16 ks .. 16 ks + 15 of the tile, and lane t takes keys 4t .. 4t + 3 (see the fragments above): P
// comes one float4 per row and k-step (a quad reads 64 contiguous bytes of a row), copied into shared
// memory one tile ahead, and V is staged in the same key order, also one tile ahead.
//
// Row 0 sees key 0 alone, with probability exactly 1, and must return V's first row exactly. The
// split carries 22 of float32's 24 bits, so that row is one product done in float32 instead, P[0][0] V[0].

// P arrives by cp.async: the copy engine moves global memory straight into shared memory, holding no
// register while it waits, and the thread asks for it with cp.async.wait_group only when it needs the
// tile. Each thread copies exactly the 16-byte pieces it will read itself (its A fragments), into
// slots of its own, so no other thread touches them and no barrier guards them: the wait is enough.
// src-size 0 fills the slot with zeros, which is how keys past the block's last visible key arrive.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    const unsigned window = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(window), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
    const unsigned window = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(window), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING)); }

// One tile of this thread's P: slot 2 ks + r holds keys tileStart + 16 ks + 4t .. + 3 of row r (rowA,
// rowB), at slots[(2 ks + r) * THREADS + threadIdx.x] (a warp's 32 slots are 512 contiguous bytes).
__device__ __forceinline__ void copy_p_tile(float4* slots, const float* pA, const float* pB, int tileStart, int lastKey, bool quads) {
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int ks = 0; ks < TILE / 16; ++ks)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float* p = r == 0 ? pA : pB;
            const int key = tileStart + ks * 16 + 4 * t;
            float4* dst = slots + (2 * ks + r) * THREADS + threadIdx.x;
            if (quads) {  // T % 4 == 0: lastKey + 1 is a multiple of 4, so a float4 is wholly in or out
                cp_async16(dst, key <= lastKey ? p + key : p, key <= lastKey);
            } else {
                float* d = reinterpret_cast<float*>(dst);
#pragma unroll
                for (int j = 0; j < 4; ++j) cp_async4(d + j, key + j <= lastKey ? p + key + j : p, key + j <= lastKey);
            }
        }
}

// V piece n: key quad kq = 8n + 2 warp + lane / 16 (keys 4 kq .. 4 kq + 3), dims 4 dq .. 4 dq + 3
// with dq = lane % 16: each load covers two whole 256-byte key rows, 16 lanes each.
__device__ __forceinline__ void load_v_tile(StagedTile& tile, const float* v, int tileStart, int g, int T) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int n = 0; n < STAGED / 4; ++n) {
        const int kq = 8 * n + 2 * warp + lane / 16, dq = lane % 16;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int key = tileStart + 4 * kq + i;
            tile.x[4 * n + i] = key < T ? *reinterpret_cast<const float4*>(v + ((size_t)key * HKV + g) * DH + dq * 4)
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
}

// vS: [dim][slot kq ^ (dq & 7)][big(k0,k1), big(k2,k3), small(k0,k1), small(k2,k3)], dq = dim / 4.
// The XOR spreads a quarter-warp's stores (one kq, 8 dq) over 8 bank groups and keeps the reads
// (two neighbouring dims, 4 slots) on 8 as well.
__device__ __forceinline__ int v_slot(int dim, int kq) { return kq ^ ((dim / 4) & 7); }

__device__ __forceinline__ void store_v_tile(unsigned* vS, const StagedTile& tile) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int n = 0; n < STAGED / 4; ++n) {
        const int kq = 8 * n + 2 * warp + lane / 16, dq = lane % 16;
        const float4* x = tile.x + 4 * n;
        unsigned* dst = vS + (dq * 4) * PITCH + v_slot(dq * 4, kq) * 4;
        *reinterpret_cast<uint4*>(dst) = split4(make_float4(x[0].x, x[1].x, x[2].x, x[3].x));
        *reinterpret_cast<uint4*>(dst + PITCH) = split4(make_float4(x[0].y, x[1].y, x[2].y, x[3].y));
        *reinterpret_cast<uint4*>(dst + 2 * PITCH) = split4(make_float4(x[0].z, x[1].z, x[2].z, x[3].z));
        *reinterpret_cast<uint4*>(dst + 3 * PITCH) = split4(make_float4(x[0].w, x[1].w, x[2].w, x[3].w));
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 3)
attn_weighted_sum(const float* scores, const float* v, float* out, int T) {
    extern __shared__ __align__(16) unsigned vS[];
    float4* pS = reinterpret_cast<float4*>(vS + TILE * PITCH);  // after the V tile: 2 tiles x 8 slots x THREADS
    // Blocks start in the order of their linear index, y fastest. Row blocks are handed out longest
    // first across all heads at once, so no long block starts late and the short ones fill the tail.
    const int linear = blockIdx.y + gridDim.y * blockIdx.z;
    const int h = linear % HQ;
    const int g = h / GROUP;
    const int firstRow = (gridDim.y - 1 - linear / HQ) * TILE;
    const int lastKey = min(T - 1, firstRow + TILE - 1);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int gr = lane / 4, t = lane % 4;
    const int rowA = firstRow + warp * 16 + gr, rowB = rowA + 8;
    const float* pA = scores + ((size_t)h * T + min(rowA, T - 1)) * T;  // clamped: rows past T compute, never store
    const float* pB = scores + ((size_t)h * T + min(rowB, T - 1)) * T;
    const bool quads = T % 4 == 0;

    float o[DH / 8][4] = {};
    StagedTile next;
    load_v_tile(next, v, 0, g, T);
    copy_p_tile(pS, pA, pB, 0, lastKey, quads);
    cp_async_commit();
    for (int tileStart = 0, buffer = 0; tileStart <= lastKey; tileStart += TILE, buffer ^= 1) {
        __syncthreads();  // every warp is done with the previous V tile
        store_v_tile(vS, next);
        __syncthreads();
        if (tileStart + TILE <= lastKey) {
            load_v_tile(next, v, tileStart + TILE, g, T);
            // Into the other buffer: this thread read it last tile, and nobody else reads it.
            copy_p_tile(pS + (buffer ^ 1) * 8 * THREADS, pA, pB, tileStart + TILE, lastKey, quads);
        }
        cp_async_commit();   // a group every tile, empty at the end, so the count below stays right
        cp_async_wait<1>();  // every group but the newest is complete: this tile's P has landed
        const float4* p = pS + buffer * 8 * THREADS + threadIdx.x;
#pragma unroll
        for (int ks = 0; ks < TILE / 16; ++ks) {
            unsigned aBig[4], aSmall[4];
            const float4 a = p[(2 * ks) * THREADS], b = p[(2 * ks + 1) * THREADS];
            split2(a.x * P_SCALE, a.y * P_SCALE, aBig[0], aSmall[0]);
            split2(b.x * P_SCALE, b.y * P_SCALE, aBig[1], aSmall[1]);
            split2(a.z * P_SCALE, a.w * P_SCALE, aBig[2], aSmall[2]);
            split2(b.z * P_SCALE, b.w * P_SCALE, aBig[3], aSmall[3]);
#pragma unroll
            for (int nb = 0; nb < DH / 8; ++nb) {
                const uint4 vf = *reinterpret_cast<const uint4*>(vS + (nb * 8 + gr) * PITCH + v_slot(nb * 8 + gr, 4 * ks + t) * 4);
                const unsigned bBig[2] = {vf.x, vf.y};
                const unsigned bSmall[2] = {vf.z, vf.w};
                mma_3xf16(o[nb], aBig, aSmall, bBig, bSmall);
            }
        }
    }
#pragma unroll
    for (int nb = 0; nb < DH / 8; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[nb][i] *= P_UNSCALE;

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
