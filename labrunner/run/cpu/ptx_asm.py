"""Inline PTX on the CPU backend: each `asm` statement becomes a call into the shim, or the file is refused.

g++ would hand an `asm` template to the x86 assembler, so no template of a student's may reach it.
Before g++ runs, the file is read with the include policy's lexer (`labrunner.compile.includes`:
comments, string and character literals and raw strings read exactly as the compiler reads them),
and every `asm` statement (`asm`, and g++'s `__asm` and `__asm__`, which NVRTC does not know; with
`volatile` spelt any of its ways) is parsed here: its template (adjacent string literals, joined and
unescaped), its outputs, inputs and clobbers. Each PTX instruction in the template must be one of
`INSTRUCTIONS`, with its operands in register classes the GPU's assembler accepts for it (NVRTC was
asked: see tests/test_cpu_ptx.py). Such a statement is replaced by plain C++ that loads the operands into
32-bit registers, calls the instruction's emulation in `ptx.h` and stores the outputs back, all on
the statement's first line, followed by as many line breaks as the statement spanned, so every
later line keeps its number and g++'s messages still point at the student's lines. Anything else
(x86 `syscall`, an unknown PTX instruction, a wrong operand count, an `asm` label on a declaration)
refuses the whole file with one line naming the line, the instruction and what the CPU backend runs.

The rewrite cannot see what macros build (`a##sm` pasted into the keyword). The CPU build reads the
file's preprocessed text too, before g++ compiles it (module.py, with labrunner/compile/attributes.py),
and any asm keyword left there is one a macro built: the file is refused at that line, so whatever
the rewrite did not see never reaches the assembler either. A file that redefines or undefines
those names is refused here, since the rewrite needs the keyword to mean what it reads.

An `asm` in a branch the preprocessor drops (`#if 0`) is read and judged too: the file is read
before the preprocessor runs, as the include policy reads it.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labrunner.compile.includes import ReportedLines, Token, code_tokens
from labrunner.exit_codes import AttnlabError

__all__ = ["AsmRefused", "INSTRUCTIONS", "SUPPORTED", "instruction_of", "rewrite_inline_asm"]

ASM_KEYWORDS = frozenset({"asm", "__asm", "__asm__"})
# Qualifiers that change nothing here (`inline` is a size hint for the compiler's inliner).
_QUALIFIERS = frozenset({"volatile", "__volatile", "__volatile__", "inline", "__inline", "__inline__"})


@dataclass(frozen=True)
class Operand:
    name: str  # as the PTX ISA calls it: d, a, D, A, B, C, dst, src, cp-size, src-size, N, p, membermask
    registers: int  # 1 for a scalar, else the size of the {vector}
    written: bool  # the instruction writes it (a destination), else reads it
    classes: str  # the register classes allowed: for a %N the constraint letter, "r" (a .b32 register, a
    # 32-bit integer), "f" (.f32, a float), "l" (.b64, a 64-bit integer or a pointer), "n" (an integer
    # constant); for a register the statement declares itself (.reg), "r" (.b32), "u" (.u32 or .s32),
    # "f" (.f32) or "p" (.pred, a predicate)
    address: bool = False  # written in brackets, [%N]: an address the instruction reads through
    immediates: range | tuple[int, ...] = ()  # the integers it may be written as, in the template itself
    optional: bool = False  # may be left out (the last operands only)
    absent: int | None = None  # left out, the emulation gets the operand at this position instead
    at_most: int | None = None  # written as an integer, it may not exceed the integer at this position
    literal: str = ""  # "int" or "float": the 32-bit literal it may be written as (-1, 0x1f; 0f3F800000, 1.5)
    piped: bool = False  # written after the operand before it with `|` (`d|p`), and may be left out


@dataclass(frozen=True)
class Instruction:
    emulation: str  # the function in ptx.h, namespace attnlab::ptx
    operands: tuple[Operand, ...]
    sited: bool  # the emulation also takes the statement's file and line: a warp collective meets
    # its warp there, and a runtime error names it
    by_value: bool = False  # the emulation takes each operand it reads by its value (a register's bits, an
    # immediate, a 64-bit or constant operand), and each it writes by register number; otherwise every
    # operand by register number
    constants: tuple[str, ...] = ()  # C++ constants it takes first (a comparison, a shuffle's mode)


# The PTX the CPU backend runs: what a 3xTF32 or a 3xFP16 tensor-core kernel needs, the asynchronous
# copies of a pipelined one, the fast exponent, logarithm and reciprocal of a softmax, the warp shuffle of
# a reduction, and the predicates, moves and blocks that guard them. The register classes are those ptxas
# accepts for sm_90 (NVRTC was asked: tests/test_cpu_ptx.py): a cvt's destination is a .b32 ("=r"; "=f"
# is refused), its sources .f32 or .b32; an mma's A and B are .b32 bit patterns ("r" only: a tf32 each, or
# two f16 packed), its C and D .f32 or .b32.
#
# A register's type must suit the instruction's: a .b32 (what "r" gives) suits every 32-bit type, a .f32
# (what "f" gives) only .f32 and .b32 instructions, a .u32 or .s32 only integer and .b32 ones; an integer
# literal suits an integer or .b32 operand, a float literal (0f3F800000, 1.5) a .f32 one.
#
# cp.async (PTX ISA, "Data Movement and Conversion Instructions: cp.async"): dst is a shared-window
# address, a .b32 ("r", what `static_cast<unsigned>(__cvta_generic_to_shared(p))` gives) or a .b64
# ("l"); src a 64-bit global address ("l" only); cp-size an integer, in the template or as an "n" operand
# (4, 8 or 16 for .ca, 16 for .cg); the optional src-size a .b32 ("r") or an immediate, at most cp-size
# (ptxas refuses more), the bytes past it zero-filled. Left out, src-size is cp-size. wait_group's N is an
# immediate (a literal or an "n" operand). A prefetch size (.L2::64B, .L2::128B, .L2::256B) and the
# `.shared::cta` spelling change where the bytes are cached, never which land, so they run as the plain
# form; the cache-hint and ignore-src forms are refused.
_MMA_OPERANDS = (
    Operand("D", 4, True, "fr"),
    Operand("A", 4, False, "r"),
    Operand("B", 2, False, "r"),
    Operand("C", 4, False, "fr"),
)
_ANY_COUNT = range(2**31)
_B32, _F32, _INT32 = "rfu", "rf", "ru"  # the registers a .b32, a .f32 and a .u32 or .s32 operand takes


def _cp_async_operands(cp_sizes: tuple[int, ...]) -> tuple[Operand, ...]:
    return (
        Operand("dst", 1, False, "rl", address=True),
        Operand("src", 1, False, "l", address=True),
        Operand("cp-size", 1, False, "n", immediates=cp_sizes),
        Operand("src-size", 1, False, "rn", immediates=_ANY_COUNT, optional=True, absent=2, at_most=2),
    )


def _read(name: str, classes: str) -> Operand:
    """A 32-bit operand the instruction reads: a register, or a literal of its type."""
    return Operand(name, 1, False, classes, literal="float" if classes == _F32 else "int")


# shfl.sync.mode.b32 d[|p], a, b, c, membermask (PTX ISA, "shfl.sync"): every operand a .b32, b, c and the
# mask registers or integers; the optional p, written after d with `|`, says whether the source lane was in
# range. The lanes meet in the runtime's warp shuffle (fiber_warp.h), as __shfl_*_sync's do.
def _shfl(mode: str) -> Instruction:
    operands = (
        Operand("d", 1, True, _B32),
        Operand("p", 1, True, "p", piped=True),
        *(_read(name, _B32) for name in ("a", "b", "c", "membermask")),
    )
    return Instruction("shfl_sync", operands, sited=True, by_value=True, constants=(f"SHFL_{mode.upper()}",))


# setp.CmpOp{.ftz}.type p[|q], a, b: p = a CmpOp b (q, written after p with `|`, its negation). The
# comparisons each type has (ptxas refuses the others): .b32 only eq and ne; .u32 and .s32 the ordered
# six, .u32 also lo, ls, hi and hs (its lt, le, gt and ge); .f32 the ordered six (false where either is
# NaN), their unordered forms (true there) and num and nan.
_SETP = {
    "b32": (_B32, ("eq", "ne")),
    "u32": (_INT32, ("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs")),
    "s32": (_INT32, ("eq", "ne", "lt", "le", "gt", "ge")),
    "f32": (_F32, ("eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")),
    "ftz.f32": (_F32, ("eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")),
}
_TYPES32 = {"b32": _B32, "u32": _INT32, "s32": _INT32, "f32": _F32}


def _setp(kind: str, classes: str, comparison: str) -> Instruction:
    operands = (Operand("p", 1, True, "p"), Operand("q", 1, True, "p", piped=True), _read("a", classes))
    return Instruction(
        f"setp_{kind.replace('.', '_')}",
        (*operands, _read("b", classes)),
        sited=False,
        by_value=True,
        constants=(f"CMP_{comparison.upper()}",),
    )


def _unary(emulation: str) -> Instruction:
    return Instruction(emulation, (Operand("d", 1, True, _F32), _read("a", _F32)), sited=False, by_value=True)


INSTRUCTIONS = {
    "cvt.rna.tf32.f32": Instruction(
        "cvt_rna_tf32_f32", (Operand("d", 1, True, "r"), Operand("a", 1, False, "fr")), sited=False
    ),
    "cvt.rn.f16x2.f32": Instruction(
        "cvt_rn_f16x2_f32",
        (Operand("d", 1, True, "r"), Operand("a", 1, False, "fr"), Operand("b", 1, False, "fr")),
        sited=False,
    ),
    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32": Instruction(
        "mma_m16n8k8_row_col_f32_tf32", _MMA_OPERANDS, sited=True
    ),
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32": Instruction(
        "mma_m16n8k16_row_col_f32_f16", _MMA_OPERANDS, sited=True
    ),
    "cp.async.ca.shared.global": Instruction(
        "cp_async_ca_shared_global", _cp_async_operands((4, 8, 16)), sited=True, by_value=True
    ),
    "cp.async.cg.shared.global": Instruction(
        "cp_async_cg_shared_global", _cp_async_operands((16,)), sited=True, by_value=True
    ),
    "cp.async.commit_group": Instruction("cp_async_commit_group", (), sited=False),
    "cp.async.wait_group": Instruction(
        "cp_async_wait_group", (Operand("N", 1, False, "n", immediates=_ANY_COUNT),), sited=True, by_value=True
    ),
    "cp.async.wait_all": Instruction("cp_async_wait_all", (), sited=False),
    **{f"shfl.sync.{mode}.b32": _shfl(mode) for mode in ("bfly", "up", "down", "idx")},
    **{
        f"{op}.approx{ftz}.f32": _unary(f"{op}_approx{ftz.replace('.', '_')}_f32")
        for op in ("ex2", "lg2", "rcp")
        for ftz in ("", ".ftz")
    },
    **{
        f"setp.{comparison}.{kind}": _setp(kind, classes, comparison)
        for kind, (classes, comparisons) in _SETP.items()
        for comparison in comparisons
    },
    **{
        f"mov.{kind}": Instruction("mov_32", (Operand("d", 1, True, classes), _read("a", classes)), False, True)
        for kind, classes in _TYPES32.items()
    },
    **{
        f"selp.{kind}": Instruction(
            "selp_32",
            (Operand("d", 1, True, classes), _read("a", classes), _read("b", classes), Operand("c", 1, False, "p")),
            sited=False,
            by_value=True,
        )
        for kind, classes in _TYPES32.items()
    },
}
SUPPORTED = (  # for messages: the instructions by family, as INSTRUCTIONS holds them
    "cvt.rna.tf32.f32, cvt.rn.f16x2.f32, mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, "
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32, cp.async.ca.shared.global, cp.async.cg.shared.global, "
    "cp.async.commit_group, cp.async.wait_group, cp.async.wait_all, shfl.sync.{bfly,up,down,idx}.b32, "
    "ex2.approx{.ftz}.f32, lg2.approx{.ftz}.f32, rcp.approx{.ftz}.f32, setp.CmpOp{.ftz}.{b32,u32,s32,f32}, "
    "mov.{b32,u32,s32,f32} and selp.{b32,u32,s32,f32}, in { } blocks with .reg declarations of .pred and "
    '32-bit registers and @p guards, on numbered "r", "f", "l" and "n" operands'
)
CP_ASYNC_FORMS = (
    "cp.async.ca.shared.global [dst], [src], 4, 8 or 16{, src-size}, cp.async.cg.shared.global "
    "[dst], [src], 16{, src-size} (each with .shared::cta and a prefetch size .L2::64B, .L2::128B or "
    ".L2::256B, or without), cp.async.commit_group, cp.async.wait_group N and cp.async.wait_all"
)
# What a cp.async may carry that changes nothing a kernel can observe (where the bytes are cached).
_CP_ASYNC_HINTS = re.compile(r"(?<=\.shared)::cta(?=\.)|\.L2::(?:64|128|256)B$")
# The register types a statement may declare (.reg), as their classes; the rest it is refused.
_REGISTER_TYPES = {".pred": "p", ".b32": "r", ".u32": "u", ".s32": "u", ".f32": "f"}
_CONSTRAINT = re.compile(r"(?P<mode>[=+]?)&?(?P<cls>[rfln])")
_CLOBBERS = frozenset({"memory"})


def instruction_of(opcode: str) -> Instruction | None:
    """The instruction an opcode runs as: its own entry, or for a cp.async with a prefetch size or
    `.shared::cta`, the plain form's."""
    if opcode.startswith("cp.async.c"):
        opcode = _CP_ASYNC_HINTS.sub("", opcode)
    return INSTRUCTIONS.get(opcode)


