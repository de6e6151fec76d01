// The one prelude every attnlab kernel file is compiled with, on every backend.
// The driver prepends it and then resets line numbering with `#line 1`, so the
// compiler's messages point at the student's own lines.
#pragma once

// NVRTC ships no <cmath>, so INFINITY does not exist there; define it the way
// CUDA's own math_constants.h does, and only where nothing defined it before.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// The attention-v1 contract (Llama-3.2-1B attention, one layer).
static constexpr int HQ = 32;          // query heads
static constexpr int HKV = 8;          // key/value heads
static constexpr int DH = 64;          // head size
static constexpr int GROUP = HQ / HKV; // query heads per KV head: head h reads KV head h / GROUP
