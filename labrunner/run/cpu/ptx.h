// The inline PTX the CPU backend runs, emulated bit for bit where the PTX ISA says what happens.
//
// ptx_asm.py turns each asm statement of a kernel file into plain C++: every "r" and "f" operand is
// loaded into a 32-bit register (`uint32_t r[]`, bit patterns, as in PTX), an "l" operand into a
// 64-bit variable and an "n" operand into a constant, the instructions below run in order (on the
// register numbers, or for cp.async on the operands' values), and the outputs are stored back. A
// statement using anything else never gets here: the build refuses it. Included by shim.h after fiber.h (the mma is a warp
// collective and uses the warp machinery of the shuffles).
#pragma once

namespace attnlab {
namespace {
namespace ptx {

// ---------------------------------------------------------------- operands
// NVRTC takes an "f" operand only from a float and an "r" operand only from a 32-bit integer;
// anything else is refused at the student's line, where the deleted overload is chosen.

inline uint32_t f_input(float x) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    return bits;
}
inline uint32_t r_input(unsigned x) { return x; }
inline uint32_t r_input(int x) { return (uint32_t)x; }
template <class T> uint32_t f_input(T) = delete;  // an "f" asm operand must be a float
template <class T> uint32_t r_input(T) = delete;  // an "r" asm operand must be an int or unsigned

// An "l" operand (a .b64 register) is a 64-bit integer or a pointer (cp.async's global source).
inline uint64_t l_input(unsigned long long x) { return x; }
inline uint64_t l_input(long long x) { return (uint64_t)x; }
inline uint64_t l_input(unsigned long x) { return x; }
inline uint64_t l_input(long x) { return (uint64_t)x; }
template <class T> uint64_t l_input(T* p) { return (uint64_t)(uintptr_t)p; }
template <class T> uint64_t l_input(T) = delete;  // an "l" asm operand must be a 64-bit integer or a pointer

inline float& f_output(float& x) { return x; }
inline unsigned& r_output(unsigned& x) { return x; }
inline int& r_output(int& x) { return x; }
template <class T> void f_output(T&) = delete;  // an "=f"/"+f" asm operand must be a float variable
template <class T> void r_output(T&) = delete;  // an "=r"/"+r" asm operand must be an int or unsigned variable

template <class T>
inline void store(T& out, uint32_t bits) {
    static_assert(sizeof(T) == 4, "asm outputs are 32-bit registers");
    memcpy(&out, &bits, 4);
}

inline float as_float(uint32_t bits) {
    float x;
    memcpy(&x, &bits, 4);
    return x;
}

inline bool is_nan(uint32_t bits) { return (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0; }

// ------------------------------------------------------------ cvt.rna.tf32.f32
// TF32 is float32 with the mantissa cut to its top 10 bits (sign, 8 exponent bits, 10 mantissa
// bits: the top 19 bits of the pattern). `.rna` rounds to nearest with ties away from zero: add
// half of the last kept bit (0x1000) to the magnitude's bit pattern and clear the 13 dropped bits.
// A carry runs into the exponent exactly as rounding should (and the largest floats round up to
// Inf). Inf and NaN are left as they are: the bias would carry out of a NaN with a full payload
// (0x7FFFFFFF, the GPU's own NaN, would become -0). NaN is returned whole, where the hardware clears
// its 13 low bits (seen on an H200: 0x7FF00BAD -> 0x7FF00000, 0x7F800001 -> +Inf): keeping ours lets
// the shim's poison NaNs (unwritten shared memory) still be named as a race after a tensor-core step.
inline void cvt_rna_tf32_f32(uint32_t* r, int d, int a) {
    const uint32_t x = r[a];
    if ((x & 0x7F800000u) == 0x7F800000u)
        r[d] = x;
    else
        r[d] = (x + 0x1000u) & 0xFFFFE000u;
}

// ------------------------------------------------------------- cvt.rn.f16x2.f32
// d = two halves (IEEE binary16: sign, 5 exponent bits biased by 15, 10 mantissa bits): a converted
// in the upper 16 bits, b in the lower 16 (PTX ISA, cvt: "d[31:16] = convert(a); d[15:0] =
// convert(b)"). `.rn` rounds to nearest, ties to even; without `.satfinite` a result past the
// largest half (65504) is +-Inf, and without `.ftz` subnormal halves are produced, not flushed.
// Written on the bits, so no host compiler's or CPU's own half conversion has a say.
inline uint32_t f16_rn(uint32_t x) {
    const uint32_t sign = (x >> 16) & 0x8000u;  // the sign moves from bit 31 to bit 15 as it is
    const uint32_t mag = x & 0x7FFFFFFFu;
    // NaN: the GPU gives the canonical half NaN 0x7FFF. We give the float's own top 16 bits, which
    // are always a half NaN (sign, five of the eight exponent ones, and a mantissa of at least
    // 0x380), so the shim's poison 0x7FF00BAD becomes 0x7FF0, which the mma below widens back
    // into the whole poison: a race read behind a conversion is still named as one.
    if (mag > 0x7F800000u) return x >> 16;
    // From 2^16 up (Inf included) every value is past 65504 and the tie above it, 65520: Inf.
    if (mag >= 0x47800000u) return sign | 0x7C00u;
    const int e = (int)(mag >> 23);  // the float's biased exponent: value = 1.m * 2^(e - 127)
    // Below 2^-25, half of the smallest subnormal half (2^-24): zero, with the sign kept. This
    // takes every float subnormal too, and keeps the shifts below under 32.
    if (e < 102) return sign;
    uint32_t full, shift;
    if (e >= 113) {
        // A normal half (biased exponent e - 112 in 1..30): rebias the exponent in place; the
        // float's 23 mantissa bits keep their top 10, so 13 bits are dropped.
        full = mag - (112u << 23);
        shift = 13;
    } else {
        // A subnormal half, a multiple of 2^-24: the significand with its leading 1 made explicit,
        // shifted right by 14 (e = 112, value in [2^-15, 2^-14)) up to 24 (e = 102).
        full = 0x800000u | (mag & 0x7FFFFFu);
        shift = (uint32_t)(126 - e);
    }
    uint32_t h = full >> shift;
    const uint32_t dropped = full & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    // Round to nearest, ties to the even pattern. A carry runs on into the exponent exactly as
    // rounding should: the largest subnormal up to the smallest normal, 65504's tie up to 0x7C00 (Inf).
    if (dropped > half || (dropped == half && (h & 1u))) ++h;
    return sign | h;
}

inline void cvt_rn_f16x2_f32(uint32_t* r, int d, int a, int b) {
    r[d] = (f16_rn(r[a]) << 16) | f16_rn(r[b]);
}

// ------------------------------------------------------------------ mma.sync
// D (16x8, f32) = A * B + C (16x8, f32) for one warp, the row.col forms with f32 accumulators.
// Each lane holds a fragment; with groupID g = lane / 4 and t = lane % 4 (PTX ISA, "Matrix
// Fragments for mma.m16n8k8" (.tf32) and "... for mma.m16n8k16 with floating point type" (.f16)):
//   C, D (both shapes): c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
// The two shapes take the same registers (4 of A, 2 of B, 4 of C and D), so one lane record and
// one warp meeting serve both; the record says which instruction it is, and the last lane to
// arrive multiplies with that instruction's rule.

struct MmaLane;

struct MmaShape {
    const char* name;                        // the PTX instruction, for messages
    void (*multiply)(MmaLane* const* lanes);  // the 32 lanes' fragments in, each lane's D out
};

struct MmaLane {
    const MmaShape* shape;
    uint32_t a[4], b[2], c[4], d[4];
};

inline void read_c(MmaLane* const* lanes, float (&C)[16][8]) {
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        const MmaLane& l = *lanes[lane];
        C[g][2 * t] = as_float(l.c[0]);
        C[g][2 * t + 1] = as_float(l.c[1]);
        C[g + 8][2 * t] = as_float(l.c[2]);
        C[g + 8][2 * t + 1] = as_float(l.c[3]);
    }
}

inline void write_d(MmaLane* const* lanes, const float (&D)[16][8]) {
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        const float out[4] = {D[g][2 * t], D[g][2 * t + 1], D[g + 8][2 * t], D[g + 8][2 * t + 1]};
        memcpy(lanes[lane]->d, out, sizeof out);
    }
}

// D = A * B + C for both shapes, and each lane takes its D: float32 additions, C first, then
// k = 0 .. K - 1 (the order each shape's comment states).
template <int K>
inline void multiply_add(MmaLane* const* lanes, const float (&A)[16][K], const float (&B)[K][8], float (&C)[16][8]) {
    read_c(lanes, C);
    float D[16][8];
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 8; ++n) {
            float acc = C[m][n];
            for (int k = 0; k < K; ++k) acc += A[m][k] * B[k][n];
            D[m][n] = acc;
        }
    write_d(lanes, D);
}

