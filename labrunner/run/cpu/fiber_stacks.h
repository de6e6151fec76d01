// Part of fiber.h: the fibers' stacks and their first context.
//
// Each CUDA thread gets a stack of its own (128 KiB, or ATTNLAB_CPU_STACK_KB), all mapped in one go
// with an inaccessible guard page below each, so a thread that outgrows its stack faults there
// (reported as a stack overflow, fiber_faults.h) instead of overwriting its neighbour's. The stacks
// are mapped once and reused by every block and launch: a grid of many blocks of 256 threads needs
// 256 of them, not one per thread of the grid. init_context prepares a fiber to begin in fiber_main
// (fiber_exit.h) at its first switch.
#pragma once

bool ensure_fibers(int n) {
    size_t want = 128 * 1024;
    if (g_opt_stack_kb >= 16 && g_opt_stack_kb <= 64 * 1024) want = (size_t)g_opt_stack_kb * 1024;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    want = (want + page - 1) / page * page;
    if (n <= rt.capacity && want == rt.stack_bytes) return true;
    if (rt.stack_map) munmap(rt.stack_map, rt.stack_map_bytes);
    for (int i = 0; i < rt.capacity; ++i) free(rt.fibers[i].cp_copies);
    free(rt.fibers);
    free(rt.ucs);
    free(rt.queue);
    rt.stack_map = nullptr;
    rt.fibers = nullptr;
    rt.ucs = nullptr;
    rt.queue = nullptr;
    rt.capacity = 0;
    const size_t per = want + page;  // one guard page below each stack
    void* m = mmap(nullptr, per * n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return false;
    rt.stack_map = (char*)m;
    rt.stack_map_bytes = per * n;
    rt.stack_bytes = want;
    rt.fibers = (Fiber*)calloc(n, sizeof(Fiber));
    rt.ucs = (ucontext_t*)calloc(n, sizeof(ucontext_t));
    rt.queue = (int*)calloc(n, sizeof(int));
    free(rt.rank);
    free(rt.by_rank);
    rt.rank = (int*)calloc(n, sizeof(int));
    rt.by_rank = (int*)calloc(n, sizeof(int));
    if (!rt.fibers || !rt.ucs || !rt.queue || !rt.rank || !rt.by_rank) return false;
    for (int i = 0; i < n; ++i) {
        char* base = rt.stack_map + per * i;
        mprotect(base, page, PROT_NONE);
        rt.fibers[i].stack_lo = base + page;
        rt.fibers[i].stack_hi = base + per;
        rt.fibers[i].uc = &rt.ucs[i];
    }
    rt.capacity = n;
    return true;
}

void init_context(Fiber& f) {
#if ATTNLAB_HAVE_ASM_FIBERS
    if (!rt.use_uc) {
        uintptr_t top = (uintptr_t)f.stack_hi & ~(uintptr_t)15;
        void** sp = (void**)top;
        *--sp = nullptr;                      // fake return address of fiber_main (rsp % 16 == 8 at entry)
        *--sp = (void*)&fiber_main;           // popped by `ret`
        for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp rbx r12 r13 r14 r15
        f.sp = sp;
        return;
    }
#endif
    getcontext(f.uc);
    f.uc->uc_stack.ss_sp = f.stack_lo;
    f.uc->uc_stack.ss_size = (size_t)(f.stack_hi - f.stack_lo);
    f.uc->uc_link = nullptr;
    makecontext(f.uc, &fiber_entry_uc, 0);
}
