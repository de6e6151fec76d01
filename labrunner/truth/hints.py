"""Hints: the likely cause of a failing grade, read from the evidence in its failures, never guessed.

A verdict says where a kernel is wrong; a hint says why it probably is. Every hint names a hazard
from a fixed list (the JSON carries its id) and is given only when the failures show its
evidence: which cases fail and how (only planted ones, with inf or nan; only the last-key one),
which rows and heads, and whether the output is exactly attention with one known mistake made
(the scale left out, the causal edge moved by a key, the prefix ignored, another KV head read;
`hints_prefill`). Decode adds its own (`hints_decode`): partitions combined without rescaling or
rescaled by the wrong maximum, an empty partition that turns into NaN, a partition size assumed to
divide the length, a masked key read into a sum, a block-table index off by one; the first four
also over maxParts equal splits of a sequence (`hints_splits`: vLLM's, SGLang's and LightLLM's cut),
and keys past a sequence's end loaded through the block table's -1 padding (`hints_padding`). Tiled
kernels' idioms have theirs: a causal edge one key late behind a zero-filled load, some rows counting
the next key and others a zero key (`hints_zero_key`), and dots on TF32 operands, Triton's default
for float32 (`hints_precision`). Lab 1's pipeline is compared stage by stage (`hints_stages`): scores
against another KV head or at another scale, a softmax without the max subtracted or over keys above
the diagonal, a weighted sum past the diagonal.
In every lab, wrong values that are the exact ones times one factor are said as such
(`hints_factor`). A grade gets at most two hints, the most specific first.

`gather_evidence` runs in the driver on each failing case (it recomputes small variants of the
oracle, so it is skipped for cases too large to redo cheaply); `add_stage_evidence` adds what a
staged pipeline's rerun buffers show; `derive_hints` reads the evidence of every case of a grade.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from labrunner.truth.cases import Case, Inputs
from labrunner.truth.contract import GROUP, QUERY_HEADS, within_tolerance
from labrunner.truth.hints_decode import DECODE_EVIDENCE_LIMIT, PAGE_INDEX_SLIPS, decode_evidence, decode_variant
from labrunner.truth.hints_factor import ONE_ROUNDING, factor_evidence, factor_words
from labrunner.truth.hints_padding import padding_evidence, padding_explains
from labrunner.truth.hints_precision import precision_evidence
from labrunner.truth.hints_prefill import (
    EVIDENCE_LIMIT,
    RESCALE_TILES,
    online_without_rescale,
    prefill_evidence,
    variant_attention,
)
from labrunner.truth.hints_records import AttentionChange, DecodeChange, Evidence, Hint
from labrunner.truth.hints_splits import split_evidence
from labrunner.truth.hints_stages import stage_evidence
from labrunner.truth.hints_zero_key import zero_key_evidence
from labrunner.truth.poison import WORKSPACE_POISON_BITS, carries
from labrunner.truth.verdict import Status

__all__ = [
    "DECODE_EVIDENCE_LIMIT",
    "EVIDENCE_LIMIT",
    "HAZARDS",
    "MAX_HINTS",
    "PAGE_INDEX_SLIPS",
    "RESCALE_TILES",
    "AttentionChange",
    "DecodeChange",
    "Evidence",
    "Hint",
    "add_stage_evidence",
    "decode_variant",
    "derive_hints",
    "factor_words",
    "gather_evidence",
    "online_without_rescale",
    "stages_wanted",
    "variant_attention",
]

# The hazards, most specific first: the order hints are given in. A variant that reproduces the output
# names its mistake; `constant-factor` says what the numbers show (one factor) and guesses the constant,
# so it comes after every variant; `bounds` and `unwritten` say where, not what.
HAZARDS = (
    "race",
    "max-subtraction",
    "causal-mask",
    "prefix-offset",
    "scale",
    "gqa-mapping",
    "rescale",
    "combine-rescale",
    "empty-partition",
    "partition-tail",
    "masked-nan",
    "page-table",
    "precision",
    "constant-factor",
    "bounds",
    "unwritten",
)
MAX_HINTS = 2


def gather_evidence(
    case: Case,
    inputs: Inputs,
    out: np.ndarray,
    reference: np.ndarray,
    status: str,
    failing_rows: list[int],
    compare: bool = True,
) -> Evidence:
    """What one failing case shows: plain data, so hints can be derived and tested without a kernel.

    `compare`: also recompute the variant oracles and say which reproduce the output (only a wrong
    value can be reproduced: a race or a never-written element is already its own explanation).
    """
    bad = ~within_tolerance(out, reference)
    heads_wrong = sorted(int(h) for h in np.flatnonzero(bad.any(axis=(0, 2))))
    evidence: Evidence = {
        "case": case.name,
        "status": status,
        "rows": case.rows,
        "prefix": case.prefix,
        "planted": bool(case.planted or case.plants),
        # only the last key of the sequence planted: the row max first appears in the final tile
        "last_key": case.planted == (case.keys - 1,),
        "nonfinite": int((~np.isfinite(out)).sum()),
        "workspace_poisoned": int(carries(out, WORKSPACE_POISON_BITS).sum()),
        "failing_rows": list(failing_rows),
        "heads_wrong": heads_wrong,
        "matches": [],
        "kv_heads_read": {},
        "compared": False,
    }
    if status == Status.WRONG:
        # under the case's own rule: an exact case's wrong elements may all be within the tolerance
        factor_evidence(evidence, out, reference, case.exact)
    if inputs.block_table is not None:
        decode_evidence(evidence, case, inputs, out, compare)
        split_evidence(evidence, case, inputs, out)
        padding_evidence(evidence, inputs)
        if compare and status == Status.WRONG and (evidence["compared"] or case.exact):
            precision_evidence(evidence, case, inputs, out, reference)
        return evidence
    if not compare or status != Status.WRONG or case.rows * case.keys > EVIDENCE_LIMIT or not heads_wrong:
        if compare and status == Status.WRONG and case.exact:  # a one-key case: nothing to recompute
            precision_evidence(evidence, case, inputs, out, reference)
        return evidence
    prefill_evidence(evidence, case, inputs, out)
    zero_key_evidence(evidence, case, inputs, out, reference)
    precision_evidence(evidence, case, inputs, out, reference)
    return evidence


def stages_wanted(evidence: Evidence, case: Case) -> bool:
    """A staged pipeline's buffers are worth rerunning for this case: its variants were compared (a wrong
    value, small enough to redo), so each stage's are too."""
    return evidence["compared"] and case.rows * case.keys <= EVIDENCE_LIMIT


