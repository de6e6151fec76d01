// A tiled variant of the lab-2 kernel: K/V tiles of 64 keys staged in dynamic
// shared memory by the whole block, then one warp per row (8 rows per warp).
#define TILE_KEYS 64

extern "C" __global__ void flash_prefill(const float* __restrict__ q, const float* __restrict__ kCache,
                                         const float* __restrict__ vCache, float* __restrict__ out,
                                         int chunkLen, int prefixLen) {
  extern __shared__ float smem[];
  float* Ks = smem;                          // [TILE_KEYS][DH + 1]
  float* Vs = smem + TILE_KEYS * (DH + 1);   // [TILE_KEYS][DH]
  const int h = blockIdx.y, g = h / GROUP;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rowBase = blockIdx.x * 64;
  float q0[8], q1[8], m[8], l[8], a0[8], a1[8];
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int row = rowBase + warp * 8 + r;
    const bool valid = row < chunkLen;
    q0[r] = valid ? q[(size_t)row * HQ * DH + h * DH + lane] : 0.0f;
    q1[r] = valid ? q[(size_t)row * HQ * DH + h * DH + lane + 32] : 0.0f;
    m[r] = -INFINITY; l[r] = 0.0f; a0[r] = 0.0f; a1[r] = 0.0f;
  }
  const int lastRow = min(rowBase + 63, chunkLen - 1);
  const int nKeys = prefixLen + lastRow + 1;
  for (int t = 0; t < nKeys; t += TILE_KEYS) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < TILE_KEYS * DH; idx += blockDim.x) {
      const int j = idx / DH, d = idx % DH, key = t + j;
      Ks[j * (DH + 1) + d] = key < nKeys ? kCache[(size_t)key * HKV * DH + g * DH + d] : 0.0f;
      Vs[j * DH + d] = key < nKeys ? vCache[(size_t)key * HKV * DH + g * DH + d] : 0.0f;
    }
    __syncthreads();
    for (int r = 0; r < 8; ++r) {
      const int row = rowBase + warp * 8 + r;
      if (row >= chunkLen) continue;
      const int jmax = min(TILE_KEYS, prefixLen + row - t + 1);
      for (int j = 0; j < jmax; ++j) {
        float dot = q0[r] * Ks[j * (DH + 1) + lane] + q1[r] * Ks[j * (DH + 1) + lane + 32];
        for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        const float s = dot * 0.125f;
        const float mNew = fmaxf(m[r], s);
        const float alpha = __expf(m[r] - mNew), p = __expf(s - mNew);
        l[r] = alpha * l[r] + p;
        a0[r] = alpha * a0[r] + p * Vs[j * DH + lane];
        a1[r] = alpha * a1[r] + p * Vs[j * DH + lane + 32];
        m[r] = mNew;
      }
    }
  }
  for (int r = 0; r < 8; ++r) {
    const int row = rowBase + warp * 8 + r;
    if (row >= chunkLen) return;
    out[(size_t)row * HQ * DH + h * DH + lane] = a0[r] / l[r];
    out[(size_t)row * HQ * DH + h * DH + lane + 32] = a1[r] / l[r];
  }
}
