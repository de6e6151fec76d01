"""The peers: what a student could call from PyTorch instead of writing a kernel, timed beside it.

A SPEEDUP over the starter says how far a kernel came; a ratio to PyTorch says where it stands.
`bench lab2 --vs sdpa` and `bench lab1 --vs torch` time a peer in float32 on the very inputs the
student's kernel gets, interleaved call by call, in the same worker process and on the same CUDA
stream. That is why the peer runs in the worker, beside student code, although it is trusted:
two processes would time on two CUDA contexts that the GPU switches between, and a ratio of
medians taken minutes apart, or under another context's load, is not the paired comparison the
starter gets. The worker runs no student host code on the GPU (its kernels are device code), so
PyTorch's host code shares the process with nothing hostile that runs on the CPU; what a
student's kernel could do to the peer's memory is caught as it would be for the starter: the
peer's checked calls are held to the oracle, and it reads each input set made again from its
number.

Each peer says what its time includes, because a fair reading needs it: the grouped heads cost
PyTorch a copy (K and V expanded from 8 to 32 heads) that a hand-written kernel avoids by
indexing, and that copy is part of every timed call here. What it leaves out is PyTorch's host
side: each op passes through Python and PyTorch's dispatcher, tens of microseconds a call, and the
GPU would sit idle inside the timing events while the host queued the next op. So before each
peer call the GPU is given a head start (`timed_runs.PeerCall`, `gpu_timer.CupyTimer.hold`), and
the events time the GPU's work, as they do for a kernel launched from CuPy.

PyTorch is optional (`pip install 'attnlab[peers]'`) and imported only here, only in the worker,
and only when a peer is asked for. Its tensors are views of the worker's own buffers through
DLPack (CuPy arrays on the GPU, numpy arrays in the tests), so the peer reads the set in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from labrunner.truth.contract import GROUP, HEAD_DIM, KV_HEADS, QUERY_HEADS, SCALE

INSTALL_HINT = "pip install 'attnlab[peers]'"
HEAD_START_US = 1000.0  # the GPU's wait before each peer call: well above PyTorch's host time for one call
# A torch.Tensor: PyTorch is optional, and imported only where a peer runs, never for an annotation.
Tensor = Any
# A peer's zero-copy tensors over one slot's q, k and v.
Views = dict[str, Tensor]
HIDDEN = f"GPU time only, PyTorch's host dispatch hidden behind a {HEAD_START_US / 1000:g} ms head start"


@dataclass(frozen=True)
class PeerSpec:
    """A peer as the reports name it: the `--vs` word, its label in a table, what its time includes."""

    name: str
    label: str
    includes: str


SPECS = {
    "sdpa": PeerSpec(
        "sdpa",
        "PyTorch SDPA fp32",
        "torch.nn.functional.scaled_dot_product_attention in float32 (PyTorch picks its kernel) with the "
        "causal_lower_right mask for the cached prefix; inside every timed call also K and V expanded from 8 to "
        "32 heads (a copy that a kernel indexing KV head h/4 never makes) and the output made [rows][32][64] "
        f"(Q is passed as a strided view); {HIDDEN}",
    ),
    "torch": PeerSpec(
        "torch",
        "PyTorch eager fp32",
        "three eager PyTorch ops in float32, as the lab's three kernels: torch.baddbmm (q.k^T / 8 plus a 0/-inf "
        "causal bias made once before timing), torch.softmax, torch.bmm (weights.v); inside every timed call also "
        "K and V expanded from 8 to 32 heads (a copy that a kernel indexing KV head h/4 never makes) and the "
        f"output made [T][32][64] (Q is passed as a strided view); {HIDDEN}",
    ),
}


class PeerMissing(Exception):
    """The peer cannot run here (no PyTorch, or one without CUDA); the words say which, and the fix."""


def load(name: str, on_gpu: bool = True) -> TorchPeer:
    """The peer called `name`, ready to run; `on_gpu`: the worker's buffers are CUDA memory."""
    try:
        import torch
    except ImportError:
        raise PeerMissing(f"PyTorch is not installed ({INSTALL_HINT})") from None
    if on_gpu and not torch.cuda.is_available():
        raise PeerMissing(
            f"PyTorch {torch.__version__} here has no CUDA (a CPU-only build, or no GPU it can use): "
            f"install a CUDA build ({INSTALL_HINT} from PyTorch's CUDA index)"
        )
    # float32 means float32: no TF32 shortcut in the matrix products (PyTorch's default, made explicit)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return {"sdpa": ScaledDotProductPeer, "torch": EagerThreeOpsPeer}[name](torch, on_gpu)


