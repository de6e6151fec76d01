// Part of fiber.h: everything the runtime knows, in one place.
//
// The limits of the GPU it stands in for; the record of one CUDA thread (Fiber: its stack, its
// index, what it waits for); and the Runtime: the fibers, the current block with its run queue,
// the shared memory, the error. There is exactly one Runtime, `rt`, per loaded module (the unnamed
// namespace fiber.h opens makes it the module's own), and every other part reads and writes it.
// Keeping the state together shows at a glance what a block start must reset (fiber_launch.h).
#pragma once

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
// How a launch failed, as far as the Python side needs to know (fiber_faults.h).
enum FaultKind : int { FAULT_NONE = 0, FAULT_OUT_OF_BOUNDS = 1, FAULT_ADDRESS = 2 };

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
    const char* name;  // the array's name, for messages
    int slot;          // its slot in the guarded reservation, or -1 where it stayed where g++ put it
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
    // The schedule of the threads: 0 runs a block's threads in order, 1 in reverse; 2 and up draw a
    // random priority for every thread from this seed at each block start and at every barrier,
    // and always run the runnable thread of highest priority (a lowest-priority thread lags behind
    // everyone until it must be waited for, which is when a missing barrier shows). The launch's
    // schedule number sets it and the block order below (fiber_launch.h, schedule_launch).
    int schedule = 0;
    // The order of the blocks: 0 in order, 1 in reverse, 2 and up a shuffle seeded by the number.
    int block_order = 0;
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
    // The dynamic shared memory's reservation (fiber_shared.h): guard, window, guard. Of the window
    // [dyn_window_lo, dyn_window_hi), only [dyn_open, dyn_window_hi) is readable and writable, and
    // the launch's bytes are its last ones, from g_dyn_shared on.
    char* dyn_reserved = nullptr;
    size_t dyn_reserved_bytes = 0;
    unsigned char* dyn_window_lo = nullptr;
    unsigned char* dyn_window_hi = nullptr;
    unsigned char* dyn_open = nullptr;
    // The static __shared__ arrays' reservation: each array in pages of its own, its end against
    // an inaccessible page (fiber_shared.h, place_shared).
    char* static_reserved = nullptr;
    size_t static_reserved_bytes = 0;
    size_t static_used = 0;

    // errors and faults
    bool in_launch = false;
    bool failed = false;
    char err[1024];
    // What the launch's error was, for the Python side (attnlab_last_fault, fiber_exports.h): an
    // access the runtime knows to be out of bounds, or a fault at an address it cannot place, which
    // the CPU device compares with the guards around its buffers (run/cpu/device_memory.py).
    FaultKind fault_kind = FAULT_NONE;
    uintptr_t fault_address = 0;
    bool fault_write = false;
    char fault_where[160];
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

// The first byte of the running launch's dynamic shared memory: exactly the bytes the launch asked
// for, ending against an inaccessible page (fiber_shared.h). module.py writes `extern __shared__ T
// name[];` as a pointer read from here (at file scope, a reference to it: a file-scope pointer
// initialised from a variable would be code run at load time, which the object check refuses).
unsigned char* g_dyn_shared = nullptr;
