"""Inline PTX on the CPU backend: each `asm` statement becomes a call into the shim, or the file is refused.

g++ would hand an `asm` template to the x86 assembler, so no template of a student's may reach it.
Before g++ runs, the file is read with the include policy's lexer (`labrunner.build.includes`:
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
file's preprocessed text too, before g++ compiles it (module.py, with labrunner/build/attributes.py),
and any asm keyword left there is one a macro built: the file is refused at that line, so whatever
the rewrite did not see never reaches the assembler either. A file that redefines or undefines
those names is refused here, since the rewrite needs the keyword to mean what it reads.

An `asm` in a branch the preprocessor drops (`#if 0`) is read and judged too: the file is read
before the preprocessor runs, as the include policy reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from labrunner.build.includes import ReportedLines, Token, code_tokens
from labrunner.exit_codes import AttnlabError

__all__ = ["AsmRefused", "INSTRUCTIONS", "SUPPORTED", "rewrite_inline_asm"]

ASM_KEYWORDS = frozenset({"asm", "__asm", "__asm__"})
# Qualifiers that change nothing here (`inline` is a size hint for the compiler's inliner).
_QUALIFIERS = frozenset({"volatile", "__volatile", "__volatile__", "inline", "__inline", "__inline__"})


@dataclass(frozen=True)
class Operand:
    name: str  # as the PTX ISA calls it: d, a, D, A, B, C, dst, src, cp-size, src-size, N
    registers: int  # 1 for a scalar, else the size of the {vector}
    written: bool  # the instruction writes it (a destination), else reads it
    classes: str  # the constraint letters allowed for a %N: "r" (.b32, a 32-bit integer), "f" (.f32, a
    # float), "l" (.b64, a 64-bit integer or a pointer), "n" (an integer constant)
    address: bool = False  # written in brackets, [%N]: an address the instruction reads through
    immediates: range | tuple[int, ...] = ()  # the integers it may be written as, in the template itself
    optional: bool = False  # may be left out (the last operands only)
    absent: int | None = None  # left out, the emulation gets the operand at this position instead
    at_most: int | None = None  # written as an integer, it may not exceed the integer at this position


@dataclass(frozen=True)
class Instruction:
    emulation: str  # the function in ptx.h, namespace attnlab::ptx
    operands: tuple[Operand, ...]
    sited: bool  # the emulation also takes the statement's file and line: a warp collective meets
    # its warp there, and a runtime error names it
    by_value: bool = False  # the emulation takes each operand's value (read-only operands of any class,
    # immediates); otherwise the register number, so that it can write outputs


# The PTX the CPU backend runs: what a 3xTF32 or a 3xFP16 tensor-core kernel needs. The register
# classes are those ptxas accepts for sm_90: a cvt's destination is a .b32 ("=r"; "=f" is refused),
# its sources .f32 or .b32; an mma's A and B are .b32 bit patterns ("r" only: a tf32 each, or two
# f16 packed), its C and D .f32 or .b32.
#
# cp.async (PTX ISA, "Data Movement and Conversion Instructions: cp.async"): dst is a shared-window
# address, a .b32 ("r", what `static_cast<unsigned>(__cvta_generic_to_shared(p))` gives) or a .b64
# ("l"); src a 64-bit global address ("l" only); cp-size an integer in the template (4, 8 or 16 for
# .ca, 16 for .cg); the optional src-size a .b32 ("r") or an immediate, at most cp-size (ptxas refuses
# more), the bytes past it zero-filled. Left out, src-size is cp-size. wait_group's N is an immediate
# (a literal or an "n" operand). The cache-hint, prefetch-size and ignore-src forms are refused.
_MMA_OPERANDS = (
    Operand("D", 4, True, "fr"),
    Operand("A", 4, False, "r"),
    Operand("B", 2, False, "r"),
    Operand("C", 4, False, "fr"),
)
_ANY_COUNT = range(0, 2**31)


def _cp_async_operands(cp_sizes: tuple[int, ...]) -> tuple[Operand, ...]:
    return (
        Operand("dst", 1, False, "rl", address=True),
        Operand("src", 1, False, "l", address=True),
        Operand("cp-size", 1, False, "", immediates=cp_sizes),
        Operand("src-size", 1, False, "rn", immediates=_ANY_COUNT, optional=True, absent=2, at_most=2),
    )


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
}
*_FIRST, _LAST = INSTRUCTIONS
SUPPORTED = f'{", ".join(_FIRST)} and {_LAST}, on numbered "r", "f", "l" and "n" operands'  # for messages
CP_ASYNC_FORMS = (
    "cp.async.ca.shared.global [dst], [src], 4, 8 or 16{, src-size}, cp.async.cg.shared.global "
    "[dst], [src], 16{, src-size}, cp.async.commit_group, cp.async.wait_group N and cp.async.wait_all"
)
_CONSTRAINT = re.compile(r"(?P<mode>[=+]?)&?(?P<cls>[rfln])")
_CLOBBERS = frozenset({"memory"})


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
        instructions = self._instructions(template, operands, keyword)
        return self.index[code[close].start], _emit(operands, instructions)

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

    def _instructions(
        self, template: str, operands: list[tuple[str, str, str]], keyword: Token
    ) -> list[tuple[str, Instruction, list[str]]]:
        """Parse and check the template's instructions against INSTRUCTIONS and the operands: each
        instruction with the C++ arguments its emulation gets, one per operand register (or value)."""
        refuse = lambda what: self.refuse(keyword, what)  # noqa: E731
        written = {k for k, (mode, _, _) in enumerate(operands) if mode == "+"}
        found = []
        for statement in _ptx_statements(template, refuse):
            opcode, groups = _parse_statement(statement, refuse)
            instruction = INSTRUCTIONS[opcode]
            specs = instruction.operands
            names = ", ".join(operand.name for operand in specs)
            required = sum(not operand.optional for operand in specs)
            if not required <= len(groups) <= len(specs):
                counts = f"{required} or {len(specs)}" if required < len(specs) else f"{len(specs)}"
                raise refuse(
                    f"`{opcode}` takes {counts} operands{f' ({names})' if specs else ''}, this one has {len(groups)}"
                )
            arguments: list[list[str]] = []
            for spec, group in zip(specs, groups):
                arguments.append(self._operand_arguments(opcode, instruction, spec, group, operands, written, refuse))
            for spec in specs[len(groups) :]:
                assert spec.absent is not None  # an operand that may be left out names the one it stands for
                arguments.append(arguments[spec.absent])
            for spec, group in zip(specs, groups):
                at_most = spec.at_most
                limit = groups[at_most] if at_most is not None else None
                if isinstance(group, _Immediate) and isinstance(limit, _Immediate) and group.value > limit.value:
                    assert at_most is not None  # a limit is read from the operand it names
                    raise refuse(
                        f"`{opcode}`'s {spec.name} is at most its {specs[at_most].name}, {limit.value}, "
                        f"got {group.value}"
                    )
            for spec, group in zip(specs, groups):
                if spec.written:
                    written.update(group)
            found.append((opcode, instruction, [argument for group in arguments for argument in group]))
        for k, (mode, cls, _) in enumerate(operands):
            if mode == "=" and k not in written:
                raise refuse(f'%{k} is an output ("={cls}") that no instruction writes')
        return found

    @staticmethod
    def _operand_arguments(
        opcode: str, instruction: Instruction, spec: Operand, group, operands, written: set[int], refuse
    ) -> list[str]:
        """Check one operand of an instruction against its spec; the C++ argument(s) it becomes."""
        if isinstance(group, _Immediate):
            if not spec.immediates:
                raise refuse(f"`{opcode}`'s {spec.name} is {_shape(spec)}, got {group.value}")
            if group.value not in spec.immediates:
                raise refuse(f"`{opcode}`'s {spec.name} is {_choices(spec.immediates)}, got {group.value}")
            return [str(group.value)]
        if (
            not spec.classes
            or isinstance(group, _Address) != spec.address
            or len(group) != spec.registers
            or (spec.registers > 1) != (type(group) is tuple)
        ):
            raise refuse(f"`{opcode}`'s {spec.name} is {_shape(spec)}, got {_group_text(group)}")
        arguments = []
        for number in group:
            if number >= len(operands):
                raise refuse(
                    f"`%{number}` in `{opcode}` names no operand: the statement has {len(operands)}"
                    + (f" (%0 to %{len(operands) - 1})" if operands else "")
                )
            mode, cls, _ = operands[number]
            if cls not in spec.classes:
                allowed = " or ".join(f'"{c}"' for c in spec.classes)
                what = "registers" if spec.classes != "n" else "operands (an integer constant)"
                raise refuse(f'`{opcode}` takes {spec.name} in {allowed} {what}, but %{number} is "{cls}"')
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
            if not instruction.by_value:
                arguments.append(str(number))
            else:
                arguments.append(
                    {"l": f"attnlab_ptx_l{number}", "n": f"attnlab_ptx_n{number}"}.get(cls, f"attnlab_ptx_r[{number}]")
                )
        if spec.written and len(set(group)) != len(group):
            raise refuse(f"`{opcode}` writes the same operand twice in its {spec.name}")
        return arguments


# --- the template's PTX -------------------------------------------------------------------------

_PTX_TOKEN = re.compile(
    r"\s+|%(?P<ref>\d+)|(?P<number>\d+)(?![\w.$])|(?P<word>[A-Za-z_.$][\w.$]*)|(?P<punct>[{},;\[\]])"
)


class _Address(tuple):
    """[%N]: an address operand (a tuple of the one operand number, so it is read like a register)."""


@dataclass(frozen=True)
class _Immediate:
    value: int


def _ptx_statements(template: str, refuse) -> list[str]:
    """The template's instructions; each must be a supported one, and each ends with `;`."""
    statements = [part.strip() for part in template.split(";")]
    for statement in statements:
        opcode = statement.split(None, 1)[0] if statement else ""
        if statement and opcode not in INSTRUCTIONS:
            raise refuse(_cannot_run(statement))
    if statements[-1]:
        raise refuse(f"`{_shown(statements[-1])}` does not end with `;` (every PTX instruction does)")
    return [s for s in statements[:-1] if s]