class AsmRefused(Exception):
    """The file holds inline assembly the CPU backend will not run: one line, naming where and why."""


def rewrite_inline_asm(source: str, filename: str) -> str:
    """The source with every asm statement turned into shim calls, line numbers kept; raises AsmRefused."""
    if "asm" not in source:
        return source  # nothing to read: the common case costs one substring search
    try:
        tokens = code_tokens(source, filename)
    except AttnlabError as unreadable:
        raise AsmRefused(unreadable.message) from None
    text = source.replace("\r\n", "\n")  # the offsets the lexer gives
    reader = _Reader(text, tokens, filename)
    edits = reader.run()
    if not edits:
        return source
    pieces, last = [], 0
    for start, end, replacement in edits:
        pieces += [text[last:start], replacement]
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


class _Reader:
    def __init__(self, text: str, tokens: list[Token], filename: str):
        self.text = text
        self.filename = filename
        self.tokens = tokens
        self.index = {token.start: i for i, token in enumerate(tokens)}
        self.line = ReportedLines([])

    def refuse(self, token: Token, what: str) -> AsmRefused:
        return AsmRefused(f"{self.filename}({self.line(token.line)}): error: {what}")

    def run(self) -> list[tuple[int, int, str]]:
        edits = []
        tokens = self.tokens
        directive: str | None = None  # the directive the tokens are in, if any
        directive_start = 0
        i = 0
        while i < len(tokens):
            token = tokens[i]
            if token.kind == "directive":
                directive, directive_start = token.text, i
                if directive in ("define", "undef"):
                    name = tokens[i + 1] if i + 1 < len(tokens) else None
                    if name is not None and name.kind == "word" and name.text in ASM_KEYWORDS:
                        raise self.refuse(
                            token,
                            f"`#{directive} {name.text}` is refused: the CPU backend reads "
                            "inline assembly itself and needs the keyword kept as it is; "
                            "give the macro another name",
                        )
            elif token.kind == "newline":
                if directive == "line":
                    self._line_directive(tokens[directive_start + 1 : i], token)
                directive = None
            elif token.kind == "word" and token.text in ASM_KEYWORDS and directive in (None, "define"):
                end, replacement = self.statement(i, in_macro=directive == "define")
                breaks = self.text.count("\n", token.start, tokens[end].end)
                edits.append(
                    (token.start, tokens[end].end, replacement + (" \\\n" if directive == "define" else "\n") * breaks)
                )
                i = end + 1
                continue
            i += 1
        return edits

    def _line_directive(self, arguments: list[Token], newline: Token) -> None:
        if arguments and arguments[0].kind == "number" and arguments[0].text.isdigit():
            self.line.marks.append((newline.line + 1, int(arguments[0].text)))

    # --- one statement ------------------------------------------------------------------------

    def statement(self, at: int, in_macro: bool) -> tuple[int, str]:
        """Parse the asm statement whose keyword is tokens[at]: (the index of its closing parenthesis,
        the C++ that replaces keyword to parenthesis). The `;` after it stays: a macro may leave it to
        its caller, so the replacement is one `do { ... } while (0)`, a statement wherever asm was one."""
        keyword = self.tokens[at]
        code = self._code_tokens(at, in_macro)
        k = 1
        while k < len(code) and code[k].kind == "word" and code[k].text in _QUALIFIERS:
            k += 1
        if k >= len(code) or code[k].text != "(":
            after = f" `{code[k].text}`" if k < len(code) else ""
            raise self.refuse(
                keyword,
                f"`{keyword.text}` followed by{after or ' nothing'}: the CPU backend runs "
                'only asm statements of the form asm volatile("template" : outputs : '
                f"inputs), with the PTX instructions {SUPPORTED}",
            )
        close = self._matching(code, k, keyword)
        ends = code[close + 1].text == ";" if close + 1 < len(code) else in_macro
        if not ends:
            raise self.refuse(
                keyword,
                f"`{keyword.text}(...)` is not a statement ending in `;` (an asm label on a "
                "declaration?): the CPU backend runs only asm statements inside functions, "
                f"with the PTX instructions {SUPPORTED}",
            )
        sections = _split_top_level(code[k + 1 : close], ":")  # template, outputs, inputs, clobbers (`::` is two)
        template_tokens = sections[0]
        template = self._template(template_tokens, keyword)
        if len(sections) == 1 and template.strip() and not _only_known_opcodes(template):
            raise self.refuse(
                keyword,
                f"`{_shown(template)}` is inline assembly without operands, which the CPU "
                f"backend cannot run: it runs only the PTX instructions {SUPPORTED}",
            )
        if len(sections) > 4:
            raise self.refuse(
                keyword,
                f"`asm goto` labels cannot run on the CPU backend, which runs only the PTX instructions {SUPPORTED}",
            )
        # Every instruction is one that runs before any operand is read: a refusal names the instruction
        # first (an operand constraint the backend lacks, "d" say, belongs to an instruction it lacks too).
        _ptx_program(template, lambda what: self.refuse(keyword, what))
        outputs = self._operands(sections[1], keyword, output=True) if len(sections) > 1 else []
        inputs = self._operands(sections[2], keyword, output=False) if len(sections) > 2 else []
        for clobber in sections[3] if len(sections) > 3 else []:
            if clobber.text == ",":
                continue
            if clobber.kind != "string" or clobber.text.strip('"') not in _CLOBBERS:
                raise self.refuse(
                    keyword,
                    f'the clobber {_shown(clobber.text)} means nothing on the CPU backend; it takes only "memory"',
                )
        operands = outputs + inputs
        program = self._instructions(template, operands, keyword)
        return self.index[code[close].start], _emit(operands, program)

    def _code_tokens(self, at: int, in_macro: bool) -> list[Token]:
        """The statement's tokens from its keyword to its `;` (or to the end of the macro or file),
        line ends outside a macro skipped; a directive inside the statement is refused."""
        keyword = self.tokens[at]
        found, depth = [], 0
        for token in self.tokens[at:]:
            if token.kind == "newline":
                if in_macro:
                    break
                continue
            if token.kind == "directive":
                raise self.refuse(
                    keyword,
                    f"a `#{token.text}` inside the `{keyword.text}` statement: the CPU backend "
                    "reads each asm statement whole; move the directive outside it",
                )
            found.append(token)
            if token.text in "([{" and token.kind == "punct":
                depth += 1
            elif token.text in ")]}" and token.kind == "punct":
                depth -= 1
                if depth < 0:
                    break
            elif token.text == ";" and depth == 0:
                break
        return found

    def _matching(self, code: list[Token], open_at: int, keyword: Token) -> int:
        depth = 0
        for j in range(open_at, len(code)):
            if code[j].kind != "punct":
                continue
            if code[j].text in "([{":
                depth += 1
            elif code[j].text in ")]}":
                depth -= 1
                if depth == 0:
                    return j
        raise self.refuse(keyword, f"the `{keyword.text}(` statement never closes its parenthesis")

    def _template(self, tokens: list[Token], keyword: Token) -> str:
        if not tokens:
            raise self.refuse(keyword, f"`{keyword.text}` without a template string")
        parts = []
        for token in tokens:
            before = self.text[token.start - 1] if token.start > 0 else " "
            if token.kind == "string" and token.text.endswith('"') and not (before.isalnum() or before == "_"):
                parts.append(_unescape(token.text[1:-1], lambda what: self.refuse(keyword, what)))
            elif token.kind == "raw" and token.text.startswith('R"') and token.text.endswith('"'):
                delimiter = token.text[2 : token.text.index("(")]
                parts.append(token.text[3 + len(delimiter) : -2 - len(delimiter)])
            else:
                raise self.refuse(
                    keyword, f"the template of `{keyword.text}` must be plain string literals, got {_shown(token.text)}"
                )
        return "".join(parts)

    def _operands(self, tokens: list[Token], keyword: Token, output: bool) -> list[tuple[str, str, str]]:
        """(mode, class, C++ expression) per operand: mode "=" or "+" for outputs, "" for inputs."""
        found = []
        for piece in _split_commas(tokens):
            if not piece:
                if tokens:
                    raise self.refuse(keyword, f"an empty operand in `{keyword.text}`")
                continue
            if piece[0].text == "[":
                raise self.refuse(
                    keyword,
                    'named operands (`[name] "r"(x)`) are not read by the CPU backend; '
                    "number them (%0, %1, ...) instead",
                )
            constraint = piece[0].text[1:-1] if piece[0].kind == "string" and piece[0].text.endswith('"') else None
            if (
                constraint is None
                or len(piece) < 3
                or piece[1].text != "("
                or piece[-1].text != ")"
                or self._matching(piece, 1, keyword) != len(piece) - 1
            ):
                raise self.refuse(
                    keyword,
                    f'an operand of `{keyword.text}` must read "constraint"(expression), got '
                    f"{_shown(' '.join(t.text for t in piece))}",
                )
            match = _CONSTRAINT.fullmatch(constraint)
            mode = match.group("mode") if match else ""  # the group always takes part: "" is no mode
            if match is None or (mode == "") == output or (output and match.group("cls") in "ln"):
                wanted = (
                    '"=r", "=f", "+r" or "+f" (r: a 32-bit integer, f: a float)'
                    if output
                    else '"r", "f", "l" or "n" (r: a 32-bit integer, f: a float, l: a 64-bit integer or a pointer, '
                    "n: an integer constant)"
                )
                raise self.refuse(
                    keyword,
                    f'the {"output" if output else "input"} constraint "{_shown(constraint)}" is '
                    f"not one the CPU backend runs: use {wanted}",
                )
            for token in piece[2:-1]:
                if token.kind == "word" and token.text in ASM_KEYWORDS:
                    raise self.refuse(keyword, f"`{token.text}` inside an operand of another asm statement")
            found.append((mode, match.group("cls"), self._expression(piece[2:-1], keyword)))
        return found

    def _expression(self, tokens: list[Token], keyword: Token) -> str:
        if not tokens:
            raise self.refuse(keyword, f"an operand of `{keyword.text}` without an expression")
        out = tokens[0].text
        for previous, token in zip(tokens, tokens[1:]):
            gap = self.text[previous.end : token.start].replace("\\\n", "")
            out += ("" if gap == "" else " ") + token.text
        if "\n" in out:
            raise self.refuse(keyword, "an operand expression that spans lines inside a literal")
        return out

    def _instructions(self, template: str, operands: list[tuple[str, str, str]], keyword: Token) -> _Program:
        """Parse and check the template's instructions against INSTRUCTIONS and the operands: each
        instruction with the C++ arguments its emulation gets (a register number, or a value), its guard
        and the checks g++ makes of its constant operands; the registers the template declares follow
        the operands in the register file, one slot each."""

        def refuse(what: str) -> AsmRefused:
            return self.refuse(keyword, what)

        registers = list(operands)  # the operands, then each register the template declares
        written = {k for k, (mode, _, _) in enumerate(operands) if mode == "+"}
        scopes: list[dict[str, _Reg]] = [{}]
        found: list[_Step] = []

        def lookup(name: str) -> _Reg:
            for scope in reversed(scopes):
                if name in scope:
                    return scope[name]
            if name.lstrip("%") in _SPECIAL_REGISTERS:
                raise refuse(
                    f"`{name}` is a special register, which the CPU backend does not read in inline PTX: pass "
                    "its value in as an operand from CUDA C++ (threadIdx.x % 32 for %laneid)"
                )
            raise refuse(f"`{name}` is no register declared in the statement (declare it: `.reg .b32 {name};`)")

        for item in _ptx_program(template, refuse):
            if item == "{":
                scopes.append({})
            elif item == "}":
                scopes.pop()
            elif isinstance(item, _Declaration):
                for name in item.names:
                    if name in scopes[-1]:
                        raise refuse(f"the register `{name}` is declared twice in one block")
                    scopes[-1][name] = _Reg(len(registers), name)
                    registers.append(("+", item.cls, item.type))
                    written.add(len(registers) - 1)
            elif isinstance(item, _Statement):
                found.append(self._step(item, registers, len(operands), written, lookup, refuse))
        for k, (mode, cls, _) in enumerate(operands):
            if mode == "=" and k not in written:
                raise refuse(f'%{k} is an output ("={cls}") that no instruction writes')
        return _Program(found, len(registers) - len(operands))

    def _step(
        self,
        item: _Statement,
        registers: list[_Register],
        count: int,
        written: set[int],
        lookup: _Lookup,
        refuse: _Refuse,
    ) -> _Step:
        """One instruction of the template, checked: its emulation's arguments, guard and constant checks."""
        opcode, groups = _parse_statement(item.text, refuse, lookup)
        instruction = instruction_of(opcode)
        assert instruction is not None  # _parse_statement refuses an opcode that runs as nothing
        specs = instruction.operands
        plain = [spec for spec in specs if not spec.piped]
        names = ", ".join(operand.name for operand in plain)
        required = sum(not operand.optional for operand in plain)
        given = [group for group in groups if not isinstance(group, _Piped)]
        if not required <= len(given) <= len(plain):
            counts = f"{required} or {len(plain)}" if required < len(plain) else f"{len(plain)}"
            raise refuse(
                f"`{opcode}` takes {counts} operands{f' ({names})' if plain else ''}, this one has {len(given)}"
            )
        aligned: list[tuple[Operand, Any]] = []  # each operand with what the template gives (None: left out)
        rest = list(groups)
        for spec in specs:
            if spec.piped:
                piped = rest.pop(0) if rest and isinstance(rest[0], _Piped) else None
                aligned.append((spec, piped.group if isinstance(piped, _Piped) else None))
            elif rest and isinstance(rest[0], _Piped):
                raise refuse(f"`{opcode}` takes no `|` operand after its {aligned[-1][0].name}")
            else:
                aligned.append((spec, rest.pop(0) if rest else None))
        arguments: list[list[str]] = []
        constant: list[str | None] = []  # each operand's value where it is a constant g++ knows
        checks: list[str] = []
        for spec, group in aligned:
            if group is None:
                arguments.append(arguments[spec.absent] if spec.absent is not None else ["-1"])
                constant.append(constant[spec.absent] if spec.absent is not None else None)
                continue
            arguments.append(
                self._operand_arguments(opcode, instruction, spec, group, registers, count, written, refuse)
            )
            constant.append(_constant_of(group, registers))
            if isinstance(group, list) and registers[group[0]][1] == "n" and spec.immediates:
                checks.append(_static_check(opcode, spec, constant[-1]))
        for k, (spec, group) in enumerate(aligned):
            if spec.at_most is None or group is None:
                continue
            at = spec.at_most
            limit = aligned[at][1]
            if isinstance(group, _Immediate) and isinstance(limit, _Immediate):
                if group.value > limit.value:
                    raise refuse(
                        f"`{opcode}`'s {spec.name} is at most its {specs[at].name}, {limit.value}, got {group.value}"
                    )
            elif constant[k] is not None and constant[at] is not None:
                message = _cxx_string(f"`{opcode}`'s {spec.name} is at most its {specs[at].name}")
                checks.append(f"static_assert({constant[k]} <= {constant[at]}, {message});")
        for spec, group in aligned:
            if spec.written and group is not None:
                written.update(group)
        guard = None
        if item.guard is not None:
            predicate = lookup(item.guard)
            if registers[predicate][1] != "p":
                raise refuse(f"`@{item.guard}` guards with a register that is no predicate (declare `.reg .pred`)")
            guard = (int(predicate), item.negated)
        return _Step(instruction, [argument for group in arguments for argument in group], guard, checks)

    @staticmethod
    def _operand_arguments(
        opcode: str,
        instruction: Instruction,
        spec: Operand,
        group: list[int] | tuple[int, ...] | _Immediate,
        operands: list[_Register],
        count: int,
        written: set[int],
        refuse: _Refuse,
    ) -> list[str]:
        """Check one operand of an instruction against its spec; the C++ argument(s) it becomes. `operands`
        holds the statement's operands, then the registers its template declares; `count` is how many of
        them are operands."""
        if isinstance(group, _Immediate):
            if spec.immediates and not group.floating:
                if group.value not in spec.immediates:
                    raise refuse(f"`{opcode}`'s {spec.name} is {_choices(spec.immediates)}, got {group.text}")
                return [str(group.value)]
            if spec.literal and group.floating == (spec.literal == "float") and not spec.written:
                return [f"0x{group.value & 0xFFFFFFFF:08x}u"]
            raise refuse(f"`{opcode}`'s {spec.name} is {_shape(spec)}, got {group.text}")
        if (
            not spec.classes
            or isinstance(group, _Address) != spec.address
            or len(group) != spec.registers
            or (spec.registers > 1) != (type(group) is tuple)
        ):
            raise refuse(f"`{opcode}`'s {spec.name} is {_shape(spec)}, got {_group_text(group)}")
        arguments = []
        for number in group:
            if not isinstance(number, _Reg) and number >= count:
                raise refuse(
                    f"`%{number}` in `{opcode}` names no operand: the statement has {count}"
                    + (f" (%0 to %{count - 1})" if count else "")
                )
            mode, cls, _ = operands[number]
            shown = f"{_ref_name(number)} is {_ref_kind(number, operands[number])}"
            if spec.classes == "p" and cls != "p":
                raise refuse(
                    f"`{opcode}`'s {spec.name} is a predicate, but {shown}: declare one in the statement "
                    "(`.reg .pred p;`) and name it"
                )
            if cls not in spec.classes and not (cls == "n" and spec.literal == "int" and not spec.written):
                allowed = " or ".join(f'"{c}"' for c in spec.classes if c not in "up")
                what = "registers" if spec.classes != "n" else "operands (an integer constant)"
                raise refuse(f"`{opcode}` takes {spec.name} in {allowed} {what}, but {shown}")
            if spec.written and mode == "":
                raise refuse(
                    f"`{opcode}` writes its {spec.name} to %{number}, which is an input; make it an "
                    f'output ("={cls}" or "+{cls}")'
                )
            if not spec.written and number not in written and mode == "=":
                raise refuse(
                    f"`{opcode}` reads its {spec.name} from %{number}, which is write-only "
                    f'("={cls}"), so its value is undefined; make it "+{cls}"'
                )
            if not instruction.by_value or spec.written:
                arguments.append(str(int(number)))
            else:
                arguments.append(
                    {"l": f"attnlab_ptx_l{number}", "n": f"attnlab_ptx_n{number}"}.get(cls, f"attnlab_ptx_r[{number}]")
                )
        if spec.written and len(set(group)) != len(group):
            raise refuse(f"`{opcode}` writes the same operand twice in its {spec.name}")
        return arguments