def add_stage_evidence(
    evidence: Evidence,
    inputs: Inputs,
    case: Case,
    stages: Sequence[tuple[str, np.ndarray]],
    output_kernel: str,
    out: np.ndarray,
) -> None:
    """What each buffer of a staged pipeline shows (`hints_stages`): `stages` are the (kernel, buffer) of
    the scores and probabilities kernels as a rerun left them (pipeline/explain.py's stage_buffers); `out`
    the case's output `[rows][32][64]`. A pipeline of another shape is left uncompared."""
    if len(stages) == 2 and stages_wanted(evidence, case):
        stage_evidence(evidence, inputs, case.rows, stages, output_kernel, out)


# Complex by design: one rule a branch, in the order the hints are given.
def derive_hints(evidence: list[Evidence]) -> list[Hint]:  # noqa: C901
    """At most two hints for a grade, from the evidence of its failing cases (`gather_evidence`)."""
    failing = [e for e in evidence if e.get("status") in (Status.WRONG, Status.NEVER_WRITTEN, Status.RACE)]
    if not failing:
        return []
    found: dict[str, str] = {}

    if any(e["status"] == Status.RACE and e.get("between_blocks") for e in failing):
        # The blocks' order alone moved the output: no barrier inside a block can help.
        return [
            {
                "hazard": "race",
                "text": (
                    "the output depends on the order the blocks run in: a GPU runs a launch's blocks in any "
                    "order, many at once, so a block cannot read what another block of the same launch writes; "
                    "pass it through a second kernel launch (as the combine kernel does)"
                ),
            }
        ]
    if any(e["status"] == Status.RACE for e in failing):
        # A race makes every other pattern in the failures an accident of the thread order: it is the one hint.
        return [
            {
                "hazard": "race",
                "text": (
                    "the output depends on the order threads run in: every write to a shared buffer needs a "
                    "__syncthreads() before other threads read it, and another before it is overwritten"
                ),
            }
        ]
    kernels = next((e["stage_kernels"] for e in failing if "stage_kernels" in e), ["", "", ""])
    scores_kernel, softmax_kernel, wsum_kernel = kernels
    # A combine that rescaled by partition 0's max overflows on exactly the planted sequences, with NaN:
    # the patterns a softmax without its max, or a masked NaN key, would leave. The variant explains it all.
    first_max = _all_match(failing, "combine-first-max") or _all_match(failing, "splits-first-max")
    table_ignored = _all_match(failing, "table-ignored")
    overflow = next((e for e in failing if "softmax-no-max" in e.get("stage_matches", [])), None)
    if overflow is not None:
        found["max-subtraction"] = (
            f"{softmax_kernel}'s probabilities overflow to inf or nan where a score passes 88 (case "
            f"{overflow['case']}), as exp(s) without the row max does: subtract the row max before "
            "exponentiating (exp(s - max) is at most 1)"
        )
    elif all(e["planted"] and e["nonfinite"] for e in failing) and not first_max:
        found["max-subtraction"] = (
            "only the planted cases fail, with inf or nan: subtract the row max before "
            "exponentiating (expf overflows near 88; exp(s - max) is at most 1)"
        )
    # the causal edge as the lab writes it: lab 1 has no prefix (row i sees keys j <= i)
    edge = "j <= prefixLen + i" if any(e["prefix"] for e in failing) else "j <= i"
    if _all_match(failing, "causal-plus-one"):
        found["causal-mask"] = (
            f"the output is attention with one key past the diagonal counted: row i sees keys {edge}, and no further"
        )
    elif _all_match(failing, "causal-zero-key"):
        found["causal-mask"] = (
            "the output is attention with one key past the diagonal counted: the next key, or past the keys a "
            "tile loaded a zero key (a masked load's other=0.0, a tile padded with 0), which scores 0 and still "
            f"takes exp(0 - max) of the weight: row i sees keys {edge}, and no further (test "
            "n <= prefixLen + i, and give every key the test leaves out the score -inf)"
        )
    elif _all_match(failing, "causal-minus-one"):
        found["causal-mask"] = (
            f"the output is attention with each row's own key dropped: row i sees keys {edge}, its own key included"
        )
    elif _all_staged(failing, "softmax-over-upper"):
        found["causal-mask"] = (
            f"{softmax_kernel} normalises over keys above the diagonal too, which {scores_kernel} left as "
            "scores: row i sees keys j <= i only (-INFINITY above the diagonal, or a softmax that stops at key i)"
        )
    elif _all_staged(failing, "wsum-over-upper"):
        found["causal-mask"] = (
            f"{wsum_kernel} sums over keys above the diagonal, where {softmax_kernel} left what "
            f"{scores_kernel} wrote: row i weights keys j <= i only (stop at key i, or write 0 above the diagonal)"
        )
    elif _all_match(failing, "causal-none"):
        found["causal-mask"] = (
            f"the output is attention over every key, above the diagonal too: row i sees keys {edge}, and no further"
        )
    if _all_match(failing, "prefix-ignored"):
        found["prefix-offset"] = (
            "the output is attention with the cached prefix ignored: chunk row i is position "
            "prefixLen + i, so it sees keys j <= prefixLen + i"
        )
    for name, words in (
        ("scale-missing", "missing"),
        ("scale-doubled", "doubled (1/4)"),
        ("scale-twice", "applied twice (1/64)"),
    ):
        if _all_match(failing, name):
            found["scale"] = f"every value is attention with the scale {words}: scores are q.k / 8, exactly 0.125"
            break
        if _all_staged(failing, f"probabilities-{name}"):
            found["scale"] = (
                f"{softmax_kernel}'s probabilities are the softmax of scores with the scale {words}: scores "
                f"are q.k / 8, exactly 0.125, applied once ({scores_kernel} or {softmax_kernel})"
            )
            break
    _gqa_hint(failing, found, scores_kernel, wsum_kernel)
    if all(e["last_key"] for e in failing):
        found["rescale"] = (
            "only cases where a row's max arrives in a later key tile fail: when the max moves, "
            "rescale both l and the accumulator by exp(m_old - m_new)"
        )
    elif _all_match(failing, "rescale-missing"):
        found["rescale"] = _rescale_words(failing)
    if _all_match(failing, "combine-no-rescale") or _all_match(failing, "splits-no-rescale"):
        found["combine-rescale"] = (
            "the output is every partition's softmax added up as it stands: partitions have "
            "different maxima, so scale each partition's sum and accumulator by "
            "exp(partMax - globalMax) before adding them, and divide once"
        )
    elif first_max:
        found["combine-rescale"] = (
            "the output is the partitions rescaled by partition 0's maximum, exp(partMax - partMax[0]): a "
            "later partition's max can lie more than 88 above the first's and expf overflows (inf / inf is "
            "nan); rescale by the global max over all of a sequence's partitions, so every factor is at most 1"
        )
    decode = [e for e in failing if "partial_page_rows" in e]
    padding_tiles = padding_explains(decode) if len(decode) == len(failing) else []
    if decode and len(decode) == len(failing):
        if all(
            e["failing_rows"] == e["empty_partition_rows"] and set(e["failing_rows"]) <= set(e["nonfinite_rows"])
            for e in decode
        ):
            found["empty-partition"] = (
                "exactly the sequences with empty partitions fail, with nan: a partition "
                "with no keys has max -inf and sum 0 and must add nothing (0 / 0 and "
                "exp(-inf - -inf) are nan): skip it, or stop at the sequence's own "
                "partition count"
            )
        elif all(
            e["failing_rows"] == e.get("empty_split_rows") and set(e["failing_rows"]) <= set(e["nonfinite_rows"])
            for e in decode
        ):
            found["empty-partition"] = (
                "exactly the sequences with an empty split fail, with nan: cut into maxParts equal splits of "
                "cdiv(seqLens[b], maxParts) keys, a short sequence's last splits hold no keys, and an empty split "
                "has max -inf and sum 0 (its output 0 / 0 is nan, and 0 * nan is nan in the combine): store "
                "nothing for it and skip it in the combine (a split whose start is at or past seqLens[b])"
            )
        if padding_tiles:
            tiles = " or ".join(str(tile) for tile in padding_tiles)
            found["page-table"] = (
                f"exactly the sequences with a partly used last page, or whose last tile of {tiles} keys runs "
                "past their last page, fail, with nan: keys past a sequence's end are loaded, in its last page "
                "rows of garbage and past it through the block table's -1 padding (page -1 lies before kCache): "
                "a key at or past seqLens[b] must not be loaded at all (mask its block-table read and its K and V "
                "loads with key < seqLens[b])"
            )
        if (
            "empty-partition" not in found
            and not padding_tiles
            and not first_max
            and not table_ignored
            and not _all_match(failing, "table-first-pages")
            and all(
                e["failing_rows"] and set(e["failing_rows"]) <= set(e["partial_page_rows"]) & set(e["nonfinite_rows"])
                for e in decode
            )
        ):
            found["masked-nan"] = (
                "only sequences whose last page is partly used fail, with nan: the rows past a "
                "sequence's end hold garbage, and a masked key must never be loaded into a sum "
                "(0 * NaN is NaN): skip it, do not weight it by 0"
            )
    if _all_match(failing, "partition-tail"):
        found["partition-tail"] = (
            "the output is attention without the keys of each sequence's last, partial "
            "partition: a length need not be a multiple of attnlab_partition_tokens, so a "
            "sequence has ceil(seqLens[b] / p) partitions and the last ends at seqLens[b]"
        )
    elif _all_match(failing, "split-tail"):
        found["partition-tail"] = (
            "the output is attention without the last seqLens[b] % maxParts keys of each sequence, as equal "
            "splits of seqLens[b] / maxParts keys (rounded down) leave them: a split holds cdiv(seqLens[b], "
            "maxParts) keys, and the last ends at seqLens[b]"
        )
    if padding_tiles:  # their words (above) already say where the pages went wrong
        pass
    elif table_ignored:
        found["page-table"] = (
            "the output is attention over pages b * maxPages + j / 16, as if the block table were the "
            "identity: a sequence's pages lie wherever its row of the table says, so key j of sequence b "
            "is row j % 16 of page blockTable[b][j / 16]"
        )
    elif _all_match(failing, "table-first-pages"):
        found["page-table"] = (
            "the output is attention over pages j / 16 of the cache, the same first pages for every sequence, "
            "as if there were no block table: a sequence's pages lie wherever its row of the table says, so "
            "key j of sequence b is row j % 16 of page blockTable[b][j / 16]"
        )
    elif _all_match(failing, "page-table"):
        found["page-table"] = (
            "the output is attention over keys read through a block-table index off by one: key "
            "j of sequence b is row j % 16 of page blockTable[b][j / 16]"
        )
    _precision_hint(failing, found)
    if "precision" not in found:  # a one-key row exactly as a TF32 dot leaves it is no constant in the code
        _factor_hint(failing, found)
    suffix_from = _failing_suffix(failing)
    by_block = _failing_in_every_block(failing)
    if by_block is not None:
        found["bounds"] = _block_rows_words(failing, *by_block)
    elif suffix_from is not None:
        # a decode batch's rows are its sequences: the words the lab's table uses
        row = "sequence" if any("partial_page_rows" in e for e in failing) else "row"
        found["bounds"] = (
            f"only the last {row}s fail (from {row} {suffix_from} on in case "
            f"{next(e['case'] for e in failing if e['failing_rows'] and e['failing_rows'][0] == suffix_from)}): "
            f"check the bounds of your {row} loops and how each block finds its first {row}"
        )
    if any(e["status"] == Status.NEVER_WRITTEN or e["workspace_poisoned"] for e in failing):
        found["unwritten"] = (
            "some outputs were never written, or were computed from a value never written: "
            "write every row, head and dim, and read no buffer before it is set"
        )
    return [Hint(hazard=hazard, text=found[hazard]) for hazard in HAZARDS if hazard in found][:MAX_HINTS]


