// CUDA built-ins for compiling a kernel file as ordinary C++: the runtime half of the CPU build.
//
// Semantics follow CUDA where a correct kernel can observe them; see README.md
// in this directory for what is and is not supported.
//
// module.py preprocesses this header (with g++'s own macros and headers) apart from the student's
// file, which sees only NVRTC's macros and cuda_macros.h, and compiles the two texts together. So
// every macro defined here, in fiber.h and ptx.h, or in the C and C++ headers below, is gone before
// the student's first line, and no macro of the student's reaches a line of the runtime. A standard
// header a kernel file includes (<cmath>, <cfloat>, <cstdint>) is one NVRTC's build would see
// too (labrunner/run/cpu/include, labrunner/include/nvrtc_std): its declarations are here already.
#pragma once

#include <assert.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The C++ library a kernel file can reach under NVRTC, and no more: NVRTC has std::move, std::forward and
// std::initializer_list built in, and its <cmath> (labrunner/include/nvrtc_std) brings std::max and
// std::min, which g++'s <cmath> brings too. <algorithm>, <memory> and <utility> were here once, and were
// two fifths of the text every CPU build parses (a tenth of a second of each grade) for nothing a file
// that NVRTC compiled can use.
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "fiber.h"
#include "ptx.h"

// ------------------------------------------------------------ built-ins

// The CUDA keywords and the built-in variables (threadIdx, ...) are macros of cuda_macros.h, which
// only the student's file sees: this runtime is preprocessed on its own (see module.py), so that
// none of its macros, nor those of the C and C++ headers above, reach the student's file.
static constexpr int warpSize = 32;

// ------------------------------------------------------------ vector types

struct __attribute__((aligned(8))) float2 { float x, y; };
struct float3 { float x, y, z; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) int2 { int x, y; };
struct int3 { int x, y, z; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct __attribute__((aligned(8))) uint2 { unsigned int x, y; };
struct __attribute__((aligned(16))) uint4 { unsigned int x, y, z, w; };
struct __attribute__((aligned(16))) double2 { double x, y; };

static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float3 make_float3(float x, float y, float z) { return float3{x, y, z}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline int2 make_int2(int x, int y) { return int2{x, y}; }
static inline int3 make_int3(int x, int y, int z) { return int3{x, y, z}; }
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
static inline double2 make_double2(double x, double y) { return double2{x, y}; }

// ------------------------------------------------------------ barriers

#define ATTNLAB_SITE_PARAMS const char* attnlab_file = __builtin_FILE(), int attnlab_line = __builtin_LINE()

static inline void __syncthreads(ATTNLAB_SITE_PARAMS) {
    ::attnlab::barrier(::attnlab::BK_PLAIN, 0, {"__syncthreads", attnlab_file, attnlab_line});
}
static inline int __syncthreads_count(int pred, ATTNLAB_SITE_PARAMS) {
    return ::attnlab::barrier(::attnlab::BK_COUNT, pred != 0, {"__syncthreads_count", attnlab_file, attnlab_line});
}
static inline int __syncthreads_and(int pred, ATTNLAB_SITE_PARAMS) {
    return ::attnlab::barrier(::attnlab::BK_AND, pred != 0, {"__syncthreads_and", attnlab_file, attnlab_line});
}
static inline int __syncthreads_or(int pred, ATTNLAB_SITE_PARAMS) {
    return ::attnlab::barrier(::attnlab::BK_OR, pred != 0, {"__syncthreads_or", attnlab_file, attnlab_line});
}

// ------------------------------------------------------------ warp ops

namespace attnlab {
namespace {

template <class T>
inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp shuffle of an unsupported type");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
inline T from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}

using ptx::ShflMode;

// The source lane as the PTX shfl.sync instruction defines it (ptx.h), with the clamp value c as CUDA's
// intrinsics set it; the caller's own lane when out of range.
inline int shfl_src(ShflMode mode, int b, int width) {
    const uint32_t c = ((uint32_t)((32 - width) & 31) << 8) | (mode == ptx::SHFL_UP ? 0u : 31u);
    bool in_range;
    return ptx::shfl_source(mode, rt.cur->lane, (uint32_t)b, c, &in_range);
}

template <class T>
inline T shfl(ShflMode mode, const char* what, unsigned mask, T var, int b, int width, const char* file, int line) {
    uint64_t r = warp_op(WK_SHFL, mask, to_bits(var), shfl_src(mode, b, width), 0, {what, file, line});
    if (sizeof(T) == 4 && r == kShflPoison64) r = kShflPoison32;
    return from_bits<T>(r);
}

}  // namespace
}  // namespace attnlab

template <class T>
static inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = 32, ATTNLAB_SITE_PARAMS) {
    return ::attnlab::shfl(::attnlab::ptx::SHFL_IDX, "__shfl_sync", mask, var, srcLane, width, attnlab_file, attnlab_line);
}
template <class T>
static inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, ATTNLAB_SITE_PARAMS) {
    return ::attnlab::shfl(::attnlab::ptx::SHFL_UP, "__shfl_up_sync", mask, var, (int)delta, width, attnlab_file,
                           attnlab_line);
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32, ATTNLAB_SITE_PARAMS) {
    return ::attnlab::shfl(::attnlab::ptx::SHFL_DOWN, "__shfl_down_sync", mask, var, (int)delta, width, attnlab_file,
                           attnlab_line);
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = 32, ATTNLAB_SITE_PARAMS) {
    return ::attnlab::shfl(::attnlab::ptx::SHFL_BFLY, "__shfl_xor_sync", mask, var, laneMask, width, attnlab_file,
                           attnlab_line);
}

