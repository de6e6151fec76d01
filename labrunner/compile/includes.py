"""The include policy: a submission may include the driver's headers and a few standard ones, nothing else.

Decided before any compiler runs, by reading the file the way the compiler does (C++17's
translation phases 1 to 3), so no compiler ever opens a file a submission names:

1. characters: a NUL (NVRTC stops reading there, g++ does not), a carriage return without a line
   feed (a new line to g++, not to NVRTC) and a backslash with spaces before the end of its line
   (g++ joins the lines, NVRTC does not) are refused, because the two compilers would see
   different files; no trigraphs (C++17 has none, and neither compiler reads them);
2. line splices: backslash-newline joins lines, so `#inc\\<newline>lude` is an include;
3. tokens, left to right, longest first: comments (a block comment spanning lines is one space,
   so a directive continues past it); string and character literals with their escapes (one that
   is never closed ends at its line, as in both compilers); raw strings R"delim( ... )delim"
   with every prefix (u8R, uR, UR, LR), whose text is never read as code and whose splices are
   undone, as the standard says; numbers with digit separators (1'000'000: the quote is part of
   the number, not a character literal); identifiers; universal character names; the `%:`
   digraph for `#` (while `%:%:` is `##`, never a directive);
4. directives: a `#` that begins a line after only whitespace and comments, or that follows a
   comment spanning lines (NVRTC reads a directive there even after code; g++ does not). Every #include
   must name one allowed header literally (`#include HEADER` through a macro is refused, since
   the policy cannot see where it goes); #include_next, #import and #embed are refused, and so is
   `__has_include` anywhere, since a probe tells the file whether a path exists.

Where NVRTC (EDG) and g++ lex a construct differently, the file is refused with the construct
named, rather than guessing which compiler's reading an attacker relied on: a quote right after
a number that is not a digit separator both read the same way (1'2' ends one, opens the other),
a universal character name spelling a basic character outside a literal (`#\\u0069nclude` is an
include to g++), a line splice inside a raw string, an identifier with `$` or a non-ASCII letter
right before a quote, raw string delimiters longer than 16 characters or with characters outside
the basic set. Each of these is a compile error on at least one of the two compilers anyway.

Why a lexer and not the real preprocessor: NVRTC has no preprocess-only mode (it refuses -E), and
g++ -E would be a third reader with its own view of the file. The real compiler is the second
wall instead: it runs in a child with nothing of the grader's in its environment
(`compiler_process`), and only its lines about the student's own file are ever shown
(`diagnostics`), so a mistake here would still print nothing of another file.
"""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass

from labrunner.exit_codes import AttnlabError, ExitCode

# Header names a submission may include, in <> or "" form. The standard ones work the same on
# both backends: NVRTC ships none of them, so labrunner/include/nvrtc_std holds small versions
# (NVRTC only); g++ uses its own. cuda_runtime.h and math_constants.h are the driver's for both.
STANDARD_HEADERS = ("cuda_runtime.h", "float.h", "cfloat", "math.h", "cmath", "stdint.h", "cstdint", "math_constants.h")
_DRIVER_HEADER = re.compile(r"attnlab/[A-Za-z0-9_]+\.cuh")
# Headers real kernels reach for that cannot work the same on both backends, and what to use.
PRINTF_NEEDS_NONE = (
    "device printf needs no include: call printf in a kernel as it is (NVRTC and the CPU backend both "
    "provide it); delete the line"
)
INSTEAD = {
    "cooperative_groups.h": "cooperative groups do not run on the CPU backend; use __syncthreads() "
    "and __shfl_xor_sync (or __shfl_down_sync) instead",
    "cuda_fp16.h": "half precision is not part of these labs; the data is float",
    "cuda_bf16.h": "bfloat16 is not part of these labs; the data is float",
    # printf is what a student includes stdio for, and a kernel has it already
    "stdio.h": PRINTF_NEEDS_NONE,
    "cstdio": PRINTF_NEEDS_NONE,
}
_FILE_DIRECTIVES = ("include", "include_next", "import", "embed")
_FILE_PROBES = ("__has_include", "__has_include_next", "__has_embed")
ALLOWED_LIST = (
    "the driver's headers (<attnlab/...>), <cuda_runtime.h>, <cfloat>, <cmath>, <cstdint>, <math_constants.h>"
)

