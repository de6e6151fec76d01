// Part of fiber.h: shared memory, exactly as large as the launch and its declarations make it, with
// guards, and the poison that makes its races visible.
//
// A GPU gives a block exactly the shared memory its launch asks for and its __shared__ declarations
// need, and an access past it faults there ("out of range shared or local address", or an illegal
// address). So here too every piece of shared memory ends against an inaccessible page, and a
// read or write past its end is a fault the handlers name (fiber_faults.h, shared_fault):
//
// * Dynamic shared memory (`extern __shared__`) lives in one reservation made at the first launch:
//   a guard of kGuardBytes, a window of 227 KiB (rounded up to whole pages), another guard. Each
//   launch opens only the pages it needs at the top of the window and places its bytes last, so
//   that byte `shared_bytes` is the first inaccessible one; g_dyn_shared (fiber_state.h) points at
//   byte 0. A launch that asks for 0 bytes opens nothing: any touch of extern __shared__ faults.
// * Each static __shared__ array (module.py rewrites `__shared__ T a[N];` into a reference to a
//   place handed out here, the first time its declaration runs) gets a slot of kSlotBytes of its
//   own in a second reservation (after a first slot left empty): its bytes are the last of the
//   slot's first pages, and the rest of the slot, hundreds of MiB, is inaccessible. An array's
//   neighbours are never the next bytes, so an index past its end faults instead of landing in
//   another array (or in the runtime's own state, where g++ would have put the arrays'
//   neighbours). Why a slot each and not one guard after the last array: an overrun of the first
//   array would still land in the second, silently. More arrays than slots keep the place g++ gave
//   them, unguarded, as do file-scope and macro-made __shared__ arrays, which module.py does not
//   rewrite.
//
// Pages are 4 KiB and a piece of shared memory starts 16-byte aligned, so a piece shares its first
// page with up to 4 KiB of bytes before it, and its last 16 bytes with up to 15 bytes after it.
// Those slack bytes are poisoned with the rest at every block start and checked at every block end
// (check_slack): a write there is reported as out of bounds too (naming the block, not the thread:
// nothing faulted), and a read there reads the poison, which the driver reports as a race.
//
// Blocks run one after another, so one piece of memory per declaration serves every block. At
// every block start all of it is filled with the NaN 0x7FF00BAD (kPoison32). A GPU's shared memory
// holds whatever was there before, so a kernel that reads what no thread of its block wrote is
// wrong there as well; here the NaN's payload, which x86 keeps through arithmetic, lets the driver
// name the output it reaches a race.
#pragma once

// How far past each piece of dynamic shared memory every access faults: 32 GiB covers any int index
// of a float4. Inaccessible reservations cost address space only, never memory.
constexpr size_t kGuardBytes = (size_t)32 << 30;
// One static __shared__ array's slot, and how many there are (64 GiB of address space in all).
constexpr size_t kSlotBytes = (size_t)256 << 20;
constexpr int kSlots = 256;

inline size_t page_size() { return (size_t)sysconf(_SC_PAGESIZE); }
inline unsigned char* page_floor(unsigned char* p) { return (unsigned char*)((uintptr_t)p & ~(uintptr_t)(page_size() - 1)); }
inline size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

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

// The first byte of [p, p + n) that is not the poison poison() wrote there, or null.
const unsigned char* unpoisoned(const unsigned char* p, size_t n) {
    static const unsigned char pat[4] = {0xAD, 0x0B, 0xF0, 0x7F};
    for (size_t i = 0; i < n; ++i)
        if (p[i] != pat[(uintptr_t)(p + i) & 3]) return p + i;
    return nullptr;
}

// ------------------------------------------------------------------ dynamic shared memory

bool reserve_dyn_shared() {
    if (rt.dyn_reserved) return true;
    const size_t window = round_up(kSharedLimit, page_size());
    const size_t total = kGuardBytes + window + kGuardBytes;
    void* m = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return false;
    rt.dyn_reserved = (char*)m;
    rt.dyn_reserved_bytes = total;
    rt.dyn_window_lo = (unsigned char*)m + kGuardBytes;
    rt.dyn_window_hi = rt.dyn_window_lo + window;
    rt.dyn_open = rt.dyn_window_hi;  // nothing open yet
    return true;
}

// Make the launch's dynamic shared memory exactly n bytes (n <= kSharedLimit, checked before): the
// pages it needs opened at the top of the window, the rest of the window closed, g_dyn_shared set.
bool open_dyn_shared(size_t n) {
    if (!reserve_dyn_shared()) return false;
    unsigned char* base = rt.dyn_window_hi - round_up(n, 16);
    unsigned char* lo = n ? page_floor(base) : rt.dyn_window_hi;
    if (lo < rt.dyn_open && mprotect(lo, (size_t)(rt.dyn_open - lo), PROT_READ | PROT_WRITE) != 0) return false;
    if (lo > rt.dyn_open && mprotect(rt.dyn_open, (size_t)(lo - rt.dyn_open), PROT_NONE) != 0) return false;
    rt.dyn_open = lo;
    g_dyn_shared = base;
    rt.dyn_shared = n;
    return true;
}

// ------------------------------------------------------------------ static __shared__ arrays