static inline void __syncwarp(unsigned mask = 0xffffffffu, ATTNLAB_SITE_PARAMS) {
    ::attnlab::warp_op(::attnlab::WK_SYNCWARP, mask, 0, 0, 0, {"__syncwarp", attnlab_file, attnlab_line});
}
static inline unsigned __ballot_sync(unsigned mask, int pred, ATTNLAB_SITE_PARAMS) {
    return (unsigned)::attnlab::warp_op(::attnlab::WK_VOTE, mask, 0, 0, pred != 0,
                                        {"__ballot_sync", attnlab_file, attnlab_line});
}
static inline int __any_sync(unsigned mask, int pred, ATTNLAB_SITE_PARAMS) {
    return ::attnlab::warp_op(::attnlab::WK_VOTE, mask, 0, 0, pred != 0, {"__any_sync", attnlab_file, attnlab_line}) !=
           0;
}
static inline int __all_sync(unsigned mask, int pred, ATTNLAB_SITE_PARAMS) {
    unsigned m = mask & ::attnlab::rt.warp_exists[::attnlab::rt.cur->warp];
    return ::attnlab::warp_op(::attnlab::WK_VOTE, mask, 0, 0, pred != 0, {"__all_sync", attnlab_file, attnlab_line}) ==
           m;
}
static inline unsigned __activemask() { return ::attnlab::active_mask(); }
static inline unsigned __lanemask_lt() { return (1u << ::attnlab::rt.cur->lane) - 1u; }

// ------------------------------------------------------------ math

