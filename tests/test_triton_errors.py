"""A Triton file's errors as the student needs them: on their own file's name and line (counted in the file,
not from a `def`), in the compiler's form `file(LINE): error: ...` that `.cu` errors take, with Triton's
chained cause where a helper fails, and each refusal saying what to write instead
(`labrunner/compile/triton_build.py`, `triton_child.py`, `triton_package.py`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from labrunner.compile.compiler_process import CompileLimits
from labrunner.compile.triton_build import _box_reply, compile_error, compile_triton
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.labs import get_lab

needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="the triton extra is not installed"
)
LAB2 = get_lab("lab2")
LABEL = "students/alice/flash.py"  # the name as the student's command line gave it


def refused(tmp_path: Path, text: str, target: str = "gpu") -> AttnlabError:
    path = tmp_path / "flash.py"
    path.write_text(text)
    with pytest.raises(AttnlabError) as caught:
        compile_triton(LAB2, path, LABEL, "sm_90", CompileLimits(), target)
    assert caught.value.exit_code == ExitCode.COMPILE_ERROR
    return caught.value


HEAD = """import triton
import triton.language as tl

attnlab_rows_per_block = 16
attnlab_constexprs = {"flash_prefill": {"BLOCK_M": 16}}
"""


@pytest.mark.slow
@needs_triton
def test_a_syntax_error_names_the_students_file_and_line_with_a_caret(tmp_path):
    text = HEAD + (
        "\n\n@triton.jit\ndef flash_prefill(q, kCache, vCache, out, chunkLen, prefixLen, BLOCK_M: tl.constexpr):\n"
        "    x = tl.load(q +\n"
    )
    assert refused(tmp_path, text).message == (
        "students/alice/flash.py(10): error: SyntaxError: '(' was never closed\n    x = tl.load(q +\n               ^"
    )


@pytest.mark.slow
@needs_triton
def test_an_exception_at_the_files_top_level_names_its_line(tmp_path):
    assert refused(tmp_path, HEAD + "\nx = 1 / 0\n").message == (
        "students/alice/flash.py(7): error: ZeroDivisionError: division by zero"
    )


IN_THE_KERNEL = (
    HEAD
    + """

@triton.jit
def flash_prefill(q, kCache, vCache, out, chunkLen, prefixLen, BLOCK_M: tl.constexpr):
    r = tl.arange(0, BLOCK_M)
    x = tl.load(q + r)
    y = undefined_name + x
    tl.store(out + r, y)
"""
)


@pytest.mark.slow
@needs_triton
def test_an_error_in_the_kernel_counts_the_files_lines_not_the_defs(tmp_path):
    # the `def` is the file's line 9; the failing line is the file's 12 (the def's fourth)
    assert refused(tmp_path, IN_THE_KERNEL).message == (
        "students/alice/flash.py(12): error: in flash_prefill: NameError('undefined_name is not defined')\n"
        "    y = undefined_name + x\n"
        "        ^"
    )


HELPER_ERROR = (
    HEAD
    + """

@triton.jit
def scores(a, b):
    return tl.dot(a, b, trans_b=True)


@triton.jit
def flash_prefill(q, kCache, vCache, out, chunkLen, prefixLen, BLOCK_M: tl.constexpr):
    r = tl.arange(0, BLOCK_M)
    x = tl.load(q + r[:, None] * 16 + r[None, :])
    tl.store(out + r[:, None] * 16 + r[None, :], scores(x, x))