def _only_known_opcodes(template: str) -> bool:
    """A template of instructions the backend runs, each ended by `;` (a basic asm statement without
    operands may hold `cp.async.commit_group;`)."""
    statements = [part.strip() for part in template.split(";")]
    return not statements[-1] and all(s.split(None, 1)[0] in INSTRUCTIONS for s in statements[:-1] if s)


def _cannot_run(statement: str) -> str:
    opcode = statement.split(None, 1)[0]
    if opcode.startswith("cp.async"):
        # A cp.async with a qualifier the backend does not emulate (a cache hint, a prefetch size, the
        # bulk and tensor forms): named on its own, with the forms that run, not the whole list.
        return (
            f"`{_shown(opcode)}` is a form of cp.async the CPU backend cannot run: it runs only "
            f"{CP_ASYNC_FORMS}, without cache hints, prefetch sizes or other qualifiers"
        )
    return (
        f"`{_shown(statement)}` is inline assembly the CPU backend cannot run: it runs only the PTX "
        f"instructions {SUPPORTED}; write the rest in CUDA C++"
    )


def _parse_statement(statement: str, refuse) -> tuple[str, list]:
    """`opcode %0, {%1,%2}, [%3], 16` -> ("opcode", [[0], (1, 2), _Address((3,)), _Immediate(16)]): a list for
    a plain operand, a tuple for a vector."""
    only = (
        f"`{_shown(statement)}`: the CPU backend reads operands only as %N, {{%N, ...}}, [%N] or an integer "
        "(no registers by name, predicates or labels)"
    )
    pieces: list[int | _Immediate | str] = []
    at = 0
    while at < len(statement):
        match = _PTX_TOKEN.match(statement, at)
        if match is None:
            raise refuse(only)
        at = match.end()
        if match.group("ref") is not None:
            pieces.append(int(match.group("ref")))
        elif match.group("number") is not None:
            pieces.append(_Immediate(int(match.group("number"))))
        elif match.group("word") or match.group("punct"):
            pieces.append(match.group())
    opcode = pieces[0] if pieces and isinstance(pieces[0], str) else ""
    if opcode not in INSTRUCTIONS:
        raise refuse(_cannot_run(statement))
    groups: list = []
    rest, k = pieces[1:], 0
    expect_operand = True
    while k < len(rest):
        piece = rest[k]
        if expect_operand and isinstance(piece, (int, _Immediate)):
            groups.append([piece] if isinstance(piece, int) else piece)
            k += 1
        elif expect_operand and piece == "[":
            if k + 2 >= len(rest) or not isinstance(rest[k + 1], int) or rest[k + 2] != "]":
                raise refuse(
                    f"`{_shown(statement)}`: an address operand reads [%N]: one operand number in brackets (no offsets)"
                )
            groups.append(_Address((rest[k + 1],)))
            k += 3
        elif expect_operand and piece == "{":
            close = rest.index("}", k) if "}" in rest[k:] else -1
            inner = rest[k + 1 : close] if close > k else None
            if (
                inner is None
                or not inner
                or inner[0] == ","
                or any((type(p) is int) != (n % 2 == 0) or (n % 2 == 1 and p != ",") for n, p in enumerate(inner))
                or inner[-1] == ","
            ):
                raise refuse(
                    f"`{_shown(statement)}`: a vector operand reads {{%a, %b, ...}}: operand numbers "
                    "separated by commas"
                )
            groups.append(tuple(inner[0::2]))
            k = close + 1
        else:
            raise refuse(only)
        if k < len(rest):
            if rest[k] != ",":
                raise refuse(f"`{_shown(statement)}`: operands must be separated by commas")
            k += 1
            if k == len(rest):
                raise refuse(f"`{_shown(statement)}` ends with a comma")
    return opcode, groups


