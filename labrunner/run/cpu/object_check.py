"""The object check: a built kernel module is read as ELF before anything loads it, and refused if
loading it would run any code, or if it reaches for anything outside the shim's runtime.

Loading a shared object runs code before any kernel is launched: the entries of `.init_array`
(constructors, and the function g++ writes for every namespace-scope variable with a dynamic
initialiser, `int x = f();`), the old `.ctors`, `.preinit_array`, the `.init` section, and the
resolvers of GNU indirect functions (`__attribute__((ifunc))`, run while relocating). NVRTC
accepts a `__device__ __attribute__((constructor))` function that no kernel calls (it drops it
unseen), so all of these arrive at g++ from files that passed the gate. The shim itself has none:
its runtime is constant-initialised, and an empty file compiled with the shim is the baseline, so
the only entries allowed are the C runtime's own (`frame_dummy`, `__do_global_dtors_aux`).

Undefined symbols are the other door: `extern "C" __device__ int system(const char*);` compiles
on NVRTC (an uncalled function is dropped) and under g++ links to the C library. Every symbol the
module imports must be on `ALLOWED_IMPORTS`, derived by building every shipped starter, solution
and fixture (`tests/test_cpu_object_check.py` rebuilds them and fails if one needs a new name).

Parsed with `struct` from the ELF64 spec (no new dependency). Only x86-64 and AArch64 little-endian
objects are expected; anything else is refused.
"""

from __future__ import annotations

import functools
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from labrunner.run.untrusted_text import shown

# What kernels and the shim's runtime may import, and nothing more. Grouped by why.
ALLOWED_IMPORTS = frozenset(
    {
        # The C runtime's own weak references in every shared object g++ links.
        "__cxa_finalize",
        "__gmon_start__",
        "_ITM_deregisterTMCloneTable",
        "_ITM_registerTMCloneTable",
        # Memory and strings, which the compiler also emits for struct copies and array fills.
        "memcpy",
        "memmove",
        "memset",
        "strcmp",
        # The math library (the shim maps CUDA's math onto it; g++ calls what it cannot inline), and
        # libgcc's helpers for bit operations.
        "expf",
        "exp",
        "exp2f",
        "exp2",
        "expm1f",
        "expm1",
        "logf",
        "log",
        "log2f",
        "log2",
        "log10f",
        "log10",
        "log1pf",
        "log1p",
        "powf",
        "pow",
        "sqrtf",
        "sqrt",
        "cbrtf",
        "cbrt",
        "hypotf",
        "hypot",
        "sinf",
        "sin",
        "cosf",
        "cos",
        "tanf",
        "tan",
        "sincosf",
        "sincos",
        "asinf",
        "asin",
        "acosf",
        "acos",
        "atanf",
        "atan",
        "atan2f",
        "atan2",
        "sinhf",
        "sinh",
        "coshf",
        "cosh",
        "tanhf",
        "tanh",
        "erff",
        "erf",
        "erfcf",
        "erfc",
        "fmaf",
        "fma",
        "fmodf",
        "fmod",
        "remainderf",
        "remainder",
        "floorf",
        "floor",
        "ceilf",
        "ceil",
        "truncf",
        "trunc",
        "roundf",
        "round",
        "nearbyintf",
        "nearbyint",
        "rintf",
        "rint",
        "lrintf",
        "lrint",
        "llrintf",
        "llrint",
        "lroundf",
        "lround",
        "ldexpf",
        "ldexp",
        "frexpf",
        "frexp",
        "modff",
        "modf",
        "fminf",
        "fmin",
        "fmaxf",
        "fmax",
        "fdimf",
        "fdim",
        "copysignf",
        "copysign",
        "nextafterf",
        "nextafter",
        "scalbnf",
        "scalbn",
        "ilogbf",
        "ilogb",
        "logbf",
        "logb",
        "exp10f",
        "exp10",
        "tgammaf",
        "tgamma",
        "lgammaf",
        "lgamma",
        "__popcountdi2",
        "__popcountsi2",
        "__clzdi2",
        "__ctzdi2",
        "__ffsdi2",
        # Device printf (to the worker's stdout), device malloc and new/delete, clock().
        "printf",
        "puts",
        "putchar",
        "fflush",
        "stdout",
        "snprintf",
        "vsnprintf",
        "malloc",
        "calloc",
        "free",
        "realloc",
        "_Znwm",
        "_Znam",
        "_ZdlPv",
        "_ZdaPv",
        "_ZdlPvm",
        "_ZdaPvm",
        "clock",
        "clock_gettime",
        # The fiber runtime: stacks, fault handling, ucontext fibers, launch errors.
        "mmap",
        "munmap",
        "mprotect",
        "sysconf",
        "sigaction",
        "sigaltstack",
        "sigemptyset",
        "__sigsetjmp",
        "siglongjmp",
        "getcontext",
        "makecontext",
        "swapcontext",
        "abort",
        # libstdc++ and libgcc: the personality routine and unwinder g++ references, pure virtual calls.
        # Not the guards of function-local statics (module.py builds with -fno-threadsafe-statics: one
        # OS thread runs every fiber), and not __cxa_atexit: a static with a destructor would run code at exit.
        "__gxx_personality_v0",
        "_Unwind_Resume",
        "__cxa_pure_virtual",
    }
)

