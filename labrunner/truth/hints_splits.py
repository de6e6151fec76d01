"""Decode cut into equal splits: the evidence of a kernel that splits each sequence as vLLM, SGLang and
LightLLM do, not into partitions of `attnlab_partition_tokens` keys.

The contract fixes only the grid: decode_partial runs maxParts programs per sequence (maxParts =
cdiv(longest, attnlab_partition_tokens)). A kernel may give each of them a partition of p keys, or cut
each sequence into maxParts equal splits of cdiv(seqLen, maxParts) keys. The two leave different
sequences with an empty part: in a grid of 3 at p = 2048, a sequence of 16 keys has two empty
partitions but no empty split (6, 6 and 4 keys), one of 2 keys has both (splits of 1, 1 and 0). So the
decode hints read both: which sequences have an empty equal split, and which combine mistakes made over
equal splits reproduce the output (no rescale, the first split's max, a split length rounded down).
"""

from __future__ import annotations

import numpy as np

from labrunner.truth.cases import Case, Inputs
from labrunner.truth.hints_decode import decode_variant, explains_rows
from labrunner.truth.hints_records import DecodeChange, Evidence
from labrunner.truth.paged_cache import max_parts


def splits_of(case: Case) -> int:
    """maxParts, the programs decode_partial runs per sequence in this case's grid."""
    return max_parts(case.prefix, case.partition)


def empty_split_rows(lengths: np.ndarray, splits: int) -> list[int]:
    """The sequences that have an empty split when each is cut into `splits` equal splits of
    cdiv(n, splits) keys: those whose keys run out before the last split starts."""
    size = -(-lengths // splits)
    used = -(-lengths // size)
    return np.flatnonzero(used < splits).tolist()


def split_variants(case: Case) -> dict[str, DecodeChange]:
    """The combine mistakes made over equal splits, where there is more than one split: partial results
    added up without rescaling, rescaled by the first split's max, and a split length rounded down
    (n // maxParts keys a split: the remainder of every sequence is left out, and one shorter than
    maxParts reads no key at all)."""
    splits = splits_of(case)
    if splits < 2:
        return {}
    return {
        "splits-no-rescale": DecodeChange(unrescaled_partition=1, equal_splits=splits),
        "splits-first-max": DecodeChange(first_partition_max=1, equal_splits=splits),
        "split-tail": DecodeChange(keys=lambda n: n // splits * splits),
    }


def split_evidence(evidence: Evidence, case: Case, inputs: Inputs, out: np.ndarray) -> None:
    """Record the sequences with an empty equal split (`empty_split_rows`), and, where the decode variants
    were compared, which equal-split variants reproduce the output (`matches`)."""
    evidence["empty_split_rows"] = empty_split_rows(np.array(inputs.lengths), splits_of(case))
    if not evidence["compared"]:
        return
    for name, change in split_variants(case).items():
        with np.errstate(invalid="ignore", over="ignore"):
            variant = decode_variant(inputs, **change)
        if explains_rows(out, variant):
            evidence["matches"].append(name)
