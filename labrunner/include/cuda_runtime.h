// attnlab's <cuda_runtime.h>, for NVRTC and for the CPU backend alike.
// A kernel file needs nothing from the real one: NVRTC builds in threadIdx, __syncthreads,
// the float4 family and the math functions, and the CPU backend's shim provides the same
// names. Kernels include it out of habit, so it is allowed and deliberately empty.
#pragma once
