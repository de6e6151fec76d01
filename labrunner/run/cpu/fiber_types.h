// Part of fiber.h: uint3 and dim3, the types of CUDA's built-in indices and sizes.
//
// threadIdx and blockIdx are uint3, blockDim and gridDim dim3 (cuda_macros.h reads them out of the
// runtime's records). The runtime keeps every thread's index and the launch's sizes in these types,
// so they come first, and at file scope, where a kernel's own code names them as it would CUDA's.
#pragma once

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};
