"""Identical and near-identical submissions, flagged for a person to judge: never a verdict, never points.

Two files are compared twice:

- byte for byte: files with the same sha256 share 1.0, whatever they hold;
- by fingerprints of what is left once the cosmetic is gone, as MOSS does ("Winnowing: local algorithms
  for document fingerprinting", Schleimer, Wilkerson and Aiken, SIGMOD 2003). Each file is read as a
  stream of tokens of C++/CUDA or of Python (one reader serves both, so the file's name is never
  needed), with comments and whitespace dropped and every identifier, number and string written as
  one placeholder each (`I`, `N`, `S`): renaming, reflowing, recommenting and retuning constants all
  leave the stream as it was. Keywords and the names a kernel cannot rename (CUDA's built-ins,
  Triton's `tl.` functions, the math functions) stay themselves, so two different kernels built of the
  same keywords still read apart. Every run of `KGRAM` tokens is hashed, and of every `WINDOW`
  consecutive hashes the smallest is kept: whatever run of at least `KGRAM + WINDOW - 1` tokens two
  files share, at least one fingerprint of it is kept in both.

The lab's starter files are fingerprinted the same way and their fingerprints taken out of every
file's, so the code every student was handed never counts as shared: what is left is a file's own.
The share of a pair is the fraction of the smaller side's own fingerprints (the file with fewer) found
among the other's; a file with no fingerprints of its own (the starter as handed out, an empty file)
shares nothing by fingerprints.

Every byte is the student's and so is its volume: a file is read as bytes (binary, one huge line and
deep nesting are tokens like any others; no decoding can fail, nothing recurses), every token pattern
always matches in one left-to-right pass (an unclosed comment or string ends at the end of the file or
of its line, never by backtracking), and only the first `MAX_TOKENS` tokens of a file are read: more
than ten times the longest reference kernel, and few enough for a 1 MiB file of anything to be read in
bounded time and memory.

Why not a library: copydetect (PyPI) does winnowing over Pygments' lexers, but it brings Pygments,
Jinja2, matplotlib and an HTML report of its own, and its last release is of 2024; the part needed
here is a reader of two languages' tokens and forty lines of hashing.
"""

from __future__ import annotations

import hashlib
import itertools
import keyword
import re
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence

# Tokens per k-gram, and k-gram hashes per winnowing window. A match of at least KGRAM + WINDOW - 1 = 24
# tokens (about two lines of a kernel) is always seen; one shorter than KGRAM (about one statement,
# once names and numbers are placeholders) never is, so the idioms every solution writes do not match
# by chance.
KGRAM = 15
WINDOW = 10
# More than ten times the tokens of the longest reference kernel (kernels/lab1/solution.cu: 4,318).
MAX_TOKENS = 50_000
# The share at and above which a batch lists a pair, where the course names no other.
DEFAULT_THRESHOLD = 0.6

# A `#` followed at once by one of these words is a preprocessor directive, kept as a token; any other
# `#` opens a Python comment (`# define ...`, with a space, is read as a comment: it costs a C++ file
# one line of tokens, where the other reading would turn Python comments into code).
_DIRECTIVE = rb"\#(?:include|define|undef|ifdef|ifndef|if|elif|else|endif|pragma|error|line)\b"
# Longest first where one alternative is the beginning of another. Each alternative either matches
# on its own, in one pass, or not at all: no pattern reaches past a failure point and comes back, and
# an unclosed comment or string ends at the end of the file (or of its line) as a compiler ends it.
# Whitespace and comments in a row are one match, so a file of nothing else costs few steps.
_TOKEN = re.compile(
    rb"""
      (?P<skipped>(?:[ \t\r\n\f\v]++|/\*.*?(?:\*/|\Z)|//[^\n]*+|(?!DIRECTIVE)\#[^\n]*+)++)
    | (?P<directive>DIRECTIVE)
    | (?P<long_string>(?:[rRbBuUfF]{1,2})?(?:\"\"\"(?:\\.|.)*?(?:\"\"\"|\Z)|'''(?:\\.|.)*?(?:'''|\Z)))
    | (?P<string>(?:u8|[rRbBuUfFL]{1,2})?(?:"(?:\\.|[^"\\\n])*+"?|'(?:\\.|[^'\\\n])*+'?))
    | (?P<number>\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*+)
    | (?P<word>[A-Za-z_$\x80-\xff][0-9A-Za-z_$\x80-\xff]*+)
    | (?P<other>.)
    """.replace(b"DIRECTIVE", _DIRECTIVE),
    re.VERBOSE | re.DOTALL,
)

