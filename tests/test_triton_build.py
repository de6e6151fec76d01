"""A Triton file's compile box: the file's own Python, hostile or wrong, gets a compile error in words, and
what comes back from the box is checked before anything trusts it (`labrunner/compile/triton_build.py`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from labrunner.compile.compiler_process import CompileLimits
from labrunner.compile.triton_build import _checked, compile_triton
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


def test_the_file_sees_none_of_the_graders_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_PLANTED_SECRET", "hunter2")
    error = refused(tmp_path, "import os\nraise RuntimeError(' '.join(sorted(os.environ)))\n")
    assert error.message == "sub.py(2): error: RuntimeError: "


SEALED = (
    " (a Triton file's top level runs sealed: it may define kernels and constants, and open no file, "
    "start no process or thread and reach no network)"
)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("import os\nos.listdir('/')\n", "sub.py(2): error: PermissionError: [Errno 1] Operation not permitted: '/'"),
        ("import os\nos.fork()\n", "sub.py(2): error: PermissionError: [Errno 1] Operation not permitted"),
        (
            "import threading\nthreading.Thread(target=print).start()\n",
            "sub.py(2): error: RuntimeError: can't start new thread",
        ),
        (
            "open('/job/planted', 'w')\n",
            "sub.py(1): error: PermissionError: [Errno 1] Operation not permitted: '/job/planted'",
        ),
    ],
)
def test_the_files_top_level_runs_sealed(tmp_path, text, said):
    # no files, no processes, no threads: each refused where the file asks, in its words, as its compile error
    error = refused(tmp_path, text)
    assert error.exit_code == ExitCode.COMPILE_ERROR
    assert error.message == f"{said}{SEALED}"


def test_an_import_the_kernels_cannot_use_is_said_as_such(tmp_path):
    error = refused(tmp_path, "import triton\nimport torch\n")
    assert error.message == (
        "sub.py(2): error: ImportError: No module named 'torch' here: a Triton file may import only what "
        "its kernels use (triton, triton.language, math, numpy and the standard modules already loaded)"
    )


@pytest.mark.parametrize("module", ["kernels", "tests", "scripts", "labrunner.pipeline.grade"])
def test_the_checkouts_own_folders_on_the_import_path_are_not_importable(tmp_path, module):
    # the box children put the package's parent folder on sys.path: after the seal nothing new loads from it
    error = refused(tmp_path, f"import triton\nimport {module}\n")
    assert error.message.startswith(f"sub.py(2): error: ImportError: No module named '{module.split('.')[0]}")
    assert "a Triton file may import only what its kernels use" in error.message


def test_a_file_that_never_returns_is_stopped_at_its_cpu_seconds(tmp_path):
    error = refused(tmp_path, "while True:\n    pass\n", CompileLimits(triton_cpu_s=2))
    assert error.message == "sub.py: error: the file's top level ran out of CPU time (--compile-timeout)"


def test_a_file_that_allocates_without_bound_is_a_compile_error(tmp_path):
    error = refused(tmp_path, "hoard = bytearray(1 << 40)\n")
    assert error.exit_code == ExitCode.COMPILE_ERROR
    assert error.message == "sub.py(1): error: MemoryError: "


@pytest.mark.parametrize(
    ("text", "stream", "limit"),
    [
        ("import sys\nwhile True:\n    sys.stderr.write('x' * 65536)\n", "stderr", "64 KiB"),
        ("while True:\n    print('x' * 65536)\n", "stderr", "64 KiB"),  # stdout is stderr there
        ("import os\nwhile True:\n    os.write(3, b'x' * 65536)\n", "stdout", "8 MiB"),  # the reply's own pipe
    ],
)
def test_a_flood_of_output_stops_the_box_and_is_named(tmp_path, text, stream, limit):
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    error = refused(tmp_path, text)
    assert error.message == (
        f"sub.py: error: the file's top level wrote more than {limit} to its {stream} (a flood) and was stopped; "
        "nothing it wrote was kept"
    )
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50 * 1024  # KiB: under 50 MB kept


def test_a_forged_reply_from_the_files_top_level_is_its_compile_error(tmp_path):
    # {"status": "no-triton"} would once have been the grader's fault (exit 6); now only data counts
    error = refused(tmp_path, 'import os\nos.write(3, b\'{"status": "no-triton"}\')\nos._exit(0)\n')
    assert error.exit_code == ExitCode.COMPILE_ERROR
    assert error.message == "sub.py: error: the file's top level stopped without an answer (exit status 0)"


def test_triton_missing_is_found_by_the_driver_before_any_box(tmp_path, monkeypatch):
    import importlib.metadata

    from labrunner.compile import triton_build

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(triton_build.importlib.metadata, "version", missing)
    monkeypatch.setattr(triton_build, "import_kernels", lambda *a: pytest.fail("a box was started"))
    error = refused(tmp_path, SOLUTION.read_text())
    assert error.exit_code == ExitCode.ENVIRONMENT
    assert error.message == (
        "Triton is not installed: install attnlab's Triton extra (pip install 'attnlab[triton]') to grade .py files"
    )


def test_a_file_that_patches_triton_at_its_top_level_changes_nothing_that_is_built(tmp_path):
    # the patch runs in the sealed import box; the compile builds the package in a process of its own
    source = SOLUTION.read_text() + (
        "\n\nclass Forged:\n    asm = {'cubin': b'#!/bin/sh'}\ntriton.compile = lambda *a, **k: Forged()\n"
    )
    path = tmp_path / "sub.py"
    path.write_text(source)
    forged = compile_triton(LAB2, path, "sub.py", "sm_90")
    clean = compile_triton(LAB2, SOLUTION, "sub.py", "sm_90")
    assert forged.kernels["flash_prefill"].cubin == clean.kernels["flash_prefill"].cubin
    assert forged.package == clean.package


SPLIT = """
import os
import triton
import triton.language as tl

