// Cooperative-fiber runtime behind the CPU backend.
//
// Every thread of a CUDA block is a fiber; all fibers of a block run on the
// calling OS thread, one block after another.  A fiber runs until it reaches
// a synchronisation point (__syncthreads, a warp shuffle/vote, __syncwarp) or
// exits; then the next runnable fiber of the block resumes.  The last thread
// to arrive at a synchronisation point releases the others and keeps running.
//
// This header is force-included (through shim.h) into the single translation
// unit built for one kernel file, so everything lives in an unnamed namespace:
// two loaded kernel modules never share runtime state.
#pragma once

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

#if defined(__x86_64__) && !defined(ATTNLAB_NO_ASM_FIBERS)
#define ATTNLAB_HAVE_ASM_FIBERS 1
// attnlab_fiber_switch(save, to): push the callee-saved registers, store the
// stack pointer to *save, load `to` as the stack pointer, pop and return into
// the other fiber.  Caller-saved registers are already spilled by the
// compiler around the call, as the System V ABI allows.
extern "C" void attnlab_fiber_switch(void** save, void* to) __attribute__((visibility("hidden")));
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".globl attnlab_fiber_switch\n"
    ".hidden attnlab_fiber_switch\n"
    ".type attnlab_fiber_switch,@function\n"
    "attnlab_fiber_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size attnlab_fiber_switch, .-attnlab_fiber_switch\n");
#else
#define ATTNLAB_HAVE_ASM_FIBERS 0
#endif

namespace attnlab {
namespace {

constexpr size_t kSharedLimit = 227 * 1024;  // bytes of shared memory per block (sm_90)
constexpr int kMaxThreads = 1024;
// Shared memory is filled with this quiet NaN at every block's start (labrunner/truth/poison.py
// knows it as SHARED_POISON_BITS): x86 keeps a NaN's payload through arithmetic, so an output
// computed from shared memory no thread wrote carries it, and the driver can name the race.
constexpr uint32_t kPoison32 = 0x7FF00BADu;  // a quiet NaN as float; 0x7FF00BAD7FF00BAD is a NaN double
// What a shuffle from an inactive source lane returns: a NaN of its own, so that it is never
// mistaken for a shared-memory read.
constexpr uint32_t kShflPoison32 = 0x7FF0D1E5u;
constexpr uint64_t kShflPoison64 = 0x7FF0D1E57FF0D1E5ull;

enum State : uint8_t { RUNNABLE, AT_BARRIER, AT_WARP, EXITED };
enum WarpKind : uint8_t { WK_SHFL, WK_SYNCWARP, WK_VOTE, WK_MMA };
enum BarKind : uint8_t { BK_PLAIN, BK_COUNT, BK_AND, BK_OR };

namespace ptx {
struct CpCopy;  // one cp.async copy not yet landed (ptx.h)
}

struct Site {
    const char* what;  // intrinsic name, for messages
    const char* file;
    int line;
};

struct Fiber {
    void* sp;             // saved stack pointer (asm fibers)
    ucontext_t* uc;       // saved context (ucontext fibers)
    char* stack_lo;       // usable stack [stack_lo, stack_hi)
    char* stack_hi;
    uint3 tid;
    int linear, warp, lane;
    State state;
    uint8_t kind;         // BarKind or WarpKind of the current wait
    Site site;
    unsigned mask;        // warp-op mask (after clipping to existing lanes)
    int pred;
    int src;              // shuffle source lane
    uint64_t value;       // shuffle payload
    uint64_t result;      // what the wait returns
    // cp.async (ptx.h): this thread's copies not yet landed, oldest first, at [cp_head, cp_count) of
    // cp_copies (cp_cap allocated, kept across blocks and launches), and how many groups it has
    // committed since its block started (the open group is number cp_committed). A copy belongs to its
    // thread alone: only that thread's own wait lands it.
    ptx::CpCopy* cp_copies;
    int cp_head, cp_count, cp_cap;
    uint32_t cp_committed;
};

struct SharedRegion {
    void* ptr;
    size_t size;
};

struct Runtime {
    // fibers and their stacks (kept across blocks and launches)
    Fiber* fibers = nullptr;
    ucontext_t* ucs = nullptr;
    int capacity = 0;
    char* stack_map = nullptr;
    size_t stack_map_bytes = 0;
    size_t stack_bytes = 0;  // usable bytes per fiber
    void* sched_sp = nullptr;
    ucontext_t sched_uc;
    bool use_uc = false;