_HSPACE = " \t\f\v\ufeff"  # a byte-order mark mid-file is taken as a space: it can only add directives
_RAW_PREFIXES = ("R", "u8R", "uR", "UR", "LR")
_DIGITS = "0123456789"
_D_CHARS = re.compile(r"[A-Za-z0-9_{}\[\]#<>%:;.?*+\-/^&|~!=,']*")
_SPACES = re.compile("[ \t\f\v\ufeff]+")
# Characters an identifier may hold (g++ takes `$` and any non-ASCII letter; the byte-order mark
# is a space here, as above).
_WORD_RUN = re.compile("[A-Za-z0-9_$\u0080-\ufefe\uff00-\U0010ffff]+")
_SPACE_BEFORE_NEWLINE = re.compile(r"\\[ \t\f\v]+(?=\r?\n)")


@dataclass
class Directive:
    line: int
    name: str
    argument: str  # the header name with its delimiters, or the rest of the line


@dataclass(frozen=True)
class Token:
    """One token of the file as the compiler reads it, for passes that must see code the same way
    (the CPU build's inline-assembly rewrite): comments are never tokens, a literal is one token."""

    kind: str  # word, number, string, char, raw (a raw string with its prefix), punct (one
    # character), directive (from the `#` through its name; text is the name, "" for
    # `# 1 "f"`), newline (a line end outside comments and literals: it ends a directive)
    text: str  # as the compiler reads it: line splices undone
    start: int  # offset of its first character in the file (CRLF counted as one character)
    end: int  # offset just past its last character
    line: int  # the physical line it begins on


def refuse_foreign_includes(user_source: str, filename: str) -> None:
    """Raises a compile error naming the line if the file includes, or could include, anything but
    the allowed headers; returns quietly otherwise. No compiler runs before this has passed."""
    for directive in scan_directives(user_source, filename):
        if directive.name not in _FILE_DIRECTIVES:
            continue
        what = f"#{directive.name} {directive.argument}".strip()
        if directive.name != "include":
            raise _refused(filename, directive.line, what, f"a submission may include only {ALLOWED_LIST}")
        header = directive.argument
        name = header[1:-1] if len(header) >= 2 and header[0] + header[-1] in ("<>", '""') else None
        if name is None:
            raise _refused(
                filename,
                directive.line,
                what,
                f"an #include must name its header literally, as <cmath>; a submission may include only {ALLOWED_LIST}",
            )
        if ".." in name:
            raise _refused(
                filename,
                directive.line,
                what,
                "a header name may not contain `..`; include the "
                "driver's headers by their own names, as <attnlab/prelude.cuh>",
            )
        if name in INSTEAD:
            raise _refused(filename, directive.line, what, INSTEAD[name])
        if name not in STANDARD_HEADERS and not _DRIVER_HEADER.fullmatch(name):
            raise _refused(
                filename,
                directive.line,
                what,
                f"a submission may include only {ALLOWED_LIST}; paste what you need into the file itself",
            )


def _refused(filename: str, line: int, what: str, why: str) -> AttnlabError:
    return AttnlabError(f"{filename}({line}): error: `{what}` is refused: {why}", ExitCode.COMPILE_ERROR)


def _unreadable(filename: str, line: int, what: str) -> AttnlabError:
    return AttnlabError(f"{filename}({line}): error: {what}", ExitCode.COMPILE_ERROR)


def scan_directives(source: str, filename: str) -> list[Directive]:
    """Every preprocessing directive of the file, with its first physical line, as the compiler
    sees them; raises (naming the line) on anything the two compilers would read differently and
    on every `__has_include` probe."""
    return _Lexer(source, filename).run()


def code_tokens(source: str, filename: str) -> list[Token]:
    """Every token of the file, left to right, with the same reading (and the same refusals) as
    `scan_directives`. Offsets are into the file with CRLF line ends read as LF."""
    lexer = _Lexer(source, filename)
    lexer.found = []
    lexer.run()
    return [
        Token(
            kind,
            lexer.text[start:end] if text is None else text,
            lexer.offset(start),
            lexer.offset(end - 1) + 1,
            lexer.line_at(start),
        )
        for kind, start, end, text in lexer.found
    ]


