"""A Triton submission graded without a GPU: Triton's interpreter in the CPU worker, made faithful.

Every buffer here is a guarded array (run/cpu/device_memory.py) of 64 elements, 256 bytes: its last
byte ends against an inaccessible guard, so an access the bounds check let through would kill this
process with SIGSEGV instead of passing. Sealed loads run in a child process, as the syscall filter's
own tests do (a filter can never be removed).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from labrunner.run.cpu.triton_module import TritonInterpretedModule, interpreter_available

# Triton imported in interpret mode first, as the worker imports it (its standard library's @jit
# functions become interpreted or compiled at that first import); then skipped where it is absent.
WHY_NOT = interpreter_available()
pytest.importorskip("triton")

from labrunner.compile import triton_package  # noqa: E402
from labrunner.run.cpu.device_memory import guarded_array  # noqa: E402
from labrunner.run.cpu.module import CpuCompileError, CpuOutOfBounds  # noqa: E402
from labrunner.syscall_filter import availability  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
HEAD = "import triton\nimport triton.language as tl\n\n\n"
TAIL = "on a GPU such an access reads or writes another allocation's memory, or faults"


def packaged(source: str, entry: dict[str, list[str]]) -> str:
    """The file's kernel package, as the sealed import box makes it (here in this process: the test's own text)."""
    return triton_package.dumps(triton_package.package_source(source, "sub.py", list(entry), []))


def load(body: str, entry: dict[str, list[str]], constexprs: dict | None = None) -> TritonInterpretedModule:
    package = packaged(HEAD + textwrap.dedent(body), entry)
    return TritonInterpretedModule.load(package, "sub.py", entry, constexprs or {}, sandboxed=False)


def floats(values=None) -> np.ndarray:
    array = guarded_array(64, np.float32)
    array[:] = np.arange(64, dtype=np.float32) if values is None else values
    return array


def test_the_interpreter_is_available_here():
    assert WHY_NOT is None


COPY = """
@triton.jit
def copy(x, y, n, B: tl.constexpr):
    r = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + r, tl.load(x + r))


@triton.jit
def masked(x, y, n, B: tl.constexpr):
    r = tl.program_id(0) * B + tl.arange(0, B)
    # lanes past n point a billion elements away (4 GB, inside the guard): masked off, never touched
    far = r + (r >= n).to(tl.int32) * 1000000000
    tl.store(y + far, tl.load(x + far, mask=r < n, other=-2.0) * 2.0, mask=r < n)
"""
COPY_ENTRY = {name: ["float*", "float*", "int"] for name in ("copy", "masked")}


def test_a_copy_and_a_masked_kernel_write_exactly_their_output_in_place():
    module = load(COPY, COPY_ENTRY, {"copy": {"B": 16}, "masked": {"B": 16}})
    x, y = floats(), floats(np.full(64, -1.0, np.float32))
    module.launch("copy", (4, 1, 1), [x, y, 64], {0: "x", 1: "y"})
    assert np.array_equal(y, np.arange(64, dtype=np.float32))
    y[:] = -1.0
    module.launch("masked", (4, 1, 1), [x, y, 37], {0: "x", 1: "y"})
    assert np.array_equal(y, np.concatenate([2.0 * np.arange(37), np.full(27, -1.0)]).astype(np.float32))


OUT_OF_BOUNDS = """
@triton.jit
def read_past(x, y, n, B: tl.constexpr):
    r = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + r % 64, tl.load(x + r))


@triton.jit
def read_before(x, y, n, B: tl.constexpr):
    r = tl.arange(0, B) - 1
    tl.store(y + r + 1, tl.load(x + r))


@triton.jit
def write_past(x, y, n, B: tl.constexpr):
    r = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + r, 1.0)


@triton.jit
def scalar_past(x, y, n, B: tl.constexpr):
    tl.store(y, tl.load(x + n))


@triton.jit
def atomic_past(x, y, n, B: tl.constexpr):
    r = tl.program_id(0) * B + tl.arange(0, B)
    tl.atomic_add(y + r, 1.0)


