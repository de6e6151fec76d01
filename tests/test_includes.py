"""The include policy reads C++ as the compilers do: every attack refused, every legal file left alone.

Three kinds of test: attacks that must be refused (with the exact message, naming the line);
tricky but legal files that must pass untouched; and a differential check that runs NVRTC and
g++'s preprocessor on the same tricky files and proves the policy saw every #include either
compiler saw (or refused the file).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from labrunner.compile.includes import code_tokens, refuse_foreign_includes, scan_directives
from labrunner.compile.nvrtc import run_nvrtc
from labrunner.exit_codes import AttnlabError, ExitCode

ALLOWED = "the driver's headers (<attnlab/...>), <cuda_runtime.h>, <cfloat>, <cmath>, <cstdint>, <math_constants.h>"
ENVIRON = (
    f'`#include "/proc/self/environ"` is refused: a submission may include only {ALLOWED}; '
    "paste what you need into the file itself"
)


def refused(source: str) -> str:
    with pytest.raises(AttnlabError) as caught:
        refuse_foreign_includes(source, "a.cu")
    assert caught.value.exit_code == ExitCode.COMPILE_ERROR
    return caught.value.message


# --- attacks: each hides an #include from a filter that misreads C++ ---------------------------


@pytest.mark.parametrize(
    "source, line",
    [
        # a digit separator read as a character literal makes '/*' look like a comment opener
        ("int a = 1'2 + '/*';\n#include \"/proc/self/environ\"\n// */\n", 2),
        ("int a = 0x1'ab'cd + '/*';\n#include \"/proc/self/environ\"\n// */\n", 2),
        # a raw string holding a quote and a comment opener, with every prefix
        ('auto s = R"x(" /*)x";\n#include "/proc/self/environ"\n// */\n', 2),
        ('auto s = u8R"x(" /*)x";\n#include "/proc/self/environ"\n// */\n', 2),
        ('auto s = LR"x(" /*)x";\n#include "/proc/self/environ"\n// */\n', 2),
        ('auto s = uR"x(" /*)x";\n#include "/proc/self/environ"\n// */\n', 2),
        ('auto s = UR"x(" /*)x";\n#include "/proc/self/environ"\n// */\n', 2),
        # a raw string holding */: the comment before it has already ended
        ('/* a */ auto s = R"(*/)";\n#include "/proc/self/environ"\n', 2),
        # line splices, in the directive and in its name
        ('#include \\\n"/proc/self/environ"\n', 1),
        ('#inc\\\nlude "/proc/self/environ"\n', 1),
        ('/\\\n* a comment *\\\n/ #include "/proc/self/environ"\n', 3),
        # the directive after whitespace, comments (one spanning lines) and a digraph
        ('  \t/* c */ # /* d */ include "/proc/self/environ"\n', 1),
        ('#/*\n*/include "/proc/self/environ"\n', 1),
        ('%:include "/proc/self/environ"\n', 1),
        # a literal's suffix: "abc"R is one token, so the next quote opens an ordinary string
        ('auto s = "abc"R"x(\n#include "/proc/self/environ"\n)x";\n', 2),
        # a skipped group is still made of tokens: the include is refused wherever it stands
        ('#if 0\ndon\'t\n#endif\n#include "/proc/self/environ"\n', 4),
        ('#if 0\n#include "/proc/self/environ"\n#endif\n', 2),
        # NVRTC starts a directive after a comment that spans lines, even with code before it
        ('int x; /*\n*/ #include "/proc/self/environ"\n', 2),
        # CRLF line endings are new lines for both compilers
        ('int a; // c\r\n#include "/proc/self/environ"\r\n', 2),
    ],
)
def test_a_hidden_include_is_found_and_refused(source, line):
    assert refused(source) == f"a.cu({line}): error: {ENVIRON}"


@pytest.mark.parametrize(
    "source, message",
    [
        (
            '#\\u0069nclude "/proc/self/environ"\n',
            "a.cu(1): error: \\u0069 names a basic or control character outside a literal, which C++ does not allow "
            "(g++ reads `#\\u0069nclude` as #include); write the character itself",
        ),
        (
            'auto s = \\u0052"x(\n#include "/proc/self/environ"\n)x";\n',
            "a.cu(1): error: \\u0052 names a basic or control character outside a literal, which C++ does not allow "
            "(g++ reads `#\\u0069nclude` as #include); write the character itself",
        ),
        (
            '#if __has_include("/proc/self/environ")\n#endif\n',
            "a.cu(1): error: `__has_include` is refused: a submission may not probe for files; it may include only "
            f"{ALLOWED}",
        ),
        (
            "constexpr bool probe = __has_include_next(<x.h>);\n",
            "a.cu(1): error: `__has_include_next` is refused: a submission may not probe for files; "
            f"it may include only {ALLOWED}",
        ),
        (
            "#include <attnlab/../../x.cuh>\n",
            "a.cu(1): error: `#include <attnlab/../../x.cuh>` is refused: a header name may not contain `..`; include "
            "the driver's headers by their own names, as <attnlab/prelude.cuh>",
        ),
        (
            "#include <cooperative_groups.h>\n",
            "a.cu(1): error: `#include <cooperative_groups.h>` is refused: cooperative groups do not run on the CPU "
            "backend; use __syncthreads() and __shfl_xor_sync (or __shfl_down_sync) instead",
        ),
        (
            "#define H <cmath>\n#include H\n",
            f"a.cu(2): error: `#include H` is refused: an #include must name its header literally, as <cmath>; a "
            f"submission may include only {ALLOWED}",
        ),
        ('#import "x.h"\n', f'a.cu(1): error: `#import "x.h"` is refused: a submission may include only {ALLOWED}'),
        (
            '#embed "/proc/self/environ"\n',
            f'a.cu(1): error: `#embed "/proc/self/environ"` is refused: a submission may include only {ALLOWED}',
        ),
        (
            '#pragma GCC dependency "/proc/self/environ"\n',
            "a.cu(1): error: `GCC dependency` is refused: it makes the compiler open a file",
        ),
        (
            '_Pragma("GCC dependency \\"/proc/self/environ\\"")\n',
            "a.cu(1): error: `GCC dependency` is refused: it makes the compiler open a file",
        ),
    ],
)
def test_probes_escapes_and_macro_includes_are_refused_with_their_reason(source, message):
    assert refused(source) == message


# Where NVRTC and g++ read the same bytes differently, the file is refused: each of these hides
# the #include from one compiler and shows it to the other (checked against both below).
@pytest.mark.parametrize(
    "source, message",
    [
        (
            '// note \\  \n#include "/proc/self/environ"\n',
            "a.cu(1): error: a backslash followed by spaces at the end of a line joins the lines for g++ but not for "
            "NVRTC; delete the spaces after the backslash (or the backslash)",
        ),
        (
            'int a; // c\r#include "/proc/self/environ"\n',
            "a.cu(1): error: a carriage return without a line feed starts a new line for g++ but not for NVRTC; save "
            "the file with LF or CRLF line endings",
        ),
        (
            'int a; // c\0\n#include "/proc/self/environ"\n',
            "a.cu(1): error: a NUL character: NVRTC stops reading the file there and g++ does not; delete it",
        ),
        (
            "int a = 1'2' /*\n#include \"/proc/self/environ\"\n// */\n",
            "a.cu(1): error: a ' right after a number that is not a digit separator between two digits: NVRTC reads "
            "it as part of the number, g++ as a character literal; write separators as in 1'000'000",
        ),
        (
            "int a = 1$'2' /*\n#include \"/proc/self/environ\"\n// */\n",
            "a.cu(1): error: a number runs into `$`: NVRTC and g++ end the number in different places; put a space "
            "after the number",
        ),
        (
            '#define $R\nauto s = $R"x(\n#include "/proc/self/environ"\n)x";\n',
            "a.cu(2): error: `$R` right before a quote: NVRTC and g++ split it differently (a `$`, a non-ASCII letter "
            "or a \\u name in it); put a space before the quote",
        ),
        (
            'auto s = R"x(\n)\\\nx" /*\n)x";\n#include "/proc/self/environ"\n// */\n',
            "a.cu(1): error: a backslash at the end of a line inside a raw string: compilers disagree on where such a "
            "string ends; remove the backslash or use an ordinary string",
        ),
        (
            'auto s = R"12345678901234567(\n#include "/proc/self/environ"\n)12345678901234567";\n',
            "a.cu(1): error: a raw string's delimiter must be at most 16 basic characters (no spaces, quotes, "
            "backslashes or parentheses) followed by `(`",
        ),
        (
            'auto s = R"x(\n#include "/proc/self/environ"\n',
            'a.cu(1): error: a raw string R"x( that never ends (add )x")',
        ),
        ('/* never closed\n#include "/proc/self/environ"\n', "a.cu(1): error: a /* comment that never ends (add */)"),
    ],
)
def test_what_the_two_compilers_read_differently_is_refused(source, message):
    assert refused(source) == message


# --- legal files: nothing here is a directive to either compiler --------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "char q = '\\''; char d = '\"'; /*\n#include \"/proc/self/environ\"\n*/\n",
        'const char* s = "#include \\"/proc/self/environ\\"";\n',
        'const char* s = "/* not a comment"; int x; // */\n',
        'auto s = R"(\n#include <x>\n)";\n',
        'auto s = R"d(\n"*/" /* \'\n#include "/proc/self/environ"\n)d";\n',
        'auto s = u8R"%:(\n#include <x>\n)%:"; auto w = LR"(\n#include <y>\n)";\n',
        "constexpr long big = 1'000'000 + 0x1'ab'cdL + 0b1'0 + 1'2.5e+3;\n",
        "char c = u8'a'; wchar_t w = L'\\''; char16_t u = u'x'; int n = 3; // it's fine\n",
        "/* don't */ int x; // isn't it\n",
        "#define STR(x) #x\n#define CAT(a, b) a ## b\n%:define DIGRAPH 1\nint v = CAT(1, 2);\n",
        '#pragma unroll\n_Pragma("unroll 4")\n#pragma once\n',
        '#line 10 "other.cu"\nint z;\n',
        "int \\u00e9t\\u00e9 = 1; int caf\u00e9 = 2;\n",
        '#include <attnlab/prelude.cuh>\n#include "attnlab/prelude.cuh"\n#include <cmath>\n#include <math.h>\n'
        "#include <cfloat>\n#include <float.h>\n#include <cstdint>\n#include <stdint.h>\n#include <cuda_runtime.h>\n"
        "#include <math_constants.h>\n",
    ],
)
def test_tricky_but_legal_code_is_not_refused(source):
    refuse_foreign_includes(source, "a.cu")


def test_directives_are_found_on_their_first_physical_line():
    source = "/* a\n b */ #define A 1\nint x = 1'2;\n#inc\\\nlude <cmath>\n# /* c\n */ pragma unroll\n"
    found = [(d.line, d.name, d.argument) for d in scan_directives(source, "a.cu")]
    assert found == [(2, "define", ""), (4, "include", "<cmath>"), (6, "pragma", "")]


def test_tokens_carry_the_text_the_compiler_reads_and_where_it_stands_in_the_file():
    """`code_tokens` (the CPU build reads asm statements with it): comments are no tokens, a splice is
    undone in a token's text, offsets and lines are the file's (CRLF counted as one character)."""
    source = '# /* c */ define M(x) as\\\nm(x) // no\r\nR"d(a "b")d" u8"s" 1\'000 \'q\' /* x\n */ ;\n'
    found = [(t.kind, t.text, t.start, t.end, t.line) for t in code_tokens(source, "a.cu")]
    assert found == [
        ("directive", "define", 0, 16, 1),
        ("word", "M", 17, 18, 1),
        ("punct", "(", 18, 19, 1),
        ("word", "x", 19, 20, 1),
        ("punct", ")", 20, 21, 1),
        ("word", "asm", 22, 27, 1),
        ("punct", "(", 27, 28, 2),
        ("word", "x", 28, 29, 2),
        ("punct", ")", 29, 30, 2),
        ("newline", "\n", 36, 37, 2),
        ("raw", 'R"d(a "b")d"', 37, 49, 3),
        ("word", "u8", 50, 52, 3),
        ("string", '"s"', 52, 55, 3),
        ("number", "1'000", 56, 61, 3),
        ("char", "'q'", 62, 65, 3),
        ("punct", ";", 75, 76, 4),
        ("newline", "\n", 76, 77, 4),
    ]


# --- the same files, through both compilers --------------------------------------------------

SEEN = re.compile(r"\b(MARK\d)\.h")
DIFFERENTIAL = [
    'int x = 1\'2;\n#include "MARK1.h"\n',
    "int x = 1'2 + '/*';\n#include \"MARK1.h\"\n// */\n",
    'auto s = R"x(" /*)x";\n#include "MARK1.h"\n// */\n',
    'auto s = u8R"d(\n#include "MARK1.h"\n)d";\n#include "MARK2.h"\n',
    'auto s = "abc"R"x(\n#include "MARK1.h"\n)x";\n',
    '#if 0\nR"x(\n#endif\n#include "MARK1.h"\n)x"\n#endif\n',
    '#if 0\ndon\'t\n#endif\n#include "MARK1.h"\n',
    '// c \\\n#include "MARK1.h"\n#include "MARK2.h"\n',
    '// c \\ \n#include "MARK1.h"\n#include "MARK2.h"\n',
    '#\\u0069nclude "MARK1.h"\n',
    'int a; // c\r#include "MARK1.h"\n',
    "int x = 1$'2' /*\n#include \"MARK1.h\"\n// */\n",
    "int x = 1.'2' /*\n#include \"MARK1.h\"\n// */\n",
    '%:include "MARK1.h"\n%:%:include "MARK2.h"\n',
    'auto s = R"x(\n)x\\\n";\n#include "MARK1.h"\n',
    'const char* s = "abc\n#include "MARK1.h"\n',
    'const char* s = "a\\\\\n\n#include "MARK1.h"\n',  # a backslash before a splice
    'int x; /*\n*/ #include "MARK1.h"\n',
    'int x; /* one line */ #include "MARK1.h"\n',
]


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
@pytest.mark.parametrize("source", DIFFERENTIAL)
@pytest.mark.slow
def test_every_include_either_compiler_sees_is_seen_or_the_file_is_refused(tmp_path, source):
    _, log, _ = run_nvrtc('#line 1 "t.cu"\n' + source, "t.cu", "sm_90", ["--fdevice-syntax-only"])
    nvrtc_saw = set(re.findall(r'cannot open source file "(MARK\d)\.h"', log))
    (tmp_path / "t.cpp").write_text(source, newline="")
    dependencies = subprocess.run(
        ["g++", "-std=c++17", "-E", "-MG", "-MM", "-x", "c++", "t.cpp"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    gcc_saw = set(SEEN.findall(dependencies))
    try:
        policy_saw = {d.argument[1:-3] for d in scan_directives(source, "t.cu") if d.name == "include"}
    except AttnlabError:
        return  # refused: no compiler runs at all
    assert nvrtc_saw | gcc_saw <= policy_saw


# --- every rule of the lexer, pinned by what the policy returns (each case once let a planted bug
# --- in the lexer pass the tests above; `bash scripts/mutation.sh` is what finds such bugs) ------


def scanned(source: str) -> list[tuple[int, str, str]]:
    return [(d.line, d.name, d.argument) for d in scan_directives(source, "a.cu")]


def include_refused(line: int, argument: str) -> str:
    return (
        f"a.cu({line}): error: `#include {argument}` is refused: a submission may include only {ALLOWED}; "
        "paste what you need into the file itself"
    )


NOT_LITERAL = f"an #include must name its header literally, as <cmath>; a submission may include only {ALLOWED}"
SEPARATOR = (
    "a ' right after a number that is not a digit separator between two digits: NVRTC reads it as part "
    "of the number, g++ as a character literal; write separators as in 1'000'000"
)
RAW_DELIMITER = (
    "a raw string's delimiter must be at most 16 basic characters (no spaces, quotes, backslashes or "
    "parentheses) followed by `(`"
)
UCN_DIGITS = "a \\u or \\U outside a literal must be followed by 4 or 8 hex digits"
PROBE = f"is refused: a submission may not probe for files; it may include only {ALLOWED}"


def ucn_basic(name: str) -> str:
    return (
        f"{name} names a basic or control character outside a literal, which C++ does not allow (g++ reads "
        "`#\\u0069nclude` as #include); write the character itself"
    )


def before_quote(word: str) -> str:  # an identifier in the code, right before a quote
    return (
        f"`{word}` right before a quote: NVRTC and g++ split it differently (a `$`, a non-ASCII letter or a "
        "\\u name in it); put a space before the quote"
    )


def suffix_before_quote(word: str) -> str:  # a literal's suffix, right before a quote
    return f"`{word}` right before a quote: NVRTC and g++ split it differently; put a space before the quote"


# Phase 1: characters the two compilers read differently are refused on the line they stand on.
@pytest.mark.parametrize(
    "source, line, why",
    [
        ("\0int a;\n", 1, "a NUL character: NVRTC stops reading the file there and g++ does not; delete it"),
        ("\nint a; // \0\n", 2, "a NUL character: NVRTC stops reading the file there and g++ does not; delete it"),
        (
            "int a; // \0\nint b; // \0\n",
            1,
            "a NUL character: NVRTC stops reading the file there and g++ does not; delete it",
        ),
        (
            "\rint a;\n",
            1,
            "a carriage return without a line feed starts a new line for g++ but not for NVRTC; save the "
            "file with LF or CRLF line endings",
        ),
        (
            "\nint a; // \r x\n",
            2,
            "a carriage return without a line feed starts a new line for g++ but not for NVRTC; "
            "save the file with LF or CRLF line endings",
        ),
        (
            "\n// c \\ \nint a;\n",
            2,
            "a backslash followed by spaces at the end of a line joins the lines for g++ but not "
            "for NVRTC; delete the spaces after the backslash (or the backslash)",
        ),
    ],
)
def test_an_unreadable_character_is_refused_at_its_first_occurrence_even_as_the_first_byte(source, line, why):
    assert refused(source) == f"a.cu({line}): error: {why}"


# Phase 2: splices, CRLF ones included, join lines; every line number still counts physical lines.
@pytest.mark.parametrize(
    "source, line",
    [
        ('#inc\\\r\nlude "/proc/self/environ"\r\n', 1),
        ('int a = \\\n1;\nint b = \\\n2;\n#include "/proc/self/environ"\n', 5),
    ],
)
def test_a_splice_joins_lines_and_later_lines_keep_their_physical_numbers(source, line):
    assert refused(source) == f"a.cu({line}): error: {ENVIRON}"


@pytest.mark.parametrize(
    "source, message",
    [
        ("#define A 1 \\\n + \\\n 2\n#ifdef __has_include\n#endif\n", f"a.cu(4): error: `__has_include` {PROBE}"),
        ("#ifdef __has_include\n#endif\n", f"a.cu(1): error: `__has_include` {PROBE}"),
        # a name split by a splice is reported where it ends
        ("#ifdef __has_includ\\\ne\n#endif\n", f"a.cu(2): error: `__has_include` {PROBE}"),
        (
            "#pragma GCC dependency\nint x;\n",
            "a.cu(1): error: `GCC dependency` is refused: it makes the compiler open a file",
        ),
        (
            "#pragma GCC dependenc\\\ny\nint x;\n",
            "a.cu(2): error: `GCC dependency` is refused: it makes the compiler open a file",
        ),
    ],
)
def test_a_probe_or_pragma_that_ends_its_line_is_reported_on_the_line_of_its_last_letter(source, message):
    assert refused(source) == message


# Phase 3, comments: a line comment hides a block-comment opener; a block comment hides a directive.
def test_a_line_comment_hides_a_block_comment_opener():
    assert refused('// /*\n#include "/proc/self/environ"\n// */\n') == f"a.cu(2): error: {ENVIRON}"


def test_a_block_comment_after_an_allowed_header_hides_the_lines_it_spans():
    source = '#include "cmath" /* a comment\n#include "/proc/self/environ" is only a comment\n*/\n'
    assert scanned(source) == [(1, "include", '"cmath"')]
    assert refuse_foreign_includes(source, "a.cu") is None


# Directives: only a `#` or `%:` that begins a line; `##` and `%:%:` never begin one, wherever they stand.
@pytest.mark.parametrize(
    "source",
    [
        '##\n#include "/proc/self/environ"\n',
        'int a;\n%:include "/proc/self/environ"\n',
        '%:%:\n%:include "/proc/self/environ"\n',
    ],
)
def test_a_directive_begins_at_a_hash_or_digraph_on_any_line_after_a_double_hash_line(source):
    assert refused(source) == f"a.cu(2): error: {ENVIRON}"


@pytest.mark.parametrize(
    "source, found",
    [
        ("#error #include <x>\n", [(1, "error", "")]),  # a `#` later on a directive's line
        ("#define STR(x) #x\n", [(1, "define", "")]),  # the stringizing operator
        ('# 1 "other.cu"\n#\nint a;\n', []),  # a line marker and the null directive
        ("int a;\n#", []),  # a `#` that ends the file
        ("#\\u00e9\n", [(1, "\\u00e9", "")]),  # a name spelled with a \u name
        ("#\u00e9\n", [(1, "\u00e9", "")]),  # ... or with a non-ASCII letter
        ("#\u2202\n", [(1, "\u2202", "")]),  # ... or any non-ASCII character but a space
        ("#\\ x\n", [(1, "", "")]),  # a stray backslash: no name, no file
        ("#pragma GCC unroll 4\nint dependency = 1;\n", [(1, "pragma", "")]),  # `GCC` alone is no dependency
    ],
)
def test_only_a_hash_at_the_start_of_a_line_begins_a_directive_named_by_the_identifier_after_it(source, found):
    assert scanned(source) == found
    assert refuse_foreign_includes(source, "a.cu") is None


# The header name: the first closing delimiter on the directive's own line ends it.
@pytest.mark.parametrize(
    "source, message",
    [
        ("#include <> // >\n", include_refused(1, "<>")),
        ("int a;\n#include", f"a.cu(2): error: `#include` is refused: {NOT_LITERAL}"),
        (
            '#include X"/proc/self/environ"\n',
            f'a.cu(1): error: `#include X"/proc/self/environ"` is refused: {NOT_LITERAL}',
        ),
        ("#include <cmath\nbool b = 1 > 0;\n", f"a.cu(1): error: `#include <cmath` is refused: {NOT_LITERAL}"),
        (
            "#define H(x) <x>\n#include H(cmath) \t extra\n",
            f"a.cu(2): error: `#include H(cmath) extra` is refused: {NOT_LITERAL}",
        ),
    ],
)
def test_the_header_name_ends_at_its_first_closing_delimiter_on_the_same_line(source, message):
    assert refused(source) == message


@pytest.mark.parametrize(
    "source",
    [
        "#include <cmath> // a > b\n",
        '#include "cmath" // the header\n',
        '#include "attnlab/prelude.cuh" /* "the" prelude */\n',
    ],
)
def test_what_follows_an_allowed_header_name_is_not_part_of_it(source):
    assert refuse_foreign_includes(source, "a.cu") is None


# Numbers: pp-numbers take digits, letters, `.`, digit separators and a sign only after e, E, p or P.
@pytest.mark.parametrize(
    "source",
    [
        "float f = 1e+'/*';\n#include \"/proc/self/environ\"\n// */\n",
        "float f = 1E-'/*';\n#include \"/proc/self/environ\"\n// */\n",
        "float f = 0x1p+'/*';\n#include \"/proc/self/environ\"\n// */\n",
        "float f = 0x1P-'/*';\n#include \"/proc/self/environ\"\n// */\n",
        "int a = 1'\u00e9;\n",  # a separator must be followed by an ASCII letter or digit
        "int a = 1'",  # ... and by anything at all
    ],
)
def test_a_quote_after_an_exponent_sign_or_at_the_end_is_no_digit_separator(source):
    assert refused(source) == f"a.cu(1): error: {SEPARATOR}"


def test_only_an_exponent_letter_takes_a_sign_into_a_number():
    # 0X+ is the number 0X, a plus and a character literal: the '/*' opens no comment
    assert refused("int x = 0X+'/*';\n#include \"/proc/self/environ\"\n// */\n") == f"a.cu(2): error: {ENVIRON}"


@pytest.mark.parametrize(
    "source",
    [
        "int c = 10+'a';\n",  # a sign after a digit ends the number
        "int n = 1'0",  # a separator just before the end of the file
        "int a = 1'_;\n",  # a separator before `_`
        "constexpr int n = 42",  # a number that ends the file
        "int n = 0xfe",  # ... ending in an exponent letter
        "float f = 1 + x.",  # a `.` that ends the file
        "struct S { int a1$; } v1; int n = v1.a1$;\n",  # a `.` after an identifier is no number
    ],
)
def test_numbers_end_where_both_compilers_end_them(source):
    assert scanned(source) == []
    assert refuse_foreign_includes(source, "a.cu") is None


# Literals: a backslash escapes the next character but never the end of a line.
def test_a_backslash_left_before_a_new_line_by_a_splice_escapes_nothing_and_the_string_ends_there():
    # `"a\` then a splice: after phase 2 the backslash stands before a new line it cannot escape
    assert refused('const char* s = "a\\\\\n\n#include "/proc/self/environ"\n') == f"a.cu(3): error: {ENVIRON}"


@pytest.mark.parametrize(
    "source, message",
    [
        ('auto s = "a"\\u00e9"b";\n', suffix_before_quote("\\u00e9")),
        ('auto s = "a"_x$"b";\n', suffix_before_quote("_x$")),
        ('auto s = "a"\u00e9"b";\n', suffix_before_quote("\u00e9")),
        ('auto s = "a"\u2202"b";\n', suffix_before_quote("\u2202")),
        ('auto s = caf\\u00e9"x";\n', before_quote("caf\\u00e9")),
        ('auto s = \\u00e9"x";\n', before_quote("\\u00e9")),
        ('auto s = \u00e9"x";\n', before_quote("\u00e9")),
        ('auto s = \u2202"x";\n', before_quote("\u2202")),
    ],
)
def test_a_suffix_or_identifier_the_compilers_split_differently_before_a_quote_is_refused_by_name(source, message):
    assert refused(source) == f"a.cu(1): error: {message}"


@pytest.mark.parametrize("source", ['auto s = "abc"sv', 'auto s = "a"_x$;\n'])
def test_a_suffix_not_followed_by_a_quote_is_legal(source):
    assert refuse_foreign_includes(source, "a.cu") is None


# Raw strings: the delimiter is the text up to the first `(`, at most 16 basic characters; the
# string ends at the first `)delimiter"` after that `(`, and the scan goes on right after it.
@pytest.mark.parametrize(
    "source",
    [
        'auto s = f(R"x(\n#include "/proc/self/environ"\n)x");\n',  # a `(` before the raw string
        'auto s = R"(f(x))";\n',  # a `(` inside it
        'auto s = R"1234567890123456(\n#include "/proc/self/environ"\n)1234567890123456";\n',  # 16 characters
        'auto s = f()R"R(\n#include "/proc/self/environ"\n)R";\n',  # `)R"` just before the opening
        'auto e = R"()";\n',  # the empty raw string
    ],
)
def test_a_raw_string_hides_everything_up_to_its_own_closing_delimiter(source):
    assert scanned(source) == []
    assert refuse_foreign_includes(source, "a.cu") is None


@pytest.mark.parametrize(
    "source",
    [
        'auto a = R"(a)";\n#include "/proc/self/environ"\nauto b = R"(b)";\n',
        'auto s = R"(a)"\n#include "/proc/self/environ"\n',
    ],
)
def test_a_raw_string_ends_at_the_first_closing_delimiter(source):
    assert refused(source) == f"a.cu(2): error: {ENVIRON}"


@pytest.mark.parametrize(
    "source",
    [
        'auto s = R"a b(\n#include "/proc/self/environ"\n)a b";\n',
        'auto s = R"ab',
    ],
)
def test_a_raw_string_delimiter_with_a_space_or_without_its_parenthesis_is_refused(source):
    assert refused(source) == f"a.cu(1): error: {RAW_DELIMITER}"


# Universal character names outside literals: exactly 4 or 8 hex digits, naming a character from U+00A0 on.
@pytest.mark.parametrize(
    "source, message",
    [
        ("int a;\n\\u", f"a.cu(2): error: {UCN_DIGITS}"),
        ("int \\u12G4 = 1;\n", f"a.cu(1): error: {UCN_DIGITS}"),
        ("int \\u00X9 = 1;\n", f"a.cu(1): error: {UCN_DIGITS}"),
        ('#\\U00000069nclude "/proc/self/environ"\n', "a.cu(1): error: " + ucn_basic("\\U00000069")),
        ("int \\u0099 = 1;\n", "a.cu(1): error: " + ucn_basic("\\u0099")),
    ],
)
def test_a_universal_character_name_outside_a_literal_is_refused_unless_it_names_a_letter_beyond_ascii(source, message):
    assert refused(source) == message


@pytest.mark.parametrize(
    "source",
    [
        "int caf\\u00E9 = 1;\n",  # capital hex digits
        "int \\u00A0 = 1;\n",  # the first character past the basic and control ones (the compiler decides)
        "int a;\n\\",  # a stray backslash that ends the file
        "int a = 1; \\X\n",  # a stray backslash before a letter other than u or U
    ],
)
def test_a_universal_character_name_for_u00a0_and_beyond_or_a_stray_backslash_is_left_to_the_compiler(source):
    assert refuse_foreign_includes(source, "a.cu") is None


def test_a_stray_backslash_after_a_probe_does_not_hide_it():
    assert refused('#if __has_include\\("/etc/passwd")\n#endif\n') == f"a.cu(1): error: `__has_include` {PROBE}"


def test_a_stray_backslash_takes_one_character_only():
    assert refused('x = \\"/*";\n#include "/proc/self/environ"\n// */\n') == f"a.cu(2): error: {ENVIRON}"


# A pragma inside _Pragma's string is read as tokens: a comment between its words is a space.
def test_gcc_dependency_in_a_pragma_string_is_refused_with_a_comment_between_its_words():
    assert (
        refused('_Pragma("GCC/**/dependency \\"/proc/self/environ\\"")\n')
        == "a.cu(1): error: `GCC dependency` is refused: it makes the compiler open a file"
    )


# `code_tokens` reads the file with the same rules: `##` and `%:%:` are punctuation even where they
# begin a line, a line marker is a directive without a name, and `.5` is one number.
def test_tokens_of_a_double_hash_a_line_marker_and_a_number_that_starts_with_a_dot():
    found = [(t.kind, t.text, t.start, t.end, t.line) for t in code_tokens('## x\n%:%: y\n# 1 "f"\nz = .5;\n', "a.cu")]
    assert found == [
        ("punct", "#", 0, 1, 1),
        ("punct", "#", 1, 2, 1),
        ("word", "x", 3, 4, 1),
        ("newline", "\n", 4, 5, 1),
        ("punct", "%", 5, 6, 2),
        ("punct", ":", 6, 7, 2),
        ("punct", "%", 7, 8, 2),
        ("punct", ":", 8, 9, 2),
        ("word", "y", 10, 11, 2),
        ("newline", "\n", 11, 12, 2),
        ("directive", "", 12, 14, 3),
        ("number", "1", 14, 15, 3),
        ("string", '"f"', 16, 19, 3),
        ("newline", "\n", 19, 20, 3),
        ("word", "z", 20, 21, 4),
        ("punct", "=", 22, 23, 4),
        ("number", ".5", 24, 26, 4),
        ("punct", ";", 26, 27, 4),
        ("newline", "\n", 27, 28, 4),
    ]


def test_tokens_refuse_what_the_policy_refuses_naming_the_file():
    with pytest.raises(
        AttnlabError,
        match=r"^k\.cu\(2\): error: `__has_include` is refused: a submission may not "
        r"probe for files; ",
    ):
        code_tokens("int a;\n#ifdef __has_include\n", "k.cu")


def test_a_number_that_starts_with_a_dot_is_one_token_at_the_end_of_the_file_too():
    assert [(t.kind, t.text) for t in code_tokens("z=.5", "a.cu")] == [("word", "z"), ("punct", "="), ("number", ".5")]
