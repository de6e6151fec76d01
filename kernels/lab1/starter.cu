// Lab 1: the full score matrix.
//
// Attention the way an eager framework runs it: a scores matmul, a row softmax and a weighted
// sum, three kernels with the whole T x T score matrix of every head in global memory between
// them. It is the oracle made literal: score every key, softmax the scores, take the weighted
// sum of the values. Then `attnlab grade` shows what that matrix costs as the prompt grows.
//
// Shapes (attention-v1, Llama-3.2-1B): q is [T][32][64], k and v are [T][8][64], out is
// [T][32][64], all float32 and C-contiguous. Query head h reads KV head h / GROUP (GROUP = 4),
// by index: never copy K or V. The prompt is causal: row i sees keys j <= i. The scale is
// exactly 1/8. The driver allocates the workspace scores as [32][T][T] float32, head-major
// (scores[h][i][j] lives at (h * T + i) * T + j), poisons it and the output, and launches the
// three kernels below in order. The prelude gives HQ, HKV, DH, GROUP and INFINITY.
//
// Launch geometry (the driver reads these exported constants from your compiled module; change
// them here if your kernels want other tiles or thread counts, never in Python):
//   attn_scores:       block (scores_threads_x, scores_threads_y), grid
//                      (ceil(T / scores_tile_keys), ceil(T / scores_tile_rows), 32): by default
//                      thread (x, y) owns score (row = by*16 + y, key = bx*16 + x) of head bz.
//   attn_softmax:      block (softmax_threads), grid (ceil(T / softmax_rows_per_block), 32):
//                      by default one block of 256 threads per (row, head).
//   attn_weighted_sum: block (wsum_threads_x, wsum_threads_y), grid
//                      (ceil(64 / wsum_tile_dims), ceil(T / wsum_tile_rows), 32): by default
//                      thread (x, y) owns output (row = by*16 + y, dim = bx*16 + x) of head bz.
// Each *_smem_bytes is that kernel's dynamic shared memory (0 unless you export it).
//
// Every constant has an upper bound; past it the file is a compile error that names it:
//   *_threads*        at most 1,024, and x * y at most 1,024: the threads a CUDA block holds.
//   *_tile_keys, *_tile_rows, softmax_rows_per_block
//                     at most 1,024 rows or keys: the longest T timed is 2,048, so a larger tile
//                     leaves it one block, and a block owning more rows than threads is a loop.
//   wsum_tile_dims    at most 64: a head has 64 dims.
//   *_smem_bytes      at most 232,448 (227 KiB): the most one block may have on Hopper (H100, H200).
extern "C" __constant__ int attnlab_scores_threads_x = 16;        // at most 1024
extern "C" __constant__ int attnlab_scores_threads_y = 16;        // at most 1024, x * y at most 1024
extern "C" __constant__ int attnlab_scores_tile_keys = 16;        // at most 1024
extern "C" __constant__ int attnlab_scores_tile_rows = 16;        // at most 1024
extern "C" __constant__ int attnlab_softmax_threads = 256;        // at most 1024
extern "C" __constant__ int attnlab_softmax_rows_per_block = 1;   // at most 1024
extern "C" __constant__ int attnlab_wsum_threads_x = 16;          // at most 1024
extern "C" __constant__ int attnlab_wsum_threads_y = 16;          // at most 1024, x * y at most 1024
extern "C" __constant__ int attnlab_wsum_tile_dims = 16;          // at most 64
extern "C" __constant__ int attnlab_wsum_tile_rows = 16;          // at most 1024

// q: [T][32][64], k: [T][8][64], scores: [32][T][T] (written here).
// Write scores[h][i][j] = (q[i][h] . k[j][h / 4]) / 8 for j <= i, and -INFINITY for j > i.
// This is your tiled matmul from the Matrix multiplication path, one head per blockIdx.z.
extern "C" __global__ void attn_scores(const float* q, const float* k, float* scores, int T) {
    // TODO: your scores kernel.
}

// scores: [32][T][T], normalized in place, one row of one head at a time.
// Subtract the row max before exponentiating: planted positions score 128 against each other,
// and expf overflows near 88. Row i's probabilities for j <= i sum to 1; write 0 for j > i.
extern "C" __global__ void attn_softmax(float* scores, int T) {
    // TODO: your softmax kernel (Reduction 5's stable softmax).
}

// scores: [32][T][T] probabilities, v: [T][8][64], out: [T][32][64] (written here).
// out[i][h][d] = sum over j of scores[h][i][j] * v[j][h / 4][d]: a second matmul.
extern "C" __global__ void attn_weighted_sum(const float* scores, const float* v, float* out, int T) {
    // TODO: your weighted-sum kernel.
}
