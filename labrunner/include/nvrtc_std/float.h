// <float.h> for NVRTC, which ships none, and for a kernel file on the CPU backend, which is
// preprocessed without g++'s headers; the values are the IEEE ones (written in hexadecimal, so exactly).
#pragma once

#define FLT_RADIX       2
#define FLT_MANT_DIG    24
#define DBL_MANT_DIG    53
#define FLT_DIG         6
#define DBL_DIG         15
#define FLT_MIN_EXP     (-125)
#define DBL_MIN_EXP     (-1021)
#define FLT_MAX_EXP     128
#define DBL_MAX_EXP     1024
#define FLT_MAX         0x1.fffffep+127F
#define FLT_MIN         0x1p-126F
#define FLT_EPSILON     0x1p-23F
#define FLT_TRUE_MIN    0x1p-149F
#define DBL_MAX         0x1.fffffffffffffp+1023
#define DBL_MIN         0x1p-1022
#define DBL_EPSILON     0x1p-52
#define DBL_TRUE_MIN    0x1p-1074
