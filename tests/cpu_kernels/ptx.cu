// Inline PTX on the CPU backend: the tf32 and f16x2 conversions and the m16n8k8 (tf32) and m16n8k16
// (f16) tensor-core multiplies, written exactly as a kernel writes them for the GPU. Every kernel here
// runs one warp (32 threads) unless it says otherwise.

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// D = A * B + D for one warp: A 16x8 (row-major fragment, 4 regs), B 8x8 (col-major fragment, 2 regs), D 16x8 f32 (4 regs)
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The same instruction with C and D apart, `volatile` spelt the GNU way, the template split over lines.
__device__ __forceinline__ void mma_tf32_cd(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                                            const float (&c)[4]) {
    asm __volatile__(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3},\n\t{%4, %5, %6, %7},\n\t{%8, %9},\n\t"
        "{%10, %11, %12, %13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3])
        : "memory");
}

// A macro that leaves the `;` to its caller.
#define TO_TF32(out, x) asm("cvt.rna.tf32.f32 %0, %1;" \
                            : "=r"(out)                 \
                            : "f"(x))

// Each lane's fragments, as the PTX ISA lays them out (g = lane / 4, t = lane % 4).
__device__ void load_fragments(const float* A, const float* B, int lane, float (&a)[4], float (&b)[2]) {
    const int g = lane / 4, t = lane % 4;
    a[0] = A[g * 8 + t];
    a[1] = A[(g + 8) * 8 + t];
    a[2] = A[g * 8 + t + 4];
    a[3] = A[(g + 8) * 8 + t + 4];
    b[0] = B[t * 8 + g];        // B is stored row-major: B[k][n] at k * 8 + n
    b[1] = B[(t + 4) * 8 + g];
}

__device__ void load_c(const float* C, int lane, float (&c)[4]) {
    const int g = lane / 4, t = lane % 4;
    c[0] = C[g * 8 + 2 * t];
    c[1] = C[g * 8 + 2 * t + 1];
    c[2] = C[(g + 8) * 8 + 2 * t];
    c[3] = C[(g + 8) * 8 + 2 * t + 1];
}

__device__ void store_d(float* D, int lane, const float (&d)[4]) {
    const int g = lane / 4, t = lane % 4;
    D[g * 8 + 2 * t] = d[0];
    D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2];
    D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

// D = A * B + C with the operands' raw float bits (the tensor core drops the low 13 bits).
// `separate` picks the statement with C and D apart.
extern "C" __global__ void mma_raw(const float* A, const float* B, const float* C, float* D, int separate) {
    const int lane = threadIdx.x;
    float af[4], bf[2], c[4], d[4];
    load_fragments(A, B, lane, af, bf);
    load_c(C, lane, c);
    unsigned a[4], b[2];
    for (int i = 0; i < 4; ++i) a[i] = __float_as_uint(af[i]);
    for (int i = 0; i < 2; ++i) b[i] = __float_as_uint(bf[i]);
    if (separate) {
        mma_tf32_cd(d, a, b, c);
    } else {
        for (int i = 0; i < 4; ++i) d[i] = c[i];
        mma_tf32(d, a, b);
    }
    store_d(D, lane, d);
}

// 3xTF32: each operand split into a tf32 part and a tf32 remainder; three products, the small
// ones first, give float32-level accuracy from the tf32 tensor core.
extern "C" __global__ void mma_3xtf32(const float* A, const float* B, float* D) {
    const int lane = threadIdx.x;
    float af[4], bf[2];
    load_fragments(A, B, lane, af, bf);
    unsigned a_big[4], a_small[4], b_big[2], b_small[2];
    for (int i = 0; i < 4; ++i) {
        a_big[i] = to_tf32(af[i]);
        a_small[i] = to_tf32(af[i] - __uint_as_float(a_big[i]));
    }
    for (int i = 0; i < 2; ++i) {
        TO_TF32(b_big[i], bf[i]);
        TO_TF32(b_small[i], bf[i] - __uint_as_float(b_big[i]));
    }
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_tf32(d, a_small, b_big);
    mma_tf32(d, a_big, b_small);
    mma_tf32(d, a_big, b_big);
    store_d(D, lane, d);
}

// out[i] = the tf32 pattern of x[i], for any number of threads.
extern "C" __global__ void cvt_each(const float* x, unsigned* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = to_tf32(x[i]);
}

// Only half the warp reaches the mma; the other half returns.
extern "C" __global__ void mma_half_warp(float* D) {
    const unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (threadIdx.x < 16) mma_tf32(d, a, b);
    D[threadIdx.x] = d[0];
}

// The two halves of the warp reach two different mma statements.
extern "C" __global__ void mma_two_sites(float* D) {
    const unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    const float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (threadIdx.x < 16)
        mma_tf32(d, a, b);
    else
        mma_tf32_cd(d, a, b, c);
    D[threadIdx.x] = d[0];
}

// Half the warp waits at the mma while the other half waits at a barrier.
extern "C" __global__ void mma_against_barrier(float* D) {
    const unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (threadIdx.x < 16)
        mma_tf32(d, a, b);
    else
        __syncthreads();
    D[threadIdx.x] = d[0];
}

// ---------------------------------------------------------------- f16: cvt.rn.f16x2.f32 and m16n8k16

