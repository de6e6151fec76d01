// The inline PTX the CPU backend runs, emulated bit for bit where the PTX ISA says what happens.
//
// ptx_asm.py turns each asm statement of a kernel file into plain C++: every operand is loaded
// into a 32-bit register (`uint32_t r[]`, bit patterns, as in PTX), the instructions below run on
// those registers in order, and the outputs are stored back. A statement using anything else never
// gets here: the build refuses it. Included by shim.h after fiber.h (the mma is a warp
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

// ------------------------------------- mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
// D (16x8, f32) = A (16x8, tf32) * B (8x8, tf32) + C (16x8, f32) for one warp. Each lane holds a
// fragment; with groupID g = lane / 4 and t = lane % 4 (PTX ISA, "Matrix Fragments for
// mma.m16n8k8", the .tf32 figures):
//   A: a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]   (row-major fragment)
//   B: b0 = B[k=t][n=g], b1 = B[k=t+4][n=g]                               (column-major fragment)
//   C, D: c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
// The tensor core reads a tf32 operand as the top 19 bits of its register (the low 13 ignored),
// so an unrounded float is truncated, not rounded. Each product of two tf32 values is exact in
// float32 (11 by 11 significant bits); the sums are float32 additions, in the order C, then
// k = 0..7 (the hardware's order and internal width are not documented; this is one fixed,
// float32-accurate choice). A NaN operand is used whole, as in cvt above.

struct MmaLane {
    uint32_t a[4], b[2], c[4], d[4];
};

inline float tf32_value(uint32_t bits) { return as_float(is_nan(bits) ? bits : bits & 0xFFFFE000u); }

constexpr const char* kMmaName = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";

inline void mma_m16n8k8_row_col_f32_tf32(uint32_t* r, int d0, int d1, int d2, int d3, int a0, int a1, int a2,
                                          int a3, int b0, int b1, int c0, int c1, int c2, int c3, const char* file,
                                          int line) {
    Fiber* me = rt.cur;
    const int w = me->warp;
    if (rt.warp_exists[w] != 0xffffffffu) {
        char t[64];
        fmt_thread(t, sizeof t, me);
        ATTNLAB_FAIL("%s needs a whole warp in kernel %s, block (%u,%u,%u): %s (%s:%d) is in warp %d, which has "
                     "only %d lanes (the block has %d threads; make it a multiple of 32)",
                     kMmaName, rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, t, file, line, w,
                     __builtin_popcount(rt.warp_exists[w]), rt.nthreads);
    }
    // Read every input before anything is written: D may share registers with A, B or C.
    MmaLane lane = {{r[a0], r[a1], r[a2], r[a3]}, {r[b0], r[b1]}, {r[c0], r[c1], r[c2], r[c3]}, {0, 0, 0, 0}};
    // All 32 lanes meet here; the last to arrive runs mma_release (below) while every lane's
    // MmaLane is still on its stack, then each lane takes its own D.
    warp_op(WK_MMA, 0xffffffffu, (uint64_t)(uintptr_t)&lane, 0, 0, {kMmaName, file, line});
    r[d0] = lane.d[0];
    r[d1] = lane.d[1];
    r[d2] = lane.d[2];
    r[d3] = lane.d[3];
}

}  // namespace ptx

// Declared in fiber.h, called by release_warp when a whole warp waits at an mma.
void mma_release(int w) {
    ptx::MmaLane* lanes[32];
    for (int j = 0; j < 32; ++j) lanes[j] = (ptx::MmaLane*)(uintptr_t)lane_fiber(w, j).value;
    // "aligned": every lane must run the same mma instruction. Two mma statements (or one helper
    // inlined at two places, which the CPU cannot tell apart) on divergent paths would meet here.
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
    float A[16][8], B[8][8], C[16][8];
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        const ptx::MmaLane& l = *lanes[lane];
        A[g][t] = ptx::tf32_value(l.a[0]);
        A[g + 8][t] = ptx::tf32_value(l.a[1]);
        A[g][t + 4] = ptx::tf32_value(l.a[2]);
        A[g + 8][t + 4] = ptx::tf32_value(l.a[3]);
        B[t][g] = ptx::tf32_value(l.b[0]);
        B[t + 4][g] = ptx::tf32_value(l.b[1]);
        C[g][2 * t] = ptx::as_float(l.c[0]);
        C[g][2 * t + 1] = ptx::as_float(l.c[1]);
        C[g + 8][2 * t] = ptx::as_float(l.c[2]);
        C[g + 8][2 * t + 1] = ptx::as_float(l.c[3]);
    }
    float D[16][8];
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 8; ++n) {
            float acc = C[m][n];
            for (int k = 0; k < 8; ++k) acc += A[m][k] * B[k][n];
            D[m][n] = acc;
        }
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        const float out[4] = {D[g][2 * t], D[g][2 * t + 1], D[g + 8][2 * t], D[g + 8][2 * t + 1]};
        memcpy(lanes[lane]->d, out, sizeof out);
    }
}

}  // namespace
}  // namespace attnlab