_CPP_KEYWORDS = """
    auto bool break case char class const constexpr continue default do double else enum extern false float
    for goto if inline int long namespace nullptr return short signed sizeof static struct switch template
    true typedef typename union unsigned using void volatile while size_t uint32_t uint64_t int64_t
    __global__ __device__ __host__ __shared__ __constant__ __restrict__ __forceinline__ __launch_bounds__
    threadIdx blockIdx blockDim gridDim warpSize __syncthreads __syncwarp __shfl_sync __shfl_xor_sync
    __shfl_down_sync __shfl_up_sync __ballot_sync __any_sync __all_sync atomicAdd atomicMax
    expf exp2f __expf __exp2f logf fmaxf fminf fabsf sqrtf rsqrtf fmaf max min INFINITY FLT_MAX
    float2 float4 make_float2 make_float4 reinterpret_cast static_cast
"""
_PYTHON_NAMES = """
    range len min max int float abs enumerate zip print
    triton jit constexpr program_id num_programs arange load store dot zeros full where maximum minimum
    exp exp2 log sum cdiv multiple_of max_contiguous make_block_ptr advance trans reshape broadcast_to
    input_precision float32 float16 int32 int64 fma sqrt rsqrt static_range
"""
# Names a copy cannot rename without changing what the code does, kept as themselves.
_KEPT_WORDS = frozenset(w.encode() for w in (*_CPP_KEYWORDS.split(), *_PYTHON_NAMES.split(), *keyword.kwlist))

_HASH_BITS = 61
_MODULUS = (1 << _HASH_BITS) - 1  # a Mersenne prime
_BASE = 1_000_003
_BASE_POWER = pow(_BASE, KGRAM - 1, _MODULUS)
_token_values: dict[bytes, int] = {}


def similar_to(
    submissions: Mapping[str, bytes], starters: Sequence[bytes], threshold: float
) -> dict[str, list[tuple[str, float]]]:
    """For each student, the others whose file shares at least `threshold` with theirs, as (student,
    share), the highest share first and then by name. Every student of `submissions` is a key, with an
    empty list where nobody is that close. Identical files (by sha256) share 1.0."""
    starter_prints: set[int] = set()
    for starter in starters:
        starter_prints |= fingerprints(starter)
    digests = {student: hashlib.sha256(data).digest() for student, data in submissions.items()}
    own = {student: fingerprints(data) - starter_prints for student, data in submissions.items()}
    found: dict[str, list[tuple[str, float]]] = {student: [] for student in submissions}
    for a, b in itertools.combinations(sorted(submissions), 2):
        share = 1.0 if digests[a] == digests[b] else shared_fraction(own[a], own[b])
        if share >= threshold:
            found[a].append((b, share))
            found[b].append((a, share))
    for pairs in found.values():
        pairs.sort(key=lambda pair: (-pair[1], pair[0]))
    return found


def shared_fraction(a: set[int], b: set[int]) -> float:
    """The fraction of the smaller set found in the other; 0.0 where either is empty."""
    smaller, larger = (a, b) if len(a) <= len(b) else (b, a)
    if not smaller:
        return 0.0
    return len(smaller & larger) / len(smaller)


def fingerprints(source: bytes) -> set[int]:
    """The winnowed fingerprints of `source`'s normalised tokens: the smallest k-gram hash of every
    window of WINDOW consecutive ones (of the only one, where the file is shorter than a window)."""
    hashes = list(kgram_hashes(_token_value(token) for token in normalised_tokens(source)))
    if len(hashes) <= WINDOW:
        return {min(hashes)} if hashes else set()
    kept: set[int] = set()
    # Positions of the hashes that could still be a window's minimum, their hashes increasing.
    candidates: deque[int] = deque()
    for i, value in enumerate(hashes):
        while candidates and hashes[candidates[-1]] >= value:
            candidates.pop()
        candidates.append(i)
        if candidates[0] <= i - WINDOW:
            candidates.popleft()
        if i >= WINDOW - 1:
            kept.add(hashes[candidates[0]])
    return kept


def kgram_hashes(tokens: Iterable[int]) -> Iterator[int]:
    """A rolling polynomial hash of every KGRAM consecutive token values (Rabin and Karp's)."""
    window: deque[int] = deque()
    value = 0
    for token in tokens:
        if len(window) == KGRAM:
            value = (value - window.popleft() * _BASE_POWER) % _MODULUS
        window.append(token)
        value = (value * _BASE + token) % _MODULUS
        if len(window) == KGRAM:
            yield value


def normalised_tokens(source: bytes) -> Iterator[bytes]:
    """The first MAX_TOKENS tokens of `source`, comments and whitespace dropped, every identifier that is
    not a kept word `I`, every number `N`, every string or character literal `S`."""
    count = 0
    for match in _TOKEN.finditer(source):
        kind = match.lastgroup
        if kind == "skipped":
            continue
        if kind in ("string", "long_string"):
            yield b"S"
        elif kind == "number":
            yield b"N"
        elif kind == "word" and match.group() not in _KEPT_WORDS:
            yield b"I"
        else:
            yield match.group()
        count += 1
        if count == MAX_TOKENS:
            return


def _token_value(text: bytes) -> int:
    """A token's value, the same in every file and every run: the first 8 bytes of its BLAKE2b digest.
    The distinct normalised tokens are few (kept words, placeholders, single bytes), so they are cached."""
    value = _token_values.get(text)
    if value is None:
        value = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") % _MODULUS
        _token_values[text] = value
    return value
