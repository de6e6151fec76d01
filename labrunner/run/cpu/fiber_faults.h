// Part of fiber.h: a kernel's faults, turned into errors.
//
// A bad pointer, an integer division by zero or a stack overflow in a kernel raises a signal in the
// grading worker. While a launch runs, the handlers here turn SIGSEGV, SIGBUS and SIGFPE into one
// line naming the kernel, the block and the thread, and jump back into launch() (siglongjmp), which
// leaves the module usable. They run on a stack of their own, since the fiber's may be the one that
// overflowed. A general-protection fault is decoded as the misaligned 16-byte access it nearly
// always is. Device assert and __trap() end the launch the ordinary way (ATTNLAB_FAIL).
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
