"""The oracle on the driver's own GPU: the reference of every checked timed call, fast enough to check them all.

A timed comparison checks a couple of dozen calls, each on an input set of its own. The float64
oracle needs seconds per set at the timing shape on a CPU and milliseconds on a GPU, so the
driver runs the same oracle (`labrunner.truth.oracle`, with CuPy as its array module) on the
GPU, in a CUDA context of its own: the worker's kernels run in another process and cannot
touch it. It runs only between timing rounds, when the worker's GPU work has finished, so it
never competes with a timed call.

Before it judges anything it proves itself, every run: the closed-form golden case to the
golden proof's tolerance, and a random set (more rows than one of the oracle's row blocks)
made both by the numpy definition and by the CUDA twin, bit for bit the same, whose GPU
reference must match the CPU oracle's to 1e-12; the decode oracle on a small paged batch, to the
same; and the pass rule as applied on the GPU must give the CPU checker's verdicts on a right and a
wrong output. A failed proof refuses to time (exit 6). The parts run in threads of their own, so
that one's host work (the CPU oracle it is held to, numpy, which lets other threads run) overlaps
another's; CuPy's kernel compiles, most of a fresh machine's proof, were seen to run one at a time.

The pass rule is applied on the GPU too (`contract.within_tolerance` takes CuPy arrays); only a
call that fails is brought back to the CPU checker, for its message. The tests run this class
with numpy as its array module and the numpy definition as its set maker, so its logic is
checked where there is no GPU; on a GPU it is CuPy and the CUDA twin.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType

import numpy as np

from labrunner.exit_codes import environment_error
from labrunner.labs.timing_strategy import TimingLayout
from labrunner.measure.device import DeviceArray
from labrunner.measure.input_pool import CudaSets, NumpySets
from labrunner.truth import oracle, paged_cache
from labrunner.truth.cases import Inputs
from labrunner.truth.checker import PASS, OutputCheck, check_output
from labrunner.truth.contract import HEAD_DIM, KV_HEADS, QUERY_HEADS, within_tolerance
from labrunner.truth.golden import PROOF_TOLERANCE, prove_oracle
from labrunner.truth.timing_sets import KEY_BITS, make_set, set_shapes

PROOF_ROWS, PROOF_PREFIX = 260, 36  # past the oracle's 256-row block, so the blocking is proven too

# The oracle's proof as the timing record carries it: each part's figures (errors, and whether the parts
# agreed), and the tolerance they were held to.
Proof = dict[str, float | bool]


def _cupy() -> ModuleType:
    import cupy

    module: ModuleType = cupy  # CuPy ships no type information
    return module


class GpuOracle:
    """Makes timing set n under a key on the GPU and judges a kernel's output for it there.

    `xp` and `sets` are CuPy and `CudaSets` unless a test passes numpy and `NumpySets`."""

    def __init__(
        self, xp: ModuleType | None = None, sets: type[CudaSets | NumpySets] = CudaSets, decode: bool = True
    ) -> None:
        self.cp = xp if xp is not None else _cupy()
        self.sets = sets
        self.decode = decode  # whether it will judge decode batches: its decode oracle is then proven too
        self.proof = self.prove()

    def host(self, array: DeviceArray) -> np.ndarray:
        host: np.ndarray = self.cp.asnumpy(array) if self.cp is not np else array
        return host

    def reference(
        self, key: tuple[int, int], number: int, rows: int, prefix: int, layout: TimingLayout | None = None
    ) -> DeviceArray:
        """The float64 reference of set `number`, on the GPU; `layout`: a paged cache's pages, table and lengths."""
        cp = self.cp
        pages = (layout or {}).get("pages")
        buffers = {name: cp.empty(shape, dtype=np.float32) for name, shape in set_shapes(rows, prefix, pages).items()}
        self.sets(None, key, rows, prefix, pages).fill(buffers, number)
        if layout is not None and pages is not None:  # pages come only with a layout
            fixed = layout["fixed"]
            return oracle.decode_attention(
                buffers["q"], buffers["k"], buffers["v"], fixed["blockTable"], fixed["seqLens"], xp=cp
            )
        return oracle.attention(buffers["q"], buffers["k"], buffers["v"], prefix=prefix, xp=cp)

    def case_reference(self, inputs: Inputs) -> np.ndarray:
        """A correctness case's float64 reference (`Inputs.reference` on the CPU), made here and brought
        back: the same oracle, milliseconds instead of seconds at lab 2's largest case."""
        cp = self.cp
        q, k, v = (cp.asarray(a) for a in (inputs.q, inputs.k, inputs.v))
        if inputs.block_table is not None:  # the table and the lengths stay on the host, as the oracle walks them
            assert inputs.seq_lens is not None  # a decode case's inputs carry both
            table, lengths = inputs.block_table, inputs.seq_lens
            reference = self.host(oracle.decode_attention(q, k, v, table, lengths, paged_cache.PAGE_TOKENS, xp=cp))
        else:
            reference = self.host(oracle.attention(q, k, v, prefix=inputs.prefix, xp=cp))
        del q, k, v
        self.release()
        return reference

    def check(self, out: np.ndarray, reference: DeviceArray) -> OutputCheck:
        """The checker's verdict on `out` (float32, host) against a reference on the GPU."""
        cp = self.cp
        on_gpu = cp.asarray(out)
        if bool(within_tolerance(on_gpu, reference).all()):
            errors = cp.abs(on_gpu.astype(cp.float64) - reference)
            return OutputCheck(PASS, f"all {out.size} elements within the pass rule", float(errors.max()), 0, out.size)
        return check_output(out, self.host(reference))

    def release(self) -> None:
        """Give the memory back, so the next round's worker has the whole GPU."""
        if self.cp is not np:
            self.cp.get_default_memory_pool().free_all_blocks()

    def prove(self) -> Proof:
        """Every part of the proof, each in a thread of its own (the module's note says what overlaps)."""
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="attnlab-proof") as pool:
            proofs = (self.prove_prefill, self.prove_checker, *((self.prove_decode,) if self.decode else ()))
            parts = [pool.submit(part) for part in proofs]
            proof = {key: value for part in parts for key, value in part.result().items()}
        self.release()
        return {**proof, "tolerance": PROOF_TOLERANCE}

    def prove_prefill(self) -> Proof:
        cp = self.cp
        golden = prove_oracle(
            attention=lambda q, k, v, prefix: self.host(
                oracle.attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), prefix=prefix, xp=cp)
            )
        )
        if not golden.passed:
            raise environment_error(
                f"the GPU oracle failed the golden proof (max error {golden.max_error:.3g} > "
                f"{PROOF_TOLERANCE:g}): refusing to time; check the GPU and the CuPy install"
            )
        draw = random.SystemRandom()
        key = (draw.getrandbits(KEY_BITS), draw.getrandbits(KEY_BITS))
        on_cpu = make_set(key, 0, PROOF_ROWS, PROOF_PREFIX)
        on_gpu = {name: cp.empty(a.shape, dtype=np.float32) for name, a in on_cpu.items()}
        self.sets(None, key, PROOF_ROWS, PROOF_PREFIX).fill(on_gpu, 0)
        differing = sum(
            int(np.count_nonzero(self.host(on_gpu[n]).view(np.uint32) != on_cpu[n].view(np.uint32))) for n in on_cpu
        )
        if differing:
            raise environment_error(
                f"the GPU made {differing} elements of a timing input set differently from its "
                "numpy definition: refusing to time; check the GPU and the CuPy install"
            )
        cpu = oracle.attention(on_cpu["q"], on_cpu["k"], on_cpu["v"], prefix=PROOF_PREFIX)
        gpu = self.host(oracle.attention(on_gpu["q"], on_gpu["k"], on_gpu["v"], prefix=PROOF_PREFIX, xp=cp))
        gap = float(np.max(np.abs(gpu - cpu)))
        if not gap <= PROOF_TOLERANCE:
            raise environment_error(
                f"the GPU oracle differs from the CPU oracle by {gap:.3g} (> {PROOF_TOLERANCE:g}) "
                "on a random set: refusing to time; check the GPU and the CuPy install"
            )
        return {"golden_max_error": golden.max_error, "cpu_gpu_max_difference": gap, "set_bits_equal": True}

    def prove_checker(self) -> Proof:
        """The pass rule as the GPU applies it (`check`) gives the CPU checker's verdicts: a right output
        passes, and one element off by a thousandth fails with the checker's own message. This also has
        CuPy build the rule's kernels here, ahead, rather than at the first timed call's check."""
        draw = np.random.default_rng(random.SystemRandom().getrandbits(64))
        reference = draw.standard_normal((4, QUERY_HEADS, HEAD_DIM))
        right = reference.astype(np.float32)
        wrong = right.copy()
        wrong[1, 5, 7] += np.float32(1e-3 * abs(reference[1, 5, 7]) + 1e-3)
        on_gpu = self.cp.asarray(reference)
        verdicts = (self.check(right, on_gpu), self.check(wrong, on_gpu))
        expected = (check_output(right, reference), check_output(wrong, reference))
        if verdicts[0].status != PASS or verdicts[1] != expected[1] or verdicts[1].status == PASS:
            raise environment_error(
                "the GPU applied the pass rule differently from the CPU checker "
                f"({verdicts[0].status} and {verdicts[1].status}, where {expected[0].status} and "
                f"{expected[1].status} were due): refusing to time; check the GPU and the CuPy install"
            )
        return {"checker_agrees": True}

    def prove_decode(self) -> Proof:
        """The decode oracle on the GPU against the CPU's, on a small paged batch (shuffled pages, NaN
        where no key stands), to the proof's tolerance."""
        cp = self.cp
        draw = np.random.default_rng(random.SystemRandom().getrandbits(64))
        lengths = [1, 17, 40]
        table, pages = paged_cache.layout(draw, lengths)
        q = draw.standard_normal((len(lengths), QUERY_HEADS, HEAD_DIM), dtype=np.float32)
        k, v = (paged_cache.fill_pages(draw, table, lengths, pages, (KV_HEADS, HEAD_DIM)) for _ in range(2))
        seq_lens = np.array(lengths, dtype=np.int32)
        cpu = oracle.decode_attention(q, k, v, table, seq_lens)
        gpu = self.host(oracle.decode_attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), table, seq_lens, xp=cp))
        gap = float(np.max(np.abs(gpu - cpu)))
        if not gap <= PROOF_TOLERANCE:
            raise environment_error(
                f"the GPU's decode oracle differs from the CPU's by {gap:.3g} (> {PROOF_TOLERANCE:g}) "
                "on a paged batch: refusing to time; check the GPU and the CuPy install"
            )
        return {"decode_cpu_gpu_max_difference": gap}
