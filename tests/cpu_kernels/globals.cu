// __device__ globals keep their value across launches; __constant__ ints are readable from the host.
#include <cstdio>

extern "C" __constant__ int ATTNLAB_TEST_VERSION = 42;
__constant__ float kScale = 0.5f;
__device__ int launches = 0;
__device__ float runningSum[4];

extern "C" __global__ void bump(float* out, int add) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    launches += 1;
    for (int i = 0; i < 4; ++i) runningSum[i] += add * kScale;
    out[0] = launches;
    for (int i = 0; i < 4; ++i) out[1 + i] = runningSum[i];
  }
}

extern "C" __global__ void atomics(float* fsum, int* counters, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicAdd(fsum, 1.0f);
  atomicAdd(&counters[0], 1);
  atomicMax(&counters[1], i);
  atomicMin(&counters[2], -i);
  if (atomicCAS(&counters[3], 0, i + 1) == 0) atomicExch(&counters[4], i + 1);
  atomicAdd(&counters[5], i % 2);
  __threadfence();
  __threadfence_block();
}

extern "C" __global__ void say(int x) {
  if (threadIdx.x == 1 && blockIdx.x == 0) printf("hello from the CPU x=%d f=%.2f\n", x, expf(0.0f));
}
