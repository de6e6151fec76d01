// Part of fiber.h: __syncthreads and its _count, _and and _or forms.
//
// A barrier releases when every live thread of the block waits at it: a thread that has exited no
// longer counts (fiber_exit.h). CUDA requires every thread to reach the same __syncthreads; a GPU may
// hang, or go on with wrong data, when they do not. So here a thread that arrives at another call
// site (file and line, which the shim's default arguments pass in) while others wait is an error on
// the spot, "barrier divergence", naming both threads and both sites. A barrier that can never
// complete because some thread waits in a warp operation instead is found when the block can no
// longer move (diagnose_deadlock, fiber_launch.h). The last thread to arrive releases the others, in
// the schedule's order, and keeps running.
#pragma once

void release_barrier() {
    // Every live thread waits here and none is queued: a new random order can start now.
    if (prioritised()) draw_priorities();
    int count = 0, n = 0;
    for (int i = 0; i < rt.nthreads; ++i) {
        const Fiber& f = rt.fibers[i];
        if (f.state == AT_BARRIER) {
            ++n;
            count += f.pred != 0;
        }
    }
    for (int k = 0; k < rt.nthreads; ++k) {
        int i = rt.reverse ? rt.nthreads - 1 - k : k;
        Fiber& f = rt.fibers[i];
        if (f.state != AT_BARRIER) continue;
        switch (f.kind) {
            case BK_COUNT: f.result = (uint64_t)count; break;
            case BK_AND: f.result = count == n; break;
            case BK_OR: f.result = count > 0; break;
            default: f.result = 0;
        }
        f.state = RUNNABLE;
        if (&f != rt.cur) push(i);
    }
    rt.bar_count = 0;
}

inline bool same_site(const Site& a, const Site& b) {
    return a.line == b.line && (a.file == b.file || (a.file && b.file && strcmp(a.file, b.file) == 0)) &&
           (a.what == b.what || strcmp(a.what, b.what) == 0);
}

int barrier(BarKind kind, int pred, Site site) {
    Fiber* me = rt.cur;
    if (rt.bar_count > 0 && !same_site(rt.bar_site, site)) {
        const Fiber* other = nullptr;
        for (int i = 0; i < rt.nthreads && !other; ++i)
            if (rt.fibers[i].state == AT_BARRIER) other = &rt.fibers[i];
        char t1[64], t2[64], s1[256], s2[256];
        fmt_thread(t1, sizeof t1, me);
        fmt_thread(t2, sizeof t2, other);
        fmt_site(s1, sizeof s1, site);
        fmt_site(s2, sizeof s2, other->site);
        ATTNLAB_FAIL("barrier divergence in kernel %s, block (%u,%u,%u): %s waits at %s while %s waits at %s",
                     rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, t1, s1, t2, s2);
    }
    if (rt.bar_count == 0) rt.bar_site = site;
    me->state = AT_BARRIER;
    me->kind = kind;
    me->pred = pred;
    me->site = site;
    ++rt.bar_count;
    if (rt.bar_count == rt.live)
        release_barrier();
    else
        run_next(me);
    return (int)me->result;
}
