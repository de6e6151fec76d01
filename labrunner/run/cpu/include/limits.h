// <limits.h> for a kernel file on the CPU backend, with the values of 64-bit Linux on x86-64 and
// AArch64 (whether plain char is signed differs between the two, so CHAR_MIN and CHAR_MAX are not
// here). The gate refuses this header (NVRTC has none); it is here for files built for the CPU only.
#pragma once

#define CHAR_BIT    8
#define SCHAR_MIN   (-128)
#define SCHAR_MAX   127
#define UCHAR_MAX   255
#define SHRT_MIN    (-32767 - 1)
#define SHRT_MAX    32767
#define USHRT_MAX   65535
#define INT_MIN     (-2147483647 - 1)
#define INT_MAX     2147483647
#define UINT_MAX    4294967295U
#define LONG_MIN    (-9223372036854775807L - 1)
#define LONG_MAX    9223372036854775807L
#define ULONG_MAX   18446744073709551615UL
#define LLONG_MIN   (-9223372036854775807LL - 1)
#define LLONG_MAX   9223372036854775807LL
#define ULLONG_MAX  18446744073709551615ULL
