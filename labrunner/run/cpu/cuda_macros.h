// The macros a kernel file sees on the CPU backend, and the only ones besides NVRTC's predefined
// macros (nvrtc_view.py) and those of the headers it includes itself.
//
// module.py preprocesses the student's file on its own, with g++'s predefined macros removed
// (-undef), no system headers (-nostdinc), NVRTC's view and this header; the runtime (shim.h,
// fiber.h, ptx.h and the C and C++ headers they include) is preprocessed separately, and the two
// are compiled together afterwards. So `#ifdef ATTNLAB_FAIL`, `#ifdef __GLIBC__` or
// `#ifdef MAP_ANONYMOUS` is false in a kernel file, as on the GPU, and nothing the file defines
// can change a line of the runtime. Every name here is CUDA's (NVRTC defines it too, or it is a
// built-in NVRTC declares), given the meaning the shim's runtime needs.
#pragma once

// ------------------------------------------------------------ qualifiers (NVRTC defines these as macros too)

#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__
#define __device_builtin__
#define __cudart_builtin__
#define CUDART_CB
// module.py turns each `__shared__ T name[...];` in a function into a static plus a registration, so
// that it is poisoned at every block start, and each `extern __shared__ T name[];` into a pointer to
// the block's dynamic shared memory; what is left of the keyword (file scope, macros) is a static.
#define __shared__ static

// NVRTC's NULL.
#define NULL 0

// ------------------------------------------------------------ built-ins (variables and functions on NVRTC)

// The current fiber's record, so that each CUDA thread reads its own index although all of a
// block's threads share one OS thread.
#define threadIdx (static_cast<const ::uint3&>(::attnlab::rt.cur->tid))
#define blockIdx (static_cast<const ::uint3&>(::attnlab::rt.block_idx))
#define blockDim (static_cast<const ::dim3>(::attnlab::rt.block_dim))
#define gridDim (static_cast<const ::dim3>(::attnlab::rt.grid_dim))

// glibc declares __expf and friends as internal names of its own, so CUDA's fast intrinsics are
// macros onto the shim's functions instead of functions of those names.
#define __expf(x) ::attnlab::fast_expf(x)
#define __logf(x) ::attnlab::fast_logf(x)
#define __log2f(x) ::attnlab::fast_log2f(x)
#define __log10f(x) ::attnlab::fast_log10f(x)
#define __exp10f(x) ::attnlab::fast_exp10f(x)
#define __sinf(x) ::attnlab::fast_sinf(x)
#define __cosf(x) ::attnlab::fast_cosf(x)
#define __tanf(x) ::attnlab::fast_tanf(x)
#define __powf(x, y) ::attnlab::fast_powf(x, y)
#define __sincosf(x, s, c) ::attnlab::fast_sincosf(x, s, c)
// The GPU's fused multiply-add, as one instruction where the host has one (shim.h says why); the
// names stay unqualified so that `std::fmaf(...)` and `::fmaf(...)` still read as calls.
#define fmaf(a, b, c) attnlab_fmaf(a, b, c)
#define fma(a, b, c) attnlab_fma(a, b, c)

// Device assert (NVRTC defines assert without any include, and so does this).
#define assert(e) ((e) ? (void)0 : ::attnlab::device_assert_fail(#e, __FILE__, __LINE__))

// NVRTC's __builtin_assume(e) lets the compiler take e as true: a false e is undefined behaviour on the
// GPU, whatever the kernel then computes. g++ has no such builtin; here e is evaluated once (NVRTC
// leaves unspecified whether side effects happen) and a false one ends the launch, naming the kernel, the
// thread and the line, so that a kernel is never graded on what undefined behaviour happened to give.
#define __builtin_assume(...) \
    ::attnlab::assume_holds(static_cast<bool>(__VA_ARGS__), "__builtin_assume(" #__VA_ARGS__ ")", __FILE__, __LINE__)
