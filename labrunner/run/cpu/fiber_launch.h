// Part of fiber.h: running one block, and a launch block by block.
//
// launch() checks the configuration, makes sure there are fibers enough, opens exactly the dynamic
// shared memory the launch asks for (fiber_shared.h), and runs the grid's blocks one after another
// on the calling OS thread, in the order the schedule number gives (schedule_launch). run_block
// resets every thread's record and the shared memory's poison, queues the threads in the
// schedule's order and switches to the first; it gets control back when no thread can run any
// more. Threads left then can never be woken: the block is deadlocked, and diagnose_deadlock names
// the threads and the sites they wait at (a barrier against a warp operation, or a warp group that
// can never complete). Last, the bytes around each piece of shared memory are checked for writes.
#pragma once

void diagnose_deadlock() {
    const Fiber* a = nullptr;
    const Fiber* b = nullptr;
    for (int i = 0; i < rt.nthreads && !a; ++i)
        if (rt.fibers[i].state == AT_BARRIER) a = &rt.fibers[i];
    char t1[64], t2[64], s1[256], s2[256];
    if (a) {
        for (int i = 0; i < rt.nthreads && !b; ++i)
            if (rt.fibers[i].state == AT_WARP) b = &rt.fibers[i];
        if (!b) {
            set_error("barrier cannot complete in kernel %s, block (%u,%u,%u)", rt.kernel, rt.block_idx.x,
                      rt.block_idx.y, rt.block_idx.z);
            return;
        }
        fmt_thread(t1, sizeof t1, a);
        fmt_thread(t2, sizeof t2, b);
        fmt_site(s1, sizeof s1, a->site);
        fmt_site(s2, sizeof s2, b->site);
        set_error("barrier divergence in kernel %s, block (%u,%u,%u): %s waits at %s while %s waits at %s",
                  rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, t1, s1, t2, s2);
        return;
    }
    for (int i = 0; i < rt.nthreads && !a; ++i)
        if (rt.fibers[i].state == AT_WARP) a = &rt.fibers[i];
    if (!a) {
        set_error("kernel %s, block (%u,%u,%u): no thread can make progress", rt.kernel, rt.block_idx.x,
                  rt.block_idx.y, rt.block_idx.z);
        return;
    }
    for (unsigned m = a->mask; m && !b; m &= m - 1) {
        const Fiber& f = lane_fiber(a->warp, __builtin_ctz(m));
        if (f.state != AT_WARP || f.mask != a->mask || f.kind != a->kind) b = &f;
    }
    fmt_thread(t1, sizeof t1, a);
    fmt_site(s1, sizeof s1, a->site);
    if (!b) {
        set_error("shuffle cannot complete in kernel %s, block (%u,%u,%u): %s (warp %d, lane %d) waits at %s",
                  rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, t1, a->warp, a->lane, s1);
        return;
    }
    fmt_site(s2, sizeof s2, b->site);
    if (b->state == AT_WARP)
        set_error("shuffle cannot complete in kernel %s, block (%u,%u,%u): %s (warp %d, lane %d) waits at %s with "
                  "mask 0x%08x, but lane %d waits at %s with mask 0x%08x",
                  rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, t1, a->warp, a->lane, s1, a->mask, b->lane,
                  s2, b->mask);
    else
        set_error("shuffle cannot complete in kernel %s, block (%u,%u,%u): %s (warp %d, lane %d) waits at %s with "
                  "mask 0x%08x, but lane %d waits at %s",
                  rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, t1, a->warp, a->lane, s1, a->mask, b->lane,
                  s2);
}

void run_block() {
    poison_shared();
    const unsigned bx = rt.block_dim.x, by = rt.block_dim.y;
    for (int i = 0; i < rt.nthreads; ++i) {
        Fiber& f = rt.fibers[i];
        f.tid = uint3{i % bx, (i / bx) % by, i / (bx * by)};
        f.linear = i;
        f.warp = i / 32;
        f.lane = i % 32;
        f.state = RUNNABLE;
        f.mask = 0;
        f.result = 0;
        f.cp_head = f.cp_count = 0;  // a new block: no copies in flight, no groups committed
        f.cp_committed = 0;
        init_context(f);
    }
    for (int w = 0; w < rt.nwarps; ++w) {
        int lanes = rt.nthreads - 32 * w;
        rt.warp_exists[w] = lanes >= 32 ? 0xffffffffu : (1u << lanes) - 1;
        rt.warp_exited[w] = 0;
        rt.warp_waiting[w] = 0;
    }
    rt.qhead = rt.qcount = 0;
    if (prioritised()) {
        // The same schedule number gives the same orders on every run: a race found is a race replayed.
        const uint64_t block = ((uint64_t)rt.block_idx.z * rt.grid_dim.y + rt.block_idx.y) * rt.grid_dim.x + rt.block_idx.x;
        rt.rng = (uint64_t)rt.schedule * 0x100000001B3ull ^ (block * 0x9E3779B97F4A7C15ull);
        memset(rt.ready, 0, sizeof rt.ready);
        draw_priorities();
    }
    for (int k = 0; k < rt.nthreads; ++k) push(rt.reverse ? rt.nthreads - 1 - k : k);
    rt.live = rt.nthreads;
    rt.bar_count = 0;
    rt.cp_pending = 0;
    int first = pop();
    switch_to(nullptr, &rt.fibers[first]);
    rt.cur = nullptr;
    if (!rt.failed && rt.live > 0) diagnose_deadlock();
    if (!rt.failed) check_slack();
}

