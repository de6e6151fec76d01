// Part of fiber.h: a kernel's faults, turned into errors.
//
// A bad pointer, an integer division by zero or a stack overflow in a kernel raises a signal in the
// grading worker. While a launch runs, the handlers here turn SIGSEGV, SIGBUS and SIGFPE into one
// line naming the kernel, the block and the thread, and jump back into launch() (siglongjmp), which
// leaves the module usable. They run on a stack of their own, since the fiber's may be the one that
// overflowed. A general-protection fault is decoded as the misaligned 16-byte access it nearly
// always is. Device assert and __trap() end the launch the ordinary way (ATTNLAB_FAIL).
//
// Where a fault happened decides what it is called, and only evidence names a cause. An address in
// a guard of the shared memory is an out-of-bounds access of the piece it missed (fiber_shared.h);
// one in the guard page below the running thread's own stack, with the stack pointer there too, is a
// stack overflow, the one fault that gets the advice to enlarge the stacks. Any other address is
// recorded for the Python side (rt.fault_address): the CPU device keeps guards around the buffers it
// hands the kernel and names the buffer a wild access missed (run/cpu/device_memory.py).
#pragma once

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

// Whether the faulting access was a write: bit 1 of the page fault's error code, which Linux saves
// with the registers on x86-64 (elsewhere every fault is called a read).
bool faulting_write(const ucontext_t* uc) {
#if defined(__x86_64__)
    return uc && (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
    (void)uc;
    return false;
#endif
}

// A stack overflow, from evidence: the address is in the guard page below the running thread's own
// stack, and so is the stack pointer, or nearly (g++'s stack-clash probes touch each new page as the
// stack pointer reaches it). A wild pointer that lands in some stack's guard is no overflow, and
// the advice to enlarge the stacks would send the student the wrong way.
bool stack_overflow(const unsigned char* a, const ucontext_t* uc) {
    const Fiber* f = rt.cur;
    if (!f || !uc) return false;
    const size_t page = page_size();
    const unsigned char* lo = (const unsigned char*)f->stack_lo;
    if (!(a < lo && a >= lo - page)) return false;
#if defined(__x86_64__)
    const uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
    return sp < (uintptr_t)lo + page;
#else
    return true;
#endif
}

// An access in a guard of the shared memory (fiber_shared.h): the error, naming the piece it missed
// and by how much. False where the address is in neither reservation.
bool shared_fault(const unsigned char* a, const char* access_of) {
    if (rt.dyn_reserved && a >= (const unsigned char*)rt.dyn_reserved &&
        a < (const unsigned char*)rt.dyn_reserved + rt.dyn_reserved_bytes) {
        const long long at = (long long)(a - g_dyn_shared);
        const long long n = (long long)rt.dyn_shared;
        if (n == 0)
            set_error("out-of-bounds %s dynamic shared memory in %s: the launch asked for none (0 bytes), yet "
                      "the kernel reads or writes extern __shared__ (its byte %lld); ask for the bytes it uses in "
                      "the launch's shared-memory size",
                      access_of, rt.fault_where, at);
        else
            set_error("out-of-bounds %s dynamic shared memory in %s: its byte %lld, %s the %lld bytes the "
                      "launch asked for (a GPU gives a launch exactly the dynamic shared memory it asks for)",
                      access_of, rt.fault_where, at, at < 0 ? "before the start of" : "past the end of", n);
        return true;
    }
    if (!rt.static_reserved || a < (const unsigned char*)rt.static_reserved ||
        a >= (const unsigned char*)rt.static_reserved + rt.static_reserved_bytes)
        return false;
    // An address in a slot below its array's first byte missed that array by an index below 0; one
    // past the array's end missed it, or the next slot's array by an index below 0: the nearer is
    // named (arrays sit at the start of their slots, so an overrun is nearly always the nearer).
    const int slot = (int)((size_t)(a - (const unsigned char*)rt.static_reserved) / kSlotBytes) - 1;
    const SharedRegion* r = nullptr;
    const SharedRegion* next = nullptr;
    for (int i = 0; i < rt.nregions; ++i) {
        if (rt.regions[i].slot == slot) r = &rt.regions[i];
        if (rt.regions[i].slot == slot + 1) next = &rt.regions[i];
    }
    if (r && next && a >= (const unsigned char*)r->ptr + r->size &&
        (size_t)((const unsigned char*)next->ptr - a) < (size_t)(a - ((const unsigned char*)r->ptr + r->size)))
        r = next;
    if (!r) r = next;
    if (!r) {
        set_error("out-of-bounds %s __shared__ memory in %s: address %p is in no __shared__ array", access_of,
                  rt.fault_where, (const void*)a);
        return true;
    }
    const long long at = (long long)(a - (const unsigned char*)r->ptr);
    const long long n = (long long)r->size;
    set_error("out-of-bounds %s __shared__ %s in %s: its byte %lld, %s its %lld bytes", access_of, r->name,
              rt.fault_where, at, at < 0 ? "before the start of" : "past the end of", n);
    return true;
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
    const ucontext_t* uc = (const ucontext_t*)context;
    snprintf(rt.fault_where, sizeof rt.fault_where, "kernel %s, block (%u,%u,%u), %s", rt.kernel, rt.block_idx.x,
             rt.block_idx.y, rt.block_idx.z, t);
    rt.failed = false;
    if (sig == SIGFPE) {
        set_error("%s in %s", what, rt.fault_where);
        siglongjmp(rt.fault_jmp, 1);
    }
    const unsigned char* a = (const unsigned char*)si->si_addr;
    const bool write = sig == SIGSEGV && faulting_write(uc);
    const char* access = write ? "write" : "read";
    const char* access_of = write ? "write to" : "read of";
    if (stack_overflow(a, uc)) {
        set_error("%s in %s: stack overflow (each thread has %zu KiB; set ATTNLAB_CPU_STACK_KB)", what,
                  rt.fault_where, rt.stack_bytes / 1024);
    } else if (shared_fault(a, access_of)) {
        rt.fault_kind = FAULT_OUT_OF_BOUNDS;
    } else {
        // An address the runtime cannot place: the CPU device compares it with its buffers' guards.
        rt.fault_kind = FAULT_ADDRESS;
        rt.fault_address = (uintptr_t)a;
        rt.fault_write = write;
        set_error("%s in %s: a %s at address %p", what, rt.fault_where, access, si->si_addr);
    }
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