def _rescale_words(failing: list[Evidence]) -> str:
    """`rescale` where the online softmax without one rescale reproduces the output: what it left out, and
    over which keys (a key at a time, or key tiles of the size that reproduced it)."""
    found = next(e["rescale_missing"] for e in failing if "rescale_missing" in e)
    left_out = "the accumulator" if found["left_out"] == "acc" else "l, the running sum,"
    walk = "a key at a time" if found["tile"] == 1 else f"in key tiles of {found['tile']}"
    return (
        f"the output is the online softmax ({walk}) with {left_out} never rescaled: whenever a key raises "
        "a row's max, rescale both l and the accumulator by exp(m_old - m_new)"
    )


def _gqa_hint(failing: list[Evidence], found: dict[str, str], scores_kernel: str, wsum_kernel: str) -> None:
    """`gqa-mapping`: every wrong query head is explained by another KV head, in the output (attention over
    it) or in one stage (scores against it, or V read from it), or heads 0 to 3 alone are right."""
    read = {int(h): g for e in failing for h, g in e["kv_heads_read"].items()}
    by_stage = {
        scores_kernel: {int(h): g for e in failing for h, g in e.get("scores_kv_heads_read", {}).items()},
        wsum_kernel: {int(h): g for e in failing for h, g in e.get("wsum_kv_heads_read", {}).items()},
    }
    wrong_heads = sorted({h for e in failing for h in e["heads_wrong"]})
    if read and all(h in read for h in wrong_heads):
        h = min(read)
        found["gqa-mapping"] = (
            f"query head {h} reads KV head {read[h]}, where it must read KV head h / 4 = "
            f"{h // GROUP} (GROUP = 4: heads 0-3 share KV head 0)"
        )
        return
    k_alone = {int(h): g for e in failing for h, g in e.get("k_heads_read", {}).items()}
    v_alone = {int(h): g for e in failing for h, g in e.get("v_heads_read", {}).items()}
    for alone, what, other in ((k_alone, "scores (K)", "values (V)"), (v_alone, "values (V)", "scores (K)")):
        if alone and all(h in alone or h in read for h in wrong_heads):
            h = min(alone)
            found["gqa-mapping"] = (
                f"query head {h} takes its {what} from KV head {alone[h]} and its {other} from KV head "
                f"{h // GROUP}: both K and V are read at KV head h / 4 = {h // GROUP} (GROUP = 4: heads 0-3 "
                "share KV head 0)"
            )
            return
    explained = set().union(*(set(heads) for heads in by_stage.values()))
    if explained and all(h in explained for h in wrong_heads):
        kernel, heads = next((k, heads) for k, heads in by_stage.items() if heads)
        h = min(heads)
        what = "scores against" if kernel == scores_kernel else "V from"
        found["gqa-mapping"] = (
            f"{kernel} takes query head {h}'s {what} KV head {heads[h]}, where it must use KV head h / 4 = "
            f"{h // GROUP} (GROUP = 4: heads 0-3 share KV head 0)"
        )
    elif wrong_heads and wrong_heads == list(range(GROUP, QUERY_HEADS)):
        found["gqa-mapping"] = (
            "heads 0 to 3 are right and every other head is wrong: query head h reads KV head h / 4 (GROUP = 4)"
        )