# --- the template's PTX -------------------------------------------------------------------------


class _Address(tuple[int, ...]):
    """[%N]: an address operand (a tuple of the one operand number, so it is read like a register)."""


class _Reg(int):
    """A register the template declares (.reg), by its slot in the register file after the operands."""

    name: str

    def __new__(cls, slot: int, name: str) -> _Reg:
        reg = super().__new__(cls, slot)
        reg.name = name
        return reg


@dataclass(frozen=True)
class _Immediate:
    value: int  # an integer's value, or a float's bit pattern
    text: str = ""  # as written
    floating: bool = False


@dataclass(frozen=True)
class _Piped:
    """The operand written after another with `|` (`%0|p`)."""

    group: list[int]


@dataclass(frozen=True)
class _Declaration:
    type: str  # .pred, .b32, ...
    cls: str  # its class: "p", "r", "u" or "f"
    names: tuple[str, ...]


@dataclass(frozen=True)
class _Statement:
    text: str  # the instruction, its guard taken off
    guard: str | None = None  # `@p`: the predicate's name
    negated: bool = False  # `@!p`


@dataclass
class _Step:
    instruction: Instruction
    arguments: list[str]
    guard: tuple[int, bool] | None  # (the predicate's slot, negated)
    checks: list[str]  # static_asserts on its constant ("n") operands


