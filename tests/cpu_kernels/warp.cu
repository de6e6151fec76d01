// Warp shuffles and votes.
__device__ __noinline__ float warp_sum_xor(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

extern "C" __global__ void warp_reduce(const float* in, float* outXor, float* outDown) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const float v = in[i];
  outXor[i] = warp_sum_xor(v);
  float d = v;
  for (int off = 16; off > 0; off /= 2) d += __shfl_down_sync(0xffffffffu, d, off);
  outDown[i] = d;  // lane 0 holds the warp sum; others partial sums
}

// Inclusive prefix sum within each warp (Hillis-Steele with __shfl_up_sync), int and float.
extern "C" __global__ void warp_scan(const float* in, float* out, int* outInt) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x & 31;
  float v = in[i];
  int iv = (int)in[i];
  for (int d = 1; d < 32; d <<= 1) {
    float t = __shfl_up_sync(0xffffffffu, v, d);
    int ti = __shfl_up_sync(0xffffffffu, iv, d);
    if (lane >= d) { v += t; iv += ti; }
  }
  out[i] = v;
  outInt[i] = iv;
}

// width < 32, broadcast, half-warp masks, votes.
extern "C" __global__ void warp_misc(float* out, unsigned* outU) {
  const int lane = threadIdx.x & 31;
  const int base = threadIdx.x * 8;
  out[base + 6] = __activemask() == 0xffffffffu ? 1.0f : 0.0f;  // before any lane can have exited
  out[base + 0] = __shfl_sync(0xffffffffu, (float)lane * 10.0f, 3);           // broadcast lane 3
  out[base + 1] = __shfl_sync(0xffffffffu, (float)lane, 2, 8);                 // lane 2 of each 8-group
  out[base + 2] = __shfl_xor_sync(0xffffffffu, (float)lane, 1, 16);
  out[base + 3] = __shfl_down_sync(0xffffffffu, (float)lane, 3, 8);            // clamps to own lane
  out[base + 4] = __shfl_up_sync(0xffffffffu, (float)lane, 2, 4);
  if (lane < 16) out[base + 5] = __shfl_xor_sync(0x0000ffffu, (float)lane, 8);
  else out[base + 5] = __shfl_xor_sync(0xffff0000u, (float)lane, 4);
  unsigned b = __ballot_sync(0xffffffffu, lane % 3 == 0);
  outU[threadIdx.x * 4 + 0] = b;
  outU[threadIdx.x * 4 + 1] = __any_sync(0xffffffffu, lane == 17);
  outU[threadIdx.x * 4 + 2] = __all_sync(0xffffffffu, lane < 31);
  __syncwarp();
  outU[threadIdx.x * 4 + 3] = __shfl_xor_sync(0xffffffffu, (unsigned)(lane * 1000u), 31);
  out[base + 7] = warpSize;
}