def _precision_hint(failing: list[Evidence], found: dict[str, str]) -> None:
    """`precision`: every failing case compared shows a TF32 signature (`hints_precision`), and no failure is
    of another kind; an exact case's signature says most (which dot, and how it rounded), so its words come
    first."""
    compared = [e for e in failing if "precision" in e]
    if not compared or not all(e["precision"] for e in compared):
        return
    if not all(e["status"] == Status.WRONG for e in failing):
        return
    signatures = {e["precision"]: e["case"] for e in reversed(compared)}  # each signature's first case
    one_key = "one-key output is V's row"
    exactly = "where it must be V's row exactly"
    if "exact-tf32x3" in signatures:
        found["precision"] = (
            f"{signatures['exact-tf32x3']}'s {one_key} as tf32x3 leaves it (rounded to TF32, plus its remainder "
            f"read as TF32: the last bits lost), {exactly}: tf32x3 suits the scores, but take p @ v with "
            'input_precision="ieee", or split V into TF32 parts that sum to it exactly'
        )
    elif "exact-tf32" in signatures or "exact-tf32-rounded" in signatures:
        case = signatures.get("exact-tf32") or signatures["exact-tf32-rounded"]
        how = "with its low 13 mantissa bits dropped" if "exact-tf32" in signatures else "rounded to TF32"
        found["precision"] = (
            f"{case}'s {one_key} {how}, as a dot on TF32 operands (10 mantissa bits; Triton's tl.dot default "
            f'for float32) reads it, {exactly}: take the scores with tl.dot(..., input_precision="tf32x3") and '
            'p @ v with "ieee" (or V split into TF32 parts that sum to it exactly)'
        )
    elif "tf32-rounded" in signatures:
        found["precision"] = (
            "the error is what dots on operands rounded to TF32 (10 of float32's 23 mantissa bits, "
            "cvt.rna.tf32.f32) leave, about 1e-3 of each value: split each operand into a TF32 part and its "
            "remainder and add the three products (3xTF32), or keep float32 FMAs"
        )
    else:
        found["precision"] = (
            "the error is what dots on TF32 operands leave (10 of float32's 23 mantissa bits: Triton's tl.dot "
            'default for float32), about 1e-3 of each value: write tl.dot(..., input_precision="tf32x3") (as '
            'accurate as float32 here, still on the tensor cores) or "ieee"'
        )


