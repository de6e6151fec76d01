// Dynamic shared memory: transpose a 32x32 tile per block through `extern __shared__`.
extern __shared__ float tile[];

extern "C" __global__ void transpose_tiles(const float* in, float* out, int n) {
  const int tx = threadIdx.x, ty = threadIdx.y;   // block (32, 32)
  const int bx = blockIdx.x * 32, by = blockIdx.y * 32;
  tile[ty * 33 + tx] = in[(by + ty) * n + bx + tx];
  __syncthreads();
  out[(bx + ty) * n + by + tx] = tile[tx * 33 + ty];
}

// A second name and type for the same dynamic memory, with an alignment.
extern "C" __global__ void bytes_view(float* out) {
  extern __shared__ __align__(16) unsigned char raw[];
  float4* v = reinterpret_cast<float4*>(raw);
  if (threadIdx.x == 0) v[0] = make_float4(1.0f, 2.0f, 3.0f, 4.0f);
  __syncthreads();
  out[threadIdx.x] = reinterpret_cast<float*>(raw)[threadIdx.x];  // 4 written, the rest never written
}