// Two floats to two halves in one register: hi in the upper 16 bits, lo in the lower 16.
__device__ __forceinline__ unsigned to_f16x2(float hi, float lo) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// D = A * B + D for one warp: A 16x16 (row-major fragment, 4 regs of two halves), B 16x8
// (col-major fragment, 2 regs of two halves), D 16x8 f32 (4 regs).
__device__ __forceinline__ void mma_f16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The same instruction with C and D apart, its template in two literals.
__device__ __forceinline__ void mma_f16_cd(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                                           const float (&c)[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// Each lane's f16 fragments (g = lane / 4, t = lane % 4). A is 16x16 halves row-major, read as
// 32-bit words: word A2[m][j] holds A[m][2j] (low half) and A[m][2j+1] (high half). B is given
// transposed (n-major, 8x16 halves), so word Bt2[n][j] holds B[2j][n] (low) and B[2j+1][n] (high):
// a column-major fragment is then one word load.
__device__ void load_f16_fragments(const unsigned* A2, const unsigned* Bt2, int lane, unsigned (&a)[4],
                                   unsigned (&b)[2]) {
    const int g = lane / 4, t = lane % 4;
    a[0] = A2[g * 8 + t];            // A[g][2t, 2t+1]
    a[1] = A2[(g + 8) * 8 + t];      // A[g+8][2t, 2t+1]
    a[2] = A2[g * 8 + t + 4];        // A[g][2t+8, 2t+9]
    a[3] = A2[(g + 8) * 8 + t + 4];  // A[g+8][2t+8, 2t+9]
    b[0] = Bt2[g * 8 + t];           // B[2t, 2t+1][g]
    b[1] = Bt2[g * 8 + t + 4];       // B[2t+8, 2t+9][g]
}

// D = A * B + C from halves given as bits. `separate` picks the statement with C and D apart.
extern "C" __global__ void mma_f16_raw(const unsigned* A2, const unsigned* Bt2, const float* C, float* D,
                                       int separate) {
    const int lane = threadIdx.x;
    unsigned a[4], b[2];
    load_f16_fragments(A2, Bt2, lane, a, b);
    float c[4], d[4];
    load_c(C, lane, c);
    if (separate) {
        mma_f16_cd(d, a, b, c);
    } else {
        for (int i = 0; i < 4; ++i) d[i] = c[i];
        mma_f16(d, a, b);
    }
    store_d(D, lane, d);
}

// big = x with its low 13 mantissa bits cleared (11 significant bits: exact in a half of normal
// range), small = what is left, x - big, exact in float32 and rounded to a half.
__device__ void split_f16(float x0, float x1, unsigned& big, unsigned& small) {
    const float b0 = __uint_as_float(__float_as_uint(x0) & 0xFFFFE000u);
    const float b1 = __uint_as_float(__float_as_uint(x1) & 0xFFFFE000u);
    big = to_f16x2(b1, b0);  // the pair as the fragment holds it: x1 high, x0 low
    small = to_f16x2(x1 - b1, x0 - b0);
}

// 3xFP16: each float operand split into a half and a half remainder; three products, the small
// ones first, give float32-level accuracy from the f16 tensor core. A is 16x16 floats row-major,
// B 16x8 floats row-major (B[k][n] at k * 8 + n).
extern "C" __global__ void mma_3xf16(const float* A, const float* B, float* D) {
    const int g = threadIdx.x / 4, t = threadIdx.x % 4;
    const int arow[4] = {g, g + 8, g, g + 8}, acol[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
    unsigned a_big[4], a_small[4], b_big[2], b_small[2];
    for (int i = 0; i < 4; ++i)
        split_f16(A[arow[i] * 16 + acol[i]], A[arow[i] * 16 + acol[i] + 1], a_big[i], a_small[i]);
    for (int i = 0; i < 2; ++i)
        split_f16(B[(2 * t + 8 * i) * 8 + g], B[(2 * t + 8 * i + 1) * 8 + g], b_big[i], b_small[i]);
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_f16(d, a_small, b_big);
    mma_f16(d, a_big, b_small);
    mma_f16(d, a_big, b_big);
    store_d(D, threadIdx.x, d);
}

// out[i] = the halves of hi[i] (upper) and lo[i] (lower), for any number of threads; the inputs
// arrive as float bits (NaN payloads kept on the way in) and go to cvt as "r" operands.
extern "C" __global__ void cvt_f16x2_each(const unsigned* hi, const unsigned* lo, unsigned* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned r;
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "r"(hi[i]), "r"(lo[i]));
        out[i] = r;
    }
}

// The f16 mma reached by only part of a block's last warp is exercised through mma_f16_raw with 48
// threads. Here the two halves of the warp reach the two different mma instructions.
extern "C" __global__ void mma_f16_against_tf32(float* D) {
    const unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (threadIdx.x < 16)
        mma_f16(d, a, b);
    else
        mma_tf32(d, a, b);
    D[threadIdx.x] = d[0];
}

// The two instructions from one macro, so both on the line that calls it: the same file and line,
// told apart by the instruction alone.
#define MMA_F16_OR_TF32(d, a, b)                                                                       \
    if (threadIdx.x < 16)                                                                              \
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "                              \
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                           \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                  \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));              \
    else                                                                                               \
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "                             \
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                           \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                  \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

extern "C" __global__ void mma_shapes_on_one_line(float* D) {
    const unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    MMA_F16_OR_TF32(d, a, b);
    D[threadIdx.x] = d[0];
}
