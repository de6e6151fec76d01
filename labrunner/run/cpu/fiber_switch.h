// Part of fiber.h: the context switch, the one piece of the runtime written in assembly.
//
// A fiber is a stack plus the registers a function call must preserve; switching fibers is saving
// those registers on one stack and loading them from another. On x86-64 that takes 15 instructions
// (below): about 18 ns a switch, against about 265 ns for glibc's swapcontext, which makes a system
// call every time (README.md, "Why fibers"). On other machines, or with ATTNLAB_NO_ASM_FIBERS
// defined, only the ucontext path exists; ATTNLAB_CPU_FIBERS=ucontext picks it at run time too.
// switch_to (fiber_scheduler.h) calls this, and init_context (fiber_stacks.h) lays out the frame a
// new fiber's first switch pops. It sits at file scope: a C symbol and a file-level asm statement
// belong to no namespace.
#pragma once

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