@dataclass
class _Program:
    steps: list[_Step]
    declared: int  # how many registers the template declares


# A slot of the register file: (mode "", "=" or "+", constraint class, PTX type), an operand's or a
# declared register's.
_Register = tuple[str, str, str]
# A token of an instruction's operands: an operand number, an immediate, or a word or punctuation.
_Piece = int | _Immediate | str
# An instruction's operand as parsed: a plain register ([N], or a declared one), a vector ((N, M, ...)),
# an address (_Address), an immediate, or the register written after `|`.
_Group = list[int] | tuple[int, ...] | _Immediate | _Piped
# The error for the statement's keyword, in words (`_Reader.refuse`, bound to it).
_Refuse = Callable[[str], AsmRefused]
# A declared register by its name, in the innermost block that declares it.
_Lookup = Callable[[str], _Reg]


# The special registers a kernel may try to read (PTX ISA, "Special Registers"), named in their refusal.
_SPECIAL_REGISTERS = frozenset(
    {"laneid", "warpid", "nwarpid", "tid", "ntid", "ctaid", "nctaid", "smid", "nsmid", "gridid", "clock", "clock64"}
    | {f"lanemask_{m}" for m in ("eq", "le", "lt", "ge", "gt")}
    | {f"{r}.{axis}" for r in ("tid", "ntid", "ctaid", "nctaid") for axis in "xyz"}
)
_PTX_TOKEN = re.compile(
    r"\s+|%(?P<ref>\d+)"
    r"|(?P<float>0[fF][0-9a-fA-F]{8}|-?\d+\.\d*(?:[eE][-+]?\d+)?)(?![\w.$])"
    r"|(?P<number>-?(?:0[xX][0-9a-fA-F]+|\d+))[uU]?(?![\w.$])"
    r"|(?P<word>(?:%%)?[A-Za-z_.$][\w.$:]*)|(?P<punct>[{},;\[\]|!])"
)
_NAME = re.compile(r"(?:%%)?[A-Za-z_$][\w$]*")


