// Probes of the CPU backend's barrier and warp rules. Every vote mixes true and false, every
// shuffle reaches a lane a wrong rule would get wrong, and every race gives a different answer in
// each thread order: tests/test_cpu_semantics.py checks the answers, then plants wrong rules in
// the backend one at a time and requires each to change at least one answer.

// Each thread records what every block-wide vote returned to it (64 threads: two warps).
extern "C" __global__ void block_votes(int* out) {
  const int t = threadIdx.x;
  int* mine = out + 6 * t;
  mine[0] = __syncthreads_and(t != 5);        // one thread votes false
  mine[1] = __syncthreads_and(t >= 0);        // every thread votes true
  mine[2] = __syncthreads_or(t == 37);        // one thread votes true, in the second warp
  mine[3] = __syncthreads_or(t < 0);          // no thread votes true
  mine[4] = __syncthreads_count(t % 3 == 0);  // 22 of 64
  mine[5] = __syncthreads_count(t * 2);       // any non-zero predicate counts once: 63
}

// Each lane records what every warp vote returned to it.
extern "C" __global__ void warp_votes(unsigned* out) {
  const int lane = threadIdx.x & 31;
  unsigned* mine = out + 5 * threadIdx.x;
  mine[0] = __all_sync(0xffffffffu, lane != 9);
  mine[1] = __all_sync(0xffffffffu, lane < 32);
  mine[2] = __any_sync(0xffffffffu, lane == 30);
  mine[3] = __any_sync(0xffffffffu, lane > 31);
  mine[4] = __ballot_sync(0xffffffffu, lane & 1);
}

// Each lane records eight shuffles of the value 100 + lane.
extern "C" __global__ void shuffles(float* out) {
  const int lane = threadIdx.x & 31;
  float* mine = out + 8 * threadIdx.x;
  const float v = 100.0f + lane;
  mine[0] = __shfl_sync(0xffffffffu, v, 2, 8);     // lane 2 of its group of 8
  mine[1] = __shfl_sync(0xffffffffu, v, 33);       // source lanes wrap: 33 is lane 1
  mine[2] = __shfl_up_sync(0xffffffffu, v, 1, 8);  // a group's first lane keeps its own
  mine[3] = __shfl_up_sync(0xffffffffu, v, 3);
  mine[4] = __shfl_down_sync(0xffffffffu, v, 1);   // lane 31 keeps its own
  mine[5] = __shfl_down_sync(0xffffffffu, v, 2, 16);
  mine[6] = __shfl_xor_sync(0xffffffffu, v, 16);
  mine[7] = __shfl_xor_sync(0xffffffffu, v, 8, 8); // a later group is out of reach, an earlier one is not
}

// A write and a neighbour's read with no barrier between them, before any barrier.
extern "C" __global__ void race_at_start(float* out) {
  __shared__ float s[128];
  const int t = threadIdx.x;
  s[t] = t;
  out[t] = s[(t + 1) % 128];
}

// The same race after a correct first barrier: the order threads resume in decides the answer.
extern "C" __global__ void race_after_barrier(float* out) {
  __shared__ float s[128];
  const int t = threadIdx.x;
  s[t] = -1.0f;
  __syncthreads();
  s[t] = t;
  out[t] = s[(t + 1) % 128];
}

// The same race after a __syncwarp, within one warp.
extern "C" __global__ void race_after_syncwarp(float* out) {
  __shared__ float s[32];
  const int t = threadIdx.x;
  s[t] = -1.0f;
  __syncwarp();
  s[t] = t;
  out[t] = s[(t + 1) % 32];
}
