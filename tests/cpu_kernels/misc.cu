// Assorted built-ins: math intrinsics, vector types, shared declarator forms, qualifiers.
/* a comment mentioning __shared__ float notReal[3]; must stay a comment */
#define TILE 8

__device__ __host__ inline float sq(float x) { return x * x; }

template <typename T>
__device__ __forceinline__ T twice(T v) { return v + v; }

extern "C" __global__ void __launch_bounds__(64, 1) math_ops(const float* __restrict__ in, float* __restrict__ out) {
  const int i = threadIdx.x;
  const float x = __ldg(&in[i]);
  float* o = out + i * 16;
  o[0] = __expf(x);
  o[1] = expf(x) - exp2f(x * 1.4426950408889634f);
  o[2] = rsqrtf(fabsf(x) + 1.0f);
  o[3] = __fdividef(x, 3.0f);
  o[4] = __saturatef(x);
  o[5] = (float)(__float_as_int(x) == __float_as_int(__int_as_float(__float_as_int(x))));
  o[6] = fmaxf(x, 0.5f) + fminf(x, -0.5f);
  o[7] = (float)max(i, 40) + (float)min(i, 3) + max(x, 1.0f);
  o[8] = isnan(x / 0.0f * 0.0f) ? 1.0f : 0.0f;
  o[9] = isinf(-INFINITY) ? 1.0f : 0.0f;
  o[10] = __fmaf_rn(x, 2.0f, 1.0f) + __fadd_rn(x, 1.0f) + __fmul_rn(x, 2.0f) + __frcp_rn(4.0f);
  o[11] = sqrtf(sq(x)) + __logf(2.0f) - logf(2.0f);
  o[12] = twice(x) + (float)twice(i);
  o[13] = __uint_as_float(__float_as_uint(x));
  o[14] = (float)__popc(i) + (float)__ffs(i) * 100.0f;
  o[15] = (clock64() > 0 && clock() >= 0) ? 1.0f : 0.0f;
}

extern "C" __global__ void vec_shared(const float* in, float* out) {
  static __shared__ float a[TILE], b[TILE];
  __shared__ __align__(16) float c[TILE * 4];
  __shared__ int counter;
  const int t = threadIdx.x;  // block (8)
  if (t == 0) counter = 0;
  a[t] = in[t];
  b[t] = 2.0f * in[t];
  __syncthreads();
  atomicAdd(&counter, 1);
  const float4 v = reinterpret_cast<const float4*>(in)[t];
  reinterpret_cast<float4*>(c)[t] = make_float4(v.w, v.z, v.y, v.x);
  float2 p = make_float2(a[(t + 1) % TILE], b[(t + 2) % TILE]);
  int4 q = make_int4(1, 2, 3, 4);
  dim3 d(3);
  __syncthreads();
  out[t * 4 + 0] = p.x + p.y;
  out[t * 4 + 1] = c[t * 4];
  out[t * 4 + 2] = (float)(q.x + q.w + (int)d.x + (int)d.y + counter);
  out[t * 4 + 3] = (float)(sizeof(float4) + alignof(float4) + sizeof(c));
}