def _factor_hint(failing: list[Evidence], found: dict[str, str]) -> None:
    """`constant-factor`: every failing case is wrong by a factor, one for all its wrong elements or one
    per failing row; the words are the message's (`factor_words`) with what to look at."""
    if not all(e["status"] == Status.WRONG and ("factor" in e or "row_factors" in e) for e in failing):
        return
    first = failing[0]
    said = factor_words(first)
    if "factor" in first and abs(first["factor"] - 1.0) <= ONE_ROUNDING:
        advice = "a one-key row's probability is exp(s - s) / exp(s - s): exactly 1 once the max is subtracted"
    elif "factor" in first and 0.99 < first["factor"] < 1.0:
        advice = "once the max is subtracted the softmax's sum is at least 1, so it needs no epsilon"
    elif "factor" in first:
        advice = "look for the one constant that multiplies or divides every output"
    else:
        advice = "each row's probabilities must sum to 1"
    found["constant-factor"] = f"{said} ({advice})"


def _all_match(failing: list[Evidence], variant: str) -> bool:
    """The variant reproduces every failing case it was compared with, at least one of them with a value
    (not only NaN where the output is NaN), and no failure is of another kind."""
    checked = [e for e in failing if e["compared"]]
    return (
        bool(checked)
        and all(variant in e["matches"] for e in checked)
        and any(variant not in e.get("nan_only_matches", []) for e in checked)
        and all(e["status"] == Status.WRONG for e in failing)
    )


