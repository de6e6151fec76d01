// Part of fiber.h: the runtime's two C functions besides the launch wrappers.
//
// The Python side (module.py) calls these by name through ctypes: the bytes of static __shared__
// memory registered so far (for its launch check), and the options it read from the environment,
// handed in before every launch because the runtime itself never reads the environment. They sit at
// file scope, outside the unnamed namespace, so that the loaded module exports them.
#pragma once

extern "C" __attribute__((visibility("default"))) long long attnlab_static_shared_bytes() {
    return (long long)attnlab::rt.static_shared;
}
extern "C" __attribute__((visibility("default"))) void attnlab_set_options(long long stack_kb, int ucontext) {
    attnlab::g_opt_stack_kb = stack_kb;
    attnlab::g_opt_ucontext = ucontext;
}