// m16n8k8, .tf32: A is 16x8, B is 8x8, one tf32 per register:
//   A: a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]   (row-major fragment)
//   B: b0 = B[k=t][n=g], b1 = B[k=t+4][n=g]                               (column-major fragment)
// The tensor core reads a tf32 operand as the top 19 bits of its register (the low 13 ignored),
// so an unrounded float is truncated, not rounded. Each product of two tf32 values is exact in
// float32 (11 by 11 significant bits); the sums are float32 additions, in the order C, then
// k = 0..7 (the hardware's order and internal width are not documented; this is one fixed,
// float32-accurate choice). A NaN operand is used whole, as in cvt above.

inline float tf32_value(uint32_t bits) { return as_float(is_nan(bits) ? bits : bits & 0xFFFFE000u); }

inline void multiply_tf32(MmaLane* const* lanes) {
    float A[16][8], B[8][8], C[16][8];
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        const MmaLane& l = *lanes[lane];
        A[g][t] = tf32_value(l.a[0]);
        A[g + 8][t] = tf32_value(l.a[1]);
        A[g][t + 4] = tf32_value(l.a[2]);
        A[g + 8][t + 4] = tf32_value(l.a[3]);
        B[t][g] = tf32_value(l.b[0]);
        B[t + 4][g] = tf32_value(l.b[1]);
    }
    multiply_add(lanes, A, B, C);
}