// glibc declares __expf and friends as internal names, so the fast-math
// intrinsics are macros (cuda_macros.h) onto functions of our own.
namespace attnlab {
namespace {
inline float fast_expf(float x) { return ::expf(x); }
inline float fast_logf(float x) { return ::logf(x); }
inline float fast_log2f(float x) { return ::log2f(x); }
inline float fast_log10f(float x) { return ::log10f(x); }
inline float fast_exp10f(float x) { return ::powf(10.0f, x); }
inline float fast_sinf(float x) { return ::sinf(x); }
inline float fast_cosf(float x) { return ::cosf(x); }
inline float fast_tanf(float x) { return ::tanf(x); }
inline float fast_powf(float x, float y) { return ::powf(x, y); }
inline void fast_sincosf(float x, float* s, float* c) {
    *s = ::sinf(x);
    *c = ::cosf(x);
}
}  // namespace
}  // namespace attnlab
// fmaf and fma (cuda_macros.h points a kernel file's calls here) as the one fused multiply-add
// instruction, where the host has it (module.py defines ATTNLAB_HOST_FMA): g++ for plain x86-64
// calls libm for each, and spills the vector registers around every call, which made a flash
// kernel three times slower. The instruction rounds once, as libm's fmaf does: the same bits. Only
// these calls change; the rest stays plain SSE code, whose aligned accesses fault where a GPU's
// misaligned float4 does (fiber_faults.h decodes them), as -mfma's AVX code would not.
static inline float attnlab_fmaf(float a, float b, float c) {
#if defined(ATTNLAB_HOST_FMA) && defined(__x86_64__)
    __asm__("vfmadd213ss %2, %1, %0" : "+x"(a) : "x"(b), "x"(c));  // a = a * b + c, rounded once
    return a;
#else
    return ::fmaf(a, b, c);
#endif
}
static inline double attnlab_fma(double a, double b, double c) {
#if defined(ATTNLAB_HOST_FMA) && defined(__x86_64__)
    __asm__("vfmadd213sd %2, %1, %0" : "+x"(a) : "x"(b), "x"(c));
    return a;
#else
    return ::fma(a, b, c);
#endif
}
namespace std {
using ::attnlab_fma;  // `std::fmaf(...)` in a kernel file reads `std::attnlab_fmaf(...)`
using ::attnlab_fmaf;
}  // namespace std
static inline float rsqrtf(float x) { return 1.0f / ::sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / ::sqrt(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return ::sqrtf(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / ::sqrtf(x); }
static inline float __fmaf_rn(float a, float b, float c) { return attnlab_fmaf(a, b, c); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __fma_rn(double a, double b, double c) { return attnlab_fma(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }  // NaN -> 0

static inline int __float_as_int(float x) { int r; memcpy(&r, &x, 4); return r; }
static inline float __int_as_float(int x) { float r; memcpy(&r, &x, 4); return r; }
static inline unsigned __float_as_uint(float x) { unsigned r; memcpy(&r, &x, 4); return r; }
static inline float __uint_as_float(unsigned x) { float r; memcpy(&r, &x, 4); return r; }
static inline long long __double_as_longlong(double x) { long long r; memcpy(&r, &x, 8); return r; }
static inline double __longlong_as_double(long long x) { double r; memcpy(&r, &x, 8); return r; }
static inline int __float2int_rn(float x) { return (int)::nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)::floorf(x); }
static inline int __float2int_ru(float x) { return (int)::ceilf(x); }
static inline unsigned __float2uint_rn(float x) { return (unsigned)::nearbyintf(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned x) { return (float)x; }

static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    x = ((x >> 8) & 0x00FF00FFu) | ((x & 0x00FF00FFu) << 8);
    return (x >> 16) | (x << 16);
}
static inline int __mul24(int a, int b) { return (int)(((long long)(a << 8 >> 8)) * (b << 8 >> 8)); }
static inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xFFFFFFu) * (b & 0xFFFFFFu); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }

// CUDA's integer and float min/max overloads (non-templates, so they win
// over std::min/std::max if a kernel says `using namespace std`).
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
static inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
static inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
static inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return ::fminf(a, b); }
static inline float max(float a, float b) { return ::fmaxf(a, b); }
static inline double min(double a, double b) { return ::fmin(a, b); }
static inline double max(double a, double b) { return ::fmax(a, b); }
static inline float min(float a, int b) { return ::fminf(a, (float)b); }
static inline float max(float a, int b) { return ::fmaxf(a, (float)b); }
static inline float min(int a, float b) { return ::fminf((float)a, b); }
static inline float max(int a, float b) { return ::fmaxf((float)a, b); }
static inline double min(double a, float b) { return ::fmin(a, (double)b); }
static inline double max(double a, float b) { return ::fmax(a, (double)b); }
static inline double min(float a, double b) { return ::fmin((double)a, b); }
static inline double max(float a, double b) { return ::fmax((double)a, b); }

// ------------------------------------------------------------ memory

