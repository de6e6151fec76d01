"""What a kernel file may not ask of the linker, the assembler or the loader, refused before any compiler runs.

A few GNU extensions reach past the compiler. They place code or data where the loader, or the
start-up code g++ links into every shared object, finds it and runs it, or they hand text to the
assembler as it is:

* `__attribute__((section("...")))` names a section, and its text reaches the assembler verbatim,
  newlines included: it can carry assembly (a `syscall`) or `.incbin "/path"`, which copies a file
  into the module while it is built; sections such as `.init_array` and `.tm_clone_table` are run
  or read by the C runtime's start-up code when the module loads;
* `constructor`, `destructor` and `init_priority` run code when the module loads or unloads; `ifunc`
  and `target_clones` make a resolver that runs while the module is relocated;
* `alias`, `weakref`, `symver` and `weak` bind one symbol's name to another definition, and an asm
  label (`int x asm("name")`) gives a symbol any name at all (`_ITM_registerTMCloneTable`, which the
  start-up code calls if the module defines it); `visibility` and `externally_visible` change which
  symbols the loader sees; `used` and `retain` keep what no kernel calls; `naked` makes a function of
  assembly alone; `copy` takes another declaration's attributes; `noinit` and `persistent` are sections;
* `asm(...)` outside a function is assembly that no instruction rewrite sees;
* `#pragma weak`, `#pragma redefine_extname` and `#pragma GCC visibility` are the attributes' pragma
  forms, and `#pragma GCC pch_preprocess "file"` makes the compiler read a file.

NVRTC accepts several of these without a word (a function no kernel calls is dropped before they
matter), so the GPU never shows them; the CPU backend compiles the file as native code, where each
would work. Refused here, in the gate, they give both backends the same compile error, naming the
line: `attention.cu(12): error: __attribute__((section)) is not allowed in a kernel file (it places
code or data where the loader runs it)`. Inline PTX inside a function (`asm volatile(...)`) stays
allowed: the CPU backend rewrites it into calls (labrunner/run/cpu/ptx_asm.py).

The file is read as the compiler reads it, with the include policy's lexer (comments, line splices,
string and raw string literals). Macros are where a lexer's sight ends, so the rules are drawn to
leave nothing a macro could hide:

* the attribute names above are refused where an attribute name stands (in `__attribute__((...))`,
  in `[[...]]`, with or without `gnu::` and in their `__name__` spellings), and a name there that
  the file defines as a macro, or a macro's parameter, is refused too (`#define S section` then
  `__attribute__((S(".x")))`); `__attribute__` must be followed by its `((` written out;
* the reserved spellings (`__section__`, `__used__`, ...) mean nothing but these attributes, so they
  are refused anywhere outside literals. The plain words are ordinary identifiers as well (a kernel
  may count the slots it has `used`), so they are refused only where an attribute name stands;
* what token pasting builds (`sec##tion`) is past any lexer. The CPU build runs the same rules on
  its preprocessed text (`refuse_in_preprocessed`, from labrunner/run/cpu/module.py), where every
  macro is expanded, so such a file is refused there all the same; NVRTC may accept it (a
  difference between the backends on a hostile file only, which the CPU side closes).
"""

from __future__ import annotations

from labrunner.compile.includes import ReportedLines, Token, code_tokens
from labrunner.exit_codes import AttnlabError, ExitCode

_SECTION = "it places code or data where the loader runs it"
_AT_LOAD = "it runs code when the module loads or unloads, outside any kernel"
_RESOLVER = "it makes a resolver function, which runs when the module loads"
_RENAMES = "it binds a symbol's name to another definition, which the loader resolves"
_SEEN = "it changes which symbols the loader sees"
# Attribute name -> why it is refused (the words in the message's parentheses).
BANNED_ATTRIBUTES = {
    "section": _SECTION,
    "noinit": _SECTION,
    "persistent": _SECTION,
    "constructor": _AT_LOAD,
    "destructor": _AT_LOAD,
    "init_priority": _AT_LOAD,
    "ifunc": _RESOLVER,
    "target_clones": _RESOLVER,
    "alias": _RENAMES,
    "weakref": _RENAMES,
    "symver": _RENAMES,
    "weak": _RENAMES,
    "visibility": _SEEN,
    "externally_visible": _SEEN,
    "used": "it keeps code or data that no kernel uses in the module, where the loader can reach it",
    "retain": "it keeps code or data that no kernel uses in the module, where the loader can reach it",
    "naked": "it makes a function of assembly alone, with no entry or exit the compiler writes",
    "copy": "it takes another declaration's attributes, which may be any of these",
}
# Pragmas: their first words -> why.
BANNED_PRAGMAS = {
    ("weak",): _RENAMES,
    ("redefine_extname",): _RENAMES,
    ("GCC", "visibility"): _SEEN,
    ("GCC", "pch_preprocess"): "it makes the compiler read another file",
    ("GCC", "dependency"): "it makes the compiler read another file",
}
ASM_KEYWORDS = frozenset({"asm", "__asm", "__asm__"})
ATTRIBUTE_KEYWORDS = frozenset({"__attribute__", "__attribute"})
_RESERVED = {f"__{name}__": name for name in BANNED_ATTRIBUTES}
# Words that may come right before an asm statement (the token before it is otherwise `;`, a brace,
# a label's `:` or the `)` of an if, for, while or switch).
_STATEMENT_WORDS = frozenset({"else", "do", "__extension__"})
_CONDITIONS = frozenset({"if", "for", "while", "switch"})
_SCOPE_WORDS = frozenset({"namespace", "struct", "class", "union", "enum"})