// m16n8k16, .f16: A is 16x16, B is 16x8, two halves per register, the lower 16 bits holding the
// lower column (of A) or row (of B):
//   A: a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9]
//   B: b0 = B[k=2t, 2t+1][n=g], b1 = B[k=2t+8, 2t+9][n=g]
// A half widens to a float exactly (11 significant bits, exponents 2^-24 to 2^15), and the product
// of two halves is exact in float32 (22 significant bits, no underflow: 2^-48 is a normal float).
// The sums follow the tf32 form's choice: float32 additions, C first, then k = 0..15.

// A half's value as a float, exactly, from its bits. A NaN stays a NaN (widened as IEEE widens it:
// payload on top, quiet bit set), and the upper half of the shim's poison 0x7FF00BAD, which is
// what a poisoned word read as two halves, or a poisoned float through cvt above, leaves, widens
// to the poison itself: x86 carries a NaN operand's payload through the sums, so D holds the
// poison bit for bit and the driver names the race. (The GPU gives its canonical NaN.)
inline float f16_value(uint32_t h) {
    const uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
    if (exponent == 0x1Fu) {
        if (mantissa == 0) return as_float(sign | 0x7F800000u);  // +-Inf
        if (h == (kPoison32 >> 16)) return as_float(kPoison32);
        return as_float(sign | 0x7FC00000u | (mantissa << 13));
    }
    if (exponent == 0) {
        // Subnormal (or zero): mantissa * 2^-24; both factors and the product are exact floats.
        return as_float(sign | f_input((float)mantissa * 0x1p-24f));
    }
    // Normal: rebias the exponent (15 -> 127) and put the 10 mantissa bits on top of the 23.
    return as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline void multiply_f16(MmaLane* const* lanes) {
    float A[16][16], B[16][8], C[16][8];
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        const MmaLane& l = *lanes[lane];
        const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
        for (int i = 0; i < 4; ++i) {
            A[rows[i]][cols[i]] = f16_value(l.a[i] & 0xFFFFu);
            A[rows[i]][cols[i] + 1] = f16_value(l.a[i] >> 16);
        }
        for (int i = 0; i < 2; ++i) {
            B[2 * t + 8 * i][g] = f16_value(l.b[i] & 0xFFFFu);
            B[2 * t + 8 * i + 1][g] = f16_value(l.b[i] >> 16);
        }
    }
    multiply_add(lanes, A, B, C);
}

