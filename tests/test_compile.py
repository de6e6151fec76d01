"""The compile gate: NVRTC with the prelude, entry points, includes, launch constants, resources.

NVRTC runs here through cuda-bindings; no GPU or driver is involved.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labrunner.compile import nvrtc
from labrunner.compile.gate import compile_gate, load_submission
from labrunner.compile.includes import refuse_foreign_includes
from labrunner.compile.nvrtc import compose_source, parse_resources
from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.labs import LABS

REPO = Path(__file__).resolve().parent.parent
LAB2 = LABS["lab2"]
FLASH_SIGNATURE = (
    'extern "C" __global__ void flash_prefill(const float* q, const float* kCache, '
    "const float* vCache, float* out, int chunkLen, int prefixLen)"
)
FLASH_PARAMS = "const float* q, const float* kCache, const float* vCache, float* out, int chunkLen, int prefixLen"
NEEDS = f"lab2 needs: {FLASH_SIGNATURE}"
ALLOWED = "the driver's headers (<attnlab/...>), <cuda_runtime.h>, <cfloat>, <cmath>, <cstdint>, <math_constants.h>"
REFUSED = f"is refused: a submission may include only {ALLOWED}; paste what you need into the file itself"


def flash(params: str = FLASH_PARAMS, body: str = "", qualifier: str = 'extern "C" ', before: str = "") -> str:
    return f"{before}{qualifier}__global__ void flash_prefill({params}) {{{body}}}\n"


def submit(tmp_path: Path, source: str, name: str = "attention.cu"):
    path = tmp_path / name
    path.write_text(source)
    return load_submission(LAB2, path, name)


def refusal(tmp_path: Path, source: str) -> AttnlabError:
    with pytest.raises(AttnlabError, match=r"^attention\.cu(\(\d+\))?: error: ") as caught:
        submit(tmp_path, source)
    assert caught.value.exit_code == ExitCode.COMPILE_ERROR == 3
    return caught.value


@pytest.fixture
def no_nvrtc(monkeypatch):
    """Any attempt to reach NVRTC fails loudly: proves a refusal came before the compiler."""

    def unreachable(*args, **kwargs):
        raise RuntimeError("NVRTC was reached")

    monkeypatch.setattr(nvrtc, "run_compiler", unreachable)


# --- the shipped kernels ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "lab, file",
    [
        ("lab2", "starter.cu"),
        ("lab2", "solution.cu"),
        ("lab1", "starter.cu"),
        ("lab1", "solution.cu"),
        ("lab3", "starter.cu"),
        ("lab3", "solution.cu"),
    ],
)
def test_shipped_kernels_pass_the_gate(lab, file):
    path = REPO / "kernels" / lab / file
    submission = load_submission(LABS[lab], path, f"{lab}/{file}")
    wanted = {e.name: [p.ptx_type for p in e.parameters] for e in LABS[lab].entry_points}
    assert {name: submission.module.entry_points[name] for name in wanted} == wanted


def test_lab2_entry_point_types_from_ptx():
    module = compile_gate((REPO / "kernels/lab2/starter.cu").read_text(), "starter.cu")
    assert module.entry_points == {"flash_prefill": ["u64", "u64", "u64", "u64", "u32", "u32"]}


def test_solution_launch_constants_are_read_from_the_module():
    submission = load_submission(LAB2, REPO / "kernels/lab2/solution.cu", "solution.cu")
    assert submission.module.launch_constants == {
        "attnlab_threads": 128,
        "attnlab_rows_per_block": 64,
        "attnlab_heads_per_block": 1,
        "attnlab_smem_bytes": 52224,
    }
    assert submission.constants["attnlab_smem_bytes"] == 52224


def test_exported_constants_override_the_defaults(tmp_path):
    source = (
        'extern "C" __constant__ int attnlab_rows_per_block = 32;\n'
        'extern "C" __constant__ int attnlab_heads_per_block = 4;\n' + flash()
    )
    submission = submit(tmp_path, source)
    assert submission.constants == {
        "attnlab_threads": 256,
        "attnlab_rows_per_block": 32,
        "attnlab_heads_per_block": 4,
        "attnlab_smem_bytes": 0,
    }


def test_negative_constants_are_read_with_their_sign():
    module = compile_gate('extern "C" __constant__ int attnlab_threads = -5;\n' + flash(), "a.cu")
    assert module.launch_constants == {"attnlab_threads": -5}


@pytest.mark.slow
def test_registers_are_parsed_for_every_kernel():
    module = compile_gate((REPO / "kernels/lab1/solution.cu").read_text(), "solution.cu")
    assert set(module.resources) == {"attn_scores", "attn_softmax", "attn_weighted_sum"}
    for name, resources in module.resources.items():
        assert isinstance(resources.registers, int) and 0 < resources.registers <= 255, name
        assert isinstance(resources.spill_stores, int) and resources.spill_stores >= 0, name
    # Nothing spills, and both matmuls stay within 168 registers, the most that still lets three
    # blocks of 128 threads share an SM (the header's measured choice); a cap lost or a spill is a
    # regression in the reference.
    for name, resources in module.resources.items():
        assert resources.spill_stores == 0 and resources.spill_loads == 0, name
    for name in ("attn_scores", "attn_weighted_sum"):
        assert module.resources[name].registers <= 168, name


PTXAS_LOG = """\
ptxas info    : 24 bytes gmem
ptxas info    : Compiling entry function 'attn_weighted_sum' for 'sm_90'
ptxas info    : Function properties for attn_weighted_sum
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, used 1 barriers, 2176 bytes smem
ptxas info    : Compile time = 7.129 ms
ptxas info    : Compiling entry function 'f' for 'sm_90'
ptxas info    : Function properties for f
ptxas         .     1200 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 1200 bytes cumulative stack size
ptxas info    : Compile time = 171.229 ms
"""


def test_ptxas_report_is_parsed_exactly():
    resources = parse_resources(PTXAS_LOG)
    wsum, f = resources["attn_weighted_sum"], resources["f"]
    assert (wsum.registers, wsum.shared_bytes, wsum.stack_bytes, wsum.spill_stores, wsum.spill_loads) == (
        30,
        2176,
        0,
        0,
        0,
    )
    assert (f.registers, f.shared_bytes, f.stack_bytes, f.spill_stores, f.spill_loads) == (40, 0, 1200, 8, 12)


# --- compiler errors with the student's line numbers -----------------------------------------


def test_a_syntax_error_is_reported_at_the_students_line():
    source = "// line 1\n// line 2\n// line 3\n" + flash(body=" int x = ; ")  # the error is on line 4
    with pytest.raises(AttnlabError, match=r"^attention\.cu\(4\): error: expected an expression\n") as caught:
        compile_gate(source, "attention.cu")
    assert caught.value.exit_code == ExitCode.COMPILE_ERROR
    lines = caught.value.message.splitlines()
    assert lines[0] == "attention.cu(4): error: expected an expression"
    assert lines[-1] == '1 error detected in the compilation of "attention.cu".'
    assert "prelude" not in caught.value.message


def test_an_error_on_line_one_is_line_one():
    with pytest.raises(AttnlabError, match=r"^a\.cu\(1\): error: ") as caught:
        compile_gate("int int x;\n" + flash(), "a.cu")
    assert caught.value.exit_code == ExitCode.COMPILE_ERROR


def test_the_prelude_defines_infinity_and_the_contract_constants():
    body = ' static_assert(HQ == 32 && HKV == 8 && DH == 64 && GROUP == 4, ""); out[0] = -INFINITY; '
    module = compile_gate(flash(body=body), "a.cu")
    assert "flash_prefill" in module.entry_points


def test_compose_source_restores_line_one_and_quotes_the_name():
    assert compose_source("x\n", 'dir\\a"b.cu') == '#include <attnlab/prelude.cuh>\n#line 1 "dir\\\\a\\"b.cu"\nx\n'


def test_compiler_warnings_are_kept_with_the_students_line():
    module = compile_gate(flash(body="\n int unused = 3;\n"), "w.cu")
    assert len(module.warnings) == 1
    assert module.warnings[0].startswith("w.cu(2): warning")
    assert '"unused"' in module.warnings[0]


# --- entry points ----------------------------------------------------------------------------


def test_a_file_without_flash_prefill_is_missing_the_entry_point(tmp_path):
    error = refusal(tmp_path, 'extern "C" __global__ void other(float* out) {}\n')
    assert error.message == f"attention.cu: error: missing entry point flash_prefill; {NEEDS}"


def test_an_empty_file_is_said_to_be_empty(tmp_path):
    error = refusal(tmp_path, "")
    assert error.message == "attention.cu: error: file is empty; `attnlab starter lab2` prints the file to start from"


def test_a_kernel_without_extern_c_is_named(tmp_path):
    error = refusal(tmp_path, flash(qualifier=""))
    assert error.message == f'attention.cu: error: flash_prefill is not declared extern "C"; {NEEDS}'


def test_a_wrong_parameter_count_is_named(tmp_path):
    error = refusal(tmp_path, flash("const float* q, const float* kCache, const float* vCache, float* out, int n"))
    assert error.message == f"attention.cu: error: flash_prefill takes 5 parameters, not 6; {NEEDS}"


def test_a_pointer_where_an_int_belongs_is_named(tmp_path):
    error = refusal(tmp_path, flash(FLASH_PARAMS.replace("int prefixLen", "float* prefixLen")))
    assert error.message == (
        f"attention.cu: error: parameter 6 of flash_prefill is a pointer, but `int prefixLen` is expected; {NEEDS}"
    )


def test_an_int_where_a_pointer_belongs_is_named(tmp_path):
    error = refusal(tmp_path, flash(FLASH_PARAMS.replace("const float* q", "int q")))
    assert error.message == (
        f"attention.cu: error: parameter 1 of flash_prefill is a 32-bit integer, but "
        f"`const float* q` is expected; {NEEDS}"
    )


def test_a_float_where_an_int_belongs_is_named_as_a_float(tmp_path):
    error = refusal(tmp_path, flash(FLASH_PARAMS.replace("int chunkLen", "float chunkLen")))
    assert "parameter 5 of flash_prefill is a float" in error.message


@pytest.mark.parametrize(
    "old, new, message",
    [
        (
            "const float* kCache",
            "const double* kCache",
            "parameter 2 of flash_prefill is `const double*`, but `const float* kCache` is expected",
        ),
        ("float* out", "int* out", "parameter 4 of flash_prefill is `int*`, but `float* out` is expected"),
        (
            "float* out",
            "const float* out",
            "parameter 4 of flash_prefill is `const float*`, but `float* out` is expected",
        ),
        (
            "const float* q",
            "const __half* q",
            "parameter 1 of flash_prefill is `const __half*`, but `const float* q` is expected",
        ),
    ],
)
def test_a_pointer_to_the_wrong_type_is_named_with_the_type_written(tmp_path, old, new, message):
    before = "struct __half { unsigned short bits; };\n" if "__half" in new else ""
    error = refusal(tmp_path, flash(FLASH_PARAMS.replace(old, new), before=before))
    assert error.message == f"attention.cu: error: {message}; {NEEDS}"


@pytest.mark.parametrize(
    "old, new",
    [
        ("const float* q", "float* q"),  # an input without its const
        ("const float* kCache", "const float4* kCache"),  # a vector view of the same float data
        ("float* out", "float2* __restrict__ out"),
        ("int chunkLen", "unsigned int chunkLen"),
        ("int prefixLen", "const int prefixLen"),
    ],
)
def test_parameter_types_that_read_the_same_data_are_accepted(tmp_path, old, new):
    assert submit(tmp_path, flash(FLASH_PARAMS.replace(old, new))).module.entry_points["flash_prefill"]


# --- includes --------------------------------------------------------------------------------

DOTDOT = (
    "is refused: a header name may not contain `..`; include the driver's headers by their own names, "
    "as <attnlab/prelude.cuh>"
)
PRINTF = (
    "is refused: device printf needs no include: call printf in a kernel as it is (NVRTC and the CPU backend "
    "both provide it); delete the line"
)
BY_MACRO = (
    f"is refused: an #include must name its header literally, as <cmath>; a submission may include only {ALLOWED}"
)


@pytest.mark.parametrize(
    "head, line, directive, why",
    [
        ('#include "/etc/passwd"\n', 1, '#include "/etc/passwd"', REFUSED),
        ('// a comment\n#include "../x.h"\n', 2, '#include "../x.h"', DOTDOT),
        ('#define HEADER "/etc/passwd"\n#include HEADER\n', 2, "#include HEADER", BY_MACRO),
        ('#include \\\n"/etc/passwd"\n', 1, '#include "/etc/passwd"', REFUSED),
        ('#inc\\\nlude "/etc/passwd"\n', 1, '#include "/etc/passwd"', REFUSED),
        ("  #  include <stdio.h>\n", 1, "#include <stdio.h>", PRINTF),
        ("#include <cstdio>\n", 1, "#include <cstdio>", PRINTF),
        ("  #  include <stdlib.h>\n", 1, "#include <stdlib.h>", REFUSED),
        ("#include_next <x.h>\n", 1, "#include_next <x.h>", f"is refused: a submission may include only {ALLOWED}"),
        ('#/* hidden */include "/etc/passwd"\n', 1, '#include "/etc/passwd"', REFUSED),
    ],
)
def test_foreign_includes_are_refused_before_nvrtc(tmp_path, no_nvrtc, head, line, directive, why):
    error = refusal(tmp_path, head + flash())
    assert error.message == f"attention.cu({line}): error: `{directive}` {why}"


def test_the_drivers_own_header_is_allowed():
    module = compile_gate("#include <attnlab/prelude.cuh>\n" + flash(), "a.cu")
    assert "flash_prefill" in module.entry_points


def test_an_include_in_a_comment_is_not_a_directive():
    """Does not raise: a commented-out include is not read by the preprocessor, and refusing it
    would fail a correct file (tests/test_include_policy.py tries more such lines)."""
    refuse_foreign_includes('// #include "/etc/passwd"\n/* #include "/etc/passwd" */\n', "a.cu")


def test_a_dotdot_escape_from_the_drivers_headers_is_refused(tmp_path, no_nvrtc):
    error = refusal(tmp_path, "#include <attnlab/../../../../../../etc/passwd>\n" + flash())
    assert error.message == (
        "attention.cu(1): error: `#include <attnlab/../../../../../../etc/passwd>` is refused: "
        "a header name may not contain `..`; include the driver's headers by their own names, "
        "as <attnlab/prelude.cuh>"
    )


def test_an_include_split_by_a_multiline_comment_is_refused(tmp_path, no_nvrtc):
    error = refusal(tmp_path, '#/*\n*/include "/etc/passwd"\n' + flash())
    assert error.message == f'attention.cu(1): error: `#include "/etc/passwd"` {REFUSED}'


def test_a_digraph_include_is_refused(tmp_path, no_nvrtc):
    error = refusal(tmp_path, '%:include "/etc/passwd"\n' + flash())
    assert error.message == f'attention.cu(1): error: `#include "/etc/passwd"` {REFUSED}'


# --- launch constants ------------------------------------------------------------------------


def test_an_unknown_launch_constant_is_refused(tmp_path):
    error = refusal(tmp_path, 'extern "C" __constant__ int attnlab_tile = 64;\n' + flash())
    assert error.message == (
        "attention.cu: error: unknown launch constant attnlab_tile (lab2 reads "
        "attnlab_threads, attnlab_rows_per_block, attnlab_heads_per_block, attnlab_smem_bytes)"
    )


def test_heads_per_block_must_divide_32(tmp_path):
    error = refusal(tmp_path, 'extern "C" __constant__ int attnlab_heads_per_block = 3;\n' + flash())
    assert error.message == "attention.cu: error: launch constants: attnlab_heads_per_block = 3 must divide 32"


def test_every_invalid_constant_is_listed_once(tmp_path):
    # the bounds first, then the lab's own rules about the constants within them: 2048 threads is not
    # said twice (above its bound, and more than a block holds)
    source = (
        'extern "C" __constant__ int attnlab_threads = 2048;\n'
        'extern "C" __constant__ int attnlab_heads_per_block = 3;\n'
        'extern "C" __constant__ int attnlab_smem_bytes = 300000;\n' + flash()
    )
    error = refusal(tmp_path, source)
    assert error.message == (
        "attention.cu: error: launch constants: attnlab_threads = 2048 is above its bound 1024; "
        "attnlab_smem_bytes = 300000 is above its bound 232448; "
        "attnlab_heads_per_block = 3 must divide 32"
    )


def test_a_negative_rows_per_block_is_refused(tmp_path):
    error = refusal(tmp_path, 'extern "C" __constant__ int attnlab_rows_per_block = -1;\n' + flash())
    assert error.message == (
        "attention.cu: error: launch constants: attnlab_rows_per_block = -1 must be positive, "
        "or 0 for one block over all rows"
    )


# --- lab 3's int32 inputs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "old, new, message",
    [
        (
            "const int* blockTable",
            "const float* blockTable",
            "parameter 4 of decode_partial is `const float*`, but `const int* blockTable` is expected",
        ),
        (
            "const int* seqLens, float* partOut",
            "const unsigned* seqLens, float* partOut",
            "parameter 5 of decode_partial is `const unsigned int*`, but `const int* seqLens` is expected",
        ),
    ],
)
def test_lab3s_block_table_and_lengths_are_int32_pointers(tmp_path, old, new, message):
    source = (REPO / "kernels/lab3/starter.cu").read_text().replace(old, new, 1)
    path = tmp_path / "decode.cu"
    path.write_text(source)
    with pytest.raises(AttnlabError, match=r"^decode\.cu: error: parameter ") as caught:
        load_submission(LABS["lab3"], path, "decode.cu")
    assert caught.value.message.startswith(f"decode.cu: error: {message}; lab3 needs: ")
    assert caught.value.exit_code == 3


def test_lab3s_int32_inputs_may_drop_their_const(tmp_path):
    source = (REPO / "kernels/lab3/starter.cu").read_text().replace("const int* blockTable", "int* blockTable", 1)
    path = tmp_path / "decode.cu"
    path.write_text(source)
    assert load_submission(LABS["lab3"], path, "decode.cu").module.entry_points["decode_partial"]