attnlab_rows_per_block = 16
attnlab_constexprs = {"flash_prefill": {"BLOCK_M": 16}}

if os.environ.get("TRITON_INTERPRET") == "1":
    @triton.jit
    def flash_prefill(q, kCache, vCache, out, chunkLen, prefixLen, BLOCK_M: tl.constexpr):
        tl.store(out + tl.arange(0, BLOCK_M), 1.0)
else:
    @triton.jit
    def flash_prefill(q, kCache, vCache, out, chunkLen, prefixLen, BLOCK_M: tl.constexpr):
        tl.store(out + tl.arange(0, BLOCK_M), 0.0)
"""


def test_the_top_level_cannot_give_the_interpreter_another_kernel_than_the_gpu(tmp_path):
    path = tmp_path / "sub.py"
    path.write_text(SPLIT)
    on_the_cpu = compile_triton(LAB2, path, "sub.py", "sm_90", target="cpu")
    on_the_gpu = compile_triton(LAB2, path, "sub.py", "sm_90", target="gpu")
    assert on_the_cpu.package == on_the_gpu.package
    assert "0.0)" in on_the_gpu.package and "1.0)" not in on_the_gpu.package  # one import, one kernel, both backends
    assert on_the_cpu.kernels["flash_prefill"].cubin == b""  # the interpreter runs the package, never a cubin


HELPER_ERROR = """import triton
import triton.language as tl

attnlab_rows_per_block = 16
attnlab_constexprs = {"flash_prefill": {"BLOCK_M": 16}}


@triton.jit
def scores(a, b):
    return tl.dot(a, b, trans_b=True)


@triton.jit
def flash_prefill(q, kCache, vCache, out, chunkLen, prefixLen, BLOCK_M: tl.constexpr):
    r = tl.arange(0, BLOCK_M)
    x = tl.load(q + r[:, None] * 16 + r[None, :])
    tl.store(out + r[:, None] * 16 + r[None, :], scores(x, x))