constexpr MmaShape kMmaTf32 = {"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", multiply_tf32};
constexpr MmaShape kMmaF16 = {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", multiply_f16};

// One lane's part of either mma: check the warp is whole, meet the other 31 lanes, take its D.
inline void mma_sync(const MmaShape& shape, uint32_t* r, int d0, int d1, int d2, int d3, int a0, int a1, int a2,
                     int a3, int b0, int b1, int c0, int c1, int c2, int c3, const char* file, int line) {
    Fiber* me = rt.cur;
    const int w = me->warp;
    if (rt.warp_exists[w] != 0xffffffffu) {
        char t[64];
        fmt_thread(t, sizeof t, me);
        ATTNLAB_FAIL("%s needs a whole warp in kernel %s, block (%u,%u,%u): %s (%s:%d) is in warp %d, which has "
                     "only %d lanes (the block has %d threads; make it a multiple of 32)",
                     shape.name, rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, t, file, line, w,
                     __builtin_popcount(rt.warp_exists[w]), rt.nthreads);
    }
    // Read every input before anything is written: D may share registers with A, B or C.
    MmaLane lane = {&shape, {r[a0], r[a1], r[a2], r[a3]}, {r[b0], r[b1]}, {r[c0], r[c1], r[c2], r[c3]}, {0, 0, 0, 0}};
    // All 32 lanes meet here; the last to arrive runs mma_release (below) while every lane's
    // MmaLane is still on its stack, then each lane takes its own D. The site names the
    // instruction, so two different mma instructions never make one meeting.
    warp_op(WK_MMA, 0xffffffffu, (uint64_t)(uintptr_t)&lane, 0, 0, {shape.name, file, line});
    r[d0] = lane.d[0];
    r[d1] = lane.d[1];
    r[d2] = lane.d[2];
    r[d3] = lane.d[3];
}

inline void mma_m16n8k8_row_col_f32_tf32(uint32_t* r, int d0, int d1, int d2, int d3, int a0, int a1, int a2,
                                          int a3, int b0, int b1, int c0, int c1, int c2, int c3, const char* file,
                                          int line) {
    mma_sync(kMmaTf32, r, d0, d1, d2, d3, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3, file, line);
}

inline void mma_m16n8k16_row_col_f32_f16(uint32_t* r, int d0, int d1, int d2, int d3, int a0, int a1, int a2,
                                          int a3, int b0, int b1, int c0, int c1, int c2, int c3, const char* file,
                                          int line) {
    mma_sync(kMmaF16, r, d0, d1, d2, d3, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3, file, line);
}

// ------------------------------------------------------------------ the shared window
// On the GPU shared memory has an address space of its own, the shared window: 32-bit addresses, which
// __cvta_generic_to_shared gives for a generic pointer and cp.async takes as its destination. Here
// shared memory is several pieces of host memory: the block's dynamic shared memory, and each
// __shared__ array declared in a function (registered in fiber.h when its declaration is first
// reached). A window address is therefore a region and an offset:
//
//     bits 31..18  the region: 1 for the dynamic shared memory, 2 + i for registered array i
//     bits 17..0   the byte offset inside it (2^18 = 256 KiB, more than a block's 227 KiB)
//
// Why this layout: a kernel adds offsets to the 32-bit address itself (`base + 16 * i`), and an offset
// stays in its region's field until it passes 256 KiB, so a destination past the end of an array (by up
// to 29 KiB past the largest possible one) is reported as past that end, never taken for a neighbour's
// bytes. Region numbers only grow (an array is registered once, in the order first reached), so an
// address taken earlier in a launch names the same bytes later. And region 0 is no region: a
// destination left at 0 fails loudly instead of landing at the start of some array.
constexpr unsigned kWindowOffsetBits = 18;
constexpr uint32_t kWindowOffsetMask = (1u << kWindowOffsetBits) - 1u;
constexpr uint32_t kWindowDynamic = 1;      // the region field of the dynamic shared memory
constexpr uint32_t kWindowFirstStatic = 2;  // registered array i is region 2 + i
constexpr uint32_t kWindowRegions = 1u << (32 - kWindowOffsetBits);

struct WindowRegion {
    unsigned char* base;  // null: no such region
    size_t size;
    uint32_t field;
};

inline WindowRegion window_region(uint32_t field) {
    if (field == kWindowDynamic) return {g_dyn_shared, rt.dyn_shared, field};
    if (field >= kWindowFirstStatic && field - kWindowFirstStatic < (uint32_t)rt.nregions) {
        const SharedRegion& r = rt.regions[field - kWindowFirstStatic];
        return {(unsigned char*)r.ptr, r.size, field};
    }
    return {nullptr, 0, 0};
}

// The region holding p. A pointer just past a region's end has an address too (a loop's end), when
// no region holds it.
inline bool region_holding(const void* p, bool or_end, WindowRegion* out) {
    const unsigned char* b = (const unsigned char*)p;
    const uint32_t end = kWindowFirstStatic + (uint32_t)rt.nregions;
    for (int pass = 0; pass < (or_end ? 2 : 1); ++pass)
        for (uint32_t field = kWindowDynamic; field < end; ++field) {
            const WindowRegion w = window_region(field);
            if (b >= w.base && (b < w.base + w.size || (pass == 1 && b == w.base + w.size))) {
                *out = w;
                return true;
            }
        }
    return false;
}

// A runtime error at an instruction (or intrinsic) of the kernel: `what` in kernel k, block b, thread t
// (file:line): the detail.
[[noreturn]] void fail_at(const char* what, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
[[noreturn]] void fail_at(const char* what, const char* file, int line, const char* fmt, ...) {
    char detail[640], t[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    fmt_thread(t, sizeof t, rt.cur);
    ATTNLAB_FAIL("%s in kernel %s, block (%u,%u,%u), %s (%s:%d): %s", what, rt.kernel, rt.block_idx.x,
                 rt.block_idx.y, rt.block_idx.z, t, file, line, detail);
}

inline size_t cvta_generic_to_shared(const void* p, const char* file, int line) {
    WindowRegion w;
    if (!region_holding(p, true, &w))
        fail_at("__cvta_generic_to_shared of a pointer outside shared memory", file, line,
                "%p is in no __shared__ array declared in a function, nor in the block's %zu bytes of dynamic "
                "shared memory",
                p, rt.dyn_shared);
    if (w.field >= kWindowRegions)
        fail_at("__cvta_generic_to_shared", file, line, "more than %u __shared__ arrays were reached in one launch",
                kWindowRegions - kWindowFirstStatic);
    return ((size_t)w.field << kWindowOffsetBits) | (size_t)((const unsigned char*)p - w.base);
}

// ------------------------------------------------------------------ cp.async
// cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size}: copy src-size bytes (cp-size when
// left out) from global memory to shared memory and zero-fill the rest of cp-size, asynchronously.
// cp.async.commit_group closes the thread's open group (the copies issued since its last commit, maybe
// none); cp.async.wait_group N waits until at most the N newest committed groups are pending;
// cp.async.wait_all commits and waits for everything (PTX ISA, "cp.async", "cp.async.wait_group").
//
// The GPU may land a copy any time between its issue and the wait that completes it, and reads its
// source some time in between. The emulation takes the latest moment for both, so that every bug of
// that kind shows: a copy lands, reading its source then, only when its own thread's wait completes
// its group. Until then the destination holds what it held (the shared poison at block start), so a
// thread that reads before waiting, or another thread that reads without the issuer's wait and a
// barrier after it, reads poison. __syncthreads completes nothing (as on the GPU), and copies still
// pending when their thread exits are dropped (a correct kernel waits for every copy it reads).

struct CpCopy {
    unsigned char* dst;
    const unsigned char* src;
    uint32_t cp_size, src_size;
    uint32_t group;  // the issuing thread's cp_committed when it was issued: the open group's number
};

// Copies in flight in one block, at most: past this a kernel is issuing without ever waiting (2^20
// 16-byte copies are 72 times the most shared memory a block has), and the pending lists would grow
// without bound.
constexpr int kMaxPendingCopies = 1 << 20;

// A copy lands: its src-size bytes are read from global memory now, the rest of cp-size is zero.
inline void land(const CpCopy& c) {
    if (c.src_size > 0) memcpy(c.dst, c.src, c.src_size);
    memset(c.dst + c.src_size, 0, c.cp_size - c.src_size);
}

inline void push_copy(Fiber* me, const CpCopy& c) {
    if (me->cp_count == me->cp_cap) {
        if (me->cp_head > 0) {  // the landed ones at the front make room
            memmove(me->cp_copies, me->cp_copies + me->cp_head, (size_t)(me->cp_count - me->cp_head) * sizeof(CpCopy));
            me->cp_count -= me->cp_head;
            me->cp_head = 0;
        } else {
            const int cap = me->cp_cap ? 2 * me->cp_cap : 16;
            CpCopy* grown = (CpCopy*)realloc(me->cp_copies, (size_t)cap * sizeof(CpCopy));
            if (!grown) ATTNLAB_FAIL("kernel %s: out of memory for cp.async copies in flight", rt.kernel);
            me->cp_copies = grown;
            me->cp_cap = cap;
        }
    }
    me->cp_copies[me->cp_count++] = c;
    ++rt.cp_pending;
}

// Land, in the order issued, every pending copy of the thread in a group numbered below `groups`.
inline void complete_groups(Fiber* me, uint32_t groups) {
    while (me->cp_head < me->cp_count && me->cp_copies[me->cp_head].group < groups) {
        land(me->cp_copies[me->cp_head++]);
        --rt.cp_pending;
    }
    if (me->cp_head == me->cp_count) me->cp_head = me->cp_count = 0;
}

// Checked at issue, each a loud error where the GPU would fault or do something undefined: the
// destination a window address whose cp-size bytes lie in one region, both addresses aligned to
// cp-size, src-size at most cp-size, the source outside shared memory. Each message is written only
// when its check fails: a kernel issues millions of copies, and formatting one costs more than the copy.
inline void cp_async(const char* opcode, uint64_t dst, uint64_t src, long long cp_size, long long src_size,
                     const char* file, int line) {
    Fiber* me = rt.cur;
    if (src_size < 0 || src_size > cp_size)
        fail_at(opcode, file, line, "src-size %lld is not in 0 to %lld, its cp-size (undefined on the GPU)", src_size,
                cp_size);
    const WindowRegion w = dst >> 32 ? WindowRegion{nullptr, 0, 0} : window_region((uint32_t)dst >> kWindowOffsetBits);
    char what[96];
    if (!w.base) {
        snprintf(what, sizeof what, "%s to an address outside shared memory", opcode);
        fail_at(what, file, line, "0x%08llx is no shared address (take one from __cvta_generic_to_shared)",
                (unsigned long long)dst);
    }
    const size_t offset = dst & kWindowOffsetMask;
    if (offset + (size_t)cp_size > w.size) {
        char region[96];
        if (w.field == kWindowDynamic)
            snprintf(region, sizeof region, "the block's %zu bytes of dynamic shared memory", w.size);
        else
            snprintf(region, sizeof region, "its %zu-byte __shared__ array", w.size);
        snprintf(what, sizeof what, "%s to an address outside shared memory", opcode);
        fail_at(what, file, line, "the %lld bytes at shared address 0x%08llx run past the end of %s", cp_size,
                (unsigned long long)dst, region);
    }
    unsigned char* to = w.base + offset;
    if (offset % (size_t)cp_size) {
        snprintf(what, sizeof what, "misaligned %s", opcode);
        fail_at(what, file, line, "the destination, shared address 0x%08llx, is %zu bytes past a multiple of %lld, "
                "its cp-size (cp.async needs both addresses aligned to cp-size)",
                (unsigned long long)dst, offset % (size_t)cp_size, cp_size);
    }
    if ((uintptr_t)to % (uintptr_t)cp_size) {
        snprintf(what, sizeof what, "misaligned %s", opcode);
        fail_at(what, file, line, "the destination, shared address 0x%08llx, is in a __shared__ array aligned to "
                "fewer than %lld bytes; declare it __align__(%lld)",
                (unsigned long long)dst, cp_size, cp_size);
    }
    if (src_size > 0 && src % (uint64_t)cp_size) {
        snprintf(what, sizeof what, "misaligned %s", opcode);
        fail_at(what, file, line, "the source, global address 0x%llx, is %llu bytes past a multiple of %lld, its "
                "cp-size (cp.async needs both addresses aligned to cp-size)",
                (unsigned long long)src, (unsigned long long)(src % (uint64_t)cp_size), cp_size);
    }
    WindowRegion in_shared;
    if (src_size > 0 && region_holding((const void*)(uintptr_t)src, false, &in_shared)) {
        snprintf(what, sizeof what, "%s from shared memory", opcode);
        fail_at(what, file, line, "the source is shared address 0x%08llx; cp.async copies from global memory",
                (unsigned long long)in_shared.field << kWindowOffsetBits |
                    (unsigned long long)((const unsigned char*)(uintptr_t)src - in_shared.base));
    }
    if (rt.cp_pending >= kMaxPendingCopies)
        fail_at("too many cp.async copies in flight", file, line, "the block has %d copies that no "
                "cp.async.wait_group or cp.async.wait_all has completed; wait for them",
                rt.cp_pending);
    push_copy(me, CpCopy{to, (const unsigned char*)(uintptr_t)src, (uint32_t)cp_size, (uint32_t)src_size,
                         me->cp_committed});
}

inline void cp_async_ca_shared_global(uint32_t*, uint64_t dst, uint64_t src, long long cp_size, long long src_size,
                                      const char* file, int line) {
    cp_async("cp.async.ca.shared.global", dst, src, cp_size, src_size, file, line);
}

inline void cp_async_cg_shared_global(uint32_t*, uint64_t dst, uint64_t src, long long cp_size, long long src_size,
                                      const char* file, int line) {
    cp_async("cp.async.cg.shared.global", dst, src, cp_size, src_size, file, line);
}

inline void cp_async_commit_group(uint32_t*) { ++rt.cur->cp_committed; }

// Every committed group but the newest n completes; the open group never does.
inline void cp_async_wait_group(uint32_t*, long long n, const char* file, int line) {
    Fiber* me = rt.cur;
    if (n < 0) fail_at("cp.async.wait_group", file, line, "N is %lld; it counts groups, 0 or more", n);
    complete_groups(me, me->cp_committed > (unsigned long long)n ? me->cp_committed - (uint32_t)n : 0u);
}

inline void cp_async_wait_all(uint32_t*) {
    Fiber* me = rt.cur;
    ++me->cp_committed;
    complete_groups(me, me->cp_committed);
}


// ------------------------------------------------------------------ shfl.sync
// shfl.sync.mode.b32 d[|p], a, b, c, membermask (PTX ISA, "shfl.sync"): lane j's a, where j is worked out
// from the caller's lane, b (the lane, offset or xor mask), and c, which packs a clamp value in bits 4..0
// and a segment mask in bits 12..8 (CUDA's __shfl_*_sync(mask, v, b, width) pass c = ((32 - width) << 8)
// | 31, or 0 in the low bits for the up shuffle). A source outside the clamp (p false) is the caller's own
// lane. The lanes meet in the runtime's warp shuffle (warp_op), as the intrinsics' do: a mask without the
// caller, a lane that never arrives or has exited, a source lane outside the mask (its value undefined
// on the GPU: the poison here) are all found there.
enum ShflMode { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_BFLY };

// The source lane, and in *in_range whether it lies within the clamp (the instruction's p).
inline int shfl_source(ShflMode mode, int lane, uint32_t b, uint32_t c, bool* in_range) {
    const int bval = (int)(b & 31u), cval = (int)(c & 31u), segmask = (int)((c >> 8) & 31u);
    const int max_lane = (lane & segmask) | (cval & ~segmask);
    const int min_lane = lane & segmask;
    int j;
    bool ok;
    switch (mode) {
        case SHFL_UP: j = lane - bval; ok = j >= max_lane; break;
        case SHFL_DOWN: j = lane + bval; ok = j <= max_lane; break;
        case SHFL_BFLY: j = lane ^ bval; ok = j <= max_lane; break;
        default: j = min_lane | (bval & ~segmask); ok = j <= max_lane; break;
    }
    *in_range = ok;
    return ok ? j : lane;
}

inline void shfl_sync(uint32_t* r, ShflMode mode, int d, int p, uint32_t a, uint32_t b, uint32_t c, uint32_t mask,
                      const char* file, int line) {
    static const char* const names[] = {"shfl.sync.idx.b32", "shfl.sync.up.b32", "shfl.sync.down.b32",
                                        "shfl.sync.bfly.b32"};
    bool in_range;
    const int source = shfl_source(mode, rt.cur->lane, b, c, &in_range);
    const uint64_t got = warp_op(WK_SHFL, mask, a, source, 0, {names[mode], file, line});
    r[d] = got == kShflPoison64 ? kShflPoison32 : (uint32_t)got;
    if (p >= 0) r[p] = in_range;
}

// ------------------------------------------------------------------ ex2, lg2, rcp (.approx)
// The GPU's approximations are not IEEE operations; the PTX ISA bounds them (ex2.approx.f32: relative
// error 2^-22 or so over the range, lg2.approx.f32: absolute error 2^-22 near 1, relative elsewhere,
// rcp.approx.f32: 1 ulp) and says what the special values give: ex2(-Inf) = +0, ex2(+Inf) = +Inf, lg2(+-0) =
// -Inf, lg2 of a negative = NaN, rcp(+-0) = +-Inf, rcp(+-Inf) = +-0. exp2f, log2f and an IEEE division
// give exactly those specials and lie within those bounds (each is within an ulp of the exact value), so
// a kernel the GPU computes well computes as well here; no host library's last bit is promised to match
// the GPU's. Without .ftz subnormal operands and results are kept (sm_20 and later); with .ftz each
// subnormal operand is read as zero of its sign and each subnormal result written as one. A NaN keeps its
// bits, as cvt above keeps them, so the shim's poison survives the instruction and is still named as a race.
inline uint32_t flush_subnormal(uint32_t x) { return (x & 0x7F800000u) == 0 ? x & 0x80000000u : x; }
inline void ex2_approx_f32(uint32_t* r, int d, uint32_t a) { r[d] = f_input(::exp2f(as_float(a))); }
inline void ex2_approx_ftz_f32(uint32_t* r, int d, uint32_t a) {
    r[d] = flush_subnormal(f_input(::exp2f(as_float(flush_subnormal(a)))));
}
inline void lg2_approx_f32(uint32_t* r, int d, uint32_t a) { r[d] = f_input(::log2f(as_float(a))); }
inline void lg2_approx_ftz_f32(uint32_t* r, int d, uint32_t a) {
    r[d] = flush_subnormal(f_input(::log2f(as_float(flush_subnormal(a)))));
}
inline void rcp_approx_f32(uint32_t* r, int d, uint32_t a) { r[d] = f_input(1.0f / as_float(a)); }
inline void rcp_approx_ftz_f32(uint32_t* r, int d, uint32_t a) {
    r[d] = flush_subnormal(f_input(1.0f / as_float(flush_subnormal(a))));
}

// ------------------------------------------------------------------ setp, mov, selp
// A predicate is a register of the statement's own (.reg .pred), 1 or 0 here; `@p` and `@!p` guard an
// instruction with it (ptx_asm.py writes the guard as an `if`, so a guarded warp shuffle whose guard is
// false is one its lane never reaches, as on the GPU). setp.CmpOp.type p[|q], a, b sets p to the
// comparison and q, if written, to its negation. Integer comparisons are signed for .s32, unsigned for
// .u32 (lo, ls, hi, hs are its lt, le, gt, ge) and .b32 (eq and ne only); the .f32 ones are IEEE's: the
// ordered six are false where either operand is NaN, their u forms true there, num and nan say which;
// .ftz reads a subnormal operand as zero of its sign first.
enum Cmp {
    CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_LO, CMP_LS, CMP_HI, CMP_HS,
    CMP_EQU, CMP_NEU, CMP_LTU, CMP_LEU, CMP_GTU, CMP_GEU, CMP_NUM, CMP_NAN
};

template <class T>
inline bool compare_int(Cmp cmp, T a, T b) {
    switch (cmp) {
        case CMP_EQ: return a == b;
        case CMP_NE: return a != b;
        case CMP_LT: case CMP_LO: return a < b;
        case CMP_LE: case CMP_LS: return a <= b;
        case CMP_GT: case CMP_HI: return a > b;
        default: return a >= b;  // CMP_GE, CMP_HS: ptx_asm.py passes no other to an integer type
    }
}

inline bool compare_f32(Cmp cmp, float a, float b) {
    const bool unordered = a != a || b != b;
    switch (cmp) {
        case CMP_EQ: return !unordered && a == b;
        case CMP_NE: return !unordered && a != b;
        case CMP_LT: return !unordered && a < b;
        case CMP_LE: return !unordered && a <= b;
        case CMP_GT: return !unordered && a > b;
        case CMP_GE: return !unordered && a >= b;
        case CMP_EQU: return unordered || a == b;
        case CMP_NEU: return unordered || a != b;
        case CMP_LTU: return unordered || a < b;
        case CMP_LEU: return unordered || a <= b;
        case CMP_GTU: return unordered || a > b;
        case CMP_GEU: return unordered || a >= b;
        case CMP_NUM: return !unordered;
        default: return unordered;  // CMP_NAN
    }
}

inline void set_predicates(uint32_t* r, int p, int q, bool value) {
    r[p] = value;
    if (q >= 0) r[q] = !value;
}
inline void setp_b32(uint32_t* r, Cmp cmp, int p, int q, uint32_t a, uint32_t b) {
    set_predicates(r, p, q, compare_int(cmp, a, b));
}
inline void setp_u32(uint32_t* r, Cmp cmp, int p, int q, uint32_t a, uint32_t b) {
    set_predicates(r, p, q, compare_int(cmp, a, b));
}
inline void setp_s32(uint32_t* r, Cmp cmp, int p, int q, uint32_t a, uint32_t b) {
    set_predicates(r, p, q, compare_int(cmp, (int32_t)a, (int32_t)b));
}
inline void setp_f32(uint32_t* r, Cmp cmp, int p, int q, uint32_t a, uint32_t b) {
    set_predicates(r, p, q, compare_f32(cmp, as_float(a), as_float(b)));
}
inline void setp_ftz_f32(uint32_t* r, Cmp cmp, int p, int q, uint32_t a, uint32_t b) {
    set_predicates(r, p, q, compare_f32(cmp, as_float(flush_subnormal(a)), as_float(flush_subnormal(b))));
}

// mov.type d, a and selp.type d, a, b, c (d = c ? a : b): 32 bits copied as they are, whatever the type.
inline void mov_32(uint32_t* r, int d, uint32_t a) { r[d] = a; }
inline void selp_32(uint32_t* r, int d, uint32_t a, uint32_t b, uint32_t c) { r[d] = c ? a : b; }

}  // namespace ptx

// Declared in fiber.h, called as a thread exits: the copies it never waited for are dropped.
void cp_async_exit(Fiber* f) {
    rt.cp_pending -= f->cp_count - f->cp_head;
    f->cp_head = f->cp_count = 0;
}

// Declared in fiber.h, called by release_warp when a whole warp waits at an mma.
void mma_release(int w) {
    ptx::MmaLane* lanes[32];
    for (int j = 0; j < 32; ++j) lanes[j] = (ptx::MmaLane*)(uintptr_t)lane_fiber(w, j).value;
    // "aligned": every lane must run the same mma instruction. Two mma statements (or one helper
    // inlined at two places, which the CPU cannot tell apart) on divergent paths would meet here;
    // so would two different mma instructions, whose sites differ in the instruction they name.
    const Fiber& first = lane_fiber(w, 0);
    for (int j = 1; j < 32; ++j) {
        const Fiber& f = lane_fiber(w, j);
        if (!same_site(f.site, first.site)) {
            char t1[64], t2[64], s1[256], s2[256];
            fmt_thread(t1, sizeof t1, &first);
            fmt_thread(t2, sizeof t2, &f);
            fmt_site(s1, sizeof s1, first.site);
            fmt_site(s2, sizeof s2, f.site);
            ATTNLAB_FAIL("mma divergence in kernel %s, block (%u,%u,%u): lane 0 (%s) runs %s while lane %d (%s) runs "
                         "%s; all 32 lanes of a warp must run the same mma.sync together",
                         rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, t1, s1, j, t2, s2);
        }
    }
    lanes[0]->shape->multiply(lanes);
}

}  // namespace
}  // namespace attnlab