def _ptx_program(template: str, refuse: _Refuse) -> list[str | _Declaration | _Statement]:
    """The template's blocks, declarations and instructions in order: "{" and "}" for a block's braces
    (registers declared in one are seen only inside it), a _Declaration for each `.reg`, a _Statement for
    each instruction; each instruction must be a supported one, and each ends with `;`."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", template, flags=re.S)  # PTX comments, as ptxas skips them
    items: list[str | _Declaration | _Statement] = []
    depth, at = 0, 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            break
        if text[at] in "{}":
            if text[at] == "}" and depth == 0:
                raise refuse(f"`{_shown(text[: at + 1])}`: a `}}` that closes no block")
            depth += 1 if text[at] == "{" else -1
            items.append(text[at])
            at += 1
            continue
        end = text.find(";", at)
        statement = (text[at:end] if end >= 0 else text[at:]).strip()
        at = end + 1 if end >= 0 else len(text)
        items.append(_read_statement(statement, refuse))
        if end < 0:
            raise refuse(f"`{_shown(statement)}` does not end with `;` (every PTX instruction does)")
    if depth:
        raise refuse(f"`{_shown(template)}`: a `{{` block that never closes")
    return items


def _read_statement(statement: str, refuse: _Refuse) -> _Declaration | _Statement:
    """One PTX statement: a register declaration, or an instruction that runs, with its guard."""
    if statement.startswith("."):
        return _declaration(statement, refuse)
    guard, negated, rest = None, False, statement
    found = re.match(r"@(!?)\s*((?:%%)?[A-Za-z_$][\w$]*)\s+", statement)
    if found:
        guard, negated, rest = found.group(2), found.group(1) == "!", statement[found.end() :]
    opcode = rest.split(None, 1)[0] if rest else ""
    if re.fullmatch(r"(?:%%)?[A-Za-z_$][\w$]*:.*", statement, re.S):
        raise refuse(
            f"`{_shown(statement)}`: labels and branches in inline PTX are not run by the CPU backend; "
            "write the branch in CUDA C++"
        )
    if instruction_of(opcode) is None:
        raise refuse(_cannot_run(rest or statement))
    return _Statement(rest, guard, negated)


def _declaration(statement: str, refuse: _Refuse) -> _Declaration:
    """`.reg .pred p, q;`, `.reg .b32 t<4>;` (t0 to t3): the registers and their type."""
    words = statement.split(None, 2)
    if words[0] != ".reg":
        raise refuse(
            f"`{_shown(statement)}`: of the PTX directives the CPU backend reads only .reg declarations "
            "inside a statement's blocks; keep other state in CUDA C++"
        )
    if len(words) < 3 or words[1] not in _REGISTER_TYPES:
        kind = words[1] if len(words) > 1 else "without a type"
        raise refuse(
            f"`{_shown(statement)}`: a .reg {kind} register is not kept by the CPU backend, which keeps "
            f'declared registers of {", ".join(_REGISTER_TYPES)} only; pass a 64-bit value in as an "l" '
            "operand, and compute the rest in CUDA C++"
        )
    names: list[str] = []
    for piece in words[2].split(","):
        piece = piece.strip()
        counted = re.fullmatch(rf"({_NAME.pattern})\s*<\s*(\d+)\s*>", piece)
        if counted:
            names += [f"{counted.group(1)}{k}" for k in range(int(counted.group(2)))]
        elif _NAME.fullmatch(piece):
            names.append(piece)
        else:
            raise refuse(f"`{_shown(statement)}`: `{_shown(piece)}` is not a register name")
    return _Declaration(words[1], _REGISTER_TYPES[words[1]], tuple(names))


def _only_known_opcodes(template: str) -> bool:
    """A template of instructions the backend runs, each ended by `;` (a basic asm statement without
    operands may hold `cp.async.commit_group;`)."""
    statements = [part.strip() for part in template.split(";")]
    return not statements[-1] and all(instruction_of(s.split(None, 1)[0]) for s in statements[:-1] if s)


def _cannot_run(statement: str) -> str:
    opcode = statement.split(None, 1)[0]
    if opcode.startswith("cp.async"):
        # A cp.async with a qualifier the backend does not emulate (a cache hint, the bulk and tensor
        # forms): named on its own, with the forms that run, not the whole list.
        return (
            f"`{_shown(opcode)}` is a form of cp.async the CPU backend cannot run: it runs only "
            f"{CP_ASYNC_FORMS}, without cache hints or other qualifiers"
        )
    if opcode == "rcp.approx.ftz.f64":
        # Its result is documented only as a gross approximation of the upper 32 bits, so no emulation
        # can give the GPU's bits.
        return (
            "`rcp.approx.ftz.f64` is inline assembly the CPU backend cannot run: the PTX ISA documents its "
            "result only roughly, so no emulation gives the GPU's bits; write 1.0 / x (or __drcp_rn(x)) in "
            "CUDA C++"
        )
    return (
        f"`{_shown(statement)}` is inline assembly the CPU backend cannot run: it runs only the PTX "
        f"instructions {SUPPORTED}; write the rest in CUDA C++"
    )


# Complex by design: one parser of a student's inline PTX.
def _parse_statement(statement: str, refuse: _Refuse, lookup: _Lookup) -> tuple[str, list[_Group]]:  # noqa: C901
    """`opcode %0, {%1,%2}, [%3], 16, t` -> ("opcode", [[0], (1, 2), _Address((3,)), _Immediate(16), [t]]): a
    list for a plain operand, a tuple for a vector, a _Piped for one written after `|`; a declared register
    is looked up by name (`lookup`)."""
    only = (
        f"`{_shown(statement)}`: the CPU backend reads operands only as %N, {{%N, ...}}, [%N], an integer, "
        "a float literal or a register the statement declares (no offsets, negations or labels)"
    )
    pieces: list[_Piece] = []
    at = 0
    while at < len(statement):
        match = _PTX_TOKEN.match(statement, at)
        if match is None:
            raise refuse(only)
        at = match.end()
        if match.group("ref") is not None:
            pieces.append(int(match.group("ref")))
        elif match.group("float") is not None:
            pieces.append(_float_literal(match.group("float")))
        elif match.group("number") is not None:
            pieces.append(_Immediate(int(match.group("number"), 0), match.group("number")))
        elif match.group("word") or match.group("punct"):
            pieces.append(match.group())
    opcode = pieces[0] if pieces and isinstance(pieces[0], str) else ""
    if instruction_of(opcode) is None:
        raise refuse(_cannot_run(statement))
    groups: list[_Group] = []
    rest, k = pieces[1:], 0

    def one(
        piece: _Piece,
    ) -> list[int] | _Immediate:  # a plain operand: a number, an immediate, or a declared register's name
        if isinstance(piece, int):
            return [piece]
        if isinstance(piece, _Immediate):
            return piece
        if isinstance(piece, str) and _NAME.fullmatch(piece):
            return [lookup(piece)]
        raise refuse(only)

    while k < len(rest):
        piece = rest[k]
        if piece == "[":
            number = rest[k + 1] if k + 1 < len(rest) else None
            if k + 2 >= len(rest) or not isinstance(number, int) or rest[k + 2] != "]":
                raise refuse(
                    f"`{_shown(statement)}`: an address operand reads [%N]: one operand number in brackets (no offsets)"
                )
            groups.append(_Address((number,)))
            k += 3
        elif piece == "{":
            close = rest.index("}", k) if "}" in rest[k:] else -1
            inner = rest[k + 1 : close] if close > k else None
            if (
                inner is None
                or not inner
                or inner[0] == ","
                or any((p != ",") != (n % 2 == 0) for n, p in enumerate(inner))
                or inner[-1] == ","
            ):
                raise refuse(
                    f"`{_shown(statement)}`: a vector operand reads {{%a, %b, ...}}: operand numbers "
                    "separated by commas"
                )
            members = [one(p) for p in inner[0::2]]
            held = [member for member in members if isinstance(member, list)]
            if len(held) != len(members):
                raise refuse(f"`{_shown(statement)}`: a vector operand holds registers, not integers")
            groups.append(tuple(member[0] for member in held))
            k = close + 1
        else:
            groups.append(one(piece))
            k += 1
        if k < len(rest) and rest[k] == "|" and groups and isinstance(groups[-1], list):
            after = one(rest[k + 1]) if k + 1 < len(rest) else None
            if not isinstance(after, list):
                raise refuse(f"`{_shown(statement)}`: `|` is followed by a register (`%0|p`)")
            groups.append(_Piped(after))
            k += 2
        if k < len(rest):
            if rest[k] != ",":
                raise refuse(f"`{_shown(statement)}`: operands must be separated by commas")
            k += 1
            if k == len(rest):
                raise refuse(f"`{_shown(statement)}` ends with a comma")
    return opcode, groups


def _float_literal(text: str) -> _Immediate:
    """A .f32 literal's bit pattern: 0fXXXXXXXX exactly, a decimal one rounded to the nearest float."""
    if text[:2] in ("0f", "0F"):
        return _Immediate(int(text[2:], 16), text, floating=True)
    return _Immediate(int.from_bytes(struct.pack("<f", float(text)), "little"), text, floating=True)