void register_shared(void* p, size_t n, const char* name, int slot) {
    for (int i = 0; i < rt.nregions; ++i)
        if (rt.regions[i].ptr == p) return;
    if (rt.nregions == rt.region_cap) {
        int cap = rt.region_cap ? rt.region_cap * 2 : 16;
        SharedRegion* r = (SharedRegion*)realloc(rt.regions, cap * sizeof(SharedRegion));
        if (!r) abort();
        rt.regions = r;
        rt.region_cap = cap;
    }
    rt.regions[rt.nregions++] = SharedRegion{p, n, name, slot};
    rt.static_shared += n;
    poison(p, n);
    if (rt.in_launch && rt.cur && rt.static_shared + rt.dyn_shared > kSharedLimit)
        ATTNLAB_FAIL("bad launch config for kernel %s: %zu bytes of static __shared__ plus %zu bytes of dynamic "
                     "shared memory exceed the %zu-byte (227 KiB) limit",
                     rt.kernel, rt.static_shared, rt.dyn_shared, kSharedLimit);
}

// Where the array declared as `shadow` (size bytes, aligned to align) lives: the last bytes of the
// first pages of a slot of its own, their end against the slot's inaccessible rest. Called once per
// declaration (its reference is a function-local static). Without a slot (all taken, or no address
// space), the array stays where g++ put it.
void* place_shared(void* shadow, size_t size, size_t align, const char* name) {
    for (int i = 0; i < rt.nregions; ++i)
        if (rt.regions[i].ptr == shadow) return shadow;
    const size_t page = page_size();
    const int slot = (int)rt.static_used;
    bool placed = size > 0 && size <= kSharedLimit && align <= page && slot < kSlots;
    if (placed && !rt.static_reserved) {
        const size_t total = kSlotBytes * (size_t)(kSlots + 1);  // and one slot of guard before the first
        void* m = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        placed = m != MAP_FAILED;
        if (placed) {
            rt.static_reserved = (char*)m;
            rt.static_reserved_bytes = total;
        }
    }
    unsigned char* start = placed ? (unsigned char*)rt.static_reserved + kSlotBytes * (size_t)(slot + 1) : nullptr;
    const size_t open = round_up(size, page);
    placed = placed && mprotect(start, open, PROT_READ | PROT_WRITE) == 0;
    if (!placed) {
        register_shared(shadow, size, name, -1);
        return shadow;
    }
    ++rt.static_used;
    void* p = start + open - round_up(size, align < 16 ? 16 : align);
    poison(start, open);  // the slack too: fresh pages hold zeros, which check_slack would take for a write
    register_shared(p, size, name, slot);
    return p;
}

// ------------------------------------------------------------------ block start and end

// Every piece's open pages: its bytes and the slack around them (a static array's open pages are
// [page_floor(ptr), ptr + round_up(size, 16)); the dynamic memory's [dyn_open, dyn_window_hi)).
inline void slot_pages(const SharedRegion& r, unsigned char** lo, unsigned char** hi) {
    *lo = page_floor((unsigned char*)r.ptr);
    *hi = *lo + round_up((size_t)((unsigned char*)r.ptr - *lo) + r.size, page_size());
}

void poison_shared() {
    for (int i = 0; i < rt.nregions; ++i) {
        const SharedRegion& r = rt.regions[i];
        if (r.slot < 0) {
            poison(r.ptr, r.size);
            continue;
        }
        unsigned char *lo, *hi;
        slot_pages(r, &lo, &hi);
        poison(lo, (size_t)(hi - lo));
    }
    poison(rt.dyn_open, (size_t)(rt.dyn_window_hi - rt.dyn_open));
}

// After a block: a slack byte that lost its poison was written by the block, out of bounds.
void check_slack() {
    for (int i = -1; i < rt.nregions && !rt.failed; ++i) {
        unsigned char *lo, *hi, *p;
        size_t n;
        if (i < 0) {
            lo = rt.dyn_open, hi = rt.dyn_window_hi, p = g_dyn_shared, n = rt.dyn_shared;
        } else {
            const SharedRegion& r = rt.regions[i];
            if (r.slot < 0) continue;
            slot_pages(r, &lo, &hi);
            p = (unsigned char*)r.ptr, n = r.size;
        }
        const unsigned char* bad = unpoisoned(lo, (size_t)(p - lo));
        if (!bad) bad = unpoisoned(p + n, (size_t)(hi - (p + n)));
        if (!bad) continue;
        const long long at = (long long)(bad - p);
        char what[160];
        if (i < 0)
            snprintf(what, sizeof what, "dynamic shared memory (the launch asked for %zu bytes)", n);
        else
            snprintf(what, sizeof what, "__shared__ %s (%zu bytes)", rt.regions[i].name, n);
        rt.fault_kind = FAULT_OUT_OF_BOUNDS;
        set_error("out-of-bounds write to %s in kernel %s, block (%u,%u,%u): its byte %lld, %s, was written "
                  "(found when the block ended, so no thread is named)",
                  what, rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, at,
                  at < 0 ? "before its start" : "past its end");
    }
}

// What the runtime's own tests write for a __shared__ array: registered where it is, unguarded.
struct SharedReg {
    SharedReg(void* p, size_t n) { register_shared(p, n, "?", -1); }
};

inline void* dyn_shared_base() { return g_dyn_shared; }

// What module.py writes for `__shared__ T a[N];` in a function: `static T shadow[N]; static auto& a =
// ::attnlab::placed(shadow, __alignof__(shadow), "a");`, so that every use of `a` reaches the placed
// bytes; the shadow only gives the type, size and alignment (g++ never touches its pages).
template <class T>
T& placed(T& shadow, size_t align, const char* name) {
    return *static_cast<T*>(place_shared((void*)&shadow, sizeof(T), align, name));
}
