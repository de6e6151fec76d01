"""The block table's padding read as pages: keys past a sequence's end loaded, through the table's -1 entries.

Every row of a case's block table ends in -1 entries past the sequence's pages, and the rows of a last
page past the sequence's end hold NaN. A kernel that loads K and V a tile of T keys at a time (T a
multiple of the 16-key page) without masking the keys past the sequence's end (only their scores set
to -inf) reads both: the NaN rows of a partly used last page (0 * NaN is NaN in p @ v), and, for the
keys of its last tile past the sequence's last page, the table's -1 entries and with them page -1, an
address before kCache: on a GPU the guard band before the buffer (poison: NaN) or whatever lies there.
The CPU backend refuses that read (out-of-bounds); a GPU grade comes out NaN in exactly the sequences
with a partly used last page or a last tile past their last page. Which those are depends only on the
lengths, the table and T: that is the evidence. Where the second set adds no sequence to the first,
the failures are a masked key read into a sum (`masked-nan`) and say nothing of the padding.
"""

from __future__ import annotations

import numpy as np

from labrunner.truth.cases import Inputs
from labrunner.truth.hints_records import Evidence
from labrunner.truth.paged_cache import PAGE_TOKENS

# The key tiles kernels load: whole pages, powers of two.
PADDING_TILES = (32, 64, 128, 256)


def padding_evidence(evidence: Evidence, inputs: Inputs) -> None:
    """Record, per tile size, the sequences whose last tile reads a -1 entry of the block table
    (`padding_rows`), and those whose last tile reads past the table's last entry (`past_table_rows`:
    what lies there is no entry of the table, so whether they fail says nothing)."""
    table = inputs.block_table
    assert table is not None, "a decode case's inputs have a block table"
    flat = table.reshape(-1)
    padding: dict[int, list[int]] = {}
    past: dict[int, list[int]] = {}
    for tile in PADDING_TILES:
        padding[tile], past[tile] = [], []
        for b, n in enumerate(inputs.lengths):
            beyond = np.arange(n, -(-n // tile) * tile)  # the keys of the last tile past the sequence's end
            index = b * table.shape[1] + beyond // PAGE_TOKENS
            if index.size and index.max() >= flat.size:
                past[tile].append(b)
            elif (flat[index] < 0).any():
                padding[tile].append(b)
    evidence["padding_rows"] = padding
    evidence["past_table_rows"] = past


def padding_explains(decode: list[Evidence]) -> list[int]:
    """The tile sizes T at which, in every failing decode case, exactly the sequences with a partly used last
    page or a last tile of T keys that reaches the padding fail, with nan (a sequence read past the table
    may fail or not), and in some case the padding adds a sequence to the partly used pages; the cases
    often cannot tell two sizes apart, so each that fits is named."""
    tiles = []
    for tile in PADDING_TILES:
        if not decode or not all(tile in e.get("padding_rows", {}) for e in decode):
            continue
        adds = False
        for e in decode:
            unknown = set(e.get("past_table_rows", {}).get(tile, []))
            reached = (set(e["partial_page_rows"]) | set(e["padding_rows"][tile])) - unknown
            failing = set(e["failing_rows"]) - unknown
            if failing != reached or not failing <= set(e["nonfinite_rows"]):
                break
            adds = adds or bool(reached - set(e["partial_page_rows"]))
        else:
            if adds:
                tiles.append(tile)
    return tiles