def _constant_of(group: _Group, registers: list[_Register]) -> str | None:
    """The C++ for an operand's value where g++ knows it when compiling: an integer, an "n" operand."""
    if isinstance(group, _Immediate) and not group.floating:
        return str(group.value)
    if type(group) is list and not isinstance(group[0], _Reg) and registers[group[0]][1] == "n":
        return f"attnlab_ptx_n{group[0]}"
    return None


def _static_check(opcode: str, spec: Operand, value: str | None) -> str:
    """A static_assert that an "n" operand is one of the integers the operand may be: g++ names the
    student's line when it is not, as ptxas does on the GPU."""
    values = spec.immediates
    if isinstance(values, range):
        condition = f"{value} >= {values.start} && {value} < {values.stop}"
    else:
        condition = " || ".join(f"{value} == {v}" for v in values)
    message = f"`{opcode}`'s {spec.name} is {_choices(values)}"
    return f"static_assert({condition}, {_cxx_string(message)});"


def _cxx_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _ref_name(number: int) -> str:
    return f"`{number.name}`" if isinstance(number, _Reg) else f"%{number}"


def _ref_kind(number: int, operand: tuple[str, str, str]) -> str:
    return f"a {operand[2]} register" if isinstance(number, _Reg) else f'"{operand[1]}"'