@triton.jit
def block_past(x, y, n, B: tl.constexpr):
    tile = tl.make_block_ptr(x, (n,), (1,), (tl.program_id(0) * B,), (B,), (0,))
    tl.store(y + tl.program_id(0) * B + tl.arange(0, B), tl.load(tile))


@triton.jit
def block_checked(x, y, n, B: tl.constexpr):
    tile = tl.make_block_ptr(x, (n,), (1,), (0,), (B,), (0,))
    tl.store(y + tl.arange(0, B), tl.load(tl.advance(tile, (48,)), boundary_check=(0,), padding_option="zero"))
"""
OUT_OF_BOUNDS_ENTRY = {
    name: ["float*", "float*", "int"]
    for name in ("read_past", "read_before", "write_past", "scalar_past", "atomic_past", "block_past", "block_checked")
}


@pytest.fixture(scope="module")
def out_of_bounds() -> TritonInterpretedModule:
    return load(OUT_OF_BOUNDS, OUT_OF_BOUNDS_ENTRY, {name: {"B": 32} for name in OUT_OF_BOUNDS_ENTRY})


PAST = "its byte 256 (element 64), past the end of its 256 bytes (64 elements of float32)"
RAMP, ZEROS, ONES = np.arange(64, dtype=np.float32), np.zeros(64, np.float32), np.ones(64, np.float32)


@pytest.mark.parametrize(
    "kernel, grid, message, after",
    [
        ("read_past", 3, f"out-of-bounds read of x in read_past, program (2, 0, 0): {PAST}; {TAIL}", RAMP),
        (
            "read_before",
            1,
            "out-of-bounds read of x in read_before, program (0, 0, 0): its byte -4 (element -1), before the start "
            f"of its 256 bytes (64 elements of float32); {TAIL}",
            ZEROS,
        ),
        ("write_past", 3, f"out-of-bounds write to y in write_past, program (2, 0, 0): {PAST}; {TAIL}", ONES),
        ("scalar_past", 1, f"out-of-bounds read of x in scalar_past, program (0, 0, 0): {PAST}; {TAIL}", ZEROS),
        ("atomic_past", 3, f"out-of-bounds write to y in atomic_past, program (2, 0, 0): {PAST}; {TAIL}", ONES),
        ("block_past", 3, f"out-of-bounds read of x in block_past, program (2, 0, 0): {PAST}; {TAIL}", RAMP),
    ],
)
def test_an_access_past_a_buffer_is_named_and_never_made(out_of_bounds, kernel, grid, message, after):
    x, y = floats(), floats(ZEROS)
    with pytest.raises(CpuOutOfBounds) as raised:
        out_of_bounds.launch(kernel, (grid, 1, 1), [x, y, 64], {0: "x", 1: "y"})
    assert str(raised.value) == message
    # The programs before the faulty one ran; of the faulty access itself no lane was made (the check
    # comes first), and a lane past the end would have hit the guard.
    assert np.array_equal(y, after)


def test_a_block_pointer_with_its_boundary_checked_pads_instead(out_of_bounds):
    x, y = floats(), floats(np.full(64, -1.0, np.float32))
    out_of_bounds.launch("block_checked", (1, 1, 1), [x, y, 64], {0: "x", 1: "y"})
    assert np.array_equal(y[:32], np.concatenate([np.arange(48, 64), np.zeros(16)]).astype(np.float32))


def test_an_access_outside_every_mapping_is_named_against_the_nearest_buffer(out_of_bounds):
    """Plain heap arrays, not guarded: the address is in no buffer's guard, and the same sentence is made."""
    x, y = np.arange(64, dtype=np.float32), np.zeros(1 << 20, np.float32)  # y far larger: x stays nearest
    with pytest.raises(CpuOutOfBounds) as raised:
        out_of_bounds.launch("read_before", (1, 1, 1), [x, y, 64], {0: "x", 1: "y"})
    assert str(raised.value) == (
        "out-of-bounds read of x in read_before, program (0, 0, 0): its byte -4 (element -1), before the start of "
        f"its 256 bytes (64 elements of float32); {TAIL}"
    )


