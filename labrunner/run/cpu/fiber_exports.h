// Part of fiber.h: the runtime's C functions besides the launch wrappers.
//
// The Python side (module.py) calls these by name through ctypes: the bytes of static __shared__
// memory registered so far (for its launch check); the options it read from the environment,
// handed in before every launch because the runtime itself never reads the environment; and what
// a failed launch's fault was (its kind, the address and access of a fault the runtime could not
// place, and where it happened), so that the CPU device can name the buffer a wild access missed. They sit at
// file scope, outside the unnamed namespace, so that the loaded module exports them.
#pragma once

extern "C" __attribute__((visibility("default"))) long long attnlab_static_shared_bytes() {
    return (long long)attnlab::rt.static_shared;
}
extern "C" __attribute__((visibility("default"))) void attnlab_set_options(long long stack_kb, int ucontext) {
    attnlab::g_opt_stack_kb = stack_kb;
    attnlab::g_opt_ucontext = ucontext;
}
extern "C" __attribute__((visibility("default"))) int attnlab_last_fault(unsigned long long* address, int* write,
                                                                         char* where, int where_len) {
    *address = (unsigned long long)attnlab::rt.fault_address;
    *write = attnlab::rt.fault_write ? 1 : 0;
    snprintf(where, (size_t)where_len, "%s", attnlab::rt.fault_where);
    return (int)attnlab::rt.fault_kind;
}
