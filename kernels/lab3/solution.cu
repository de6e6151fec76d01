// Lab 3 reference solution: split-K decode against a paged KV cache, K/V shared by the KV group.
//
// Read this after finishing your own. Decode reads 4 KiB of K and V per key per KV head pair and
// does almost nothing with it, so the whole game is moving those bytes at the memory's speed:
//   1. Each K/V row is loaded once for the 4 query heads of its KV group (FlashInfer's grouped
//      decode): one block serves query heads 4g .. 4g + 3, so the starter's 4x re-read is gone.
//   2. Loads are float4 (16 bytes a lane, 256 bytes a half-warp: one K row of one KV head), and
//      each warp issues the loads of 8 keys before it uses any, so many bytes are in flight.
//   3. Each sequence is cut into partitions of PARTITION keys (Flash-Decoding, vLLM's paged
//      attention v2), one block each, so a 32,768-key sequence keeps 256 blocks busy (32 partitions
//      x 8 KV groups) instead of 32 warps, and the short sequences no longer wait behind it.
//
// Work split in decode_partial: 128 threads = 4 warps; a warp takes every 4th chunk of 8 keys of
// the partition (a chunk never crosses a page: partitions start on a page boundary). Lane l of a
// warp loads key 2u + l / 16 of the chunk (u = 0..3), dims 4 * (l % 16) .. + 3, of K and of V.
// Each half-warp carries its own online softmax state per head (m, l and a 64-wide accumulator
// spread over its 16 lanes); at the end the two halves and the four warps are merged, rescaling
// each by 2^(m_own - m_merged).
//
// Decode does so little arithmetic per byte that the instructions around it decide the speed: with
// a dot product finished by 16 shuffles per key and every lane of a half-warp computing the same
// exponential, the SMs issued an instruction on 69% of their cycles and the kernel reached 0.85 of
// a device copy. So the arithmetic is cut to what each byte needs:
//  - Four keys' dot products are summed over the half-warp's 16 lanes together, in 5 shuffles
//    instead of 16: at each of the first two steps a lane sends half of what it holds and keeps
//    the other half, so after all four steps lane l holds the whole dot product of one key,
//    2 * ((l % 16) / 4) + l / 16 of the chunk.
//  - Each key's exponential is computed by the 4 lanes that hold it, not by all 16; each lane's
//    share of l counts only its own keys and the four shares are summed once at the end.
//  - Scores are in base 2 (q is scaled by log2(e) / 8), so every exponential is one exp2f, and the
//    partial maxima that decode_combine reads are base-2 too.
//  - The 8 KV groups of a partition are neighbours in launch order, so the blocks that run
//    together read whole pages.
// decode_combine does the same merge across partitions: rescale every partition by
// 2^(partMax - globalMax) before adding, divide once. Empty partitions (a sequence shorter than
// its batch's longest) are never written and never read: the combine stops at the sequence's own
// partition count.
//
// What bounds it (H200, `attnlab grade lab3` and `attnlab profile lab3`, B = 64, the longest 32,768
// keys, 4.76 GB that must move at the default seed): 1.108 ms, 4.29 TB/s, 1.01 of a device copy
// timed in the same run (4.27 TB/s; the copy reads and writes, decode only reads), SPEEDUP 9.49x
// over the starter. Nsight Compute: memory-bound at 2.0 FLOP/B, 91% of the HBM bandwidth NVML
// states, DRAM bytes 1.005x the bytes that must move. Memory bandwidth: nothing is left to take but
// the bytes themselves. (512- and 2,048-key partitions gave 1.00 and 1.005 of the copy in one run
// beside 1,024's 1.016.)
constexpr int PARTITION = 1024;  // keys per partition: a multiple of the 8-key chunk and of the 16-row page
constexpr int THREADS = 128;
constexpr int WARPS = THREADS / 32;
constexpr int CHUNK = 8;        // keys a warp loads before it uses any
constexpr int PAGE = 16;
constexpr float SCALE_LOG2E = 0.125f * 1.4426950408889634f;  // the contract's 1/8, times log2(e)

extern "C" __constant__ int attnlab_partition_tokens = PARTITION;
extern "C" __constant__ int attnlab_heads_per_block = GROUP;
extern "C" __constant__ int attnlab_partial_threads = THREADS;
extern "C" __constant__ int attnlab_partial_smem_bytes = 0;
extern "C" __constant__ int attnlab_combine_threads = DH;

