// Part of fiber.h: how a thread starts and how it ends.
//
// Every fiber starts in fiber_main, which calls the kernel through the launch wrapper's thunk, and
// ends in fiber_exit, which never returns. An exit can settle a wait: the exited thread no longer
// counts at a barrier, so if every other live thread already waits there, the barrier releases now;
// and a warp group that names the exited lane can never complete, which is an error naming both.
#pragma once

// Drops the copies an exiting thread never waited for (ptx.h).
void cp_async_exit(Fiber* f);

[[noreturn]] void fiber_exit() {
    Fiber* me = rt.cur;
    const int w = me->warp;
    const unsigned self = 1u << me->lane;
    cp_async_exit(me);
    me->state = EXITED;
    --rt.live;
    rt.warp_exited[w] |= self;
    for (unsigned m = rt.warp_waiting[w]; m; m &= m - 1) {
        const Fiber& f = lane_fiber(w, __builtin_ctz(m));
        if (f.mask & self) {
            char t1[64], t2[64], s[256];
            fmt_thread(t1, sizeof t1, &f);
            fmt_thread(t2, sizeof t2, me);
            fmt_site(s, sizeof s, f.site);
            ATTNLAB_FAIL("shuffle cannot complete in kernel %s, block (%u,%u,%u): %s (warp %d, lane %d) waits at %s "
                         "with mask 0x%08x, but lane %d (%s) has exited",
                         rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, t1, w, f.lane, s, f.mask,
                         me->lane, t2);
        }
    }
    if (rt.bar_count > 0 && rt.bar_count == rt.live) release_barrier();
    run_next(me);
    abort();  // an exited fiber is never resumed
}

void fiber_main() {
    rt.thunk(rt.args);
    fiber_exit();
}

void fiber_entry_uc() { fiber_main(); }