# The libraries a module may need, all loaded by the worker before it seals itself.
ALLOWED_LIBRARIES = frozenset({"libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6"})

# Names the start-up and shut-down code g++ links into every shared object (crti.o, crtbeginS.o)
# calls when the object itself defines them: `frame_dummy` hands the object's .tm_clone_table to
# _ITM_registerTMCloneTable, `_init` calls __gmon_start__, and so on. The empty file's build only
# refers to them (weakly: each is called only if it exists), so a definition here is code that runs
# inside dlopen. Also refused: any other name the empty file's build imports.
LOAD_TIME_HOOKS = {
    "_ITM_registerTMCloneTable": "load",
    "__gmon_start__": "load",
    "__register_frame_info": "load",
    "_Jv_RegisterClasses": "load",
    "_ITM_deregisterTMCloneTable": "unload",
    "__cxa_finalize": "unload",
    "__deregister_frame_info": "unload",
}

# Sections an ordinary kernel's build has beyond the empty file's (which imports nothing and has no
# constants): symbol versions and the procedure linkage table for what it imports, constants, and
# relocated read-only data (vtables, tables of pointers); with a g++ that links libstdc++ statically,
# what the exception runtime brings (its tables, thread-local data, SystemTap notes). Anything else
# was placed there by a `section` attribute or assembly.
ORDINARY_SECTIONS = frozenset(
    {
        ".gnu.version",
        ".gnu.version_r",
        ".gnu.version_d",
        ".rela.plt",
        ".plt.sec",
        ".hash",
        ".rodata",
        ".data.rel.ro",
        ".gcc_except_table",
        ".tdata",
        ".tbss",
        ".note.stapsdt",
        ".stapsdt.base",
        ".note.gnu.property",
        ".note.ABI-tag",
    }
)
# Sections the loader or the start-up code reads to run code: their size must be the empty file's.
LOAD_TIME_SECTIONS = (".init_array", ".fini_array", ".preinit_array", ".ctors", ".dtors", ".init", ".fini")

_SHT_SYMTAB, _SHT_DYNAMIC, _SHT_RELA, _SHT_DYNSYM = 2, 6, 4, 11
_SHT_INIT_ARRAY, _SHT_FINI_ARRAY, _SHT_PREINIT_ARRAY = 14, 15, 16
_STT_GNU_IFUNC = 10
_R_IRELATIVE = {37, 1032}  # x86-64, AArch64
_R_RELATIVE = {8, 1027}
_R_ABS64 = {1, 257}
_DT_NEEDED = 1
# The dynamic tags the loader itself follows to run code at load and unload (it reads these, not
# the section headers): their sizes, or their presence, must be the baseline's.
_DT_LOAD_TIME = {
    12: "DT_INIT",
    13: "DT_FINI",
    25: "DT_INIT_ARRAY",
    26: "DT_FINI_ARRAY",
    27: "DT_INIT_ARRAYSZ",
    28: "DT_FINI_ARRAYSZ",
    32: "DT_PREINIT_ARRAY",
    33: "DT_PREINIT_ARRAYSZ",
}
_DT_SIZES = {27, 28, 33}
_MACHINES = {62: "x86-64", 183: "AArch64"}


class ObjectRefused(Exception):
    """The built module would run code when loaded, or imports a symbol outside the allowed list."""


@dataclass
class Section:
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int


@dataclass
class ElfFacts:
    """What the check needs from one shared object."""

    init_entries: list[int] = field(default_factory=list)  # target addresses (or -slot, when a symbol names it)
    fini_entries: list[int] = field(default_factory=list)
    preinit_entries: int = 0
    section_sizes: dict[str, int] = field(default_factory=dict)  # .init, .fini, .ctors, .dtors
    undefined: list[str] = field(default_factory=list)
    ifuncs: list[str] = field(default_factory=list)
    irelative: int = 0
    needed: list[str] = field(default_factory=list)
    functions: dict[int, str] = field(default_factory=dict)  # address -> name, for messages
    load_time_tags: dict[str, int] = field(default_factory=dict)  # DT_INIT_ARRAYSZ -> bytes, DT_INIT -> 1
    sections: dict[str, int] = field(default_factory=dict)  # every section by name -> its size in bytes
    defined: set[str] = field(default_factory=set)  # every symbol the object defines, of any binding