// 2^(m - mNew), where both may be -inf (a state that has seen no key yet): then nothing to rescale.
__device__ __forceinline__ float rescale(float m, float mNew) {
    return mNew == -INFINITY ? 1.0f : exp2f(m - mNew);
}

extern "C" __global__ void __launch_bounds__(THREADS)
decode_partial(const float* __restrict__ q, const float* __restrict__ kCache, const float* __restrict__ vCache,
               const int* __restrict__ blockTable, const int* __restrict__ seqLens, float* __restrict__ partOut,
               float* __restrict__ partMax, float* __restrict__ partSum, int maxPages, int maxParts) {
    __shared__ float stateM[WARPS][GROUP], stateL[WARPS][GROUP];
    __shared__ __align__(16) float stateAcc[WARPS][GROUP][DH];

    // The 8 KV groups of one partition are neighbours in launch order, so blocks running together
    // read whole pages (a page row holds all 8 KV heads side by side).
    const int order = blockIdx.y * gridDim.x + blockIdx.x;
    const int g = order % gridDim.y;  // the KV group: query heads 4g .. 4g + 3
    const int part = order / gridDim.y;
    const int b = blockIdx.z;
    const int len = seqLens[b];
    const int start = part * PARTITION;
    if (start >= len) return;  // an empty partition: the combine never reads it
    const int end = min(start + PARTITION, len);

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int half = lane / 16;
    const int sub = lane % 16;  // dims 4 * sub .. 4 * sub + 3

    float4 qv[GROUP];
#pragma unroll
    for (int i = 0; i < GROUP; ++i) {
        const float4 x = *reinterpret_cast<const float4*>(&q[((size_t)b * HQ + g * GROUP + i) * DH + 4 * sub]);
        qv[i] = make_float4(x.x * SCALE_LOG2E, x.y * SCALE_LOG2E, x.z * SCALE_LOG2E, x.w * SCALE_LOG2E);
    }
    float m[GROUP], l[GROUP];
    float4 acc[GROUP];
#pragma unroll
    for (int i = 0; i < GROUP; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        acc[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }

    const int* table = blockTable + (size_t)b * maxPages;
    for (int chunk = start + warp * CHUNK; chunk < end; chunk += WARPS * CHUNK) {
        const size_t pageBase = (size_t)table[chunk / PAGE] * PAGE;
        float4 kv[CHUNK / 2], vv[CHUNK / 2];
        bool valid[CHUNK / 2];
#pragma unroll
        for (int u = 0; u < CHUNK / 2; ++u) {
            const int key = chunk + 2 * u + half;
            valid[u] = key < end;  // a masked key is never loaded: its slot may hold NaN, and 0 * NaN is NaN
            const size_t at = ((pageBase + key % PAGE) * HKV + g) * DH + 4 * sub;
            kv[u] = valid[u] ? __ldg(reinterpret_cast<const float4*>(&kCache[at])) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            vv[u] = valid[u] ? __ldg(reinterpret_cast<const float4*>(&vCache[at])) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        const int mine = (sub >> 2) & 3;  // after the reduction this lane holds key 2 * mine + half of the chunk
        const bool mineValid = chunk + 2 * mine + half < end;
        const bool b3 = sub & 8, b2 = sub & 4;
#pragma unroll
        for (int i = 0; i < GROUP; ++i) {
            float d[CHUNK / 2];
#pragma unroll
            for (int u = 0; u < CHUNK / 2; ++u)
                d[u] = qv[i].x * kv[u].x + qv[i].y * kv[u].y + qv[i].z * kv[u].z + qv[i].w * kv[u].w;
            // Four keys' dot products summed over 16 lanes with 5 shuffles, not 16: each step sends
            // half of what a lane holds and keeps the other half, so every lane ends with one key.
            const float x0 = (b3 ? d[2] : d[0]) + __shfl_xor_sync(0xffffffffu, b3 ? d[0] : d[2], 8);
            const float x1 = (b3 ? d[3] : d[1]) + __shfl_xor_sync(0xffffffffu, b3 ? d[1] : d[3], 8);
            float y = (b2 ? x1 : x0) + __shfl_xor_sync(0xffffffffu, b2 ? x0 : x1, 4);
            y += __shfl_xor_sync(0xffffffffu, y, 2);
            y += __shfl_xor_sync(0xffffffffu, y, 1);
            const float score = mineValid ? y : -INFINITY;
            float chunkMax = fmaxf(score, __shfl_xor_sync(0xffffffffu, score, 4));
            chunkMax = fmaxf(chunkMax, __shfl_xor_sync(0xffffffffu, chunkMax, 8));
            const float mNew = fmaxf(m[i], chunkMax);
            const float alpha = rescale(m[i], mNew);
            const float p = mineValid ? exp2f(score - mNew) : 0.0f;
            l[i] = l[i] * alpha + p;  // this lane's key only: summed over the four keys at the end
            float4 a = make_float4(acc[i].x * alpha, acc[i].y * alpha, acc[i].z * alpha, acc[i].w * alpha);
#pragma unroll
            for (int u = 0; u < CHUNK / 2; ++u) {
                const float pu = __shfl_sync(0xffffffffu, p, (lane & 16) | (u << 2));
                a.x += pu * vv[u].x;
                a.y += pu * vv[u].y;
                a.z += pu * vv[u].z;
                a.w += pu * vv[u].w;
            }
            m[i] = mNew;
            acc[i] = a;
        }
    }

    // Each lane's l counts its own key of every chunk: sum the four keys' lanes of the half-warp.
#pragma unroll
    for (int i = 0; i < GROUP; ++i) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 4);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 8);
    }

    // Merge the two half-warps (lane l and lane l ^ 16 hold the same dims), then the four warps.
