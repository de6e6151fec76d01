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
//
// The runtime is written in parts, one concept each, included below in the order the compiler
// needs them: each part uses only what the parts above it declare. They are fragments of this one
// header, not headers of their own: all but the first two and the last sit inside the unnamed
// namespace opened here, and this file is the only place that includes them. (module.py keys its
// build caches on the bytes of every part, fiber_*.h.)
#pragma once

// The C library the parts use, included here, outside the namespace.
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

#include "fiber_types.h"   // uint3 and dim3, the types of threadIdx, blockDim and the like
#include "fiber_switch.h"  // the x86-64 context switch: 15 instructions of assembly

namespace attnlab {
namespace {

#include "fiber_state.h"      // the limits, the per-thread Fiber record, the Runtime and its one instance
#include "fiber_errors.h"     // how a launch fails: one message, then leave the block (ATTNLAB_FAIL)
#include "fiber_scheduler.h"  // switching fibers, and the run queue that orders them (the schedules)
#include "fiber_barriers.h"   // __syncthreads and its _count/_and/_or forms; barrier divergence
#include "fiber_warp.h"       // shuffles, votes, __syncwarp: meetings of a warp's lanes
#include "fiber_exit.h"       // a thread's start and its exit (which can release a barrier)
#include "fiber_shared.h"     // __shared__ memory: registration, and the poison at every block start
#include "fiber_stacks.h"     // the fibers' stacks, with guard pages, and their first context
#include "fiber_faults.h"     // signals in a kernel turned into one-line errors; device assert
#include "fiber_launch.h"     // one block, a launch block by block, and the deadlock diagnosis

}  // namespace
}  // namespace attnlab

#include "fiber_exports.h"  // the two C functions the Python side calls by name
