"""CPU backend: CUDA kernel files compiled with g++ and run on cooperative fibers."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from labrunner.run.cpu.module import CpuKernelError, CpuModule, cpu_compiler_available

KERNELS = Path(__file__).parent / "cpu_kernels"
PRELUDE = '#include <attnlab/prelude.cuh>\n#line 1 "attention.cu"\n'

# Every test here runs on a plain CPU; the compiler is part of the CI image.
assert cpu_compiler_available() is None, cpu_compiler_available()


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cpu-cache")


_built: dict = {}


def build(cache, name: str, entry_points: dict[str, list[str]]) -> CpuModule:
    key = (name, tuple((k, tuple(v)) for k, v in entry_points.items()))
    if key not in _built:
        path = KERNELS / name if (KERNELS / name).exists() else Path(__file__).parent.parent / name
        src = PRELUDE + path.read_text()
        _built[key] = CpuModule.build(src, "attention.cu", entry_points, cache_dir=cache)
    return _built[key]


def line_of(name: str, needle: str, nth: int = 0) -> int:
    lines = [i + 1 for i, line in enumerate((KERNELS / name).read_text().splitlines()) if needle in line]
    return lines[nth]


@pytest.fixture(params=["asm", "ucontext"])
def fibers(request, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CPU_FIBERS", request.param)
    return request.param


# ---------------------------------------------------------------- basics


@pytest.mark.slow
def test_block_reduce_shared_and_syncthreads(cache, fibers):
    mod = build(cache, "reduce.cu", {"block_reduce": ["float*", "float*", "int"]})
    n = 256 * 5 - 17
    x = (np.arange(n) % 13 - 6).astype(np.float32)
    out = np.zeros(10, np.float32)
    mod.launch("block_reduce", (5, 1, 1), (256, 1, 1), 0, [x, out, n])
    xp = np.concatenate([x, np.zeros(17, np.float32)]).reshape(5, 256)
    np.testing.assert_array_equal(out[0::2], xp.sum(1))
    np.testing.assert_array_equal(out[1::2], 2 * xp.sum(1))
    mod.launch("block_reduce", (5, 1, 1), (256, 1, 1), 0, [x, out, n], reverse_threads=True)
    np.testing.assert_array_equal(out[0::2], xp.sum(1))


@pytest.mark.slow
def test_syncthreads_count_and_or(cache):
    mod = build(cache, "reduce.cu", {"sync_votes": ["float*", "float*"]})
    x = np.linspace(-10, 10, 2 * 128, dtype=np.float32)
    x[200] = 1000.0
    out = np.zeros(6, np.float32)
    mod.launch("sync_votes", (2, 1, 1), (128, 1, 1), 0, [x, out])
    xb = x.reshape(2, 128)
    for b in range(2):
        assert out[3 * b] == (xb[b] > 0).sum()
        assert out[3 * b + 1] == 1.0
        assert out[3 * b + 2] == float((xb[b] > 100).any())


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.slow
def test_exited_threads_do_not_hold_barriers(cache, reverse):
    mod = build(cache, "reduce.cu", {"early_exit_barrier": ["float*", "float*", "int"]})
    x = np.arange(128, dtype=np.float32)
    out = np.full(128, -1.0, np.float32)
    mod.launch("early_exit_barrier", (1, 1, 1), (128, 1, 1), 0, [x, out, 77], reverse_threads=reverse)
    np.testing.assert_array_equal(out[:77], x[:77][::-1])
    np.testing.assert_array_equal(out[77:], -1.0)


@pytest.mark.slow
def test_warp_reductions(cache, fibers):
    mod = build(cache, "warp.cu", {"warp_reduce": ["float*", "float*", "float*"]})
    x = np.arange(128, dtype=np.float32) * 0.5
    ox = np.zeros(128, np.float32)
    od = np.zeros(128, np.float32)
    mod.launch("warp_reduce", (2, 1, 1), (64, 1, 1), 0, [x, ox, od])
    sums = x.reshape(4, 32).sum(1)
    np.testing.assert_array_equal(ox, np.repeat(sums, 32))
    np.testing.assert_array_equal(od[0::32], sums)
    # shfl_down: a lane whose source is past the warp end adds its own value
    d = x.reshape(4, 32).copy()
    lane = np.arange(32)
    off = 16
    while off > 0:
        src = np.where(lane + off <= 31, lane + off, lane)
        d = d + d[:, src]
        off //= 2
    np.testing.assert_array_equal(od, d.ravel())


@pytest.mark.slow
def test_warp_scan_shfl_up(cache):
    mod = build(cache, "warp.cu", {"warp_scan": ["float*", "float*", "int*"]})
    x = (np.arange(96) % 7).astype(np.float32)
    out = np.zeros(96, np.float32)
    outi = np.zeros(96, np.int32)
    mod.launch("warp_scan", (1, 1, 1), (96, 1, 1), 0, [x, out, outi])
    ref = np.cumsum(x.reshape(3, 32), axis=1).ravel()
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(outi, ref.astype(np.int32))


@pytest.mark.slow
def test_warp_misc_width_masks_votes(cache):
    mod = build(cache, "warp.cu", {"warp_misc": ["float*", "unsigned*"]})
    out = np.zeros((64, 8), np.float32)
    outu = np.zeros((64, 4), np.uint32)
    mod.launch("warp_misc", (1, 1, 1), (64, 1, 1), 0, [out, outu])
    lane = np.arange(64) % 32
    np.testing.assert_array_equal(out[:, 0], 30.0)
    np.testing.assert_array_equal(out[:, 1], (lane // 8) * 8 + 2)
    np.testing.assert_array_equal(out[:, 2], lane ^ 1)
    np.testing.assert_array_equal(out[:, 3], np.where(lane % 8 + 3 < 8, lane + 3, lane))
    np.testing.assert_array_equal(out[:, 4], np.where(lane % 4 >= 2, lane - 2, lane))
    np.testing.assert_array_equal(out[:, 5], np.where(lane < 16, lane ^ 8, lane ^ 4))
    ballot = sum(1 << lane for lane in range(32) if lane % 3 == 0)
    np.testing.assert_array_equal(outu[:, 0], ballot)
    np.testing.assert_array_equal(outu[:, 1], 1)
    np.testing.assert_array_equal(outu[:, 2], 0)
    np.testing.assert_array_equal(outu[:, 3], (lane ^ 31) * 1000)
    np.testing.assert_array_equal(out[:, 6], 1.0)
    np.testing.assert_array_equal(out[:, 7], 32.0)


@pytest.mark.slow
def test_dynamic_shared_tile(cache, fibers):
    mod = build(cache, "shared_dyn.cu", {"transpose_tiles": ["float*", "float*", "int"]})
    n = 64
    a = np.arange(n * n, dtype=np.float32).reshape(n, n)
    out = np.zeros_like(a)
    mod.launch("transpose_tiles", (2, 2, 1), (32, 32, 1), 32 * 33 * 4, [a, out, n])
    np.testing.assert_array_equal(out, a.T)


@pytest.mark.slow
def test_dynamic_shared_second_view_and_poison(cache):
    mod = build(cache, "shared_dyn.cu", {"bytes_view": ["float*"]})
    out = np.zeros(32, np.float32)
    mod.launch("bytes_view", (1, 1, 1), (32, 1, 1), 128, [out])
    np.testing.assert_array_equal(out[:4], [1, 2, 3, 4])
    assert np.isnan(out[4:]).all()
    assert (out[4:].view(np.uint32) == 0x7FF00BAD).all()


@pytest.mark.slow
def test_multidim_blocks_and_3d_grid(cache):
    mod = build(cache, "dims.cu", {"coords": ["float*"]})
    grid, block = (2, 3, 4), (16, 16, 1)
    nb, nt = 24, 256
    out = np.zeros((nb, nt, 8), np.float32)
    mod.launch("coords", grid, block, 0, [out])
    for bid in range(nb):
        bx, by, bz = bid % 2, (bid // 2) % 3, bid // 6
        rec = out[bid]
        np.testing.assert_array_equal(rec[:, 0], np.arange(nt) % 16)
        np.testing.assert_array_equal(rec[:, 1], np.arange(nt) // 16)
        np.testing.assert_array_equal(rec[:, 2], 0)
        np.testing.assert_array_equal(rec[:, 3:6], np.tile([bx, by, bz], (nt, 1)))
        np.testing.assert_array_equal(rec[:, 6], 1761)
        np.testing.assert_array_equal(rec[:, 7], 234)


@pytest.mark.slow
def test_static_shared_matmul_16x16(cache, fibers):
    mod = build(cache, "dims.cu", {"matmul16": ["float*", "float*", "float*", "int"]})
    n = 48
    rng = np.random.default_rng(1)
    a = rng.integers(-4, 5, (n, n)).astype(np.float32)
    b = rng.integers(-4, 5, (n, n)).astype(np.float32)
    c = np.zeros((n, n), np.float32)
    mod.launch("matmul16", (3, 3, 1), (16, 16, 1), 0, [a, b, c, n])
    np.testing.assert_array_equal(c, a @ b)


@pytest.mark.slow
def test_device_global_persists_and_constant(cache):
    mod = CpuModule.build(
        PRELUDE + (KERNELS / "globals.cu").read_text(), "attention.cu", {"bump": ["float*", "int"]}, cache_dir=cache
    )
    out = np.zeros(5, np.float32)
    mod.launch("bump", (3, 1, 1), (32, 1, 1), 0, [out, 2])
    np.testing.assert_array_equal(out, [1, 1, 1, 1, 1])
    mod.launch("bump", (1, 1, 1), (32, 1, 1), 0, [out, 6])
    np.testing.assert_array_equal(out, [2, 4, 4, 4, 4])
    assert mod.read_int_global("ATTNLAB_TEST_VERSION") == 42
    assert mod.read_int_global("NO_SUCH_GLOBAL") is None


@pytest.mark.slow
def test_atomics(cache):
    mod = build(cache, "globals.cu", {"atomics": ["float*", "int*", "int"]})
    fsum = np.zeros(1, np.float32)
    c = np.array([0, -1, 0, 0, 0, 0], np.int32)
    n = 1000
    mod.launch("atomics", (4, 1, 1), (256, 1, 1), 0, [fsum, c, n])
    assert fsum[0] == n
    assert c[0] == n and c[1] == n - 1 and c[2] == -(n - 1)
    assert c[3] == c[4] and 1 <= c[3] <= n
    assert c[5] == n // 2


@pytest.mark.slow
def test_device_printf(cache, capfd):
    mod = build(cache, "globals.cu", {"say": ["int"]})
    mod.launch("say", (2, 1, 1), (4, 1, 1), 0, [7])
    assert capfd.readouterr().out == "hello from the CPU x=7 f=1.00\n"


def test_read_int_global_absent(cache):
    mod = build(cache, "reduce.cu", {"sync_votes": ["float*", "float*"]})
    assert mod.read_int_global("ATTNLAB_TEST_VERSION") is None


@pytest.mark.slow
def test_math_intrinsics(cache):
    mod = build(cache, "misc.cu", {"math_ops": ["float*", "float*"]})
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    out = np.zeros((64, 16), np.float32)
    mod.launch("math_ops", (1, 1, 1), (64, 1, 1), 0, [x, out])
    i = np.arange(64)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(out[:, 0], np.exp(xd), rtol=1e-6)
    np.testing.assert_allclose(out[:, 1], 0, atol=1e-5)
    np.testing.assert_allclose(out[:, 2], 1 / np.sqrt(np.abs(xd) + 1), rtol=1e-6)
    np.testing.assert_allclose(out[:, 3], xd / 3, rtol=1e-6)
    np.testing.assert_array_equal(out[:, 4], np.clip(x, 0, 1))
    np.testing.assert_array_equal(out[:, 5], 1)
    np.testing.assert_array_equal(out[:, 6], np.maximum(x, 0.5) + np.minimum(x, -0.5))
    np.testing.assert_array_equal(
        out[:, 7], (np.maximum(i, 40) + np.minimum(i, 3)).astype(np.float32) + np.maximum(x, np.float32(1))
    )
    np.testing.assert_array_equal(out[:, 8], 1)
    np.testing.assert_array_equal(out[:, 9], 1)
    np.testing.assert_allclose(out[:, 10], (2 * xd + 1) + (xd + 1) + 2 * xd + 0.25, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out[:, 11], np.abs(xd), rtol=1e-6)
    np.testing.assert_array_equal(out[:, 12], 2 * x + (2 * i).astype(np.float32))
    np.testing.assert_array_equal(out[:, 13], x)
    ffs = np.array([0] + [(v & -v).bit_length() for v in range(1, 64)])
    np.testing.assert_array_equal(out[:, 14], [bin(v).count("1") for v in range(64)] + ffs * 100)
    np.testing.assert_array_equal(out[:, 15], 1)


@pytest.mark.slow
def test_vector_types_and_shared_declarators(cache, fibers):
    mod = build(cache, "misc.cu", {"vec_shared": ["float*", "float*"]})
    x = np.arange(32, dtype=np.float32) + 1
    out = np.zeros((8, 4), np.float32)
    mod.launch("vec_shared", (2, 1, 1), (8, 1, 1), 0, [x, out])
    t = np.arange(8)
    np.testing.assert_array_equal(out[:, 0], x[(t + 1) % 8] + 2 * x[(t + 2) % 8])
    np.testing.assert_array_equal(out[:, 1], x.reshape(8, 4)[:, 3])
    np.testing.assert_array_equal(out[:, 2], 1 + 4 + 3 + 1 + 8)
    np.testing.assert_array_equal(out[:, 3], 16 + 16 + 32 * 4)


def test_rewrite_keeps_lines():
    from labrunner.run.cpu.module import rewrite_source

    src = (KERNELS / "misc.cu").read_text() + (KERNELS / "shared_dyn.cu").read_text()
    out = rewrite_source(src)
    assert out.count("\n") == src.count("\n")
    assert "notReal[3]; must stay a comment */" in out and "ATTNLAB_SHARED_REG(notReal)" not in out
    assert "extern __shared__ float tile[];" not in out and "unsigned char raw[]" not in out


# ---------------------------------------------------------------- bugs caught


@pytest.mark.slow
def test_divergent_barrier_message(cache, fibers):
    mod = build(cache, "bugs.cu", {"diverge": ["float*"]})
    out = np.zeros(64, np.float32)
    mod.launch("diverge", (1, 1, 1), (64, 1, 1), 0, [out])  # block y == 0 is fine
    l1 = line_of("bugs.cu", "__syncthreads();", 0)
    l2 = line_of("bugs.cu", "__syncthreads();", 1)
    with pytest.raises(CpuKernelError, match=r"^barrier divergence in kernel diverge, block \(0,1,0\): ") as e:
        mod.launch("diverge", (1, 2, 1), (64, 1, 1), 0, [out])
    assert str(e.value) == (
        f"barrier divergence in kernel diverge, block (0,1,0): thread 5 waits at __syncthreads (attention.cu:{l2}) "
        f"while thread 0 waits at __syncthreads (attention.cu:{l1})"
    )


def test_divergent_barrier_message_reverse(cache):
    mod = build(cache, "bugs.cu", {"diverge": ["float*"]})
    out = np.zeros(64, np.float32)
    l1 = line_of("bugs.cu", "__syncthreads();", 0)
    l2 = line_of("bugs.cu", "__syncthreads();", 1)
    with pytest.raises(CpuKernelError, match=r"^barrier divergence in kernel diverge, block \(0,1,0\): ") as e:
        mod.launch("diverge", (1, 2, 1), (64, 1, 1), 0, [out], reverse_threads=True)
    assert str(e.value) == (
        f"barrier divergence in kernel diverge, block (0,1,0): thread 4 waits at __syncthreads (attention.cu:{l1}) "
        f"while thread 5 waits at __syncthreads (attention.cu:{l2})"
    )


@pytest.mark.slow
def test_shuffle_naming_exited_lane(cache):
    mod = build(cache, "bugs.cu", {"shfl_exited": ["float*"]})
    out = np.zeros(32, np.float32)
    ln = line_of("bugs.cu", "v += __shfl_xor_sync")
    with pytest.raises(CpuKernelError, match=r"^shuffle cannot complete in kernel shfl_exited, ") as e:
        mod.launch("shfl_exited", (1, 1, 1), (32, 1, 1), 0, [out])
    assert str(e.value) == (
        "shuffle cannot complete in kernel shfl_exited, block (0,0,0): thread 0 (warp 0, lane 0) waits at "
        f"__shfl_xor_sync (attention.cu:{ln}) with mask 0xffffffff, but lane 7 (thread 7) has exited"
    )
    # in reverse order lane 7 exits before lanes 6..0 arrive
    with pytest.raises(CpuKernelError, match=r"shfl_exited.*lane 7"):
        mod.launch("shfl_exited", (1, 1, 1), (32, 1, 1), 0, [out], reverse_threads=True)


@pytest.mark.slow
def test_barrier_vs_shuffle_deadlock(cache):
    mod = build(cache, "bugs.cu", {"bar_vs_shfl": ["float*"]})
    out = np.zeros(64, np.float32)
    with pytest.raises(CpuKernelError, match=r"^barrier divergence in kernel bar_vs_shfl, ") as e:
        mod.launch("bar_vs_shfl", (1, 1, 1), (64, 1, 1), 0, [out])
    msg = str(e.value)
    assert msg.startswith("barrier divergence in kernel bar_vs_shfl, block (0,0,0): thread 16 waits at __syncthreads")
    assert "while thread 0 waits at __shfl_sync (attention.cu:" in msg


def test_missing_syncthreads_shows_with_reverse_threads(cache):
    mod = build(cache, "bugs.cu", {"missing_sync": ["float*"], "with_sync": ["float*"]})
    fwd = np.zeros(512, np.float32)
    rev = np.zeros(512, np.float32)
    mod.launch("missing_sync", (2, 1, 1), (256, 1, 1), 0, [fwd])
    mod.launch("missing_sync", (2, 1, 1), (256, 1, 1), 0, [rev], reverse_threads=True)
    assert not np.array_equal(fwd, rev, equal_nan=True)
    good = (np.arange(256) + 1) % 256 + 1.0
    mod.launch("with_sync", (2, 1, 1), (256, 1, 1), 0, [fwd])
    mod.launch("with_sync", (2, 1, 1), (256, 1, 1), 0, [rev], reverse_threads=True)
    np.testing.assert_array_equal(fwd, np.tile(good, 2))
    np.testing.assert_array_equal(rev, fwd)


@pytest.mark.slow
def test_unwritten_shared_reads_nan_in_every_block(cache):
    mod = build(cache, "bugs.cu", {"stale_shared": ["float*"]})
    out = np.zeros(96, np.float32)
    mod.launch("stale_shared", (3, 1, 1), (32, 1, 1), 0, [out])
    np.testing.assert_array_equal(out[:32], 5.0)
    assert np.isnan(out[32:]).all()


@pytest.mark.slow
def test_fault_and_assert_are_errors(cache):
    mod = build(cache, "bugs.cu", {"null_write": ["float*"], "asserts": ["float*", "int"]})
    with pytest.raises(
        CpuKernelError, match=r"illegal memory access \(SIGSEGV\) in kernel null_write, block \(0,0,0\)"
    ):
        mod.launch("null_write", (1, 1, 1), (32, 1, 1), 0, [None])
    out = np.zeros(32, np.float32)
    mod.launch("asserts", (1, 1, 1), (32, 1, 1), 0, [out, 32])
    with pytest.raises(CpuKernelError, match=r"device assert failed in kernel asserts, block \(0,0,0\), thread 20: "):
        mod.launch("asserts", (1, 1, 1), (32, 1, 1), 0, [out, 20])
    # the module still works afterwards
    mod.launch("asserts", (1, 1, 1), (32, 1, 1), 0, [out, 32])


def test_bad_launch_configs(cache):
    mod = build(cache, "reduce.cu", {"sync_votes": ["float*", "float*"]})
    x = np.zeros(2048, np.float32)
    out = np.zeros(8, np.float32)
    with pytest.raises(CpuKernelError, match=r"bad launch config for kernel sync_votes: block \(1025, 1, 1\)"):
        mod.launch("sync_votes", (1, 1, 1), (1025, 1, 1), 0, [x, out])
    with pytest.raises(CpuKernelError, match=r"bad launch config for kernel sync_votes: .*227 KiB"):
        mod.launch("sync_votes", (1, 1, 1), (32, 1, 1), 227 * 1024 + 1, [x, out])
    with pytest.raises(CpuKernelError, match=r"unknown kernel 'nope'"):
        mod.launch("nope", (1, 1, 1), (32, 1, 1), 0, [x, out])
    mod.launch("sync_votes", (1, 1, 1), (32, 1, 1), 227 * 1024, [x, out])


def test_compile_error_points_at_student_line(cache):
    src = PRELUDE + '// header\n\nextern "C" __global__ void k(float* o) {\n  o[0] = undefined_name;\n}\n'
    with pytest.raises(CpuKernelError, match=r"^C\+\+ compile failed:\n") as e:
        CpuModule.build(src, "attention.cu", {"k": ["float*"]}, cache_dir=cache)
    msg = str(e.value)
    assert msg.startswith("C++ compile failed:\n")
    assert "attention.cu(4): error: " in msg and "undefined_name" in msg  # the line as NVRTC writes it


# ---------------------------------------------------------------- the lab-2 starter


def _attention_ref(q, k, v, C, P):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    out = np.zeros_like(q)
    for i in range(C):
        for h in range(32):
            g = h // 4
            s = k[: P + i + 1, g] @ q[i, h] * 0.125
            p = np.exp(s - s.max())
            out[i, h] = p @ v[: P + i + 1, g] / p.sum()
    return out


def _run_starter(mod, C, P, seed=0, reverse=False, shared=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((C, 32, 64), dtype=np.float32)
    k = rng.standard_normal((P + C, 8, 64), dtype=np.float32)
    v = rng.standard_normal((P + C, 8, 64), dtype=np.float32)
    out = np.full((C, 32, 64), np.nan, np.float32)
    t0 = time.perf_counter()
    mod.launch(
        "flash_prefill", ((C + 63) // 64, 32, 1), (256, 1, 1), shared, [q, k, v, out, C, P], reverse_threads=reverse
    )
    return q, k, v, out, time.perf_counter() - t0


STARTER_EP = {"flash_prefill": ["float*", "float*", "float*", "float*", "int", "int"]}


def test_lab2_starter_matches_reference(cache):
    mod = build(cache, "kernels/lab2/starter.cu", STARTER_EP)
    C, P = 17, 31
    q, k, v, out, _ = _run_starter(mod, C, P)
    ref = _attention_ref(q, k, v, C, P)
    assert np.all(np.abs(out - ref) <= 1e-4 + 1e-3 * np.abs(ref))
    _, _, _, out_rev, _ = _run_starter(mod, C, P, reverse=True)
    np.testing.assert_array_equal(out_rev, out)


def test_lab2_starter_timing(cache):
    mod = build(cache, "kernels/lab2/starter.cu", STARTER_EP)
    q, k, v, out, dt = _run_starter(mod, 33, 31, seed=3)
    print(f"\nlab-2 starter on the CPU, C=33 P=31: {dt:.3f} s")
    ref = _attention_ref(q, k, v, 33, 31)
    assert np.all(np.abs(out - ref) <= 1e-4 + 1e-3 * np.abs(ref))


@pytest.mark.parametrize("C,P", [(17, 31), (70, 5)])
@pytest.mark.slow
def test_tiled_kernel_with_dynamic_shared(cache, C, P):
    mod = build(cache, "tiled.cu", STARTER_EP)
    shared = (64 * 65 + 64 * 64) * 4
    q, k, v, out, _ = _run_starter(mod, C, P, seed=C, shared=shared)
    ref = _attention_ref(q, k, v, C, P)
    assert np.all(np.abs(out - ref) <= 1e-4 + 1e-3 * np.abs(ref))
    _, _, _, out_rev, _ = _run_starter(mod, C, P, seed=C, shared=shared, reverse=True)
    np.testing.assert_array_equal(out_rev, out)