def _group_text(group) -> str:
    refs = ", ".join(f"%{n}" for n in group)
    if isinstance(group, _Address):
        return f"[{refs}]"
    return f"{{{refs}}}" if type(group) is tuple else refs


def _shape(spec: Operand) -> str:
    if spec.address:
        return "an address, [%N]"
    if not spec.classes:
        return f"an integer written in the template ({_choices(spec.immediates)})"
    if spec.registers > 1:
        return f"a vector of {spec.registers} registers"
    return "one register or an integer" if spec.immediates else "one register"


def _choices(values: range | tuple[int, ...]) -> str:
    if isinstance(values, range):
        return f"an integer from {values.start} up"
    *first, last = values
    return f"{', '.join(map(str, first))} or {last}" if first else str(last)


# --- the C++ that replaces a statement ------------------------------------------------------------


def _emit(operands: list[tuple[str, str, str]], instructions: list[tuple[str, Instruction, list[str]]]) -> str:
    """One line of C++: bind each output once, load every operand into a 32-bit register (outputs
    only written start at zero and are never read), run the instructions in order, store the outputs.
    A 64-bit ("l") operand is read once into a 64-bit variable of its own, and an "n" operand into a
    constexpr one: g++ then refuses, at the student's line, an expression that is not a constant, as
    the GPU's compiler does."""
    ns = "::attnlab::ptx::"
    binds, loads, stores = [], [], []
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
    calls = []
    for _, instruction, arguments in instructions:
        site = ["__builtin_FILE()", "__builtin_LINE()"] if instruction.sited else []
        calls.append(f"{ns}{instruction.emulation}({', '.join(['attnlab_ptx_r', *arguments, *site])});")
    count = max(1, len(operands))
    return (
        "do { "
        + " ".join(binds)
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


def _unescape(body: str, refuse) -> str:
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