def read_elf(path: Path) -> ElfFacts:  # noqa: C901 (one reader of an untrusted ELF file, field by field)
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ObjectRefused("the built module is not a 64-bit little-endian ELF object")
    machine = struct.unpack_from("<H", data, 18)[0]
    if machine not in _MACHINES:
        raise ObjectRefused(f"the built module is for machine {machine}, not x86-64 or AArch64")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = raw[shstrndx]

    def cstr(table_offset: int, at: int) -> str:
        end = data.index(b"\0", table_offset + at)
        return data[table_offset + at : end].decode(errors="replace")

    sections = [Section(cstr(names[4], r[0]), r[1], r[3], r[4], r[5], r[6], r[9]) for r in raw]
    facts = ElfFacts()
    facts.section_sizes = {s.name: s.size for s in sections if s.name in (".init", ".fini", ".ctors", ".dtors")}
    facts.sections = {s.name: s.size for s in sections[1:]}  # section 0 is the null section

    relative: dict[int, int] = {}  # where a RELATIVE relocation writes -> the address it writes
    by_symbol: dict[int, str] = {}  # where an absolute relocation writes -> the symbol it names
    for s in sections:
        if s.type == _SHT_RELA:
            symbols = sections[s.link]
            for off in range(s.offset, s.offset + s.size, 24):
                r_offset, r_info, r_addend = struct.unpack_from("<QQq", data, off)
                kind, index = r_info & 0xFFFFFFFF, r_info >> 32
                if kind in _R_IRELATIVE:
                    facts.irelative += 1
                elif kind in _R_RELATIVE:
                    relative[r_offset] = r_addend
                elif kind in _R_ABS64 and index:
                    st_name = struct.unpack_from("<I", data, symbols.offset + index * 24)[0]
                    by_symbol[r_offset] = cstr(sections[symbols.link].offset, st_name)
        elif s.type in (_SHT_SYMTAB, _SHT_DYNSYM):
            strtab = sections[s.link].offset
            for off in range(s.offset + 24, s.offset + s.size, 24):  # entry 0 is the null symbol
                st_name, st_info, _other, st_shndx, st_value, _size = struct.unpack_from("<IBBHQQ", data, off)
                name = cstr(strtab, st_name)
                kind = st_info & 0xF
                if kind == _STT_GNU_IFUNC:
                    facts.ifuncs.append(name)
                if s.type == _SHT_DYNSYM and st_shndx == 0 and name:
                    facts.undefined.append(name)
                if st_shndx != 0 and name:
                    # Local ones too: the linker turns a hidden definition local, and a hidden
                    # definition still satisfies the start-up code's weak reference to its name.
                    facts.defined.add(name)
                if kind == 2 and st_shndx != 0 and name:  # STT_FUNC, defined here
                    facts.functions.setdefault(st_value, name)
        elif s.type == _SHT_DYNAMIC:
            strtab = sections[s.link].offset
            for off in range(s.offset, s.offset + s.size, 16):
                tag, value = struct.unpack_from("<qQ", data, off)
                if tag == 0:
                    break
                if tag == _DT_NEEDED:
                    facts.needed.append(cstr(strtab, value))
                elif tag in _DT_LOAD_TIME:
                    facts.load_time_tags[_DT_LOAD_TIME[tag]] = value if tag in _DT_SIZES else 1
    for s in sections:
        if s.type in (_SHT_INIT_ARRAY, _SHT_FINI_ARRAY, _SHT_PREINIT_ARRAY):
            targets = []
            for slot in range(s.addr, s.addr + s.size, 8):
                stored = struct.unpack_from("<Q", data, s.offset + slot - s.addr)[0]
                if slot in by_symbol:
                    facts.functions.setdefault(-slot, by_symbol[slot])  # named by its slot: see _what_runs
                    targets.append(-slot)
                else:
                    targets.append(relative.get(slot, stored))
            if s.type == _SHT_INIT_ARRAY:
                facts.init_entries += targets
            elif s.type == _SHT_FINI_ARRAY:
                facts.fini_entries += targets
            else:
                facts.preinit_entries += len(targets)
    return facts


@functools.cache
def _demangle(name: str) -> str:
    tool = shutil.which("c++filt")
    if tool is None or not name.startswith("_Z"):
        return name
    try:
        return subprocess.run([tool, name], capture_output=True, text=True, timeout=10).stdout.strip() or name
    except (OSError, subprocess.SubprocessError):
        return name


def _what_runs(address: int, facts: ElfFacts) -> str:
    name = facts.functions.get(address)
    if name is None:
        return f"the function at 0x{address:x}"
    if name.startswith("_GLOBAL__sub_I_"):
        return "the dynamic initialiser of a namespace-scope variable (like `int x = f();`)"
    return f"`{_demangle(name)}`"