FAULTS = """
@triton.jit
def swallowed(x, y, n, B: tl.constexpr):
    r = tl.arange(0, B)
    try:  # the interpreter runs a kernel's body as Python, so a kernel could try to hide its fault
        v = tl.load(x + r + n)
    except Exception:
        v = tl.zeros((B,), tl.float32)
    tl.store(y + r, v + 5.0)


@triton.jit
def misshapen(x, y, n, B: tl.constexpr):
    v = tl.load(x + tl.arange(0, B))
    tl.store(y + tl.arange(0, B), tl.sum(tl.reshape(v, (3, 5)), 0))
"""


def test_a_fault_the_kernel_catches_is_still_the_verdict_and_stops_it():
    module = load(FAULTS, {"swallowed": ["float*", "float*", "int"]}, {"swallowed": {"B": 16}})
    x, y = floats(), floats(ZEROS)
    with pytest.raises(CpuOutOfBounds) as raised:
        module.launch("swallowed", (1, 1, 1), [x, y, 60], {0: "x", 1: "y"})
    assert str(raised.value).startswith("out-of-bounds read of x in swallowed, program (0, 0, 0): its byte 256 ")
    assert np.array_equal(y, ZEROS)  # the store after the caught fault never ran


def test_what_tritons_compiler_would_refuse_is_a_compile_error():
    module = load(FAULTS, {"misshapen": ["float*", "float*", "int"]}, {"misshapen": {"B": 16}})
    with pytest.raises(CpuCompileError) as raised:
        module.launch("misshapen", (1, 1, 1), [floats(), floats(), 16], {0: "x", 1: "y"})
    assert str(raised.value) == "sub.py:19: ValueError: Shape element 0 must be a power of 2"


DOT = """
@triton.jit
def dot(a, b, c, n, P: tl.constexpr):
    i = tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :]
    x = tl.load(a + i)
    y = tl.load(b + i)
    if P == 0:
        z = tl.dot(x, y)
    elif P == 1:
        z = tl.dot(x, y, input_precision="tf32x3")
    elif P == 2:
        z = tl.dot(x, y, input_precision="ieee")
    else:
        z = tl.dot(x.to(tl.bfloat16), y.to(tl.bfloat16))
    tl.store(c + i, z)
"""


def dot_of(precision: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    module = load(DOT, {"dot": ["float*", "float*", "float*", "int"]}, {"dot": {"P": precision}})
    arrays = [guarded_array(256, np.float32) for _ in range(3)]
    arrays[0][:], arrays[1][:] = a.ravel(), b.ravel()
    module.launch("dot", (1, 1, 1), [*arrays, 16], {0: "a", 1: "b", 2: "c"})
    return arrays[2].reshape(16, 16).copy()


def tf32(x: np.ndarray) -> np.ndarray:
    """What the tensor cores read of a float32: its low 13 mantissa bits dropped."""
    return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.fixture(scope="module")
def operands() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)  # normal values: every mantissa bit random, so TF32 rounding matters
    return rng.standard_normal((16, 16)).astype(np.float32), rng.standard_normal((16, 16)).astype(np.float32)


def test_a_default_float32_dot_is_tf32_as_on_the_gpu(operands):
    a, b = operands
    got = dot_of(0, a, b)
    assert np.array_equal(got, np.matmul(tf32(a), tf32(b)) + np.zeros((16, 16), np.float32))
    assert not np.array_equal(got, np.matmul(a, b))


def test_an_ieee_dot_is_float32(operands):
    a, b = operands
    assert np.array_equal(dot_of(2, a, b), np.matmul(a, b) + np.zeros((16, 16), np.float32))


def test_tf32x3_is_far_closer_to_float64_than_tf32(operands):
    a, b = operands
    exact = a.astype(np.float64) @ b.astype(np.float64)
    tf32_error = np.abs(dot_of(0, a, b) - exact).max()
    tf32x3_error = np.abs(dot_of(1, a, b) - exact).max()
    # Measured: tf32 1.2e-2 (truncated operands; rounded ones would give 3.7e-3), tf32x3 1.4e-6, and
    # float32 itself (np.matmul) 1.9e-6: tf32x3 is as accurate as float32, as it is on the GPU.
    assert tf32_error > 5e-3
    assert tf32x3_error < 4e-6
    assert tf32x3_error < tf32_error / 1000


