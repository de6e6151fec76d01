"""What the driver accepts back from a worker: the buffers each request implies, and nothing else.

A case's reply carries exactly the writable buffers asked for (`outputs/<name>`), both guard
bands of every writable buffer (`bands/<name>/0` and `/1`), and every input as the kernels left
it (`inputs_after/<name>`), each with the dtype and shape the driver sent or asked for. A timing
reply carries the outputs of its verified calls: every buffer is a float32 vector as long as an
output the request names (`out_count`, or a size's `out_count` in a pipeline request). A new
kind of buffer in a timing reply needs its rule here, in `timing_reply`.
"""

from __future__ import annotations

import numpy as np

from labrunner.run.wire import BufferSpec, Expected
from labrunner.truth.poison import GUARD_ELEMENTS

TIMING_REPLY_LIMIT_BYTES = 8 << 30  # far above a timing run's verified outputs (16 MiB each at lab 2's shape)


def case_reply(inputs: dict[str, np.ndarray], writable: dict[str, int], returned) -> Expected:
    exact = {f"outputs/{name}": BufferSpec("float32", (writable[name],)) for name in returned}
    for name in writable:
        for side in (0, 1):
            exact[f"bands/{name}/{side}"] = BufferSpec("float32", (GUARD_ELEMENTS,))
    for name, array in inputs.items():
        exact[f"inputs_after/{name}"] = BufferSpec(array.dtype.name, tuple(array.shape))
    return Expected(exact=exact)


def timing_reply(request: dict) -> Expected:
    lengths = {request["out_count"]} if "out_count" in request else set()
    lengths |= {size["out_count"] for size in request.get("sizes", [])}

    def fits(name: str, spec: BufferSpec) -> bool:
        # where a verified output stands is the timing code's business; its dtype and size are ours
        return spec.dtype == "float32" and len(spec.shape) == 1 and spec.shape[0] in lengths

    return Expected(fits=fits, max_bytes=TIMING_REPLY_LIMIT_BYTES)
