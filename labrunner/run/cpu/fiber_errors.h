// Part of fiber.h: how a launch fails.
//
// A kernel's bug ends its launch with one line naming the kernel, the block, the thread and the call
// site; Python raises it as CpuKernelError. set_error keeps the first message only, because after a
// failure whatever the remaining threads do is noise. ATTNLAB_FAIL records the message and leaves
// the block for good by switching to the scheduler, which abandons the other fibers where they are.
#pragma once

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