def _all_staged(failing: list[Evidence], variant: str) -> bool:
    """A stage variant (`hints_stages`) reproduces its stage in every failing case whose stages were
    compared, and no failure is of another kind."""
    checked = [e for e in failing if e.get("stages_compared")]
    return (
        bool(checked)
        and all(variant in e.get("stage_matches", []) for e in checked)
        and all(e["status"] == Status.WRONG for e in failing)
    )


def _failing_in_every_block(failing: list[Evidence]) -> tuple[int, int, str] | None:
    """(first, block, case) where every failing case fails exactly on rows first .. block - 1 of every block
    of `block` rows, and the widest case (named) shows that run in more than one block: the geometry of a
    block that writes only its first rows. None where the failures are of another shape (one run to the
    end is `_failing_suffix`'s)."""
    widest = max(failing, key=lambda e: e["rows"])
    rows = widest["failing_rows"]
    if not rows or rows[0] == 0:
        return None
    end = rows[0]
    while end + 1 - rows[0] < len(rows) and rows[end + 1 - rows[0]] == end + 1:
        end += 1
    block = end + 1
    if block >= widest["rows"]:
        return None
    for e in failing:
        if e["failing_rows"] != [r for r in range(e["rows"]) if r % block >= rows[0]]:
            return None
    return rows[0], block, widest["case"]


