"""The include policy, by its behaviour: which directives are refused, with which message, on which line.

A submission may include the driver's own headers (`<attnlab/NAME.cuh>`) and nothing else, decided
before any compiler runs. Each refusal quotes the very directive (or probe) it refused, so these
tests assert the whole message: a refusal for the wrong reason, or of the wrong line, fails them.
`no_nvrtc` proves the refusal came before the compiler: NVRTC evaluates `__has_include("/abs/path")`
as a file-existence probe, and prints the lines of any file it includes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from labrunner.cli import main
from labrunner.compile import nvrtc
from labrunner.compile.includes import refuse_foreign_includes
from labrunner.exit_codes import AttnlabError, ExitCode

ALLOWED = "the driver's headers (<attnlab/...>), <cuda_runtime.h>, <cfloat>, <cmath>, <cstdint>, <math_constants.h>"
DIRECTIVE = f"is refused: a submission may include only {ALLOWED}"  # #import, #embed, #include_next
REFUSED = f"{DIRECTIVE}; paste what you need into the file itself"  # an #include of any other header
DOTDOT = (
    "is refused: a header name may not contain `..`; include the driver's headers by their own names, "
    "as <attnlab/prelude.cuh>"
)
NOT_LITERAL = (
    f"is refused: an #include must name its header literally, as <cmath>; a submission may include only {ALLOWED}"
)
PROBE = f"is refused: a submission may not probe for files; it may include only {ALLOWED}"
KERNEL = (
    'extern "C" __global__ void flash_prefill(const float* q, const float* kCache, const float* vCache, '
    "float* out, int chunkLen, int prefixLen) {}\n"
)


@pytest.fixture
def no_nvrtc(monkeypatch):
    """Any attempt to reach NVRTC fails loudly: proves a refusal came before the compiler."""

    def unreachable():
        raise RuntimeError("NVRTC was reached")

    monkeypatch.setattr(nvrtc, "_nvrtc", unreachable)


def refused(source: str, filename: str = "attention.cu") -> str:
    with pytest.raises(AttnlabError, match=r"^\S+\(\d+\): error: `[^`]+` is refused: ") as caught:
        refuse_foreign_includes(source, filename)
    assert caught.value.exit_code == ExitCode.COMPILE_ERROR
    return caught.value.message


# --- the driver's header path is matched exactly ------------------------------------------------


@pytest.mark.parametrize(
    ("argument", "why"),
    [
        ("<attnlab/../../x.cuh>", DOTDOT),  # ends in .cuh: only the `..` can make it foreign
        ("<attnlab/../attnlab/prelude.cuh>", DOTDOT),
        ("<attnlab/./prelude.cuh>", REFUSED),
        ("<attnlab/sub/prelude.cuh>", REFUSED),
        ("<attnlab/prelude.cuh/../../../etc/passwd>", DOTDOT),
        ("</attnlab/prelude.cuh>", REFUSED),
        ("<attnlab/prelude.h>", REFUSED),
        ("<attnlab/prelude.cuh", NOT_LITERAL),
        ("<ATTNLAB/prelude.cuh>", REFUSED),
    ],
)
def test_anything_but_the_drivers_header_path_is_refused(argument, why):
    assert refused(f"#include {argument}\n") == f"attention.cu(1): error: `#include {argument}` {why}"


def test_a_double_slash_in_the_header_path_is_refused():
    # `//` inside <...> is where a comment-stripping scanner and the preprocessor may disagree;
    # either way the line must be refused (what the message quotes is the scanner's reading)
    assert refused("#include <attnlab//prelude.cuh>\n").startswith("attention.cu(1): error: `#include <attnlab")


@pytest.mark.parametrize(
    "line",
    [
        "#include <attnlab/prelude.cuh>",
        "  #  include   <attnlab/prelude.cuh>   ",
        "#include <attnlab/prelude.cuh> // the driver's prelude",
        "#include <attnlab/prelude.cuh> /* twice is harmless */",
        "%:include <attnlab/prelude.cuh>",
        "#include <attnlab/prelude.cuh> extra",  # both compilers ignore tokens after the header name (a warning)
        '#include "attnlab/prelude.cuh"',  # no compiler sees a folder of the file's own: the driver's header
    ],
)
def test_the_drivers_own_header_is_accepted_however_it_is_spaced(line):
    """Does not raise: the policy must not refuse what every starter file does (a refusal here fails every student)."""
    refuse_foreign_includes(f"{line}\n{KERNEL}", "attention.cu")


def test_a_dotdot_path_ending_in_cuh_is_refused_before_nvrtc_by_attnlab_check(no_nvrtc, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("attention.cu").write_text("// my kernel\n#include <attnlab/../../x.cuh>\n" + KERNEL)
    result = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["check", "lab2", "attention.cu"])
    assert result.exit_code == ExitCode.COMPILE_ERROR == 3
    assert (
        result.output == f"attention.cu(2): error: `#include <attnlab/../../x.cuh>` {DOTDOT}\nCOMPILE-ERROR (exit 3)\n"
    )


# --- __has_include probes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "line", "probe"),
    [
        ('#if __has_include("/etc/passwd")\n#endif\n', 1, "__has_include"),
        ("#if __has_include(</etc/shadow>)\n#endif\n", 1, "__has_include"),
        ('#if 0\n#elif __has_include("/root/.ssh/id_rsa")\n#endif\n', 2, "__has_include"),
        ('#if __has_include_next("/etc/passwd")\n#endif\n', 1, "__has_include_next"),
        (
            '#if defined(X) && \\\n    __has_include("/etc/passwd")\n#endif\n',
            2,
            "__has_include",
        ),  # the probe's own line
        ('/* a probe\n   below */\n#if __has_include ("/etc/passwd")\n#endif\n', 3, "__has_include"),
        ("#if __has_include(<attnlab/prelude.cuh>)\n#endif\n", 1, "__has_include"),
    ],
)
def test_a_has_include_probe_is_refused_and_named(source, line, probe):
    assert refused(source) == f"attention.cu({line}): error: `{probe}` {PROBE}"


def test_a_has_include_probe_is_refused_before_nvrtc_by_attnlab_check(no_nvrtc, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("attention.cu").write_text('#if __has_include("/etc/passwd")\n#define LEAK 1\n#endif\n' + KERNEL)
    result = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["check", "lab2", "attention.cu"])
    assert result.exit_code == ExitCode.COMPILE_ERROR
    assert result.output == f"attention.cu(1): error: `__has_include` {PROBE}\nCOMPILE-ERROR (exit 3)\n"


def test_a_name_that_only_contains_has_include_is_not_a_probe():
    """Does not raise: an identifier such as `my__has_include_flag` is not the operator, and refusing it
    would fail a correct file for a name."""
    refuse_foreign_includes("static const int my__has_include_flag = 1;\n" + KERNEL, "attention.cu")


# --- every file-reading directive, and where the report points ------------------------------------


@pytest.mark.parametrize(
    ("directive", "shown", "why"),
    [
        ('#import "x.h"', '#import "x.h"', DIRECTIVE),
        ("#embed </etc/passwd>", "#embed </etc/passwd>", DIRECTIVE),
        ("#include_next <attnlab/prelude.cuh>", "#include_next <attnlab/prelude.cuh>", DIRECTIVE),
        ("#include", "#include", NOT_LITERAL),
    ],
)
def test_every_file_reading_directive_is_refused(directive, shown, why):
    assert refused(directive + "\n") == f"attention.cu(1): error: `{shown}` {why}"


def test_the_first_refused_line_is_reported_after_splices_and_block_comments():
    source = (
        "#define LONG \\\n    1\n"  # lines 1-2, one logical line
        "/* a comment\n   over two lines */\n"  # lines 3-4
        "#include <attnlab/prelude.cuh>\n"  # line 5: allowed
        '#include "../secret.h"\n'  # line 6: the first refusal
        '#include "/etc/passwd"\n'
    )
    assert refused(source, "k.cu") == f'k.cu(6): error: `#include "../secret.h"` {DOTDOT}'


def test_directives_inside_comments_and_strings_are_not_directives():
    """Does not raise: a commented-out include, or one inside a string, is not read by the
    preprocessor, and a student who commented one out must not be refused for it."""
    refuse_foreign_includes(
        '// #include "/etc/passwd"\n/* #include "/etc/passwd" */\n'
        'const char* s = "#include \\"/etc/passwd\\"";\n' + KERNEL,
        "attention.cu",
    )


# --- the scan reads lines, comments and literals as the preprocessor does ------------------------


@pytest.mark.parametrize(
    ("source", "line", "shown"),
    [
        ('%:include "/etc/passwd"\n', 1, '#include "/etc/passwd"'),  # the digraph of #
        ("\t  #include </etc/passwd>\n", 1, "#include </etc/passwd>"),  # indented
        ('#   include "/etc/passwd"\n', 1, '#include "/etc/passwd"'),  # spaced after the #
        ('#inc\\\nlude "/etc/passwd"\n', 1, '#include "/etc/passwd"'),  # a splice inside the name
        ('int a;\n#\\\ninclude "/etc/passwd"\n', 2, '#include "/etc/passwd"'),  # reported where its # is
        ('int a;\n\\\n#include "/etc/passwd"\n', 3, '#include "/etc/passwd"'),  # a splice before the #
        ('// a\n#include "/etc/passwd"\n', 2, '#include "/etc/passwd"'),  # after line comments of
        ('// ab\n#include "/etc/passwd"\n', 2, '#include "/etc/passwd"'),  # odd and even length
        ('/**/#include "/etc/passwd"\n', 1, '#include "/etc/passwd"'),  # after the emptiest comment
        ('/* a/b */#include "/etc/passwd"\n', 1, '#include "/etc/passwd"'),  # a comment holding / and *
        ('/* a*b */#include "/etc/passwd"\n', 1, '#include "/etc/passwd"'),
        ('"x"\n#include "/etc/passwd"\n', 2, '#include "/etc/passwd"'),  # after a literal
        ('s = "a";\n#include "/etc/passwd"\n', 2, '#include "/etc/passwd"'),  # ... of odd length
        ('s = "ab";\n#include "/etc/passwd"\n', 2, '#include "/etc/passwd"'),  # ... of even length
        ('/* a */ int x; /* b */\n#include "/etc/passwd"\n', 2, '#include "/etc/passwd"'),  # two comments
        ('/* a *//* b */#include "/etc/passwd"\n', 1, '#include "/etc/passwd"'),  # a comment right after one
        ('char c = \'\n#include "/etc/passwd"\n', 2, '#include "/etc/passwd"'),  # an unclosed quote ends at its line
        ('int a;\n#include "/etc/passwd"', 2, '#include "/etc/passwd"'),  # the last line, no newline
        ('int a;\n#include "/etc/passwd"\nx', 2, '#include "/etc/passwd"'),  # a one-character last line
    ],
)
def test_a_directive_is_found_wherever_the_preprocessor_finds_it(source, line, shown):
    assert refused(source) == f"attention.cu({line}): error: `{shown}` {REFUSED}"


@pytest.mark.parametrize(
    "source",
    [
        'float x = 1.0f; /* old code:\n#include "/etc/passwd" */\n',  # a comment opened after code
        'float X = 1.0f; /* old code:\n#include "/etc/passwd" */\n',  # ... whatever the letters
        'const char* s = "a"; /* old:\n#include "/etc/passwd" */\n',  # ... after a string
        'const char* s = "a\\"b"; /* old:\n#include "/etc/passwd" */\n',  # ... holding an escaped quote
        'const char* s = "\\\\"; /* old:\n#include "/etc/passwd" */\n',  # ... holding an escaped backslash
        "#include <attnlab/prelude.cuh> //",  # a comment at the very end
        'const char* s = "never closed',
        'const char* s = "ends in a backslash\\',
    ],
)
def test_what_the_preprocessor_never_reads_as_a_directive_is_not_refused(source):
    """Does not raise: each line here is one a compiler would not read as a directive (it lies in a
    comment, or the file ends inside one); refusing it would fail a correct file, and a scanner that
    stumbles at the end of a file would crash the grader instead of letting NVRTC report it."""
    assert refuse_foreign_includes(source, "attention.cu") is None


@pytest.mark.parametrize(
    "source",
    [
        "#include <attnlab/prelude.cuh> /* never closed\n#include </etc/passwd>\n",
        "/* never closed, ending in a star *",
    ],
)
def test_a_block_comment_that_never_ends_is_refused_at_its_line(source):
    """Neither compiler reads what follows an unclosed comment, and both refuse the file: said here,
    before either runs, with the line the comment opens on."""
    with pytest.raises(AttnlabError, match=r"^attention\.cu\(1\): error: a /\* comment that never ends \(add \*/\)$"):
        refuse_foreign_includes(source, "attention.cu")
