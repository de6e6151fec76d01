// Multi-dimensional blocks and grids.
extern "C" __global__ void coords(float* out) {
  // block (16, 16, 1), grid (2, 3, 4): one record of 8 floats per thread
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int bid = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  float* r = out + ((size_t)bid * (blockDim.x * blockDim.y) + tid) * 8;
  r[0] = threadIdx.x; r[1] = threadIdx.y; r[2] = threadIdx.z;
  r[3] = blockIdx.x; r[4] = blockIdx.y; r[5] = blockIdx.z;
  r[6] = blockDim.x * 100 + blockDim.y * 10 + blockDim.z;
  r[7] = gridDim.x * 100 + gridDim.y * 10 + gridDim.z;
}

// 16x16 tiled matrix multiply with static shared memory (n a multiple of 16).
extern "C" __global__ void matmul16(const float* A, const float* B, float* C, int n) {
  __shared__ float As[16][16], Bs[16][16];
  const int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < n; t += 16) {
    As[threadIdx.y][threadIdx.x] = A[row * n + t + threadIdx.x];
    Bs[threadIdx.y][threadIdx.x] = B[(t + threadIdx.y) * n + col];
    __syncthreads();
    for (int k = 0; k < 16; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  C[row * n + col] = acc;
}