def _block_rows_words(failing: list[Evidence], first: int, block: int, case: str) -> str:
    """`bounds` for rows that fail in every block, naming the file's settings behind them where it exports
    a rows-per-block of that size and a thread count."""
    said = f"rows {first}-{block - 1} of every {block}-row block fail (case {case}): a block writes its first {first}"
    constants = next((e["launch_constants"] for e in failing if "launch_constants" in e), {})
    rows_setting = next((n for n, v in constants.items() if v == block and "rows" in n), None)
    threads = [f"{n} = {v}" for n, v in constants.items() if n.endswith("threads")]
    if rows_setting is None or not threads:
        return f"{said}: check the bounds of each block's row loop and how many rows its threads cover"
    return (
        f"{said}, while {rows_setting} = {block} gives it {block}: {' and '.join(threads)} is too few threads for "
        f"{block} rows as the kernel hands rows to threads; raise it, or lower {rows_setting}"
    )


def _failing_suffix(failing: list[Evidence]) -> int | None:
    """The first failing row, when every failing case fails exactly on its last row, or on every row
    from a multiple of 8 (where the tiles kernels use begin) to its end, and in at least one case
    that run starts past row 0 (the largest such start); else None."""
    starts = []
    for e in failing:
        rows = e["failing_rows"]
        if not rows or rows != list(range(rows[0], e["rows"])):
            return None
        if rows[0] % 8 and len(rows) > 1:
            return None
        starts.append(rows[0])
    return max(starts) if max(starts) > 0 else None
