// Part of fiber.h: shared memory, and the poison that makes its races visible.
//
// Blocks run one after another, so a single static array per __shared__ variable serves every
// block: module.py rewrites each declaration into a static plus a SharedReg, which registers the
// array the first time its function runs. The block's dynamic shared memory is one array too
// (g_dyn_shared, fiber_state.h). At every block start all of it is filled with the NaN 0x7FF00BAD
// (kPoison32). A GPU's shared memory holds whatever was there before, so a kernel that reads what
// no thread of its block wrote is wrong there as well; here the NaN's payload, which x86 keeps
// through arithmetic, lets the driver name the output it reaches a race.
#pragma once

void poison(void* p, size_t n) {
    unsigned char* b = (unsigned char*)p;
    static const unsigned char pat[4] = {0xAD, 0x0B, 0xF0, 0x7F};
    while (n && ((uintptr_t)b & 3)) {
        *b = pat[(uintptr_t)b & 3];
        ++b;
        --n;
    }
    uint32_t* w = (uint32_t*)b;
    for (size_t i = 0; i < n / 4; ++i) w[i] = kPoison32;
    b += n & ~(size_t)3;
    for (size_t i = 0; i < (n & 3); ++i) b[i] = pat[i];
}

void register_shared(void* p, size_t n) {
    for (int i = 0; i < rt.nregions; ++i)
        if (rt.regions[i].ptr == p) return;
    if (rt.nregions == rt.region_cap) {
        int cap = rt.region_cap ? rt.region_cap * 2 : 16;
        SharedRegion* r = (SharedRegion*)realloc(rt.regions, cap * sizeof(SharedRegion));
        if (!r) abort();
        rt.regions = r;
        rt.region_cap = cap;
    }
    rt.regions[rt.nregions++] = SharedRegion{p, n};
    rt.static_shared += n;
    poison(p, n);
    if (rt.in_launch && rt.cur && rt.static_shared + rt.dyn_shared > kSharedLimit)
        ATTNLAB_FAIL("bad launch config for kernel %s: %zu bytes of static __shared__ plus %zu bytes of dynamic "
                     "shared memory exceed the %zu-byte (227 KiB) limit",
                     rt.kernel, rt.static_shared, rt.dyn_shared, kSharedLimit);
}

struct SharedReg {
    SharedReg(void* p, size_t n) { register_shared(p, n); }
};

inline void* dyn_shared_base() { return g_dyn_shared; }