template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldca(const T* p) { return *p; }
template <class T> static inline T __ldcg(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline T __ldlu(const T* p) { return *p; }
template <class T> static inline T __ldcv(const T* p) { return *p; }
template <class T> static inline void __stwb(T* p, T v) { *p = v; }
template <class T> static inline void __stcg(T* p, T v) { *p = v; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }
template <class T> static inline void __stwt(T* p, T v) { *p = v; }

// A generic pointer into shared memory -> its address in the shared window, which cp.async takes as its
// destination. NVRTC's returns size_t, and so does this, so that the same source compiles both ways;
// how the window is laid out, and the error for a pointer outside shared memory, are in ptx.h.
static inline size_t __cvta_generic_to_shared(const void* p, ATTNLAB_SITE_PARAMS) {
    return ::attnlab::ptx::cvta_generic_to_shared(p, attnlab_file, attnlab_line);
}

// All threads of a launch share one OS thread and switch only at barriers,
// warp operations and exit, so a plain read-modify-write is atomic here.
static inline int atomicAdd(int* p, int v) { int o = *p; *p = o + v; return o; }
static inline unsigned atomicAdd(unsigned* p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    unsigned long long o = *p; *p = o + v; return o;
}
static inline float atomicAdd(float* p, float v) { float o = *p; *p = o + v; return o; }
static inline double atomicAdd(double* p, double v) { double o = *p; *p = o + v; return o; }
static inline int atomicSub(int* p, int v) { int o = *p; *p = o - v; return o; }
static inline unsigned atomicSub(unsigned* p, unsigned v) { unsigned o = *p; *p = o - v; return o; }
static inline int atomicMax(int* p, int v) { int o = *p; *p = o > v ? o : v; return o; }
static inline unsigned atomicMax(unsigned* p, unsigned v) { unsigned o = *p; *p = o > v ? o : v; return o; }
static inline long long atomicMax(long long* p, long long v) { long long o = *p; *p = o > v ? o : v; return o; }
static inline int atomicMin(int* p, int v) { int o = *p; *p = o < v ? o : v; return o; }
static inline unsigned atomicMin(unsigned* p, unsigned v) { unsigned o = *p; *p = o < v ? o : v; return o; }
static inline long long atomicMin(long long* p, long long v) { long long o = *p; *p = o < v ? o : v; return o; }
static inline int atomicExch(int* p, int v) { int o = *p; *p = v; return o; }
static inline unsigned atomicExch(unsigned* p, unsigned v) { unsigned o = *p; *p = v; return o; }
static inline unsigned long long atomicExch(unsigned long long* p, unsigned long long v) {
    unsigned long long o = *p; *p = v; return o;
}
static inline float atomicExch(float* p, float v) { float o = *p; *p = v; return o; }
static inline int atomicCAS(int* p, int cmp, int v) { int o = *p; if (o == cmp) *p = v; return o; }
static inline unsigned atomicCAS(unsigned* p, unsigned cmp, unsigned v) { unsigned o = *p; if (o == cmp) *p = v; return o; }
static inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long cmp, unsigned long long v) {
    unsigned long long o = *p; if (o == cmp) *p = v; return o;
}
static inline int atomicAnd(int* p, int v) { int o = *p; *p = o & v; return o; }
static inline unsigned atomicAnd(unsigned* p, unsigned v) { unsigned o = *p; *p = o & v; return o; }
static inline int atomicOr(int* p, int v) { int o = *p; *p = o | v; return o; }
static inline unsigned atomicOr(unsigned* p, unsigned v) { unsigned o = *p; *p = o | v; return o; }
static inline int atomicXor(int* p, int v) { int o = *p; *p = o ^ v; return o; }
static inline unsigned atomicXor(unsigned* p, unsigned v) { unsigned o = *p; *p = o ^ v; return o; }
static inline unsigned atomicInc(unsigned* p, unsigned v) { unsigned o = *p; *p = o >= v ? 0 : o + 1; return o; }
static inline unsigned atomicDec(unsigned* p, unsigned v) { unsigned o = *p; *p = (o == 0 || o > v) ? v : o - 1; return o; }

static inline void __threadfence() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

static inline long long clock64() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static inline long long __globaltimer() { return clock64(); }

// ------------------------------------------------------------ traps

static inline void __trap(ATTNLAB_SITE_PARAMS) { ::attnlab::device_assert_fail("__trap()", attnlab_file, attnlab_line); }
static inline void __brkpt() {}

// __builtin_assume (a macro of cuda_macros.h): the assumption, checked.
namespace attnlab {
namespace {
inline void assume_holds(bool holds, const char* expression, const char* file, int line) {
    if (!holds)
        ptx::fail_at("assumption false", file, line, "%s does not hold; the GPU's compiler takes it as true, so "
                     "what the kernel does past it is undefined there: make it hold, or remove it", expression);
}
}  // namespace
}  // namespace attnlab