    // current block
    Fiber* cur = nullptr;
    int nthreads = 0, nwarps = 0, live = 0;
    int* queue = nullptr;
    int qhead = 0, qcount = 0;
    int bar_count = 0;
    Site bar_site{};
    int cp_pending = 0;  // cp.async copies issued in this block and neither landed nor dropped
    unsigned warp_exists[kMaxThreads / 32];
    unsigned warp_exited[kMaxThreads / 32];
    unsigned warp_waiting[kMaxThreads / 32];
    bool reverse = false;
    // The schedule: 0 runs a block's threads in order, 1 in reverse; 2 and up draw a random
    // priority for every thread from this seed at each block start and at every barrier, and
    // always run the runnable thread of highest priority (a lowest-priority thread lags behind
    // everyone until it must be waited for, which is when a missing barrier shows).
    int schedule = 0;
    uint64_t rng = 0;
    int* rank = nullptr;         // [thread] -> its priority (0 runs first)
    int* by_rank = nullptr;      // [priority] -> thread
    uint64_t ready[kMaxThreads / 64];  // runnable threads, one bit per priority

    uint3 block_idx{0, 0, 0}, block_dim{1, 1, 1}, grid_dim{1, 1, 1};
    const char* kernel = "";
    void (*thunk)(void**) = nullptr;
    void** args = nullptr;

    // shared memory
    SharedRegion* regions = nullptr;
    int nregions = 0, region_cap = 0;
    size_t static_shared = 0;
    size_t dyn_shared = 0;

