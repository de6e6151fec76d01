// <stdint.h> for NVRTC, which ships none, and for a kernel file on the CPU backend (read without g++'s headers).
// The types are spelled as glibc spells them on 64-bit Linux (int64_t is long), so a kernel's
// overloads and templates resolve the same way on both backends.
#pragma once

typedef signed char        int8_t;
typedef short              int16_t;
typedef int                int32_t;
typedef long               int64_t;
typedef unsigned char      uint8_t;
typedef unsigned short     uint16_t;
typedef unsigned int       uint32_t;
typedef unsigned long      uint64_t;
typedef long               intptr_t;
typedef unsigned long      uintptr_t;
typedef long               intmax_t;
typedef unsigned long      uintmax_t;

#define INT8_MIN    (-128)
#define INT16_MIN   (-32767 - 1)
#define INT32_MIN   (-2147483647 - 1)
#define INT64_MIN   (-9223372036854775807L - 1)
#define INT8_MAX    127
#define INT16_MAX   32767
#define INT32_MAX   2147483647
#define INT64_MAX   9223372036854775807L
#define UINT8_MAX   255
#define UINT16_MAX  65535
#define UINT32_MAX  4294967295U
#define UINT64_MAX  18446744073709551615UL
#define SIZE_MAX    18446744073709551615UL

#define INT32_C(c)  c
#define UINT32_C(c) c ## U
#define INT64_C(c)  c ## L
#define UINT64_C(c) c ## UL