def check_object(path: Path, baseline: ElfFacts, filename: str) -> None:
    """Raise ObjectRefused (one line naming the symbol) unless loading `path` runs no code of the file's."""
    facts = read_elf(path)
    prefix = f"{filename}: the CPU build refuses this file:"
    extra = (
        facts.init_entries[len(baseline.init_entries) :] if len(facts.init_entries) > len(baseline.init_entries) else []
    )
    if extra or facts.preinit_entries > baseline.preinit_entries:
        what = _what_runs(extra[0], facts) if extra else "a .preinit_array entry"
        raise ObjectRefused(
            f"{prefix} {what} would run when the module loads, outside any kernel "
            "(a constructor or a global's initialiser); kernels run only when launched, so remove it"
        )
    if len(facts.fini_entries) > len(baseline.fini_entries):
        what = _what_runs(facts.fini_entries[len(baseline.fini_entries)], facts)
        raise ObjectRefused(
            f"{prefix} {what} would run when the module unloads, outside any kernel (a destructor); remove it"
        )
    for tag in sorted(set(facts.load_time_tags) | set(baseline.load_time_tags)):
        if facts.load_time_tags.get(tag) != baseline.load_time_tags.get(tag):
            raise ObjectRefused(
                f"{prefix} its dynamic section's {tag} differs from the runtime's own, so code "
                "would run when the module loads; remove what places code there"
            )
    for section in (".init", ".fini", ".ctors", ".dtors"):
        if facts.section_sizes.get(section, 0) != baseline.section_sizes.get(section, 0):
            raise ObjectRefused(
                f"{prefix} its {section} section differs from the runtime's own, so code would "
                "run when the module loads; remove what places code there"
            )
    if facts.ifuncs or facts.irelative:
        what = f"`{_demangle(facts.ifuncs[0])}`" if facts.ifuncs else "an indirect function"
        raise ObjectRefused(
            f"{prefix} {what} is a GNU indirect function (ifunc), whose resolver runs when "
            "the module loads; remove the ifunc attribute"
        )
    _check_against_empty_build(facts, baseline, filename)
    foreign = sorted(set(facts.undefined) - ALLOWED_IMPORTS)
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise ObjectRefused(
            f"{prefix} it uses `{_demangle(foreign[0])}`{more}, which kernels on the CPU backend "
            "may not call (allowed: math functions, memcpy/memset, printf, malloc/free and the "
            "shim's CUDA built-ins)"
        )
    libraries = sorted(set(facts.needed) - ALLOWED_LIBRARIES)
    if libraries:
        raise ObjectRefused(f"{prefix} it needs the library {libraries[0]}, which the CPU backend does not load")


def _check_against_empty_build(facts: ElfFacts, baseline: ElfFacts, filename: str) -> None:
    """The rule behind the specific checks above: what the loader and the start-up code look at is
    the empty file's build, beyond the kernels' own symbols. A load-time hook the module defines, a
    .tm_clone_table with entries (frame_dummy passes it to _ITM_registerTMCloneTable), a load-time
    section of another size, or a section the empty build does not have, is refused, whatever put it
    there."""
    hooks = (set(LOAD_TIME_HOOKS) | set(baseline.undefined)) - baseline.defined
    defined = sorted(facts.defined & hooks)
    if defined:
        when = LOAD_TIME_HOOKS.get(defined[0], "load")
        raise ObjectRefused(
            f"{filename}: error: the CPU build defines {defined[0]}, which runs at {when} time; "
            "kernels may not define it"
        )
    table = facts.sections.get(".tm_clone_table", 0)
    if table > baseline.sections.get(".tm_clone_table", 0):
        raise ObjectRefused(
            f"{filename}: error: the CPU build has {table} bytes in .tm_clone_table, which the C "
            "runtime's start-up code hands to _ITM_registerTMCloneTable when the module loads; an "
            "empty file's build has none"
        )
    for section in LOAD_TIME_SECTIONS:
        size, empty = facts.sections.get(section, 0), baseline.sections.get(section, 0)
        if size != empty:
            raise ObjectRefused(
                f"{filename}: error: the CPU build's {section} holds {size} bytes where an empty "
                f"file's build holds {empty}, so code would run when the module loads or unloads; "
                "remove what puts it there"
            )
    foreign = sorted(set(facts.sections) - set(baseline.sections) - ORDINARY_SECTIONS - {".tm_clone_table"})
    if foreign:
        raise ObjectRefused(
            f"{filename}: error: the CPU build has a section {shown(foreign[0])} that an empty file's "
            "build does not (a section attribute or assembly put it there); kernels may not add sections"
        )