MACRO_BUILT_ASM = (
    "inline assembly built by a macro: the CPU backend runs only asm statements written out in the "
    "file (see the CPU backend's README)"
)


def refuse_linker_requests(source: str, filename: str) -> None:
    """The gate's rule: raises a compile error naming the line if the file uses any of the module
    docstring's attributes, pragmas or asm forms; returns quietly otherwise."""
    problem = _Reader(code_tokens(source, filename), preprocessed=False).first_problem()
    if problem is not None:
        raise AttnlabError(f"{filename}({problem[0]}): error: {problem[1]}", ExitCode.COMPILE_ERROR)


def refuse_in_preprocessed(text: str, filename: str) -> None:
    """The same rules on g++ -E's output for the student's file (every macro expanded, line markers
    kept); there, any asm keyword left is one a macro built (the CPU build has rewritten every asm
    statement written out). Raises a compile error naming the line the marker gives."""
    problem = _Reader(code_tokens(text, filename), preprocessed=True).first_problem()
    if problem is not None:
        raise AttnlabError(f"{filename}({problem[0]}): error: {problem[1]}", ExitCode.COMPILE_ERROR)


def _normal(name: str) -> str:
    """`__section__` -> `section`, as GCC reads attribute names."""
    return name[2:-2] if len(name) > 4 and name.startswith("__") and name.endswith("__") else name


def _refusal(form: str, name: str) -> str:
    return f"{form} is not allowed in a kernel file ({BANNED_ATTRIBUTES[name]})"