def test_a_bfloat16_dot_multiplies_values_not_bit_patterns(operands):
    a, b = operands
    a16, b16 = [(x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32) for x in operands]  # bfloat16 exact
    assert np.array_equal(dot_of(3, a16, b16), np.matmul(a16, b16) + np.zeros((16, 16), np.float32))
    assert not np.array_equal(dot_of(3, a, b), np.matmul(a, b))  # the conversion did round


def test_a_package_that_is_not_data_is_a_compile_error():
    with pytest.raises(CpuCompileError) as raised:
        TritonInterpretedModule.load("print('hi')", "sub.py", {"copy": ["float*"]}, {}, sandboxed=False)
    assert str(raised.value) == "sub.py: the file's kernels did not come back as data"


def test_a_forged_package_is_checked_as_code_before_anything_is_made_of_it():
    # a package comes from the process that ran the file: its sources are checked before a `def` is run
    package = json.loads(packaged(HEAD + textwrap.dedent(COPY), COPY_ENTRY))
    package["functions"]["copy"]["source"] = "def copy(x, y, n, B: tl.constexpr):\n    open('/etc/passwd')\n"
    with pytest.raises(CpuCompileError) as raised:
        TritonInterpretedModule.load(json.dumps(package), "sub.py", COPY_ENTRY, {}, sandboxed=False)
    line = package["functions"]["copy"]["line"] + 1
    assert str(raised.value) == f"sub.py:{line}: copy: a kernel may not use open"


@pytest.mark.parametrize("body, found", [("", "nothing"), ("def flash_prefill(q):\n    pass\n", "a function")])
def test_a_kernel_the_lab_needs_must_be_a_jit_function(body, found):
    with pytest.raises(triton_package.PackageError) as raised:
        packaged(HEAD + body, {"flash_prefill": ["float*"]})
    assert str(raised.value) == (
        f"sub.py: flash_prefill must be a @triton.jit function; the file defines {found} by that name"
    )


SEALED_CHILD = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    from labrunner.compile import triton_package
    from labrunner.run.cpu.device_memory import guarded_array
    from labrunner.run.cpu.triton_module import TritonInterpretedModule, interpreter_available

    interpreter_available()  # Triton imported in interpret mode first, as the worker imports it
    KERNEL = "import triton\\nimport triton.language as tl\\n" + '''
    @triton.jit
    def twice(x, y, B: tl.constexpr):
        r = tl.program_id(0) * B + tl.arange(0, B)
        tl.store(y + r, 2.0 * tl.load(x + r) + tl.sum(tl.load(x + r)) * 0.0)
    '''
    package = triton_package.dumps(triton_package.package_source(KERNEL, "sub.py", ["twice"], []))
    seen = {}
    module = TritonInterpretedModule.load(package, "sub.py", {"twice": ["float*", "float*"]}, {"twice": {"B": 16}})
    x, y = guarded_array(64, np.float32), guarded_array(64, np.float32)
    x[:] = np.arange(64)
    module.launch("twice", (4, 1, 1), [x, y], {0: "x", 1: "y"})
    seen["launch"] = bool(np.array_equal(y, 2.0 * np.arange(64)))
    seen["environment"] = dict(os.environ)
    try:
        open("/etc/hostname").close()
        seen["after"] = "opened"
    except OSError as exc:
        seen["after"] = exc.strerror
    print(json.dumps(seen))
""")


@pytest.mark.skipif(availability() is not None, reason=f"no seccomp here: {availability()}")
def test_the_package_is_rebuilt_and_run_sealed():
    completed = subprocess.run(
        [sys.executable, "-c", SEALED_CHILD], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert json.loads(completed.stdout.splitlines()[-1]) == {
        "launch": True,
        "environment": {"TRITON_INTERPRET": "1"},
        "after": "Operation not permitted",
    }
