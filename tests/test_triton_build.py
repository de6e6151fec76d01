"""A Triton file's compile box: the file's own Python, hostile or wrong, gets a compile error in words, and
what comes back from the box is checked before anything trusts it (`labrunner/build/triton_build.py`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from labrunner.build.compiler_process import CompileLimits
from labrunner.build.triton_build import _checked, compile_triton
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.labs import get_lab

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="the triton extra is not installed")
SOLUTION = Path(__file__).resolve().parent.parent / "kernels" / "lab2" / "solution.py"
LAB2 = get_lab("lab2")


def refused(tmp_path: Path, text: str, limits: CompileLimits = CompileLimits()) -> AttnlabError:
    path = tmp_path / "sub.py"
    path.write_text(text)
    with pytest.raises(AttnlabError) as caught:
        compile_triton(LAB2, path, "sub.py", "sm_90", limits)
    return caught.value


def test_the_shipped_solution_compiles_with_its_launch_facts():
    module = compile_triton(LAB2, SOLUTION, "solution.py", "sm_90")
    kernel = module.kernels["flash_prefill"]
    assert kernel.cubin.startswith(b"\x7fELF")
    assert (kernel.num_warps, kernel.num_stages, kernel.constexprs) == (
        8,
        3,
        {"BLOCK_M": 32, "BLOCK_N": 64, "HEADS": 4},
    )
    # the block's constants are the compile's: 32 x 8 threads and the shared memory Triton allotted
    assert module.constants["attnlab_threads"] == 256
    assert module.constants["attnlab_smem_bytes"] == kernel.shared_bytes
    assert module.constants["attnlab_heads_per_block"] == 4


def test_an_exception_at_the_top_of_the_file_names_its_line(tmp_path):
    error = refused(tmp_path, "import triton\n\nx = 1 / 0\n")
    assert error.exit_code == ExitCode.COMPILE_ERROR
    assert error.message == "sub.py: error: sub.py:3: ZeroDivisionError: division by zero"


def test_the_file_sees_none_of_the_graders_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_PLANTED_SECRET", "hunter2")
    error = refused(tmp_path, "import os\nraise RuntimeError(' '.join(sorted(os.environ)) + repr(os.listdir('/')))\n")
    assert "ATTNLAB_PLANTED_SECRET" not in error.message and "hunter2" not in error.message
    assert "RuntimeError" in error.message


def test_a_file_that_never_returns_is_stopped_at_the_compile_timeout(tmp_path):
    error = refused(tmp_path, "while True:\n    pass\n", CompileLimits(timeout_s=3))
    assert error.message == "sub.py: error: the compiler did not finish in 3 s (--compile-timeout)"


def test_a_file_that_allocates_without_bound_is_a_compile_error(tmp_path):
    error = refused(tmp_path, "hoard = bytearray(1 << 40)\n")
    assert error.exit_code == ExitCode.COMPILE_ERROR
    assert error.message == "sub.py: error: sub.py:1: MemoryError: "


def test_a_file_that_patches_triton_to_forge_its_cubin_is_refused(tmp_path):
    source = SOLUTION.read_text() + (
        "\n\nclass Forged:\n"
        "    asm = {'cubin': b'#!/bin/sh'}\n"
        "    class metadata:\n"
        "        name, num_warps, num_stages, shared, global_scratch_size, num_ctas = 'x', 4, 2, 0, 0, 1\n"
        "        launch_cooperative_grid = False\n"
        "triton.compile = lambda *a, **k: Forged()\n"
    )
    error = refused(tmp_path, source)
    assert error.message == "sub.py: error: flash_prefill: what came back as its cubin is not an ELF image"


def test_a_file_may_not_set_a_blocks_threads(tmp_path):
    error = refused(tmp_path, SOLUTION.read_text() + "\nattnlab_threads = 1024\n")
    assert error.message == (
        "sub.py: error: attnlab_threads is not a Triton file's to set: a block's threads are 32 x "
        "attnlab_num_warps and its shared memory is what Triton's compiler allots"
    )


def test_a_kernel_the_lab_names_must_be_a_jit_function(tmp_path):
    error = refused(tmp_path, "def flash_prefill(q, k, v, out, c, p):\n    pass\n")
    assert error.message == (
        "sub.py: error: sub.py: flash_prefill must be a @triton.jit function; the file defines a function by that name"
    )


@pytest.mark.parametrize(
    ("facts", "problem"),
    [
        (
            {"global_scratch_size": 64},
            "flash_prefill: it uses global scratch memory, which attnlab does not run; write the kernel without it",
        ),
        (
            {"num_ctas": 2},
            "flash_prefill: it uses clusters of CTAs (num_ctas), which attnlab does not run; write the kernel "
            "without it",
        ),
        ({"num_warps": 3}, "flash_prefill: num_warps = 3 must be one of 1, 2, 4, 8, 16, 32"),
        ({"shared": 1 << 20}, "flash_prefill: it needs 1048576 bytes of shared memory; a block has at most 232448"),
        ({"entry": "x; rm -rf /"}, "flash_prefill: the cubin's function name is not an identifier"),
        ({"num_stages": True}, "flash_prefill: the compiler's reply has no integer num_stages"),
    ],
)
def test_a_forged_reply_is_refused_before_anything_trusts_it(facts, problem):
    kernel = {
        "cubin": (b"\x7fELF" + bytes(16)).hex(),
        "entry": "flash_prefill",
        "num_warps": 4,
        "num_stages": 2,
        "shared": 0,
        "global_scratch_size": 0,
        "num_ctas": 1,
        **facts,
    }
    reply = {"kernels": {"flash_prefill": kernel}, "constants": {}, "constexprs": {"flash_prefill": {}}}
    with pytest.raises(AttnlabError) as caught:
        _checked(LAB2, reply, "sub.py", "sm_90", "")
    assert caught.value.message == f"sub.py: error: {problem}"


def test_a_triton_file_is_not_compiled_where_no_box_can_be_made(tmp_path, monkeypatch):
    # Its compile runs its Python: unboxed, that would be the student's code as the grader. Refused with
    # the reason and both ways out; --unsafe-cpu (the user's own file) lets it compile unboxed.
    from labrunner import box as boxes

    reason = "bubblewrap is not installed (apt-get install bubblewrap, or set ATTNLAB_BWRAP to a bwrap binary)"
    monkeypatch.setattr(boxes, "availability", lambda: reason)
    monkeypatch.delenv(boxes.INSIDE_VARIABLE, raising=False)
    error = refused(tmp_path, "open('/tmp/planted', 'w')\n")
    assert error.exit_code == ExitCode.ENVIRONMENT
    assert error.message == (
        f"sub.py: a Triton file's compile runs its Python, and no box can be made here: {reason}. "
        "It is not compiled unboxed; install bubblewrap, or pass --unsafe-cpu for a file you wrote yourself"
    )
    module = compile_triton(LAB2, SOLUTION, "solution.py", "sm_90", CompileLimits(unboxed_python=True))
    assert sorted(module.kernels) == ["flash_prefill"]