def _group_text(group: list[int] | tuple[int, ...]) -> str:
    refs = ", ".join(number.name if isinstance(number, _Reg) else f"%{number}" for number in group)
    if isinstance(group, _Address):
        return f"[{refs}]"
    return f"{{{refs}}}" if type(group) is tuple else refs


def _shape(spec: Operand) -> str:
    if spec.address:
        return "an address, [%N]"
    if spec.classes == "p":
        return "a predicate register"
    if not spec.classes:
        return f"an integer written in the template ({_choices(spec.immediates)})"
    if spec.registers > 1:
        return f"a vector of {spec.registers} registers"
    if spec.literal:
        return f"one register or {'a float literal (0f3F800000, 1.5)' if spec.literal == 'float' else 'an integer'}"
    return "one register or an integer" if spec.immediates else "one register"


def _choices(values: range | tuple[int, ...]) -> str:
    if isinstance(values, range):
        return f"an integer from {values.start} up"
    *first, last = values
    return f"{', '.join(map(str, first))} or {last}" if first else str(last)


# --- the C++ that replaces a statement ------------------------------------------------------------


def _emit(operands: list[tuple[str, str, str]], program: _Program) -> str:
    """One line of C++: bind each output once, load every operand into a 32-bit register (outputs
    only written start at zero and are never read; so do the registers the template declares, after
    them), run the instructions in order (each under its guard), store the outputs. A 64-bit ("l")
    operand is read once into a 64-bit variable of its own, and an "n" operand into a constexpr one: g++
    then refuses, at the student's line, an expression that is not a constant, as the GPU's compiler
    does, and the static_asserts check the values the instructions take."""
    ns = "::attnlab::ptx::"
    binds, loads, stores, checks = [], [], [], []
    for k, (mode, cls, expression) in enumerate(operands):
        if mode:
            binds.append(f"auto& attnlab_ptx_o{k} = {ns}{cls}_output({expression});")
            loads.append(f"{ns}{cls}_input(attnlab_ptx_o{k})" if mode == "+" else "0u")
            stores.append(f"{ns}store(attnlab_ptx_o{k}, attnlab_ptx_r[{k}]);")
        elif cls == "l":
            binds.append(f"const ::uint64_t attnlab_ptx_l{k} = {ns}l_input({expression});")
            loads.append("0u")
        elif cls == "n":
            binds.append(f"constexpr long long attnlab_ptx_n{k} = ({expression});")
            loads.append("0u")
        else:
            loads.append(f"{ns}{cls}_input({expression})")
    loads += ["0u"] * program.declared
    calls = []
    for step in program.steps:
        instruction = step.instruction
        checks += step.checks
        site = ["__builtin_FILE()", "__builtin_LINE()"] if instruction.sited else []
        constants = [ns + constant for constant in instruction.constants]
        call = f"{ns}{instruction.emulation}({', '.join(['attnlab_ptx_r', *constants, *step.arguments, *site])});"
        if step.guard is not None:
            slot, negated = step.guard
            call = f"if ({'!' if negated else ''}attnlab_ptx_r[{slot}]) {call}"
        calls.append(call)
    count = max(1, len(loads))
    return (
        "do { "
        + " ".join(binds + checks)
        + f" ::uint32_t attnlab_ptx_r[{count}] = {{{', '.join(loads) or '0u'}}}; "
        + " ".join(calls)
        + " "
        + " ".join(stores)
        + " (void)attnlab_ptx_r; } while (0)"
    )


