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

// ---------------------------------------------------------------- cp.async: global -> shared, asynchronously

// The helpers as the lab-1 reference kernel writes them: a 16-byte (.cg) and a 4-byte (.ca) copy whose
// src-size is the whole copy or, when !valid, zero (the destination zero-filled, the source never read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(s), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

// Each of 32 threads copies 16 bytes into a static array, 4 bytes into another and 16 bytes into the
// dynamic shared memory (launched with 512 bytes), reads all 9 floats before waiting (out[0..287], 9 per
// thread: defined on the CPU only, where it is the poison) and again after (out[288..575]).
// src: 288 floats: the 16-byte sources at [4t], the 4-byte at [128 + t], the dynamic at [160 + 4t].
extern "C" __global__ void cp_async_copies(const float* src, float* out) {
    __shared__ __align__(16) float tile[128];
    __shared__ float one[32];
    extern __shared__ __align__(16) float dyn[];
    const int t = threadIdx.x;
    cp_async16(&tile[4 * t], &src[4 * t], true);
    cp_async4(&one[t], &src[128 + t], true);
    cp_async16(&dyn[4 * t], &src[160 + 4 * t], true);
    for (int pass = 0; pass < 2; ++pass) {
        float* o = out + 288 * pass + 9 * t;
        for (int i = 0; i < 4; ++i) o[i] = tile[4 * t + i];
        o[4] = one[t];
        for (int i = 0; i < 4; ++i) o[5 + i] = dyn[4 * t + i];
        if (pass == 0) {
            cp_async_commit();
            cp_async_wait<0>();
        }
    }
}

// Every way of sizing a copy: thread t < 17 copies 16 bytes with src-size t ("r"); the others as their
// case says. Each thread's 16-byte slot is first filled with 0xEE, so bytes no copy writes show as such
// on every device. One wait_all, with no commit before it, lands everything. src: 16 bytes per thread,
// out: the 16 bytes of each slot.
extern "C" __global__ void cp_async_sizes(const unsigned char* src, unsigned char* out) {
    __shared__ __align__(16) unsigned char slots[32 * 16];
    const int t = threadIdx.x;
    unsigned char* d = &slots[16 * t];
    for (int i = 0; i < 16; ++i) d[i] = 0xEE;
    __syncthreads();  // the fill is done before any copy is issued
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(d));
    const unsigned char* g = src + 16 * t;
    if (t < 17)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(g), "r"(t));
    else if (t == 17)
        cp_async16(d, g, false);                                                        // src-size 0: all zero
    else if (t == 18)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, 5;\n" :: "r"(s), "l"(g));  // 5 of 8 bytes
    else if (t == 19)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(s), "l"(g), "n"(3));  // 3 of 4
    else if (t == 20)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(g));    // no src-size: all 16
    else if (t == 21)                                                                    // a 64-bit destination
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, 8;\n" :: "l"(__cvta_generic_to_shared(d + 8)), "l"(g));
    else
        cp_async4(d + 4 * (t % 4), g, t & 1);                                            // 4 bytes or 4 zeros
    asm volatile("cp.async.wait_all;\n" ::);
    for (int i = 0; i < 16; ++i) out[16 * t + i] = d[i];
}

// Groups: 16 bytes per thread into each of three stages; stages 0 and 1 committed as two groups, stage 2
// left in the open group. After wait_group 1 (an "n" operand) only stage 0 is complete; after wait_group 0
// (a literal) stage 1 too; the open group only after wait_all. Each read of all three stages goes to out:
// 3 reads x 3 stages x 4 floats per thread, read r of stage k at out[36 * t + 12 * r + 4 * k]. src: 384
// floats, stage k's at [128 * k + 4 * t].
extern "C" __global__ void cp_async_groups(const float* src, float* out) {
    __shared__ __align__(16) float stage[3][128];
    const int t = threadIdx.x;
    cp_async16(&stage[0][4 * t], &src[4 * t], true);
    cp_async_commit();
    cp_async16(&stage[1][4 * t], &src[128 + 4 * t], true);
    cp_async_commit();
    cp_async16(&stage[2][4 * t], &src[256 + 4 * t], true);
    for (int r = 0; r < 3; ++r) {
        if (r == 0) cp_async_wait<1>();
        if (r == 1) asm volatile("cp.async.wait_group 0;\n" ::);
        if (r == 2) asm volatile("cp.async.wait_all;\n");  // no operands: a basic asm statement will do
        for (int k = 0; k < 3; ++k)
            for (int i = 0; i < 4; ++i) out[36 * t + 12 * r + 4 * k + i] = stage[k][4 * t + i];
    }
}

// 64 threads: threads 0..31 copy 16 bytes each into tile, threads 32..63 read what thread t - 32 copied
// after a barrier, into out[4 * (t - 32)]. mode 0: the issuers wait, then the barrier (correct).
// mode 1: the issuers wait only after a second barrier, once the readers have read (a race).
// mode 2: the issuers commit and return without waiting (their copies are dropped).
extern "C" __global__ void cp_async_threads(const float* src, float* out, int mode) {
    __shared__ __align__(16) float tile[128];
    const int t = threadIdx.x;
    if (t < 32) {
        cp_async16(&tile[4 * t], &src[4 * t], true);
        cp_async_commit();
        if (mode == 2) return;
        if (mode == 0) cp_async_wait<0>();
    }
    __syncthreads();
    if (t >= 32)
        for (int i = 0; i < 4; ++i) out[4 * (t - 32) + i] = tile[4 * (t - 32) + i];
    if (mode == 1) {
        __syncthreads();
        if (t < 32) cp_async_wait<0>();
    }
}

// One thread copies g[0], then stores 2.0f to it, then waits: the copy reads its source when it lands, at
// the wait, so x is 2.0f (CPU only: on a GPU the copy may read either value).
extern "C" __global__ void cp_async_source_late(float* g, float* out) {
    __shared__ float x;
    cp_async4(&x, g, true);
    cp_async_commit();
    g[0] = 2.0f;
    cp_async_wait<0>();
    out[0] = x;
}

// One thread, 64 bytes of dynamic shared memory, one mistake per mode (CPU only: on a GPU each is a
// fault or undefined). g: a global array of at least 8 floats.
extern "C" __global__ void cp_async_fault(const float* g, float* out, int mode) {
    extern __shared__ __align__(16) float dyn[];
    if (mode == 0) cp_async16(dyn + 1, g, true);                 // destination 4 bytes past a multiple of 16
    if (mode == 1) cp_async16(dyn + 16, g, true);                // 16 bytes at the very end: past it
    if (mode == 2)                                               // 0 is no shared address
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(0u), "l"(g));
    if (mode == 3) out[0] = (float)__cvta_generic_to_shared(g);  // a global pointer has no shared address
    if (mode == 4) {                                             // src-size past cp-size
        const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dyn));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(g), "r"(17));
    }
    if (mode == 5) cp_async16(dyn, g + 1, true);                 // source 4 bytes past a multiple of 16
    if (mode == 6) cp_async4(dyn, dyn + 4, true);                // a source in shared memory
    if (mode == 7)                                               // issuing and never waiting
        for (int i = 0; i < (1 << 20) + 1; ++i) cp_async4(dyn, g, true);
    asm volatile("cp.async.wait_all;\n" ::);
    out[1] = dyn[0];
}