class _Lexer:
    def __init__(self, source: str, filename: str):
        self.filename = filename
        self._check_characters(source)
        # Phase 2: splice lines. Each splice's place in the spliced text is kept, which maps any
        # character back to its offset and physical line in the file (and shows a raw string whose
        # text held a splice: one the standard says to undo).
        source = source.replace("\r\n", "\n")
        pieces = source.split("\\\n")
        self.text = "".join(pieces)
        self.splices = list(itertools.accumulate(len(piece) for piece in pieces[:-1]))
        self.newlines = [match.start() for match in re.finditer("\n", source)]
        self.found: list[tuple[str, int, int, str | None]] | None = None  # tokens, when `code_tokens` asks

    def _emit(self, kind: str, start: int, end: int, text: str | None = None) -> None:
        if self.found is not None:
            self.found.append((kind, start, end, text))

    def _check_characters(self, source: str) -> None:
        for index, what in (
            (source.find("\0"), "a NUL character: NVRTC stops reading the file there and g++ does not; delete it"),
            (
                _lone_carriage_return(source),
                "a carriage return without a line feed starts a new "
                "line for g++ but not for NVRTC; save the file with "
                "LF or CRLF line endings",
            ),
        ):
            if index >= 0:
                raise _unreadable(self.filename, source.count("\n", 0, index) + 1, what)
        if match := _SPACE_BEFORE_NEWLINE.search(source):
            raise _unreadable(
                self.filename,
                source.count("\n", 0, match.start()) + 1,
                "a backslash followed by spaces at the end of a line joins the lines for g++ but "
                "not for NVRTC; delete the spaces after the backslash (or the backslash)",
            )

    def offset(self, i: int) -> int:
        """Where the spliced text's character i stands in the file: two characters later per splice before it."""
        return i + 2 * bisect.bisect_right(self.splices, i)

    def line_at(self, i: int) -> int:
        return bisect.bisect_left(self.newlines, self.offset(min(i, len(self.text)))) + 1

    def fail(self, i: int, what: str) -> AttnlabError:
        return _unreadable(self.filename, self.line_at(i), what)

    def run(self) -> list[Directive]:
        text, n = self.text, len(self.text)
        directives: list[Directive] = []
        i = 0
        line_start = True  # only whitespace and comments since the last new line
        previous_word = ""
        while i < n:
            c = text[i]
            if c == "\n":
                self._emit("newline", i, i + 1)
                line_start, i = True, i + 1
                continue
            if c in _HSPACE:
                spaces = _SPACES.match(text, i)
                assert spaces is not None  # text[i] is one of them
                i = spaces.end()
                continue
            if text.startswith("//", i):
                i = self._line_end(i)
                continue
            if text.startswith("/*", i):
                end = self._comment_end(i)
                # NVRTC takes a `#` right after a comment that spans lines as the start of a
                # directive, even when code came before the comment (`int x; /*\n*/ #include`); g++
                # does not. Reading it as NVRTC does sees every directive either compiler sees.
                line_start = line_start or "\n" in text[i:end]
                i = end
                continue
            if line_start and (
                c == "#" and not text.startswith("##", i) or text.startswith("%:", i) and not text.startswith("%:%:", i)
            ):
                start = i
                i, directive = self._directive(i + (1 if c == "#" else 2), start)
                if directive is not None:
                    directives.append(directive)
                self._emit("directive", start, i, directive.name if directive is not None else "")
                line_start = False
                continue
            line_start = False
            if c in _DIGITS or (c == "." and i + 1 < n and text[i + 1] in _DIGITS):
                start, i = i, self._number_end(i)
                self._emit("number", start, i)
                previous_word = ""
                continue
            if c in "\"'":
                start, i = i, self._suffix_end(self._quoted_end(i))
                self._emit("string" if c == '"' else "char", start, i)
                previous_word = ""
                continue
            if _identifier_start(c) or c == "\\":
                start = i
                i, word = self._identifier(i)
                if word in _FILE_PROBES:
                    raise self.fail(
                        i - 1,
                        f"`{word}` is refused: a submission may not probe for files; it may "
                        f"include only {ALLOWED_LIST}",
                    )
                if previous_word == "GCC" and word == "dependency":
                    raise self.fail(i - 1, "`GCC dependency` is refused: it makes the compiler open a file")
                previous_word = word
                if i < n and text[i] in "\"'":
                    if word in _RAW_PREFIXES and text[i] == '"':
                        i = self._suffix_end(self._raw_string_end(i))
                        self._emit("raw", start, i)
                        previous_word = ""
                        continue
                    if not word.isascii() or "$" in word or "\\" in word:
                        raise self.fail(
                            i,
                            f"`{word}` right before a quote: NVRTC and g++ split it differently "
                            "(a `$`, a non-ASCII letter or a \\u name in it); put a space before the quote",
                        )
                self._emit("word", start, i)
                continue
            previous_word = ""
            self._emit("punct", i, i + 1)
            i += 1
        return directives

    # --- pieces of the token grammar ------------------------------------------------------

    def _line_end(self, i: int) -> int:
        end = self.text.find("\n", i)
        return len(self.text) if end < 0 else end

    def _comment_end(self, i: int) -> int:
        end = self.text.find("*/", i + 2)
        if end < 0:
            raise self.fail(i, "a /* comment that never ends (add */)")
        return end + 2

    def _skip_space_and_comments(self, i: int) -> int:
        """Inside a directive: spaces and comments, a block comment spanning lines included."""
        text = self.text
        while i < len(text):
            if text[i] in _HSPACE:
                i += 1
            elif text.startswith("/*", i):
                i = self._comment_end(i)
            else:
                break
        return i

    def _directive(self, i: int, start: int) -> tuple[int, Directive | None]:
        text = self.text
        i = self._skip_space_and_comments(i)
        if i >= len(text) or not (_identifier_start(text[i]) or text[i] == "\\"):
            return i, None  # the null directive, or `# 1 "file"` line markers: nothing opens a file
        i, name = self._identifier(i)
        line = self.line_at(start)
        if name not in _FILE_DIRECTIVES:
            return i, Directive(line, name, "")
        i = self._skip_space_and_comments(i)
        end = self._line_end(i)
        # A header name is its own token: within <...> or "..." nothing is a comment or an escape.
        if i < end and text[i] in '<"':
            close = text.find(">" if text[i] == "<" else '"', i + 1, end)
            if close >= 0:
                return close + 1, Directive(line, name, text[i : close + 1])
        return end, Directive(line, name, _one_line(text[i:end]))

    def _number_end(self, i: int) -> int:
        """A pp-number: digits, letters, `_`, `.`, exponents with their sign, digit separators."""
        text, n = self.text, len(self.text)
        i += 1
        while i < n:
            c = text[i]
            if c in "eEpP" and i + 1 < n and text[i + 1] in "+-":
                i += 2
            elif c.isascii() and (c.isalnum() or c in "_."):
                i += 1
            elif c == "'" and i + 1 < n and text[i + 1].isascii() and (text[i + 1].isalnum() or text[i + 1] == "_"):
                i += 2  # a digit separator: both compilers keep it in the number
            elif c == "'":
                raise self.fail(
                    i,
                    "a ' right after a number that is not a digit separator between two digits: "
                    "NVRTC reads it as part of the number, g++ as a character literal; "
                    "write separators as in 1'000'000",
                )
            elif c in '$\\"' or not c.isascii():
                raise self.fail(
                    i,
                    f"a number runs into `{c}`: NVRTC and g++ end the number in different "
                    "places; put a space after the number",
                )
            else:
                break
        return i

    def _suffix_end(self, i: int) -> int:
        """A user-defined literal's suffix right after a literal: `"abc"R"x(` is the literal `"abc"R`
        and then an ordinary string, never a raw one (both compilers agree)."""
        text = self.text
        if i < len(text) and (_identifier_start(text[i]) or text[i] == "\\"):
            i, word = self._identifier(i)
            if i < len(text) and text[i] in "\"'" and (not word.isascii() or "$" in word or "\\" in word):
                raise self.fail(
                    i,
                    f"`{word}` right before a quote: NVRTC and g++ split it differently; put a space before the quote",
                )
        return i

    def _quoted_end(self, i: int) -> int:
        """A string or character literal: escapes skip one character; one never closed ends at its line."""
        text, n = self.text, len(self.text)
        quote = text[i]
        i += 1
        start = i
        while i < n and text[i] != quote and text[i] != "\n":
            i += 2 if text[i] == "\\" and i + 1 < n and text[i + 1] != "\n" else 1
        # _Pragma("...") is read as the tokens of a #pragma line, so a comment between the two
        # words is a space there: `_Pragma("GCC/**/dependency \"/etc/passwd\"")` opens the file.
        if re.search(r"\bGCC(?:\s|/\*.*?\*/)+dependency\b", text[start:i]):
            raise self.fail(start, "`GCC dependency` is refused: it makes the compiler open a file")
        return i + 1 if i < n and text[i] == quote else i

    def _raw_string_end(self, quote: int) -> int:
        """R"delim( ... )delim": nothing inside is code; a splice inside would be undone by the
        standard's rule but read differently by the two compilers, so it is refused."""
        text = self.text
        # the `(` is looked for only within 17 characters: a delimiter has at most 16
        open_paren = text.find("(", quote + 1, quote + 18)
        delimiter = text[quote + 1 : open_paren] if open_paren >= 0 else None
        if delimiter is None or not _D_CHARS.fullmatch(delimiter):
            raise self.fail(
                quote,
                "a raw string's delimiter must be at most 16 basic characters (no spaces, "
                "quotes, backslashes or parentheses) followed by `(`",
            )
        close = text.find(")" + delimiter + '"', open_paren + 1)
        if close < 0:
            raise self.fail(quote, f'a raw string R"{delimiter}( that never ends (add ){delimiter}")')
        end = close + len(delimiter) + 2
        if self.offset(end - 1) - self.offset(quote) != end - 1 - quote:
            raise self.fail(
                quote,
                "a backslash at the end of a line inside a raw string: compilers disagree on "
                "where such a string ends; remove the backslash or use an ordinary string",
            )
        return end

    def _identifier(self, i: int) -> tuple[int, str]:
        """An identifier, as written; a universal character name in it must name a letter beyond ASCII."""
        text, n = self.text, len(self.text)
        word = []
        while i < n:
            if run := _WORD_RUN.match(text, i):
                word.append(run.group())
                i = run.end()
            elif text[i] == "\\" and i + 1 < n and text[i + 1] in "uU":
                digits = 4 if text[i + 1] == "u" else 8
                code = text[i + 2 : i + 2 + digits]
                if len(code) != digits or not all(d in "0123456789abcdefABCDEF" for d in code):
                    raise self.fail(i, "a \\u or \\U outside a literal must be followed by 4 or 8 hex digits")
                if int(code, 16) < 0xA0:
                    raise self.fail(
                        i,
                        f"\\{text[i + 1]}{code} names a basic or control character outside a "
                        f"literal, which C++ does not allow (g++ reads `#\\u0069nclude` as "
                        "#include); write the character itself",
                    )
                word.append(text[i : i + 2 + digits])
                i += 2 + digits
            elif text[i] == "\\" and not word:
                return i + 1, ""  # a stray backslash: a compile error, and nothing else
            else:
                break
        return i, "".join(word)


def _identifier_start(c: str) -> bool:
    return c.isalpha() or c in "_$" or not c.isascii() and c not in _HSPACE


def _lone_carriage_return(source: str) -> int:
    match = re.search(r"\r(?!\n)", source)
    return match.start() if match else -1


def _one_line(text: str) -> str:
    return " ".join(text.split())


@dataclass
class ReportedLines:
    """Physical line -> the line a compiler reports, following `#line N` (the driver's `#line 1` after its
    prelude) and g++ -E's `# N "file"` markers: how a rule that reads the tokens names the student's line."""

    marks: list[tuple[int, int]]  # (first physical line it applies to, the number that line gets)

    def __call__(self, physical: int) -> int:
        number = physical
        for first, given in self.marks:
            if physical >= first:
                number = given + physical - first
        return number
