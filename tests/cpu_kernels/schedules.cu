// Two block-wide sums through one shared scratch array, as lab 1's softmax does. Without the barrier
// after reading scratch[0], a warp that runs ahead into the second sum overwrites scratch[0] before
// a slower warp has read the first: right in thread order and in reverse, wrong when one warp leads.
template <bool BARRIER_AFTER>
__device__ float block_sum(float value, float* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < 8 ? scratch[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
    if (lane == 0) scratch[0] = value;
  }
  __syncthreads();
  value = scratch[0];
  if (BARRIER_AFTER) __syncthreads();
  return value;
}

extern "C" __global__ void sums_racing(const float* x, float* out) {
  __shared__ float scratch[8];
  const float v = x[threadIdx.x];
  const float a = block_sum<false>(v, scratch);
  const float b = block_sum<false>(1000.0f * v, scratch);
  out[blockIdx.x * 256 + threadIdx.x] = a + b;
}

extern "C" __global__ void sums_synced(const float* x, float* out) {
  __shared__ float scratch[8];
  const float v = x[threadIdx.x];
  const float a = block_sum<true>(v, scratch);
  const float b = block_sum<true>(1000.0f * v, scratch);
  out[blockIdx.x * 256 + threadIdx.x] = a + b;
}