class TorchPeer:
    """What both peers share: views of the worker's buffers, the stream, the output read back."""

    def __init__(self, torch: ModuleType, on_gpu: bool) -> None:
        self.torch = torch
        self.stream: Any = None  # a torch.cuda.ExternalStream over CuPy's current stream
        if on_gpu:
            import cupy

            # The timer's events are recorded on CuPy's current stream; the peer must queue there too.
            pointer = cupy.cuda.get_current_stream().ptr
            self.stream = torch.cuda.ExternalStream(pointer) if pointer else None
        self.bias: dict[int, Tensor] = {}

    def wrap(self, slot: dict[str, Any]) -> Views:
        """Zero-copy tensors over a slot's q, k and v (made once per slot, outside any timing)."""
        views = {name: self.torch.from_dlpack(slot[name]) for name in ("q", "k", "v")}
        self.prepare(views)
        return views

    def prepare(self, views: Views) -> None:
        """What a peer may make once per shape, before timing (lab 1's causal bias)."""

    def launch(self, views: Views) -> Tensor:
        if self.stream is None:
            return self.compute(views)
        with self.torch.cuda.stream(self.stream):
            return self.compute(views)

    def compute(self, views: Views) -> Tensor:
        raise NotImplementedError

    def to_host(self, out: Tensor) -> np.ndarray:
        """The output as the lab lays it out, `float32 [rows * 32 * 64]`, on the host."""
        host: np.ndarray = out.detach().to("cpu").contiguous().numpy().reshape(-1)
        return host

    def heads_first(self, x: Tensor, heads: int) -> Tensor:
        """[rows][heads][64] -> [heads][rows][64] (a view); grouped K and V expanded to 32 heads (a copy:
        query head h reads KV head h // 4). Expand-and-reshape, never `repeat_interleave`, whose output
        size may be read back from the GPU: a synchronisation inside a timed call would stall the
        queue and time PyTorch's host side."""
        x = x.view(-1, heads, HEAD_DIM).transpose(0, 1)
        if heads != KV_HEADS:
            return x
        return x[:, None].expand(heads, GROUP, x.shape[1], HEAD_DIM).reshape(QUERY_HEADS, x.shape[1], HEAD_DIM)


class ScaledDotProductPeer(TorchPeer):
    """Lab 2: PyTorch's fused attention on the chunk, its row i seeing keys 0 .. prefix + i."""

    def compute(self, views: Views) -> Tensor:
        from torch.nn.attention.bias import causal_lower_right
        from torch.nn.functional import scaled_dot_product_attention

        q = self.heads_first(views["q"], QUERY_HEADS)
        k, v = self.heads_first(views["k"], KV_HEADS), self.heads_first(views["v"], KV_HEADS)
        # lower-right alignment: the chunk's last row is the sequence's last position, so row i sees
        # keys up to (keys - rows) + i = prefix + i, the lab's rule
        mask = causal_lower_right(q.shape[1], k.shape[1])
        out = scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask, scale=SCALE)
        return out[0].transpose(0, 1).contiguous()


class EagerThreeOpsPeer(TorchPeer):
    """Lab 1: the lab's three kernels as three PyTorch ops over the whole [32][T][T] matrix."""

    def prepare(self, views: Views) -> None:
        t = views["q"].shape[0]
        if t not in self.bias:
            torch = self.torch
            above = torch.ones(t, t, dtype=torch.bool, device=views["q"].device).triu(1)
            self.bias[t] = torch.zeros(t, t, dtype=torch.float32, device=views["q"].device).masked_fill(
                above, float("-inf")
            )

    def compute(self, views: Views) -> Tensor:
        torch = self.torch
        q = self.heads_first(views["q"], QUERY_HEADS)
        k, v = self.heads_first(views["k"], KV_HEADS), self.heads_first(views["v"], KV_HEADS)
        scores = torch.baddbmm(self.bias[q.shape[1]], q, k.transpose(1, 2), alpha=SCALE)
        weights = torch.softmax(scores, dim=-1)
        return torch.bmm(weights, v).transpose(0, 1).contiguous()
