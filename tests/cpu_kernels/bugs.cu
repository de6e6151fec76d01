// Kernels with bugs the CPU backend must report or expose.

// Threads 0..4 of block y == 1 take a different __syncthreads.
extern "C" __global__ void diverge(float* out) {
  if (blockIdx.y == 1 && threadIdx.x < 5) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}

// Lane 7 exits, then the warp shuffles with a full mask.
extern "C" __global__ void shfl_exited(float* out) {
  float v = threadIdx.x;
  if (threadIdx.x == 7) return;
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

// Lanes 0..15 wait at a full-mask shuffle that lanes 16..31 never reach: they wait at the barrier.
extern "C" __global__ void bar_vs_shfl(float* out) {
  float v = threadIdx.x;
  if (threadIdx.x < 16) v = __shfl_sync(0xffffffffu, v, 0);
  __syncthreads();
  out[threadIdx.x] = v;
}

// Forgets the __syncthreads between writing and reading a neighbour's slot.
extern "C" __global__ void missing_sync(float* out) {
  __shared__ float s[256];
  s[threadIdx.x] = threadIdx.x + 1.0f;
  out[blockIdx.x * 256 + threadIdx.x] = s[(threadIdx.x + 1) % 256];
}

// Same kernel, correct.
extern "C" __global__ void with_sync(float* out) {
  __shared__ float s[256];
  s[threadIdx.x] = threadIdx.x + 1.0f;
  __syncthreads();
  out[blockIdx.x * 256 + threadIdx.x] = s[(threadIdx.x + 1) % 256];
}

// Block 0 writes shared memory; every block reads slot threadIdx.x + 32, which only block 0 wrote.
extern "C" __global__ void stale_shared(float* out) {
  __shared__ float s[64];
  if (blockIdx.x == 0) s[threadIdx.x + 32] = 5.0f;
  __syncthreads();
  out[blockIdx.x * 32 + threadIdx.x] = s[threadIdx.x + 32];
}

extern "C" __global__ void null_write(float* out) {
  out[threadIdx.x] = 1.0f;
}

extern "C" __global__ void asserts(float* out, int n) {
  assert(threadIdx.x < n);
  out[threadIdx.x] = 1.0f;
}
