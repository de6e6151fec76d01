// Block reductions: shared memory tree + __syncthreads, and __syncthreads_count/and/or.
template <int N>
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float buf[N];
  buf[threadIdx.x] = v;
  __syncthreads();
#pragma unroll
  for (int s = N / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  float r = buf[0];
  __syncthreads();
  return r;
}

extern "C" __global__ void __launch_bounds__(256) block_reduce(const float* __restrict__ in, float* __restrict__ out, int n) {
  const int i = blockIdx.x * 256 + threadIdx.x;
  float v = i < n ? in[i] : 0.0f;
  float total = block_sum<256>(v);
  float total2 = block_sum<256>(v * 2.0f);  // the same shared array reused
  if (threadIdx.x == 0) { out[2 * blockIdx.x] = total; out[2 * blockIdx.x + 1] = total2; }
}

extern "C" __global__ void sync_votes(const float* in, float* out) {
  const float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  const int c = __syncthreads_count(v > 0.0f);
  const int a = __syncthreads_and(v > -100.0f);
  const int o = __syncthreads_or(v > 100.0f);
  if (threadIdx.x == 3) { out[3 * blockIdx.x] = c; out[3 * blockIdx.x + 1] = a; out[3 * blockIdx.x + 2] = o; }
}

// Threads past n exit early; the remaining threads still synchronise (exited
// threads do not hold a barrier back, as on Volta and later GPUs).
extern "C" __global__ void early_exit_barrier(const float* in, float* out, int n) {
  __shared__ float s[128];
  const int t = threadIdx.x;
  if (t >= n) return;
  s[t] = in[t];
  __syncthreads();
  out[t] = s[n - 1 - t];
}
