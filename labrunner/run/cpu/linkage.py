"""`extern "C" __constant__ int attnlab_threads = 256;` as g++ should read it: a definition, silently.

A launch constant is declared the way the driver reads it from NVRTC's PTX: `extern "C"` in front, so
that its name is not mangled, and an initializer. On the CPU backend `__constant__` is nothing
(cuda_macros.h), and g++ takes a declaration that a linkage specification introduces directly, with an
initializer, as it takes `extern int x = 1;`: it warns "'attnlab_threads' initialized and declared
'extern'", once per constant, and every compile error of the file would show those warnings first.

The C++ standard gives `extern "C" T x = v;` and `extern "C" { T x = v; }` the same meaning, a
definition of x with C linkage ([dcl.link]: a declaration directly contained in a linkage specification
is treated as if it contained `extern` only for deciding its linkage and whether it is a definition,
and one with an initializer is a definition either way); only the unbraced spelling draws the warning.
So each `extern "C"` declaration with an initializer is given the braces before g++ reads the file, on
the lines it already occupies: no line moves, no name changes, and the module exports every constant
as before (`CpuModule.read_int_global`). Declarations without an initializer and function definitions
are left as written: g++ says nothing about them.
"""

from __future__ import annotations

from labrunner.compile.includes import Token, code_tokens
from labrunner.exit_codes import AttnlabError

__all__ = ["brace_linkage"]


def brace_linkage(source: str) -> str:
    """The source with every `extern "C" <declaration> = <initializer>;` written `extern "C" { ... }`."""
    if "extern" not in source:
        return source  # the common case costs one substring search
    try:
        tokens = code_tokens(source, "<kernel>")
    except AttnlabError:
        return source  # unreadable: the compiler says why, in its own words
    text = source.replace("\r\n", "\n")  # the offsets the lexer gives
    edits: list[tuple[int, str]] = []
    in_directive = False  # a macro's body is left to its expansion
    for i, token in enumerate(tokens):
        if token.kind == "directive":
            in_directive = True
        elif token.kind == "newline":
            in_directive = False
        elif not in_directive and token.kind == "word" and token.text == "extern" and i + 1 < len(tokens):
            linkage = tokens[i + 1]
            if linkage.kind == "string" and linkage.text in ('"C"', '"C++"'):
                end = _initialized_declaration_end(tokens, i + 2)
                if end is not None:
                    edits += [(linkage.end, " {"), (end.end, " }")]
    if not edits:
        return source
    pieces, last = [], 0
    for at, insert in sorted(edits):
        pieces += [text[last:at], insert]
        last = at
    pieces.append(text[last:])
    return "".join(pieces)


def _initialized_declaration_end(tokens: list[Token], start: int) -> Token | None:
    """The `;` that ends the declaration starting at tokens[start], if it is one with an initializer (an
    `=` outside brackets before it); None for a braced block, a function definition, a directive inside."""
    depth, initialized = 0, False
    for token in tokens[start:]:
        if token.kind == "newline":
            continue
        if token.kind == "directive":
            return None
        if token.kind != "punct":
            continue
        if token.text == "{":
            if depth == 0 and not initialized:
                return None  # extern "C" { ... }, or a function's body
            depth += 1
        elif token.text in "([":
            depth += 1
        elif token.text in ")]}":
            depth -= 1
        elif token.text == "=" and depth == 0:
            initialized = True
        elif token.text == ";" and depth == 0:
            return token if initialized else None
    return None