"""


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            "    tl.core.builtins.exec('import os')\n",
            "sub.py(15): error: flash_prefill: tl.core.builtins is the module builtins, not Triton's language",
        ),
        (
            "    m = tl.core\n",
            "sub.py(15): error: flash_prefill: the module tl.core may be used only as `tl.core.name`",
        ),
        (
            "    tl.load.__globals__\n",
            "sub.py(15): error: flash_prefill: a kernel may not use the attribute __globals__",
        ),
        ("    __import__('os')\n", "sub.py(15): error: flash_prefill: a kernel may not use __import__"),
        (
            "    triton.knobs\n",
            "sub.py(15): error: flash_prefill: triton.knobs is the module triton.knobs, not Triton's language",
        ),
    ],
)
def test_a_kernel_reaches_nothing_but_the_language(tmp_path, body, said):
    text = HELPER_ERROR.replace("    r = tl.arange(0, BLOCK_M)\n", body + "    r = tl.arange(0, BLOCK_M)\n", 1)
    text = text.replace("import triton.language as tl\n", "import triton.language as tl\n", 1)
    assert refused(tmp_path, text).message == said


def test_a_file_may_not_set_a_blocks_threads(tmp_path):
    error = refused(tmp_path, SOLUTION.read_text() + "\nattnlab_threads = 1024\n")
    assert error.message == (
        "sub.py: error: attnlab_threads is not a Triton file's to set: a block's threads are 32 x "
        "attnlab_num_warps and its shared memory is what Triton's compiler allots"
    )


def test_a_kernel_the_lab_names_must_be_a_jit_function(tmp_path):
    error = refused(tmp_path, "def flash_prefill(q, k, v, out, c, p):\n    pass\n")
    assert error.message == (
        "sub.py: error: flash_prefill must be a @triton.jit function; the file defines a function by that name"
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


def test_a_device_side_tensor_descriptor_is_refused_with_what_to_write_instead():
    kernel = {
        "cubin": (b"\x7fELF" + bytes(16)).hex(),
        "entry": "flash_prefill",
        "num_warps": 4,
        "num_stages": 2,
        "shared": 0,
        "global_scratch_size": 128,
        "num_ctas": 1,
    }
    reply = {"kernels": {"flash_prefill": kernel}, "constexprs": {"flash_prefill": {}}}
    with pytest.raises(AttnlabError) as caught:
        _checked(LAB2, reply, "sub.py", "sm_90", "", package='{"source": "d = tl.make_tensor_descriptor(q, ...)"}')
    assert caught.value.message == (
        "sub.py: error: flash_prefill: a tensor descriptor made in the kernel (tl.make_tensor_descriptor) needs "
        "global scratch memory, which attnlab does not run; load the tile through tl.make_block_ptr (with "
        "boundary_check) or through pointers and a mask instead"
    )


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


@pytest.mark.parametrize("child", ["triton_import_child.py", "triton_child.py"])
def test_a_triton_box_child_finds_the_package_it_belongs_to_when_none_is_installed(tmp_path, child):
    # `python -I` drops PYTHONPATH and the script's folder: a checkout run with PYTHONPATH=. (as on a GPU host
    # without an install) must still find labrunner. A copy of the package proves the child found its own.
    import shutil
    import subprocess
    import sys

    import triton

    package = Path(__file__).resolve().parent.parent / "labrunner"
    copy = tmp_path / "checkout" / "labrunner"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    site_packages = str(Path(triton.__file__).resolve().parent.parent)  # Triton itself, without the .pth files
    code = (
        f"import sys, runpy; sys.path.append({site_packages!r}); "
        f"runpy.run_path({str(copy / 'compile' / child)!r}, run_name='child'); "
        "import labrunner; print(labrunner.__file__)"
    )
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(copy / "__init__.py")
