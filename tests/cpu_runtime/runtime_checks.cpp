// Checks of the CPU backend's scheduler and barriers, run on the fiber runtime itself.
//
// The runtime's rules (which thread runs when, what a barrier waits for, what it reports) live in
// C++, so they are checked here in C++, with no Python and no kernel file in between. This file
// includes the runtime's headers as the CPU build composes them: shim.h (which brings fiber.h, its
// parts and ptx.h) for the runtime, then cuda_macros.h for the CUDA names a kernel uses. The build
// preprocesses those two halves apart (module.py); here they share one translation unit, so the C
// library's NULL and assert, which cuda_macros.h defines again as NVRTC does, are dropped between
// them. Each "kernel" below is a plain function started through attnlab::launch, the entry the
// generated launch wrappers call; it takes no arguments and writes what it saw to this file's globals.
//
// Usage: runtime_checks [CHECK]   runs one check (or, without a name, all of them), one line each:
//                                 "CHECK: ok: what was seen" or "CHECK: FAILED: what was seen";
//        runtime_checks --list    prints the checks' names.
// Exit status: 1 if a check failed, 2 for a name that is no check. tests/test_cpu_runtime.py builds
// this file once and pins every line exactly.
#include "shim.h"
#undef NULL
#undef assert
#include "cuda_macros.h"

