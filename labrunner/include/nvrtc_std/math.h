// <math.h> for NVRTC, which ships none. NVRTC already knows every math function (expf, exp,
// fmaxf, sqrtf, isinf, ...); what it lacks are the macros, defined here with glibc's values
// (NAN is the quiet NaN 0x7fc00000, as glibc's is; CUDART_NAN_F is CUDA's 0x7fffffff).
// A kernel file on the CPU backend reads it too (the runtime there has g++'s <math.h> declarations).
#pragma once

#ifndef INFINITY
#define INFINITY    __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN         __int_as_float(0x7fc00000)
#endif
#define HUGE_VALF   INFINITY
#define HUGE_VAL    __longlong_as_double(0x7ff0000000000000LL)

#define M_E         2.7182818284590452354
#define M_LOG2E     1.4426950408889634074
#define M_LN2       0.69314718055994530942
#define M_LN10      2.30258509299404568402
#define M_PI        3.14159265358979323846
#define M_PI_2      1.57079632679489661923
#define M_SQRT2     1.41421356237309504880
#define M_SQRT1_2   0.70710678118654752440