    // errors and faults
    bool in_launch = false;
    bool failed = false;
    char err[1024];
    sigjmp_buf fault_jmp;
    char* altstack = nullptr;
};

// Constant-initialised (`{}`), so loading a module runs no initialiser of ours: the object check
// in object_check.py refuses any module whose load would run code, and the shim must pass it.
Runtime rt{};

// Set from Python before every launch (CpuModule reads ATTNLAB_CPU_STACK_KB and
// ATTNLAB_CPU_FIBERS), so the runtime itself never reads the environment.
long long g_opt_stack_kb = 128;
int g_opt_ucontext = 0;

alignas(256) unsigned char g_dyn_shared[kSharedLimit];

// ---------------------------------------------------------------- messages

void fmt_thread(char* buf, size_t n, const Fiber* f) {
    if (rt.block_dim.y == 1 && rt.block_dim.z == 1)
        snprintf(buf, n, "thread %u", f->tid.x);
    else
        snprintf(buf, n, "thread (%u,%u,%u)", f->tid.x, f->tid.y, f->tid.z);
}

void fmt_site(char* buf, size_t n, const Site& s) {
    snprintf(buf, n, "%s (%s:%d)", s.what, s.file ? s.file : "?", s.line);
}

// Record the error and leave the block for good: the scheduler abandons the
// remaining fibers.  Never returns when called on a fiber.
[[noreturn]] void switch_to_scheduler_forever();

void set_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void set_error(const char* fmt, ...) {
    if (rt.failed) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt.err, sizeof rt.err, fmt, ap);
    va_end(ap);
    rt.failed = true;
}

#define ATTNLAB_FAIL(...)                      \
    do {                                       \
        ::attnlab::set_error(__VA_ARGS__);     \
        ::attnlab::switch_to_scheduler_forever(); \
    } while (0)

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

// ---------------------------------------------------------------- barriers

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

// --------------------------------------------------------------- warp ops

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

// ---------------------------------------------------------------- exit

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

// ------------------------------------------------------- shared memory

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

// ------------------------------------------------------------- stacks

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

// -------------------------------------------------------------- faults

struct sigaction g_old_act[3];
stack_t g_old_altstack;
const int g_fault_sigs[3] = {SIGSEGV, SIGBUS, SIGFPE};

// A general-protection fault (SIGSEGV with no address) in a kernel is nearly always an SSE access to
// an address that is not 16-byte aligned: a float4 load or store at a float offset, which a GPU
// reports as a misaligned address. The address is not in the signal; decode the faulting
// instruction's memory operand (legacy SSE encoding: the CPU build targets plain x86-64) from
// the registers the signal saved. Returns false where the instruction is not one we can read.
bool misaligned_operand(const unsigned char* p, const ucontext_t* uc, uintptr_t* address) {
#if defined(__x86_64__)
    static const int regs[16] = {REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP, REG_RSI, REG_RDI,
                                 REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15};
    const greg_t* g = uc->uc_mcontext.gregs;
    int i = 0;
    while (p[i] == 0x66 || p[i] == 0xF2 || p[i] == 0xF3) ++i;
    unsigned rex = (p[i] & 0xF0) == 0x40 ? p[i++] : 0;
    if (p[i++] != 0x0F) return false;
    const unsigned char op = p[i++];
    if (op == 0x38 || op == 0x3A) ++i;
    const unsigned char modrm = p[i++];
    const int mod = modrm >> 6, rm = modrm & 7;
    if (mod == 3) return false;
    int32_t disp32;
    uintptr_t a = 0;
    if (rm == 4) {
        const unsigned char sib = p[i++];
        const int index = ((sib >> 3) & 7) | (rex & 2 ? 8 : 0), base = (sib & 7) | (rex & 1 ? 8 : 0);
        if (index != 4) a += (uintptr_t)g[regs[index]] << (sib >> 6);
        if ((sib & 7) == 5 && mod == 0) {
            memcpy(&disp32, p + i, 4);
            i += 4;
            a += (uintptr_t)(intptr_t)disp32;
        } else {
            a += (uintptr_t)g[regs[base]];
        }
    } else if (rm == 5 && mod == 0) {
        return false;  // RIP-relative: a global, never a kernel's pointer arithmetic
    } else {
        a = (uintptr_t)g[regs[rm | (rex & 1 ? 8 : 0)]];
    }
    if (mod == 1) a += (uintptr_t)(intptr_t)(int8_t)p[i];
    if (mod == 2) {
        memcpy(&disp32, p + i, 4);
        a += (uintptr_t)(intptr_t)disp32;
    }
    *address = a;
    return (a & 15) != 0;
#else
    (void)p, (void)uc, (void)address;
    return false;
#endif
}

void on_fault(int sig, siginfo_t* si, void* context) {
    if (!rt.in_launch) {
        // Not ours: put the previous handler back and let the fault recur.
        for (int i = 0; i < 3; ++i)
            if (g_fault_sigs[i] == sig) sigaction(sig, &g_old_act[i], nullptr);
        return;
    }
    char t[64] = "the scheduler";
    if (rt.cur) fmt_thread(t, sizeof t, rt.cur);
    const char* what = sig == SIGFPE ? "arithmetic fault (SIGFPE, e.g. integer division by zero)"
                       : sig == SIGBUS ? "bus error (SIGBUS)"
                                       : "illegal memory access (SIGSEGV)";
    char extra[160] = "";
    uintptr_t misaligned = 0;
#if defined(__x86_64__)
    const unsigned char* at = context ? (const unsigned char*)((const ucontext_t*)context)->uc_mcontext.gregs[REG_RIP]
                                      : nullptr;
#else
    const unsigned char* at = nullptr;
#endif
    if (sig == SIGSEGV && si->si_code == SI_KERNEL && si->si_addr == nullptr && at &&
        misaligned_operand(at, (const ucontext_t*)context, &misaligned)) {
        rt.failed = false;
        set_error("misaligned access in kernel %s, block (%u,%u,%u), %s: a 16-byte access at address 0x%lx, "
                  "which is %lu bytes past a multiple of 16 (float4 and other 16-byte types need 16-byte "
                  "alignment)",
                  rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, t, (unsigned long)misaligned,
                  (unsigned long)(misaligned & 15));
        siglongjmp(rt.fault_jmp, 1);
    }
    if (sig != SIGFPE) {
        char* a = (char*)si->si_addr;
        bool overflow = false;
        for (int i = 0; i < rt.capacity && !overflow; ++i)
            overflow = a < rt.fibers[i].stack_lo && a >= rt.fibers[i].stack_lo - sysconf(_SC_PAGESIZE);
        if (overflow)
            snprintf(extra, sizeof extra, ": stack overflow (each thread has %zu KiB; set ATTNLAB_CPU_STACK_KB)",
                     rt.stack_bytes / 1024);
        else
            snprintf(extra, sizeof extra, " at address %p", si->si_addr);
    }
    rt.failed = false;
    set_error("%s in kernel %s, block (%u,%u,%u), %s%s", what, rt.kernel, rt.block_idx.x, rt.block_idx.y,
              rt.block_idx.z, t, extra);
    siglongjmp(rt.fault_jmp, 1);
}

void install_fault_handlers() {
    const size_t alt = 256 * 1024;
    if (!rt.altstack) rt.altstack = (char*)malloc(alt);
    stack_t ss;
    ss.ss_sp = rt.altstack;
    ss.ss_size = alt;
    ss.ss_flags = 0;
    sigaltstack(&ss, &g_old_altstack);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = &on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i) sigaction(g_fault_sigs[i], &sa, &g_old_act[i]);
}