namespace {

// ------------------------------------------------------------------ harness

int g_failed = 0;
char g_err[1024];

void report(const char* check, bool ok, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void report(const char* check, bool ok, const char* fmt, ...) {
    char what[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    printf("%s: %s: %s\n", check, ok ? "ok" : "FAILED", what);
    if (!ok) g_failed = 1;
}

// One launch as a launch wrapper makes it, with `schedule` as the thread order (0 in order, 1
// reversed, N >= 2 seeded random priorities). True when it succeeded; else g_err holds the message.
// `shared` is the launch's bytes of dynamic shared memory.
bool launch(const char* name, void (*kernel)(void**), dim3 grid, dim3 block, int schedule, long long shared = 0) {
    const int g[3] = {(int)grid.x, (int)grid.y, (int)grid.z};
    const int b[3] = {(int)block.x, (int)block.y, (int)block.z};
    g_err[0] = 0;
    return ::attnlab::launch(name, kernel, nullptr, g, b, shared, schedule, g_err, (int)sizeof g_err) == 0;
}

// Which context switch the next launches use: the assembly one (false) or ucontext (true), as
// ATTNLAB_CPU_FIBERS chooses through module.py.
void use_ucontext(bool on) { attnlab_set_options(128, on ? 1 : 0); }

// The order threads were seen in, as text: "0 1 2 | 2 0 1" (the bar marks a barrier).
int g_log[256];
int g_nlog = 0;

void log_text(char* out, size_t n, int from, int to) {
    size_t used = 0;
    out[0] = 0;
    for (int i = from; i < to && used < n; ++i)
        used += (size_t)snprintf(out + used, n - used, i == from ? "%d" : " %d", g_log[i]);
}

bool is_permutation(const int* v, int n) {
    bool seen[256] = {};
    for (int i = 0; i < n; ++i) {
        if (v[i] < 0 || v[i] >= n || seen[v[i]]) return false;
        seen[v[i]] = true;
    }
    return true;
}

// ------------------------------------------------------------------ every thread runs

int g_runs[2][24];  // [block][linear thread index]: how many times that thread ran
bool g_index_ok = true;

void k_every_thread(void**) {
    const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    if (gridDim.x != 2 || blockDim.x != 4 || blockDim.y != 3 || blockDim.z != 2 || blockIdx.x >= 2 || linear >= 24 ||
        (int)linear != ::attnlab::rt.cur->linear)
        g_index_ok = false;
    else
        ++g_runs[blockIdx.x][linear];
}

void check_every_thread_runs(const char* name) {
    bool ok = true;
    for (int schedule = 0; schedule < 3; ++schedule) {
        memset(g_runs, 0, sizeof g_runs);
        ok = launch("every_thread", k_every_thread, dim3(2), dim3(4, 3, 2), schedule) && ok;
        for (int b = 0; b < 2; ++b)
            for (int t = 0; t < 24; ++t) ok = ok && g_runs[b][t] == 1;
    }
    report(name, ok && g_index_ok, "2 blocks of 4x3x2 threads: each thread ran once, with its own index, under "
           "schedules 0, 1 and 2");
}

// ------------------------------------------------------------------ thread orders

// Every thread notes itself before and after one barrier: the order the scheduler ran them in, in
// its block's 16 entries (blocks may run in any order).
int g_nblock[16];
void k_order(void**) {
    g_log[16 * blockIdx.x + g_nblock[blockIdx.x]++] = (int)threadIdx.x;
    __syncthreads();
    g_log[16 * blockIdx.x + g_nblock[blockIdx.x]++] = (int)threadIdx.x;
}

void run_order(int schedule, int blocks, char* out, size_t n) {
    memset(g_nblock, 0, sizeof g_nblock);
    launch("order", k_order, dim3(blocks), dim3(8), schedule);
    size_t used = 0;
    for (int b = 0; b < blocks; ++b) {
        char before[128], after[128];
        log_text(before, sizeof before, 16 * b, 16 * b + 8);
        log_text(after, sizeof after, 16 * b + 8, 16 * b + 16);
        used += (size_t)snprintf(out + used, n - used, "%sblock %d: %s | %s", b ? ", " : "", b, before, after);
    }
}

// In order and reversed, as README.md says: threads start in the order given; at a barrier the last
// to arrive releases the others (queued in the same order) and keeps running itself.
void check_order_forward(const char* name) {
    char got[256];
    run_order(0, 1, got, sizeof got);
    report(name, strcmp(got, "block 0: 0 1 2 3 4 5 6 7 | 7 0 1 2 3 4 5 6") == 0, "%s", got);
}

void check_order_reversed(const char* name) {
    char got[256];
    run_order(1, 1, got, sizeof got);
    report(name, strcmp(got, "block 0: 7 6 5 4 3 2 1 0 | 0 7 6 5 4 3 2 1") == 0, "%s", got);
}

// A seeded schedule: each block's threads in an order drawn from the schedule number and the block,
// drawn again at the barrier; the same number gives the same orders every time, another number others.
void check_order_seeded(const char* name) {
    char two[256], again[256], three[256];
    run_order(2, 2, two, sizeof two);
    bool ok = true;
    for (int b = 0; b < 2; ++b) {
        const int* before = g_log + 16 * b;
        const int* after = before + 8;
        ok = ok && is_permutation(before, 8) && is_permutation(after, 8) && after[0] == before[7];
    }
    run_order(2, 2, again, sizeof again);
    run_order(3, 2, three, sizeof three);
    ok = ok && strcmp(two, again) == 0 && strcmp(two, three) != 0;
    report(name, ok, "schedule 2: %s; schedule 3: %s", two, three);
}

// ------------------------------------------------------------------ block order

// Each block notes itself as it starts: the order the launch ran the blocks in.
int g_blocks[64];
int g_nblocks = 0;
void k_block_order(void**) {
    if (threadIdx.x == 0) g_blocks[g_nblocks++] = (int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
}

void block_order(int schedule, dim3 grid, char* out, size_t n) {
    g_nblocks = 0;
    launch("block_order", k_block_order, grid, dim3(2), schedule);
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < g_nblocks; ++i) used += (size_t)snprintf(out + used, n - used, "%s%d", i ? " " : "", g_blocks[i]);
}

// The schedule number orders the blocks too (fiber_launch.h): 0 in order, 1 and -1 reversed, N and -N
// a shuffle seeded by N. A shuffle runs every
// block once, the same way for the same number, and a negative number orders the blocks as its
// positive twin does, with the threads in order.
void check_block_orders(const char* name) {
    char zero[128], one[128], minus_one[128], two[128], two_again[128], minus_two[128], three[128], grid3[128];
    block_order(0, dim3(8), zero, sizeof zero);
    block_order(1, dim3(8), one, sizeof one);
    block_order(-1, dim3(8), minus_one, sizeof minus_one);
    block_order(2, dim3(8), two, sizeof two);
    bool ok = is_permutation(g_blocks, 8) && g_nblocks == 8;
    block_order(2, dim3(8), two_again, sizeof two_again);
    block_order(-2, dim3(8), minus_two, sizeof minus_two);
    block_order(3, dim3(8), three, sizeof three);
    block_order(5, dim3(3, 2, 2), grid3, sizeof grid3);
    ok = ok && is_permutation(g_blocks, 12) && g_nblocks == 12;
    ok = ok && strcmp(two, two_again) == 0 && strcmp(two, minus_two) == 0 && strcmp(two, three) != 0;
    report(name, ok, "0: %s; 1: %s; -1: %s; 2 and -2: %s; 3: %s; 5 over a grid of 3x2x2: %s", zero, one, minus_one,
           two, three, grid3);
}

// ------------------------------------------------------------------ shared memory bounds

int g_touch = 0;  // which byte of dynamic shared memory thread 0 writes
void k_dyn_write(void**) {
    // what module.py writes for `extern __shared__ unsigned char dyn[];` in a function
    unsigned char* const dyn = reinterpret_cast<unsigned char*>(::attnlab::g_dyn_shared);
    if (threadIdx.x == 0) dyn[g_touch] = 1;
}

// A launch gets exactly the dynamic shared memory it asks for: its last byte is writable, the one
// after it faults (a launch of none faults at its first), and the message says so.
void check_dynamic_shared_bounds(const char* name) {
    g_touch = 4095;
    bool ok = launch("dyn_write", k_dyn_write, dim3(1), dim3(32), 0, 4096);
    g_touch = 4096;
    ok = ok && !launch("dyn_write", k_dyn_write, dim3(1), dim3(32), 0, 4096);
    char past[512];
    snprintf(past, sizeof past, "%s", g_err);
    g_touch = 0;
    ok = ok && !launch("dyn_write", k_dyn_write, dim3(1), dim3(32), 0, 0);
    report(name, ok, "byte 4095 of 4096 written; %s; %s", past, g_err);
}

// Asking for bytes that are no multiple of 16 leaves up to 15 bytes after the end in the same
// 16-byte unit: a write there is found when the block ends, and a page of bytes before the start
// likewise.
void check_dynamic_shared_slack(const char* name) {
    g_touch = 99;
    bool ok = launch("dyn_write", k_dyn_write, dim3(1), dim3(32), 0, 100);
    g_touch = 100;
    ok = ok && !launch("dyn_write", k_dyn_write, dim3(1), dim3(32), 0, 100);
    char after[512];
    snprintf(after, sizeof after, "%s", g_err);
    g_touch = -8;
    ok = ok && !launch("dyn_write", k_dyn_write, dim3(1), dim3(32), 0, 100);
    report(name, ok, "%s; %s", after, g_err);
}

// ------------------------------------------------------------------ barriers

constexpr int kN = 128;
float g_out[kN];
float g_sum[kN];

// What module.py writes for `__shared__ float s[kN];` in a kernel: a static, registered so that it
// is poisoned at every block start.
#define SHARED_ARRAY(type, name, n) \
    __shared__ type name[n];        \
    static ::attnlab::SharedReg name##_reg((void*)&(name), sizeof(name))

// Each thread writes its slot, then after __syncthreads reads another thread's; then a tree sum,
// a barrier per level. Right only if every write before a barrier is seen by every read after it.
void k_exchange(void**) {
    SHARED_ARRAY(float, s, kN);
    const int t = (int)threadIdx.x;
    s[t] = (float)(3 * t + 1);
    __syncthreads();
    g_out[t] = s[(37 * t + 11) % kN];
    __syncthreads();
    for (int half = kN / 2; half > 0; half /= 2) {
        if (t < half) s[t] += s[t + half];
        __syncthreads();
    }
    g_sum[t] = s[0];
}

void check_barrier_makes_writes_visible(const char* name) {
    bool ok = true;
    for (int fibers = 0; fibers < 2; ++fibers) {
        use_ucontext(fibers == 1);
        for (int schedule = 0; schedule < 8; ++schedule) {
            ok = launch("exchange", k_exchange, dim3(1), dim3(kN), schedule) && ok;
            for (int t = 0; t < kN; ++t)
                ok = ok && g_out[t] == (float)(3 * ((37 * t + 11) % kN) + 1) && g_sum[t] == (float)(3 * kN * (kN - 1) / 2 + kN);
        }
    }
    use_ucontext(false);
    report(name, ok, "%d threads exchanged values and summed them over a barrier per step, under schedules 0-7, "
           "with both context switches", kN);
}

// The control: without the barrier the same exchange reads slots not yet written, which hold the
// poison (0x7FF00BAD). So the check above is one a missing barrier fails.
unsigned g_bits[8];

void k_no_barrier(void**) {
    SHARED_ARRAY(float, s, 8);
    const int t = (int)threadIdx.x;
    s[t] = (float)(t + 1);
    const float seen = s[(t + 1) % 8];
    memcpy(&g_bits[t], &seen, 4);
}

int poisoned_reads(int schedule) {
    launch("no_barrier", k_no_barrier, dim3(1), dim3(8), schedule);
    int n = 0;
    for (unsigned b : g_bits) n += b == 0x7FF00BADu;
    return n;
}

void check_missing_barrier_reads_poison(const char* name) {
    const int forward = poisoned_reads(0), reversed = poisoned_reads(1);
    // In order, threads 0-6 read their neighbour's slot before it runs; reversed, only thread 7 does.
    report(name, forward == 7 && reversed == 1, "without __syncthreads, %d of 8 threads read the poison in order, "
           "%d reversed", forward, reversed);
}

int g_votes[64][4];

void k_votes(void**) {
    const int t = (int)threadIdx.x;
    g_votes[t][0] = __syncthreads_count(t % 3 == 0);
    g_votes[t][1] = __syncthreads_and(t % 3 == 0);
    g_votes[t][2] = __syncthreads_or(t % 3 == 0);
    g_votes[t][3] = __syncthreads_and(t < 64);
}

void check_barrier_votes(const char* name) {
    bool ok = launch("votes", k_votes, dim3(1), dim3(64), 1);
    for (int t = 0; t < 64; ++t)
        ok = ok && g_votes[t][0] == 22 && g_votes[t][1] == 0 && g_votes[t][2] == 1 && g_votes[t][3] == 1;
    report(name, ok, "64 threads, 22 true: every thread got count %d, and %d, or %d (all true: and %d)", g_votes[0][0],
           g_votes[0][1], g_votes[0][2], g_votes[0][3]);
}

// Threads that have exited no longer count: the barrier releases when all the live ones wait.
int g_passed[8];

void k_some_exit(void**) {
    const int t = (int)threadIdx.x;
    g_passed[t] = 0;
    if (t >= 5) return;
    __syncthreads();
    ++g_passed[t];
    __syncthreads();
    ++g_passed[t];
}

void check_barrier_after_exits(const char* name) {
    bool ok = true;
    for (int schedule = 0; schedule < 4; ++schedule) {
        ok = launch("some_exit", k_some_exit, dim3(1), dim3(8), schedule) && ok;
        for (int t = 0; t < 8; ++t) ok = ok && g_passed[t] == (t < 5 ? 2 : 0);
    }
    report(name, ok, "threads 0-4 passed two barriers while threads 5-7 had exited, under schedules 0-3");
}

// Two groups of threads at two different __syncthreads: the runtime stops the launch at the first
// thread that arrives at the other one, naming both threads and both call sites (file and line).
int g_line_low, g_line_high;

void k_divergent(void**) {
    if (threadIdx.x < 4) {
        g_line_low = __LINE__; __syncthreads();  // site: divergent-low
    } else {
        g_line_high = __LINE__; __syncthreads();  // site: divergent-high
    }
}

void check_barrier_divergence(const char* name) {
    char want[2][512], got[2][1024];
    const bool failed0 = !launch("divergent", k_divergent, dim3(1), dim3(8), 0);
    snprintf(got[0], sizeof got[0], "%s", g_err);
    const bool failed1 = !launch("divergent", k_divergent, dim3(1), dim3(8), 1);
    snprintf(got[1], sizeof got[1], "%s", g_err);
    // In order, threads 0-3 wait at the first barrier when thread 4 reaches the second; reversed,
    // threads 7-4 wait at the second when thread 3 reaches the first.
    snprintf(want[0], sizeof want[0],
             "barrier divergence in kernel divergent, block (0,0,0): thread 4 waits at __syncthreads (%s:%d) while "
             "thread 0 waits at __syncthreads (%s:%d)", __FILE__, g_line_high, __FILE__, g_line_low);
    snprintf(want[1], sizeof want[1],
             "barrier divergence in kernel divergent, block (0,0,0): thread 3 waits at __syncthreads (%s:%d) while "
             "thread 4 waits at __syncthreads (%s:%d)", __FILE__, g_line_low, __FILE__, g_line_high);
    const bool ok = failed0 && failed1 && strcmp(got[0], want[0]) == 0 && strcmp(got[1], want[1]) == 0;
    report(name, ok, "in order: %s; reversed: %s", got[0], got[1]);
}

// A barrier some threads can never reach because they wait in a warp operation: nothing can move,
// and the block's end diagnoses it as a divergence between the barrier and the warp operation.
int g_line_bar, g_line_warp;

void k_barrier_against_warp(void**) {
    const int t = (int)threadIdx.x;
    if (t < 32 || t == 63) {
        g_line_bar = __LINE__; __syncthreads();  // site: against-warp-barrier
    } else {
        g_line_warp = __LINE__; __syncwarp();  // site: against-warp-syncwarp
    }
}

void check_barrier_against_warp_op(const char* name) {
    const bool failed = !launch("against_warp", k_barrier_against_warp, dim3(1), dim3(64), 0);
    char want[512];
    snprintf(want, sizeof want,
             "barrier divergence in kernel against_warp, block (0,0,0): thread 0 waits at __syncthreads (%s:%d) while "
             "thread 32 waits at __syncwarp (%s:%d)", __FILE__, g_line_bar, __FILE__, g_line_warp);
    report(name, failed && strcmp(g_err, want) == 0, "%s", g_err);
}

// ------------------------------------------------------------------ warp operations

unsigned g_warp[64][5];

void k_shuffles(void**) {
    const unsigned t = threadIdx.x, lane = t % 32;
    unsigned sum = t;
    for (int m = 16; m > 0; m /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, m);
    g_warp[t][0] = sum;
    g_warp[t][1] = __shfl_sync(0xffffffffu, t, 5);
    g_warp[t][2] = __shfl_down_sync(0xffffffffu, t, 1);
    g_warp[t][3] = __shfl_up_sync(0xffffffffu, t, 2, 8);
    g_warp[t][4] = __ballot_sync(0xffffffffu, lane % 2 == 1);
}

void check_warp_shuffles(const char* name) {
    bool ok = true;
    for (int schedule = 0; schedule < 4; ++schedule) {
        ok = launch("shuffles", k_shuffles, dim3(1), dim3(64), schedule) && ok;
        for (unsigned t = 0; t < 64; ++t) {
            const unsigned lane = t % 32, base = t - lane;
            ok = ok && g_warp[t][0] == 32 * base + 496 && g_warp[t][1] == base + 5 &&
                 g_warp[t][2] == (lane == 31 ? t : t + 1) && g_warp[t][3] == (lane % 8 < 2 ? t : t - 2) &&
                 g_warp[t][4] == 0xAAAAAAAAu;
        }
    }
    report(name, ok, "two warps: xor sum %u and %u, broadcast of lane 5, down by 1, up by 2 in groups of 8, "
           "ballot 0x%08x, under schedules 0-3", g_warp[0][0], g_warp[32][0], g_warp[0][4]);
}

// A lane that exits while others wait for it in a shuffle: the shuffle can never complete.
int g_line_shfl;

void k_shuffle_exited(void**) {
    if (threadIdx.x == 3) return;
    g_line_shfl = __LINE__; (void)__shfl_sync(0xffffffffu, 1.0f, 0);  // site: shuffle-exited
}

void check_shuffle_with_exited_lane(const char* name) {
    const bool failed = !launch("shuffle_exited", k_shuffle_exited, dim3(1), dim3(32), 0);
    char want[512];
    snprintf(want, sizeof want,
             "shuffle cannot complete in kernel shuffle_exited, block (0,0,0): thread 0 (warp 0, lane 0) waits at "
             "__shfl_sync (%s:%d) with mask 0xffffffff, but lane 3 (thread 3) has exited", __FILE__, g_line_shfl);
    report(name, failed && strcmp(g_err, want) == 0, "%s", g_err);
}

// ------------------------------------------------------------------ the list

struct Check {
    const char* name;
    void (*run)(const char*);
};

const Check kChecks[] = {
    {"every_thread_runs", check_every_thread_runs},
    {"order_forward", check_order_forward},
    {"order_reversed", check_order_reversed},
    {"order_seeded", check_order_seeded},
    {"block_orders", check_block_orders},
    {"dynamic_shared_bounds", check_dynamic_shared_bounds},
    {"dynamic_shared_slack", check_dynamic_shared_slack},
    {"barrier_makes_writes_visible", check_barrier_makes_writes_visible},
    {"missing_barrier_reads_poison", check_missing_barrier_reads_poison},
    {"barrier_votes", check_barrier_votes},
    {"barrier_after_exits", check_barrier_after_exits},
    {"barrier_divergence", check_barrier_divergence},
    {"barrier_against_warp_op", check_barrier_against_warp_op},
    {"warp_shuffles", check_warp_shuffles},
    {"shuffle_with_exited_lane", check_shuffle_with_exited_lane},
};

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (const Check& c : kChecks) printf("%s\n", c.name);
        return 0;
    }
    bool found = false;
    for (const Check& c : kChecks)
        if (argc < 2 || strcmp(argv[1], c.name) == 0) {
            c.run(c.name);
            found = true;
        }
    if (!found) {
        fprintf(stderr, "runtime_checks: no check named %s (see --list)\n", argv[1]);
        return 2;
    }
    return g_failed;
}
