"""The paged KV cache of a decode batch: pages, the block table, lengths derived from a partition size.

A decode case is a batch of sequences, each with one new token. Their keys and values live in
pages of `PAGE_TOKENS` rows of the attention-v1 `[keys][8][64]` layout, handed out in a shuffled
order, and the block table maps sequence b's logical page i to its physical page. The layout
made here is hostile on purpose, in the ways a real cache is:

* pages are shuffled, and never in order for a sequence of two pages or more, so a kernel that
  ignores the table and reads pages in order fails;
* every row of the table ends in -1 entries (one column more than the longest sequence needs), so
  a kernel that reads past a sequence's last page finds -1, not another page;
* the rows of a last page past the sequence's end, and whole pages no table names, hold NaN, so a
  kernel that reads a masked key into its sums (0 * NaN is NaN) fails, whatever it multiplies by.

Lengths and planted keys are written as small expressions of the student's partition size `p`
(`"2p+1"`), so the cases land on the partition boundaries of the file being graded; `L` in a
planted key is the sequence's own length (`"L-1"`: its last key).
"""

from __future__ import annotations

import re

import numpy as np

PAGE_TOKENS = 16
_TERM = re.compile(r"([+-]?)(\d*)([pL]?)")


def evaluate(expression: str | int, partition: int, length: int = 0) -> int:
    """`"2p+1"` with p = 512 is 1025; `"L-1"` with length 17 is 16; a plain integer is itself."""
    if isinstance(expression, int):
        return expression
    text = expression.replace(" ", "")
    total, at = 0, 0
    while at < len(text) or not text:
        match = _TERM.match(text, at)
        assert match is not None  # every part of the pattern is optional: it matches anywhere
        sign, digits, unit = match.groups()
        if not digits and not unit or (at > 0 and not sign):
            raise ValueError(f"cannot read {expression!r}: terms are integers, p, L or n*p, joined by + and -")
        value = int(digits) if digits else 1
        if unit:
            value *= partition if unit == "p" else length
        total += -value if sign == "-" else value
        at = match.end()
    return total


def max_pages(longest: int) -> int:
    """Columns of the block table: the longest sequence's pages, and one more, so every row ends in -1."""
    return -(-longest // PAGE_TOKENS) + 1


def max_parts(longest: int, partition: int) -> int:
    """Partitions of the longest sequence: 1 when the partition is the whole sequence (0)."""
    return 1 if partition <= 0 else -(-longest // partition)


SPARE_PAGES = 3  # pages of a case's cache that no sequence uses (they hold NaN)


def page_count(lengths: list[int], spare_pages: int = SPARE_PAGES) -> int:
    """The physical pages `layout` hands out for these lengths: every sequence's own, and the spares."""
    return sum(-(-n // PAGE_TOKENS) for n in lengths) + spare_pages


def layout(rng: np.random.Generator, lengths: list[int], spare_pages: int = SPARE_PAGES) -> tuple[np.ndarray, int]:
    """The block table `[B][max_pages]` int32 for these lengths (shuffled pages, -1 padding) and the
    number of physical pages, `spare_pages` of which no sequence uses."""
    needed = [-(-n // PAGE_TOKENS) for n in lengths]
    pages = rng.permutation(page_count(lengths, spare_pages)).astype(np.int32)
    table = np.full((len(lengths), max_pages(max(lengths))), -1, dtype=np.int32)
    at = 0
    for b, count in enumerate(needed):
        own = pages[at : at + count]
        if count > 1 and (np.diff(own) > 0).all():
            own = own[::-1].copy()  # never in order: a kernel reading pages in order must fail
        table[b, :count] = own
        at += count
    return table, len(pages)


def fill_pages(
    rng: np.random.Generator, table: np.ndarray, lengths: list[int], pages: int, shape: tuple[int, ...]
) -> np.ndarray:
    """`[pages * 16][8][64]` standard normal float32 rows where a sequence's key stands, NaN elsewhere."""
    rows = np.full((pages * PAGE_TOKENS, *shape), np.nan, dtype=np.float32)
    used = key_rows(table, lengths)
    rows[used] = rng.standard_normal((used.size, *shape), dtype=np.float32)
    return rows


def key_rows(table: np.ndarray, lengths: list[int]) -> np.ndarray:
    """The physical rows of every sequence's keys, in sequence then key order."""
    return np.concatenate(
        [
            table[b, np.arange(n) // PAGE_TOKENS].astype(np.int64) * PAGE_TOKENS + np.arange(n) % PAGE_TOKENS
            for b, n in enumerate(lengths)
        ]
    )


def key_row(table: np.ndarray, sequence: int, key: int) -> int:
    return int(table[sequence, key // PAGE_TOKENS]) * PAGE_TOKENS + key % PAGE_TOKENS


def timing_batch(batch: int, longest: int, seed: int) -> tuple[list[int], np.ndarray]:
    """The timing shape's lengths (sequence 0 has exactly `longest` keys, the rest are uniform in
    1 .. longest, from `seed`) and its block table: every page used, shuffled, -1 padding. The
    values in the pages are the timing sets' own, fresh for every timed call."""
    rng = np.random.default_rng([seed, batch, longest])
    lengths = [longest] + rng.integers(1, longest, endpoint=True, size=batch - 1).tolist()
    table, _ = layout(rng, lengths, spare_pages=0)
    return lengths, table


def bytes_to_move(lengths: list[int], heads: int, kv_heads: int, head_dim: int) -> int:
    """What a decode batch must read and write at the least: every visible key's K and V row of every KV
    head once, each query and output row once, the table entries it uses and the lengths (float32 and
    int32, 4 bytes each). Partial results are the kernel's own choice, so they count for nothing."""
    keys = sum(lengths)
    pages = sum(-(-n // PAGE_TOKENS) for n in lengths)
    return 4 * (2 * keys * kv_heads * head_dim + 2 * len(lengths) * heads * head_dim + pages + len(lengths))


def decode_flops(lengths: list[int], heads: int, head_dim: int) -> int:
    """The arithmetic of one decode batch: for every sequence, query head and visible key, the score
    q . k (head_dim multiplies and head_dim adds: 2 * head_dim) and the weighted value p * v (a multiply
    and an add into each of the output's head_dim elements: 2 * head_dim), so 4 * head_dim in all. The
    softmax's exponentials, maxima and sums, and the combine's rescaling of partitions, are counted as
    none: a handful of operations per key beside 256, as lab 2 counts its softmax."""
    return 4 * head_dim * heads * sum(lengths)