// ------------------------------------------------------------------ block order

// A schedule number orders a launch's threads and its blocks (README.md, "Why fibers"):
//
//   0        threads in order, blocks in order
//   1        threads reversed, blocks reversed
//   N >= 2   threads by random priorities seeded from N, blocks in a shuffle seeded from N
//   -1       threads in order, blocks reversed
//   -N       threads in order, blocks in the shuffle N gives
//
// A GPU runs blocks in any order, many at once, so a launch whose blocks read what other blocks of
// it write is wrong there whatever the CPU's order. Running them in another order shows it; a
// negative number changes the block order alone, so that a difference it makes is evidence about
// the blocks, never about a thread race inside one.
void schedule_launch(int number) {
    rt.schedule = number < 0 ? 0 : number;
    rt.reverse = number == 1;
    rt.block_order = number < 0 ? -number : number;
}

// One round of a bijection of the integers below 2^bits: multiply by an odd number, add, fold the
// high half into the low. Each step is invertible modulo 2^bits, so the round is a permutation.
inline uint64_t mix_round(uint64_t x, uint64_t key, int bits, uint64_t mask) {
    x = (x * (key | 1) + (key >> 17)) & mask;
    return x ^ (x >> ((bits + 1) / 2));
}

// The block a launch of n blocks runs k-th. A shuffle needs no table however large the grid: four
// rounds permute [0, 2^bits) for the smallest 2^bits >= n, and applying them again until the value
// falls below n ("cycle walking") permutes [0, n) itself. The keys come from the schedule number,
// so the same number gives the same order on every run.
uint64_t block_at(uint64_t k, uint64_t n) {
    if (rt.block_order == 0) return k;
    if (rt.block_order == 1) return n - 1 - k;
    int bits = 1;
    while (bits < 63 && (1ull << bits) < n) ++bits;
    const uint64_t mask = (1ull << bits) - 1;
    uint64_t keys[4];
    const uint64_t saved = rt.rng;
    rt.rng = (uint64_t)rt.block_order * 0xD1B54A32D192ED03ull;
    for (uint64_t& key : keys) key = next_random();
    rt.rng = saved;
    uint64_t x = k;
    do {
        for (const uint64_t key : keys) x = mix_round(x, key, bits, mask);
    } while (x >= n);
    return x;
}

// The launch entry used by the generated per-kernel wrappers.  Returns 0 on
// success, else 1 with a one-line message in err.
int launch(const char* kernel, void (*thunk)(void**), void** args, const int* grid, const int* block,
           long long shared_bytes, int reverse, char* err, int errlen) {
    rt.failed = false;
    rt.err[0] = 0;
    rt.fault_kind = FAULT_NONE;
    rt.fault_address = 0;
    rt.fault_write = false;
    rt.kernel = kernel;
    const long long nthreads = (long long)block[0] * block[1] * block[2];
    if (block[0] < 1 || block[1] < 1 || block[2] < 1 || nthreads > kMaxThreads || grid[0] < 1 || grid[1] < 1 ||
        grid[2] < 1) {
        snprintf(err, errlen, "bad launch config for kernel %s: grid (%d,%d,%d), block (%d,%d,%d)", kernel, grid[0],
                 grid[1], grid[2], block[0], block[1], block[2]);
        return 1;
    }
    if (shared_bytes < 0 || (size_t)shared_bytes + rt.static_shared > kSharedLimit) {
        snprintf(err, errlen,
                 "bad launch config for kernel %s: %lld bytes of dynamic plus %zu bytes of static shared memory "
                 "exceed the %zu-byte (227 KiB) limit",
                 kernel, shared_bytes, rt.static_shared, kSharedLimit);
        return 1;
    }
    rt.use_uc = !ATTNLAB_HAVE_ASM_FIBERS || g_opt_ucontext;
    if (!ensure_fibers((int)nthreads)) {
        snprintf(err, errlen, "kernel %s: cannot allocate %lld fiber stacks", kernel, nthreads);
        return 1;
    }
    if (!open_dyn_shared((size_t)shared_bytes)) {
        snprintf(err, errlen, "kernel %s: cannot map %lld bytes of dynamic shared memory", kernel, shared_bytes);
        return 1;
    }
    rt.nthreads = (int)nthreads;
    rt.nwarps = (rt.nthreads + 31) / 32;
    rt.block_dim = uint3{(unsigned)block[0], (unsigned)block[1], (unsigned)block[2]};
    rt.grid_dim = uint3{(unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2]};
    schedule_launch(reverse);
    rt.thunk = thunk;
    rt.args = args;
    fflush(stdout);
    install_fault_handlers();
    rt.in_launch = true;
    if (sigsetjmp(rt.fault_jmp, 1) == 0) {
        const uint64_t gx = (uint64_t)grid[0], gxy = gx * (uint64_t)grid[1], n = gxy * (uint64_t)grid[2];
        for (uint64_t k = 0; k < n && !rt.failed; ++k) {
            const uint64_t b = block_at(k, n);
            rt.block_idx = uint3{(unsigned)(b % gx), (unsigned)(b % gxy / gx), (unsigned)(b / gxy)};
            run_block();
        }
    }
    rt.in_launch = false;
    rt.cur = nullptr;
    remove_fault_handlers();
    fflush(stdout);
    if (rt.failed) {
        snprintf(err, errlen, "%s", rt.err);
        return 1;
    }
    return 0;
}