"""
)


@pytest.mark.slow
@needs_triton
@pytest.mark.parametrize("target", ["gpu", "cpu"], ids=["cubin", "llvm-ir"])
def test_a_helpers_error_shows_tritons_chained_cause_on_the_helpers_line(tmp_path, target):
    # Triton's own error names only the entry kernel's `def`; the cause it chains names the helper's line
    assert refused(tmp_path, HELPER_ERROR, target).message == (
        "students/alice/flash.py(10): error: in scores: dot() got an unexpected keyword argument 'trans_b'\n"
        "    return tl.dot(a, b, trans_b=True)\n"
        "           ^\n"
        "  called from students/alice/flash.py(17), in flash_prefill"
    )


def decorated(decorator: str, function: str) -> str:
    return HELPER_ERROR.replace(", trans_b=True", "").replace(
        f"@triton.jit\ndef {function}(", f"{decorator}\n@triton.jit\ndef {function}("
    )


@pytest.mark.slow
@needs_triton
@pytest.mark.parametrize(
    ("decorator", "function", "said"),
    [
        (
            "@triton.autotune(configs=[triton.Config({'BLOCK_M': 64}, num_warps=8, num_stages=2)], key=['chunkLen'])",
            "flash_prefill",
            "students/alice/flash.py(13): error: flash_prefill is wrapped in @triton.autotune: attnlab grades one "
            "configuration: drop the decorator and set attnlab_num_warps, attnlab_num_stages and "
            "attnlab_constexprs; its first configuration is attnlab_num_warps = 8, attnlab_num_stages = 2, "
            "attnlab_constexprs = {'flash_prefill': {'BLOCK_M': 64}}",
        ),
        (
            "@triton.heuristics({'BLOCK_M': lambda args: 16})",
            "flash_prefill",
            "students/alice/flash.py(13): error: flash_prefill is wrapped in @triton.heuristics: drop the "
            "decorator and give BLOCK_M its value in attnlab_constexprs = {'flash_prefill': {'BLOCK_M': ...}}, "
            "or as the parameter's default",
        ),
        (
            "@triton.heuristics({'EVEN_M': lambda args: True, 'SCALE': lambda args: 1})",
            "scores",
            "students/alice/flash.py(8): error: scores is wrapped in @triton.heuristics: drop the decorator and "
            "pass EVEN_M and SCALE from the kernel that calls it, or give them as the parameters' defaults",
        ),
        (
            "@triton.autotune(configs=[triton.Config({})], key=[])",
            "scores",
            "students/alice/flash.py(8): error: scores is wrapped in @triton.autotune: a helper runs with the "
            "launch of the kernel that calls it: drop the decorator, and set the launch once for the lab's kernel "
            "(attnlab_num_warps, attnlab_num_stages, attnlab_constexprs)",
        ),
    ],
)
def test_a_decorator_attnlab_does_not_run_is_refused_on_its_line_with_what_to_write(
    tmp_path, decorator, function, said
):
    assert refused(tmp_path, decorated(decorator, function)).message == said


DESCRIPTOR = (
    HEAD
    + """

@triton.jit
def flash_prefill(q, kCache, vCache, out, chunkLen, prefixLen, BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M
    tile = tl.make_tensor_descriptor(q, shape=[chunkLen * 32, 64], strides=[64, 1], block_shape=[BLOCK_M, 64])
    tl.store(out + rows * 64 + tl.arange(0, 64), tl.sum(tile.load([rows, 0]), 0))
"""
)


@pytest.mark.slow
@needs_triton
def test_a_device_side_tensor_descriptor_is_refused_on_its_line_with_what_to_write(tmp_path):
    assert refused(tmp_path, DESCRIPTOR, "cpu").message == (
        "students/alice/flash.py(11): error: flash_prefill: a tensor descriptor made in the kernel "
        "(tl.make_tensor_descriptor) needs global scratch memory, which attnlab does not run; load the tile "
        "through tl.make_block_ptr (with boundary_check) or through pointers and a mask instead"
    )


@pytest.mark.parametrize(
    ("detail", "message"),
    [
        ("flash.py:12: in k: boom", "flash.py(12): error: in k: boom"),
        ("flash.py:12:5: boom", "flash.py(12): error: boom"),  # the column is the caret's, under the line
        ("flash.py: k must be a @triton.jit function", "flash.py: error: k must be a @triton.jit function"),
        ("the package lacks its functions", "flash.py: error: the package lacks its functions"),
        ("other.py:3: boom", "flash.py: error: other.py:3: boom"),  # only the file's own lines are placed
    ],
)
def test_a_boxs_words_become_the_compilers_form(detail, message):
    error = compile_error("flash.py", detail)
    assert (error.message, error.exit_code) == (message, ExitCode.COMPILE_ERROR)


@pytest.mark.parametrize(
    "out",
    [
        b'{"status": "done", "package": ' + b"[" * 200_000,  # deeper than the parser goes: RecursionError
        b'{"status": "no-triton", "detail": "ModuleNotFoundError"}',
        b'{"status": ' + b"{" * 100_000,
    ],
)
def test_a_reply_that_is_no_compile_result_is_the_files_compile_error(out):
    with pytest.raises(AttnlabError) as caught:
        _box_reply(out, 0, "flash.py", 4096, "the file's top level")
    assert (caught.value.message, caught.value.exit_code) == (
        "flash.py: error: the file's top level stopped without an answer (exit status 0)",
        ExitCode.COMPILE_ERROR,
    )