#pragma unroll
    for (int i = 0; i < GROUP; ++i) {
        const float mo = __shfl_xor_sync(0xffffffffu, m[i], 16);
        const float lo = __shfl_xor_sync(0xffffffffu, l[i], 16);
        float4 ao;
        ao.x = __shfl_xor_sync(0xffffffffu, acc[i].x, 16);
        ao.y = __shfl_xor_sync(0xffffffffu, acc[i].y, 16);
        ao.z = __shfl_xor_sync(0xffffffffu, acc[i].z, 16);
        ao.w = __shfl_xor_sync(0xffffffffu, acc[i].w, 16);
        const float mNew = fmaxf(m[i], mo);
        const float fa = rescale(m[i], mNew), fb = rescale(mo, mNew);
        if (half == 0) {
            if (sub == 0) {
                stateM[warp][i] = mNew;
                stateL[warp][i] = l[i] * fa + lo * fb;
            }
            *reinterpret_cast<float4*>(&stateAcc[warp][i][4 * sub]) =
                make_float4(acc[i].x * fa + ao.x * fb, acc[i].y * fa + ao.y * fb,
                            acc[i].z * fa + ao.z * fb, acc[i].w * fa + ao.w * fb);
        }
    }
    __syncthreads();

    // Thread t merges head t / 32, dims 2 * (t % 32) and 2 * (t % 32) + 1, over the four warps.
    const int i = threadIdx.x / 32;
    const int d = 2 * lane;
    float mAll = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) mAll = fmaxf(mAll, stateM[w][i]);
    float sum = 0.0f, o0 = 0.0f, o1 = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
        const float f = rescale(stateM[w][i], mAll);  // a warp that saw no key has l = 0 and acc = 0
        sum += f * stateL[w][i];
        o0 += f * stateAcc[w][i][d];
        o1 += f * stateAcc[w][i][d + 1];
    }
    const size_t slot = ((size_t)b * HQ + g * GROUP + i) * maxParts + part;
    *reinterpret_cast<float2*>(&partOut[slot * DH + d]) = make_float2(o0, o1);
    if (lane == 0) {
        partMax[slot] = mAll;
        partSum[slot] = sum;
    }
}

extern "C" __global__ void __launch_bounds__(DH)
decode_combine(const float* __restrict__ partOut, const float* __restrict__ partMax,
               const float* __restrict__ partSum, const int* __restrict__ seqLens, float* __restrict__ out,
               int maxParts) {
    // One block per (query head, sequence), one thread per dim.
    const int h = blockIdx.x;
    const int b = blockIdx.y;
    const int d = threadIdx.x;
    const int parts = (seqLens[b] + PARTITION - 1) / PARTITION;  // this sequence's non-empty partitions
    const size_t slot = ((size_t)b * HQ + h) * maxParts;
    float mAll = -INFINITY;
    for (int p = 0; p < parts; ++p) mAll = fmaxf(mAll, partMax[slot + p]);
    // Partition maxima can differ by more than 128: 2^(partMax - mAll) is at most 1, never inf.
    float sum = 0.0f, o = 0.0f;
    for (int p = 0; p < parts; ++p) {
        const float f = exp2f(partMax[slot + p] - mAll);
        sum += f * partSum[slot + p];
        o += f * partOut[(slot + p) * DH + d];
    }
    out[((size_t)b * HQ + h) * DH + d] = o / sum;
}