class _Reader:
    def __init__(self, tokens: list[Token], preprocessed: bool):
        self.tokens = tokens
        self.preprocessed = preprocessed
        self.line = ReportedLines([])
        # Every name the file #defines: such a name where an attribute name stands is a macro's choice.
        self.macros = {
            tokens[i + 1].text
            for i, t in enumerate(tokens[:-1])
            if t.kind == "directive" and t.text == "define" and tokens[i + 1].kind == "word"
        }

    # Complex by design: the attribute policy, one rule a branch, in the order a reader checks them.
    def first_problem(self) -> tuple[int, str] | None:  # noqa: C901
        tokens = self.tokens
        directive: str | None = None  # the directive the tokens are in, if any
        directive_at = 0
        parameters: set[str] = set()  # the current #define's parameters
        braces: list[bool] = []  # per open brace: whether it is a function's body (or inside one)
        code: list[int] = []  # indices of the significant tokens outside directives
        opens: list[int] = []  # open parentheses among them (indices into tokens)
        before_open: dict[int, int | None] = {}  # a `)` -> the token before its `(`, for `if (...) asm`
        i = 0
        while i < len(tokens):
            token = tokens[i]
            if token.kind == "directive":
                directive, directive_at = token.text, i
                parameters = self._parameters(i) if token.text == "define" else set()
                if token.text == "pragma" and (why := self._pragma(self._words(i + 1))):
                    return self.line(token.line), why
            elif token.kind == "newline":
                if directive in ("line", ""):
                    self._marker(tokens[directive_at + 1 : i], token)
                directive = None
            elif token.kind == "word" and token.text in _RESERVED:
                name = _RESERVED[token.text]
                return self.line(
                    token.line
                ), f"{token.text} (the attribute {name}) is not allowed in a kernel file ({BANNED_ATTRIBUTES[name]})"
            elif token.kind == "word" and token.text in ATTRIBUTE_KEYWORDS:
                if problem := self._gnu_attributes(i, parameters if directive == "define" else set()):
                    return problem
            elif token.kind == "punct" and token.text == "[" and self._is(i + 1, "punct", "["):
                if problem := self._standard_attributes(i, parameters if directive == "define" else set()):
                    return problem
            elif (
                token.kind == "word"
                and token.text == "_Pragma"
                and self._is(i + 1, "punct", "(")
                and i + 2 < len(tokens)
                and tokens[i + 2].kind in ("string", "raw")
            ):
                if why := self._pragma(_unquoted(tokens[i + 2].text).split()):
                    return self.line(token.line), why
            elif token.kind == "word" and token.text in ASM_KEYWORDS and directive is None:
                if self.preprocessed:
                    return self.line(token.line), MACRO_BUILT_ASM
                if problem := self._asm(token, code, before_open, braces):
                    return problem
            if directive is None and token.kind not in ("newline", "directive"):
                if token.text == "{" and token.kind == "punct":
                    braces.append(any(braces) or self._function_body(code))
                elif token.text == "}" and token.kind == "punct" and braces:
                    braces.pop()
                elif token.text == "(" and token.kind == "punct":
                    opens.append(len(code))
                elif token.text == ")" and token.kind == "punct" and opens:
                    at = opens.pop()
                    before_open[len(code)] = code[at - 1] if at > 0 else None
                code.append(i)
            i += 1
        return None

    # --- pieces -----------------------------------------------------------------------------------

    def _is(self, i: int, kind: str, text: str) -> bool:
        return i < len(self.tokens) and self.tokens[i].kind == kind and self.tokens[i].text == text

    def _words(self, i: int) -> list[str]:
        """The words of a directive line from token i on."""
        words = []
        while i < len(self.tokens) and self.tokens[i].kind != "newline":
            words.append(self.tokens[i].text)
            i += 1
        return words

    def _parameters(self, i: int) -> set[str]:
        """A function-like #define's parameter names (its `(` right after the name, no space between)."""
        tokens = self.tokens
        if i + 2 >= len(tokens) or tokens[i + 2].text != "(" or tokens[i + 2].start != tokens[i + 1].end:
            return set()
        names, j = set(), i + 3
        while j < len(tokens) and tokens[j].text != ")" and tokens[j].kind != "newline":
            if tokens[j].kind == "word":
                names.add(tokens[j].text)
            j += 1
        return names

    def _marker(self, arguments: list[Token], newline: Token) -> None:
        if arguments and arguments[0].kind == "number" and arguments[0].text.isdigit():
            self.line.marks.append((newline.line + 1, int(arguments[0].text)))

    @staticmethod
    def _pragma(words: list[str]) -> str | None:
        for start, why in BANNED_PRAGMAS.items():
            if tuple(words[: len(start)]) == start:
                return f"#pragma {' '.join(start)} is not allowed in a kernel file ({why})"
        return None

    def _name_problem(self, name_token: Token, form: str, parameters: set[str]) -> tuple[int, str] | None:
        name = _normal(name_token.text)
        if name in BANNED_ATTRIBUTES:
            return self.line(name_token.line), _refusal(form.format(name), name)
        if not self.preprocessed and (name_token.text in self.macros or name_token.text in parameters):
            return self.line(name_token.line), (
                f"the attribute name `{name_token.text}` in {form.format('...')} comes from a macro; write attribute "
                "names out in a kernel file (the grader reads them before any compiler runs)"
            )
        return None

    def _items(self, start: int, closers: int) -> tuple[list[list[Token]], int]:
        """The comma-separated items from tokens[start] up to the bracket that closes `closers` levels
        (`((...))` or `[[...]]`), and the index just past it."""
        items: list[list[Token]] = [[]]
        depth, j = 0, start
        while j < len(self.tokens):
            token = self.tokens[j]
            if token.kind == "newline" or token.kind == "directive":
                j += 1
                continue
            if token.kind == "punct" and token.text in "([":
                depth += 1
            elif token.kind == "punct" and token.text in ")]":
                depth -= 1
                if depth < 0:
                    return items, j + closers
            elif token.kind == "punct" and token.text == "," and depth == 0:
                items.append([])
                j += 1
                continue
            items[-1].append(token)
            j += 1
        return items, j

    def _gnu_attributes(self, i: int, parameters: set[str]) -> tuple[int, str] | None:
        keyword = self.tokens[i]
        if not (self._is(i + 1, "punct", "(") and self._is(i + 2, "punct", "(")):
            if self.preprocessed:
                return None  # g++ refuses it itself
            return self.line(keyword.line), (
                f"{keyword.text} must be followed by its `((` and the attribute names, written out in a kernel "
                "file (the grader reads them before any compiler runs)"
            )
        items, _ = self._items(i + 3, 2)
        for item in items:
            if (
                item
                and item[0].kind == "word"
                and (problem := self._name_problem(item[0], "__attribute__(({}))", parameters))
            ):
                return problem
        return None

    def _standard_attributes(self, i: int, parameters: set[str]) -> tuple[int, str] | None:
        items, _ = self._items(i + 2, 2)
        namespace = None
        if items and len(items[0]) >= 3 and items[0][0].text == "using" and items[0][2].text == ":":
            namespace = items[0][1]
            items[0] = items[0][3:]
        for item in items:
            words = item
            space = namespace
            if len(item) >= 4 and item[0].kind == "word" and item[1].text == ":" and item[2].text == ":":
                space, words = item[0], item[3:]
            if not words or words[0].kind != "word":
                continue
            shown = "[[{}]]" if space is None else f"[[{_normal(space.text)}::{{}}]]"
            if space is not None and not self.preprocessed and (space.text in self.macros or space.text in parameters):
                return self._name_problem(space, shown, parameters)
            if problem := self._name_problem(words[0], shown, parameters):
                return problem
        return None

    def _asm(
        self, keyword: Token, code: list[int], before_open: dict[int, int | None], braces: list[bool]
    ) -> tuple[int, str] | None:
        """An asm keyword outside directives in the file as written: a statement inside a function is
        allowed (the CPU build rewrites it); a label after a declaration, or a statement outside any
        function, is refused."""
        previous = self.tokens[code[-1]] if code else None
        if previous is None or previous.text in (";", "{", "}", ":") or previous.text in _STATEMENT_WORDS:
            statement = True
        elif previous.text == ")":
            opener = before_open.get(len(code) - 1)
            statement = opener is not None and self.tokens[opener].text in _CONDITIONS
        else:
            statement = False
        if not statement:
            return self.line(keyword.line), (
                f'an asm label (`{keyword.text}("name")` after a declaration) is not allowed in a kernel file '
                "(it gives a symbol a name of its choosing, which the loader resolves)"
            )
        if not any(braces):
            return self.line(keyword.line), (
                f"{keyword.text}(...) outside a function is not allowed in a kernel file (its text goes to the "
                'assembler as it is); inline PTX belongs inside a function, as asm volatile("..." : outputs : '
                "inputs)"
            )
        return None

    def _function_body(self, code: list[int]) -> bool:
        """Whether a `{` at namespace or class scope opens a function's body (or a lambda's): the
        declaration before it, back to the last `;` or brace, ends in `)`, `]`, a qualifier after them
        or a trailing return type, and names no namespace, class or enum."""
        tokens = self.tokens
        seen: list[Token] = []
        depth = 0
        j = len(code) - 1
        while j >= 0:
            token = tokens[code[j]]
            if token.kind == "punct" and token.text in ")]":
                if depth == 0:
                    seen.append(token)
                depth += 1
            elif token.kind == "punct" and token.text in "([":
                depth -= 1
                if depth < 0:
                    break  # the brace is inside parentheses (a lambda passed to a call)
            elif depth == 0 and token.kind == "punct" and token.text in ";{":
                break
            elif depth == 0 and token.kind == "punct" and token.text == "}":
                # `S() : a{1}, b{2} {`: a brace group followed by `,` or `{` belongs to a constructor's
                # member initialisers; any other `}` ends what came before.
                after = seen[-1].text if seen else "{"
                if after not in (",", "{"):
                    break
                depth_braces, j = 1, j - 1
                while j >= 0 and depth_braces:
                    text = tokens[code[j]].text
                    depth_braces += (text == "}") - (text == "{")
                    j -= 1
                continue
            elif depth == 0:
                seen.append(token)
            j -= 1
        if any(token.kind == "word" and token.text in _SCOPE_WORDS for token in seen):
            return False
        if seen and seen[0].kind in ("string", "raw"):
            return False  # extern "C" {
        return any(token.text in (")", "]") for token in seen) or any(
            a.text == "-" and b.text == ">" and b.start == a.end for b, a in zip(seen, seen[1:])
        )


def _unquoted(literal: str) -> str:
    """A _Pragma's string as the pragma reads it: the quotes off, \\" and \\\\ undone (a raw string as it is)."""
    quote = literal.index('"')
    if literal[quote - 1 : quote] == "R":
        delimiter = literal[quote + 1 : literal.index("(", quote)]
        return literal[quote + 2 + len(delimiter) : -2 - len(delimiter)]
    body = literal[quote + 1 : -1] if literal.endswith('"') else literal[quote + 1 :]
    return body.replace('\\"', '"').replace("\\\\", "\\")
