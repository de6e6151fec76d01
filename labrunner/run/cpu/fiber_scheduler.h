// Part of fiber.h: the scheduler: which thread runs next, and the switch to it.
//
// Threads switch only where CUDA lets them wait for one another (a barrier, a warp operation, the
// thread's exit), so the order in which runnable threads resume is the one freedom left, and the
// runtime chooses it (README.md, "Why fibers"): schedule 0 runs a block's threads in order, 1 in
// reverse, and N >= 2 by random priorities seeded from N and the block, drawn again at every
// barrier. A missing __syncthreads shows as a different output under one of them, and the same N
// gives the same orders on every run, so a race found is a race replayed. switch_to moves between a
// fiber and the scheduler (the OS thread's own stack, where run_block waits), with the assembly
// switch of fiber_switch.h or with ucontext.
#pragma once

// ------------------------------------------------------------ context switch

inline void switch_to(Fiber* from, Fiber* to) {
    rt.cur = to;
#if ATTNLAB_HAVE_ASM_FIBERS
    if (!rt.use_uc) {
        attnlab_fiber_switch(from ? &from->sp : &rt.sched_sp, to ? to->sp : rt.sched_sp);
        __asm__ __volatile__("" ::: "memory");  // another fiber ran: reload everything
        return;
    }
#endif
    swapcontext(from ? from->uc : &rt.sched_uc, to ? to->uc : &rt.sched_uc);
    __asm__ __volatile__("" ::: "memory");
}

[[noreturn]] void switch_to_scheduler_forever() {
    Fiber* me = rt.cur;
    if (me) switch_to(me, nullptr);
    // Only reachable if called outside a fiber, which the callers never do.
    abort();
}

// ------------------------------------------------------------------- queue

inline bool prioritised() { return rt.schedule >= 2; }

inline uint64_t next_random() {  // splitmix64: a small, good, seedable generator
    uint64_t z = (rt.rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A fresh random priority for every thread (Fisher-Yates). Called only when no thread is queued.
void draw_priorities() {
    for (int r = 0; r < rt.nthreads; ++r) rt.by_rank[r] = r;
    for (int r = rt.nthreads - 1; r > 0; --r) {
        int j = (int)(next_random() % (uint64_t)(r + 1));
        int t = rt.by_rank[r];
        rt.by_rank[r] = rt.by_rank[j];
        rt.by_rank[j] = t;
    }
    for (int r = 0; r < rt.nthreads; ++r) rt.rank[rt.by_rank[r]] = r;
}

inline void push(int i) {
    if (prioritised()) {
        const int r = rt.rank[i];
        rt.ready[r >> 6] |= 1ull << (r & 63);
        ++rt.qcount;
        return;
    }
    int slot = rt.qhead + rt.qcount;
    if (slot >= rt.nthreads) slot -= rt.nthreads;
    rt.queue[slot] = i;
    ++rt.qcount;
}

inline int pop() {
    if (rt.qcount == 0) return -1;
    if (prioritised()) {
        for (int w = 0; w < kMaxThreads / 64; ++w)
            if (rt.ready[w]) {
                const int r = w * 64 + __builtin_ctzll(rt.ready[w]);
                rt.ready[w] &= rt.ready[w] - 1;
                --rt.qcount;
                return rt.by_rank[r];
            }
        return -1;
    }
    int i = rt.queue[rt.qhead];
    if (++rt.qhead == rt.nthreads) rt.qhead = 0;
    --rt.qcount;
    return i;
}

// The running fiber has just blocked (or exited): run the next one.
inline void run_next(Fiber* me) {
    int n = pop();
    switch_to(me, n >= 0 ? &rt.fibers[n] : nullptr);
}