void remove_fault_handlers() {
    for (int i = 0; i < 3; ++i) sigaction(g_fault_sigs[i], &g_old_act[i], nullptr);
    sigaltstack(&g_old_altstack, nullptr);
}

[[noreturn]] void device_assert_fail(const char* expr, const char* file, int line) {
    char t[64] = "a thread";
    if (rt.cur) fmt_thread(t, sizeof t, rt.cur);
    ATTNLAB_FAIL("device assert failed in kernel %s, block (%u,%u,%u), %s: %s:%d: %s", rt.kernel, rt.block_idx.x,
                 rt.block_idx.y, rt.block_idx.z, t, file, line, expr);
}

// ---------------------------------------------------------------- blocks

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
    for (int i = 0; i < rt.nregions; ++i) poison(rt.regions[i].ptr, rt.regions[i].size);
    poison(g_dyn_shared, rt.dyn_shared);
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
}

// The launch entry used by the generated per-kernel wrappers.  Returns 0 on
// success, else 1 with a one-line message in err.
int launch(const char* kernel, void (*thunk)(void**), void** args, const int* grid, const int* block,
           long long shared_bytes, int reverse, char* err, int errlen) {
    rt.failed = false;
    rt.err[0] = 0;
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
    rt.nthreads = (int)nthreads;
    rt.nwarps = (rt.nthreads + 31) / 32;
    rt.block_dim = uint3{(unsigned)block[0], (unsigned)block[1], (unsigned)block[2]};
    rt.grid_dim = uint3{(unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2]};
    rt.dyn_shared = (size_t)shared_bytes;
    rt.reverse = reverse == 1;
    rt.schedule = reverse;
    rt.thunk = thunk;
    rt.args = args;
    fflush(stdout);
    install_fault_handlers();
    rt.in_launch = true;
    if (sigsetjmp(rt.fault_jmp, 1) == 0) {
        for (int z = 0; z < grid[2] && !rt.failed; ++z)
            for (int y = 0; y < grid[1] && !rt.failed; ++y)
                for (int x = 0; x < grid[0] && !rt.failed; ++x) {
                    rt.block_idx = uint3{(unsigned)x, (unsigned)y, (unsigned)z};
                    run_block();
                    if (rt.failed) break;
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

}  // namespace
}  // namespace attnlab

// Symbols the Python side reads directly.
extern "C" __attribute__((visibility("default"))) long long attnlab_static_shared_bytes() {
    return (long long)attnlab::rt.static_shared;
}
extern "C" __attribute__((visibility("default"))) void attnlab_set_options(long long stack_kb, int ucontext) {
    attnlab::g_opt_stack_kb = stack_kb;
    attnlab::g_opt_ucontext = ucontext;
}