# --- small helpers --------------------------------------------------------------------------------

_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "v": "\v",
    "f": "\f",
    "a": "\a",
    "b": "\b",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "?": "?",
}


def _unescape(body: str, refuse: _Refuse) -> str:
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1] if i + 1 < len(body) else ""
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt in "01234567" and (octal := re.match(r"[0-7]{1,3}", body[i + 1 :])):  # always matches
            digits = octal.group()
            out.append(chr(int(digits, 8)))
            i += 1 + len(digits)
        elif nxt == "x" and (hexadecimal := re.match(r"[0-9a-fA-F]{1,2}", body[i + 2 :])):
            digits = hexadecimal.group()
            out.append(chr(int(digits, 16)))
            i += 2 + len(digits)
        else:
            raise refuse(f"the escape `\\{nxt}` in an asm template is not one the CPU backend reads")
    return "".join(out)


def _split_top_level(tokens: list[Token], separator: str) -> list[list[Token]]:
    """Split at each `separator` outside any bracket: the colons between an asm statement's sections,
    the commas between its operands."""
    pieces: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        if token.kind == "punct" and token.text in "([{":
            depth += 1
        elif token.kind == "punct" and token.text in ")]}":
            depth -= 1
        if token.kind == "punct" and token.text == separator and depth == 0:
            pieces.append([])
        else:
            pieces[-1].append(token)
    return pieces


def _split_commas(tokens: list[Token]) -> list[list[Token]]:
    return _split_top_level(tokens, ",") if tokens else []


def _shown(text: str, limit: int = 60) -> str:
    """A template's text in a one-line message: spaces collapsed, cut at `limit` characters."""
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."
