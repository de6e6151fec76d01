// Part of fiber.h: warp operations: shuffles, votes, __syncwarp, and the meeting of an mma.
//
// A warp operation is a meeting of the lanes its mask names (lanes past a partial last warp are
// dropped from the mask): it releases when every one of them waits at an operation of the same kind
// with the same mask, wherever in the code (Volta and later allow different call sites). The last
// lane to arrive works out every lane's answer at once (the value a shuffle takes from its source
// lane, the ballot of the predicates), while all operands are still in place. A mask without the
// caller's own lane, or one naming a lane that has exited, is an error on the spot; a group that
// can never complete is found when the block can no longer move (diagnose_deadlock). The shuffles'
// source-lane rules are in shim.h, the matrix multiply itself in ptx.h.
#pragma once

inline Fiber& lane_fiber(int warp, int lane) { return rt.fibers[warp * 32 + lane]; }

// The warp-wide matrix multiply (ptx.h): run by the last lane to arrive, while every lane's
// operands are still in place on its stack.
void mma_release(int w);

void release_warp(int w, unsigned mask) {
    if (lane_fiber(w, __builtin_ctz(mask)).kind == WK_MMA) mma_release(w);
    unsigned ballot = 0;
    for (unsigned m = mask; m; m &= m - 1) {
        int j = __builtin_ctz(m);
        if (lane_fiber(w, j).pred) ballot |= 1u << j;
    }
    for (unsigned m = mask; m; m &= m - 1) {
        int j = __builtin_ctz(m);
        Fiber& f = lane_fiber(w, j);
        if (f.kind == WK_SHFL) {
            int s = f.src;
            if (s == j)
                f.result = f.value;
            else if (s >= 0 && s < 32 && (mask >> s & 1))
                f.result = lane_fiber(w, s).value;
            else
                f.result = kShflPoison64;  // source lane inactive: undefined on a GPU
        } else {
            f.result = ballot;
        }
    }
    rt.warp_waiting[w] &= ~mask;
    for (int k = 0; k < 32; ++k) {
        int j = rt.reverse ? 31 - k : k;
        if (!(mask >> j & 1)) continue;
        Fiber& f = lane_fiber(w, j);
        f.state = RUNNABLE;
        if (&f != rt.cur) push(w * 32 + j);
    }
}

// Can the group (kind, mask) that lane `self` waits in be released now?
inline bool warp_group_ready(int w, unsigned mask, uint8_t kind) {
    if ((rt.warp_waiting[w] & mask) != mask) return false;
    for (unsigned m = mask; m; m &= m - 1) {
        const Fiber& f = lane_fiber(w, __builtin_ctz(m));
        if (f.mask != mask || f.kind != kind) return false;
    }
    return true;
}

uint64_t warp_op(WarpKind kind, unsigned mask, uint64_t value, int src, int pred, Site site) {
    Fiber* me = rt.cur;
    const int w = me->warp;
    const unsigned self = 1u << me->lane;
    const unsigned given = mask;
    mask &= rt.warp_exists[w];
    if (!(mask & self)) {
        char t[64], s[256];
        fmt_thread(t, sizeof t, me);
        fmt_site(s, sizeof s, site);
        ATTNLAB_FAIL("bad warp mask in kernel %s, block (%u,%u,%u): %s (warp %d, lane %d) calls %s with mask 0x%08x, "
                     "which does not include its own lane",
                     rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, t, w, me->lane, s, given);
    }
    if (mask & rt.warp_exited[w]) {
        char t[64], s[256];
        fmt_thread(t, sizeof t, me);
        fmt_site(s, sizeof s, site);
        ATTNLAB_FAIL("shuffle cannot complete in kernel %s, block (%u,%u,%u): %s (warp %d, lane %d) calls %s with "
                     "mask 0x%08x naming lane %d, which has exited",
                     rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, t, w, me->lane, s, given,
                     __builtin_ctz(mask & rt.warp_exited[w]));
    }
    me->state = AT_WARP;
    me->kind = kind;
    me->mask = mask;
    me->value = value;
    me->src = src;
    me->pred = pred;
    me->site = site;
    rt.warp_waiting[w] |= self;
    if (warp_group_ready(w, mask, kind))
        release_warp(w, mask);
    else
        run_next(me);
    return me->result;
}

unsigned active_mask() {
    const Fiber* me = rt.cur;
    return rt.warp_exists[me->warp] & ~rt.warp_exited[me->warp];
}
