"""A Triton file's kernels as data: what its sealed import hands on, and how each backend rebuilds them.

A Triton file is a Python program, and its top level (decorators included) can do anything Python
can, including choosing which kernel to define by where it runs. So the file's Python runs once, in
the sealed import box (`triton_import_child.py`: seccomp, no files, no processes, no threads), and
what leaves that box is a *kernel package*, plain JSON:

    {"format": 1,
     "functions": {name: {"source": the `def` and its body, as written, "line": the file's line of the
                          `def`, "noinline": bool, "defaults": {parameter: plain value}}},
     "globals":   {name: {"module": "triton.language"} | {"attr": [module, name]} | {"jit": function}
                         | {"constexpr": plain value} | {"value": plain value}},
     "launch":    {"constants": {lab constant: value}, "num_warps": ..., "num_stages": ...,
                   "constexprs": {kernel: {name: value}}}}

The functions are the lab's kernels and every `@triton.jit` function they call; the globals are the
names those functions read. Every backend builds the kernels from the package alone (`rebuild`): the
GPU's compile (`triton_child.py`, which runs no top-level code of the file) and the CPU worker's
interpreter (`labrunner/run/cpu/triton_module.py`), in a namespace that holds nothing else of the file.
Both run exactly the same source with exactly the same values, so no top-level code can give the
interpreter one kernel and the GPU another.

The package comes from a process that ran the student's code, so it is hostile data. `rebuild` checks
it before anything is made of it: sizes and types, each source one plain `def` (no decorator, nothing
nested), and what a kernel may reach: Triton's language modules and `math`, never a name or attribute
beginning with an underscore, never a module outside those (`tl.core.builtins`), never a module as a
value (`m = tl.core`), never `eval`, `exec`, `open` and their kind. A function is made by running its
`def` with its defaults and annotations replaced by constants, so making it evaluates nothing written
in the file; only a backend's compiler or interpreter then reads the body.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import json
import keyword
import linecache
import math
import re
import sys
import types
from collections.abc import Callable
from typing import Any

FORMAT = 1
PACKAGE_LIMIT_BYTES = 4 << 20  # the whole package, as JSON: the shipped files' are under 20 KB
FUNCTION_LIMIT_CHARS = 256 << 10
MAX_FUNCTIONS = 128
MAX_GLOBALS = 512
MAX_LINE = 1_000_000
TEXT_LIMIT = 200  # characters of a string value
# The launch data a Triton file declares beside the lab's own constants (README "Triton submissions").
NUM_WARPS, NUM_STAGES, CONSTEXPRS = "attnlab_num_warps", "attnlab_num_stages", "attnlab_constexprs"

# Imported before the seal, wherever a Triton file's Python runs (the import box, the CPU worker), so
# that a file's `import math` finds it loaded: after the seal, importing anything new fails, since the
# import system cannot even stat a folder.
PRELOADED = (
    "math",
    "functools",
    "itertools",
    "operator",
    "typing",
    "dataclasses",
    "enum",
    "collections",
    "numpy",
    "numpy.random",
    "numpy.linalg",
    "triton",
    "triton.language",
    "triton.language.extra",
    "triton.language.extra.libdevice",
    "triton.runtime.interpreter",
    "triton.tools.tensor_descriptor",
)
# The modules a kernel may name or reach through attributes; Triton's compiler accepts module globals
# as the language's namespaces, and these are the ones that hold only the language.
KERNEL_MODULES = (
    "math",
    "triton",
    "triton.language",
    "triton.language.core",
    "triton.language.math",
    "triton.language.standard",
    "triton.language.random",
    "triton.language.extra",
    "triton.language.extra.libdevice",
    "triton.language.extra.cuda",
)
# Of the `triton` package itself, what a kernel body uses; the rest (its compiler, runtime, knobs) is
# the toolchain's, not the language's.
TRITON_TOP_LEVEL = ("jit", "cdiv", "next_power_of_2", "language", "constexpr_function", "must_use_result")
# Builtins that reach outside a computation: never in a kernel.
FORBIDDEN_NAMES = frozenset(
    [
        "eval",
        "exec",
        "compile",
        "open",
        "globals",
        "locals",
        "vars",
        "setattr",
        "delattr",
        "breakpoint",
        "input",
        "memoryview",
        "help",
        "exit",
        "quit",
        "copyright",
        "credits",
        "license",
        "object",
        "type",
        "super",
        "classmethod",
        "staticmethod",
        "property",
    ]
)
PLAIN = (int, float, bool, str, type(None))
_DEF = re.compile(r"^\s*def\s+\w+\s*\(")


class PackageError(Exception):
    """The file's kernels cannot be packaged or rebuilt: a compile error of the file's, in these words."""


# ------------------------------------------------------------------------------------------ values


def plain(value: object, what: str) -> int | float | bool | str | None:
    """A value the package may carry: an integer, a finite float, a bool, None, a short string."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise PackageError(f"{what} = {value} does not fit in 64 bits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PackageError(f"{what} must be a finite number")
        return value
    if isinstance(value, str):
        if len(value) > TEXT_LIMIT:
            raise PackageError(f"{what} is a string of over {TEXT_LIMIT} characters")
        return value
    raise PackageError(f"{what} must be a number, a bool, None or a short string, not a {type(value).__name__}")


def _identifier(name: object, what: str) -> str:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or name.startswith("__"):
        raise PackageError(f"{what} {name!r} is not a plain Python name")
    return name


# --------------------------------------------------------------------------- extraction (import box)


def _module_attributes() -> dict[int, tuple[str, str]]:
    """id(object) -> (module, name) for every public attribute of the kernel modules: how a global such
    as `DTYPE = tl.float32` or `from triton.language import program_id` is said as data."""
    found: dict[int, tuple[str, str]] = {}
    for module_name in reversed(KERNEL_MODULES):  # the shortest path wins: triton.language before .core
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name, value in vars(module).items():
            public = not name.startswith("_") and not isinstance(value, (types.ModuleType, *PLAIN))
            if public and (module_name != "triton" or name in TRITON_TOP_LEVEL):
                found[id(value)] = (module_name, name)
    return found


# Complex by design: one reader of a hostile file's namespace, each refusal in place.
def extract(namespace: dict[str, Any], kernel_names: list[str], filename: str) -> dict[str, Any]:  # noqa: C901
    """The package of the lab's kernels as the file's top level left them in `namespace`."""
    from triton.language.core import constexpr
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    attributes = _module_attributes()
    functions: dict[str, dict[str, Any]] = {}
    made_from: dict[str, object] = {}
    globals_: dict[str, dict[str, Any]] = {}

    def refuse_wrapper(name: str, value: object, helper: bool) -> None:
        if isinstance(value, (Autotuner, Heuristics)):
            raise PackageError(_wrapper_refusal(name, value, helper, filename))

    def visit(function: Any) -> str:
        name = str(function.__name__)
        if name in functions:
            if made_from[name] is not function:
                raise PackageError(f"{filename}: two @triton.jit functions are named {name}; rename one")
            return name
        if getattr(function.fn, "__code__", None) is None or function.fn.__code__.co_filename != filename:
            raise PackageError(f"{filename}: {name} is a @triton.jit function defined outside the file")
        closure = inspect.getclosurevars(function.fn).nonlocals
        if closure:
            raise PackageError(
                f"{filename}: {name} is defined inside another function (it reads {', '.join(sorted(closure))} "
                "from there): define @triton.jit functions at the file's top level"
            )
        raw, first = inspect.getsourcelines(function.fn)
        offset = next((i for i, line in enumerate(raw) if _DEF.match(line)), 0)
        defaults = {}
        for parameter in inspect.signature(function.fn).parameters.values():
            if parameter.default is not inspect.Parameter.empty:
                value = parameter.default
                value = value.value if isinstance(value, constexpr) else value
                defaults[parameter.name] = plain(value, f"{filename}: {name}: the default of {parameter.name}")
        functions[name] = {
            "source": function.src,
            "line": first + offset,
            "noinline": bool(getattr(function, "noinline", False)),
            "defaults": defaults,
        }
        made_from[name] = function
        stored = _stored_names(function.src)
        for used in sorted(_loaded_names(function.src)):
            if used in globals_ or used not in function.__globals__:
                continue
            value = function.__globals__[used]
            if isinstance(value, JITFunction):
                globals_[used] = {"jit": visit(value)}
            elif isinstance(value, types.ModuleType):
                if value.__name__ not in KERNEL_MODULES:
                    raise PackageError(
                        f"{filename}: {name} uses the module {value.__name__} (as {used}); a kernel may use "
                        f"only {', '.join(KERNEL_MODULES)}"
                    )
                globals_[used] = {"module": value.__name__}
            elif isinstance(value, constexpr):
                globals_[used] = {"constexpr": plain(value.value, f"{filename}: {used}")}
            elif isinstance(value, PLAIN):
                globals_[used] = {"value": plain(value, f"{filename}: {used}")}
            elif id(value) in attributes:
                globals_[used] = {"attr": list(attributes[id(value)])}
            elif used in stored:
                continue  # a local of the kernel's that happens to share a global's name
            else:
                refuse_wrapper(used, value, helper=True)
                raise PackageError(
                    f"{filename}: {name} uses {used}, a {type(value).__name__}: a kernel may use only "
                    "@triton.jit functions, tl.constexpr values, numbers and Triton's own names"
                )
        return name

    for name in kernel_names:
        value = namespace.get(name)
        refuse_wrapper(name, value, helper=False)
        if not isinstance(value, JITFunction):
            found = "nothing" if value is None else f"a {type(value).__name__}"
            raise PackageError(
                f"{filename}: {name} must be a @triton.jit function; the file defines {found} by that name"
            )
        if value.__name__ != name:
            raise PackageError(f"{filename}: {name} is the @triton.jit function {value.__name__}: define it as {name}")
        visit(value)
    return {
        "format": FORMAT,
        "functions": functions,
        "globals": globals_,
        "launch": _launch(namespace, kernel_names, filename),
    }


def _wrapper_refusal(name: str, wrapper: Any, helper: bool, filename: str) -> str:
    """Why a function wrapped in @triton.autotune or @triton.heuristics is refused, on the line of its first
    decorator, with what to write instead: attnlab grades one launch, stated as module data, and a helper
    takes its constexprs from the kernel that calls it."""
    from triton.runtime.autotuner import Autotuner

    decorator = "@triton.autotune" if isinstance(wrapper, Autotuner) else "@triton.heuristics"
    if isinstance(wrapper, Autotuner) and helper:
        instead = (
            "a helper runs with the launch of the kernel that calls it: drop the decorator, and set the launch "
            f"once for the lab's kernel ({NUM_WARPS}, {NUM_STAGES}, {CONSTEXPRS})"
        )
    elif isinstance(wrapper, Autotuner):
        instead = (
            f"attnlab grades one configuration: drop the decorator and set {NUM_WARPS}, {NUM_STAGES} and "
            f"{CONSTEXPRS}{_first_configuration(wrapper, name)}"
        )
    else:
        names = sorted(str(k) for k in getattr(wrapper, "values", {}))[:16]
        listed = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names) or "its constexprs"
        it, value, default = (
            ("it", "its value", "the parameter's default")
            if len(names) == 1
            else ("them", "their values", "the parameters' defaults")
        )
        skeleton = ", ".join(f"{n!r}: ..." for n in names)
        instead = (
            f"drop the decorator and pass {listed} from the kernel that calls it, or give {it} as {default}"
            if helper
            else f"drop the decorator and give {listed} {value} in {CONSTEXPRS} = {{{name!r}: {{{skeleton}}}}}, or "
            f"as {default}"
        )
    line = _first_line(wrapper, filename)
    return f"{filename}{'' if line is None else f':{line}'}: {name} is wrapped in {decorator}: {instead}"


def _first_configuration(tuner: Any, kernel: str) -> str:
    """The autotuner's first configuration as the module data that says it, where it is plain data."""
    configs = getattr(tuner, "configs", None)
    if not configs:
        return ""
    first = configs[0]
    try:
        values = {str(k): plain(v, k) for k, v in dict(first.kwargs).items()}
        warps, stages = plain(first.num_warps, NUM_WARPS), plain(first.num_stages, NUM_STAGES)
    except (PackageError, AttributeError, TypeError, ValueError):
        return ""
    said = f"; its first configuration is {NUM_WARPS} = {warps}, {NUM_STAGES} = {stages}, {CONSTEXPRS} = "
    said += repr({kernel: values})
    return said if len(said) <= 2 * TEXT_LIMIT else ""


def _first_line(wrapper: Any, filename: str) -> int | None:
    """The file's line of the first decorator over the function a wrapper holds (its `def`'s source, as
    `inspect` reads it, starts there)."""
    function = wrapper
    for _ in range(8):  # autotune over heuristics over jit: a few layers at most
        if isinstance(function, types.FunctionType):
            break
        function = getattr(function, "fn", None)
    if not isinstance(function, types.FunctionType) or function.__code__.co_filename != filename:
        return None
    try:
        return inspect.getsourcelines(function)[1]
    except (OSError, TypeError):
        return None


def run_file(source: str, filename: str) -> dict[str, Any]:
    """A file's top level, run as the module `submission`, its text where `inspect` looks for it: only
    ever where the file's Python may run (the sealed import box; the grader's own warm-up files)."""
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    linecache.cache[filename] = (len(source), None, lines, filename)
    module = types.ModuleType("submission")
    module.__file__ = filename
    sys.modules["submission"] = module
    exec(compile(source, filename, "exec", dont_inherit=True), module.__dict__)
    return module.__dict__


def package_source(source: str, filename: str, kernel_names: list[str], constants: list[str]) -> dict[str, Any]:
    """The file run (`run_file`) and its kernels packaged, with the lab's constants it sets."""
    namespace = run_file(source, filename)
    package = extract(namespace, kernel_names, filename)
    package["launch"]["constants"] = lab_constants(namespace, constants)
    return package


def _launch(namespace: dict[str, Any], kernel_names: list[str], filename: str) -> dict[str, Any]:
    """The module-level launch data, as plain values; `lab_constants` are read by the caller's list."""

    def per_kernel(value: object, what: str) -> object:
        if isinstance(value, dict):
            return {_identifier(k, what): plain(v, f"{filename}: {what}[{k!r}]") for k, v in value.items()}
        return plain(value, f"{filename}: {what}")

    declared = namespace.get(CONSTEXPRS, {})
    constexprs: dict[str, dict[str, Any]] = {}
    if isinstance(declared, dict):
        for kernel, values in declared.items():
            if kernel in kernel_names and isinstance(values, dict):
                constexprs[kernel] = {
                    _identifier(k, CONSTEXPRS): plain(v, f"{filename}: {CONSTEXPRS}[{kernel!r}][{k!r}]")
                    for k, v in values.items()
                }
    return {
        "num_warps": per_kernel(namespace.get(NUM_WARPS, 4), NUM_WARPS),
        "num_stages": per_kernel(namespace.get(NUM_STAGES, 3), NUM_STAGES),
        "constexprs": constexprs,
    }


def lab_constants(namespace: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The lab's launch constants the file sets: an integer as it is, anything else as its short repr
    (which the driver refuses with the value in its words)."""
    found: dict[str, Any] = {}
    for name in names:
        if name in namespace:
            value = namespace[name]
            found[name] = value if isinstance(value, int) and not isinstance(value, bool) else repr(value)[:80]
    return found


def _loaded_names(source: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _stored_names(source: str) -> set[str]:
    tree = ast.parse(source)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names | {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}


# ------------------------------------------------------------------------------------------ checking


def dumps(package: dict[str, Any]) -> str:
    """The package as the canonical JSON every backend is handed (and the compile cache is keyed by)."""
    return json.dumps(package, sort_keys=True, separators=(",", ":"), allow_nan=False)


# Complex by design: one reader of untrusted JSON, each refusal in place.
def loads(text: str | bytes, kernel_names: list[str]) -> dict[str, Any]:  # noqa: C901
    """The package from its JSON, every field checked for type and size (its sources are checked as code
    by `rebuild`)."""
    if len(text) > PACKAGE_LIMIT_BYTES:
        raise PackageError(f"the file's kernels come to over {PACKAGE_LIMIT_BYTES >> 20} MiB of source")
    try:
        package = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError):  # nested past the parser's depth: not data either
        raise PackageError("the file's kernels did not come back as data") from None
    if not isinstance(package, dict) or package.get("format") != FORMAT:
        raise PackageError("the file's kernels did not come back in the package's format")
    functions, globals_, launch = package.get("functions"), package.get("globals"), package.get("launch")
    if not isinstance(functions, dict) or not isinstance(globals_, dict) or not isinstance(launch, dict):
        raise PackageError("the package lacks its functions, globals or launch")
    if len(functions) > MAX_FUNCTIONS or len(globals_) > MAX_GLOBALS:
        raise PackageError(f"the kernels use over {MAX_FUNCTIONS} functions or {MAX_GLOBALS} globals")
    missing = [k for k in kernel_names if k not in functions]
    if missing:
        raise PackageError(f"the package holds no kernel {', '.join(missing)}")
    for name, entry in functions.items():
        _identifier(name, "function")
        if not isinstance(entry, dict):
            raise PackageError(f"function {name}: not a table")
        source, line, noinline, defaults = (entry.get(k) for k in ("source", "line", "noinline", "defaults"))
        if not isinstance(source, str) or len(source) > FUNCTION_LIMIT_CHARS:
            raise PackageError(f"function {name}: no source of at most {FUNCTION_LIMIT_CHARS} characters")
        if isinstance(line, bool) or not isinstance(line, int) or not 1 <= line <= MAX_LINE:
            raise PackageError(f"function {name}: its line is not a line number")
        if not isinstance(noinline, bool) or not isinstance(defaults, dict):
            raise PackageError(f"function {name}: noinline or defaults of the wrong type")
        for parameter, value in defaults.items():
            _identifier(parameter, f"{name}'s parameter")
            plain(value, f"{name}: the default of {parameter}")
    for name, spec in globals_.items():
        _identifier(name, "global")
        if not isinstance(spec, dict) or len(spec) != 1:
            raise PackageError(f"global {name}: not a one-entry table")
        ((kind, value),) = spec.items()
        if kind == "module":
            if value not in KERNEL_MODULES:
                raise PackageError(f"global {name}: the module {value!r} is not one a kernel may use")
        elif kind == "attr":
            if not (isinstance(value, list) and len(value) == 2 and value[0] in KERNEL_MODULES):
                raise PackageError(f"global {name}: not an attribute of a kernel module")
            _identifier(value[1], f"global {name}'s attribute")
        elif kind == "jit":
            if value not in functions:
                raise PackageError(f"global {name}: no function {value!r} in the package")
        elif kind in ("constexpr", "value"):
            plain(value, f"global {name}")
        else:
            raise PackageError(f"global {name}: unknown kind {kind!r}")
    return package


# ------------------------------------------------------------------------------------------ rebuilding


def rebuild(package: dict[str, Any], filename: str, jit: Callable[..., Any]) -> dict[str, Any]:
    """The namespace of the package's functions, each made by `jit` (Triton's decorator, compiled or
    interpreted as the caller set it up) from its checked source; nothing of the file runs here."""
    namespace: dict[str, Any] = {"__name__": "submission", "__builtins__": builtins}
    for name, spec in package["globals"].items():
        ((kind, value),) = spec.items()
        if kind == "module":
            namespace[name] = importlib.import_module(value)
        elif kind == "attr":
            module = importlib.import_module(value[0])
            if value[0] == "triton" and value[1] not in TRITON_TOP_LEVEL or not hasattr(module, value[1]):
                raise PackageError(f"{filename}: {value[0]} has no {value[1]} a kernel may use")
            found = getattr(module, value[1])
            if isinstance(found, types.ModuleType):
                raise PackageError(f"{filename}: {value[0]}.{value[1]} is a module")
            namespace[name] = found
        elif kind == "constexpr":
            from triton.language.core import constexpr

            namespace[name] = constexpr(value)
        elif kind == "value":
            namespace[name] = value
    _register(package["functions"], filename)
    trees = {name: _checked_def(name, entry, namespace, filename) for name, entry in package["functions"].items()}
    for name, tree in trees.items():
        code = compile(tree, filename, "exec", dont_inherit=True)
        exec(code, namespace)  # a `def` whose defaults and annotations are constants: it evaluates nothing
        namespace[name] = jit(namespace[name], noinline=package["functions"][name]["noinline"] or None)
    for name, spec in package["globals"].items():
        if "jit" in spec:
            namespace[name] = namespace[spec["jit"]]
    return namespace


def _register(functions: dict[str, dict[str, Any]], filename: str) -> None:
    """The functions' text at their own lines of a file of that name, where `inspect` (and so Triton)
    and tracebacks look for it; no file exists, and no other line of the student's is in it."""
    lines: list[str] = []
    taken: dict[int, str] = {}
    for name, entry in sorted(functions.items(), key=lambda item: item[1]["line"]):
        text = entry["source"].splitlines()
        start = entry["line"] - 1
        for index in range(start, start + max(1, len(text))):
            if index in taken:
                raise PackageError(f"{filename}: {name} and {taken[index]} overlap at line {index + 1}")
            taken[index] = name
        if len(lines) < start:
            lines += ["\n"] * (start - len(lines))
        lines[start:] = [line + "\n" for line in text]
    linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)


def _checked_def(name: str, entry: dict[str, Any], namespace: dict[str, Any], filename: str) -> ast.Module:
    source = entry["source"]

    def refuse(node: ast.AST | None, problem: str) -> PackageError:
        where = (
            f"{filename}:{entry['line'] + node.lineno - 1}"
            if node is not None and hasattr(node, "lineno")
            else filename
        )
        return PackageError(f"{where}: {problem}")

    if not source.startswith("def "):
        raise refuse(None, f"{name}: its source is not one `def`")
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        raise refuse(None, f"{name}: SyntaxError: {exc.msg}") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef) or tree.body[0].name != name:
        raise refuse(None, f"{name}: its source is not one `def {name}`")
    function = tree.body[0]
    if function.decorator_list:
        raise refuse(function, f"{name}: a decorator inside the package")
    _check_reach(function, namespace, refuse)
    arguments = function.args
    if arguments.vararg or arguments.kwarg:
        raise refuse(function, f"{name}: a @triton.jit function takes no *args or **kwargs")
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    for argument in every:
        if argument.annotation is not None:
            # as text: Triton reads "constexpr" in it; evaluated, it would be the file's expression
            argument.annotation = ast.Constant(ast.unparse(argument.annotation))
    given = entry["defaults"]
    positional = [*arguments.posonlyargs, *arguments.args]
    with_default = positional[len(positional) - len(arguments.defaults) :]
    expected = {a.arg for a in with_default} | {
        a.arg for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None
    }
    if expected != set(given):
        raise refuse(function, f"{name}: the package's defaults do not match its parameters")
    arguments.defaults = [ast.Constant(given[a.arg]) for a in with_default]
    arguments.kw_defaults = [
        None if d is None else ast.Constant(given[a.arg]) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults)
    ]
    function.returns = None
    ast.fix_missing_locations(tree)
    ast.increment_lineno(tree, entry["line"] - 1)
    return tree  # type: ignore[no-any-return]


def _check_reach(function: ast.FunctionDef, namespace: dict[str, Any], refuse: Callable[..., PackageError]) -> None:
    """What the body may reach: no underscore names, no forbidden builtins, no nested code, and modules
    only as the stem of an attribute (`tl.load`), only the language's."""
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(function):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    for node in ast.walk(function):
        if node is not function and isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef | ast.Import | ast.ImportFrom
        ):
            raise refuse(node, f"{function.name}: a kernel defines or imports nothing inside itself")
        if isinstance(node, ast.Global | ast.Nonlocal):
            raise refuse(node, f"{function.name}: a kernel declares no global or nonlocal names")
        if isinstance(node, ast.Name) and (node.id.startswith("__") or node.id in FORBIDDEN_NAMES):
            raise refuse(node, f"{function.name}: a kernel may not use {node.id}")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise refuse(node, f"{function.name}: a kernel may not use the attribute {node.attr}")
        if isinstance(node, ast.Name | ast.Attribute) and isinstance(getattr(node, "ctx", None), ast.Load):
            reached = _module_reached(node, namespace)
            if reached is None:
                continue
            path, value = reached
            if isinstance(value, types.ModuleType):
                if value.__name__ not in KERNEL_MODULES:
                    raise refuse(node, f"{function.name}: {path} is the module {value.__name__}, not Triton's language")
                if not isinstance(parents.get(node), ast.Attribute):
                    raise refuse(node, f"{function.name}: the module {path} may be used only as `{path}.name`")
            elif isinstance(node, ast.Attribute):
                stem = _module_reached(node.value, namespace)
                top = stem is not None and isinstance(stem[1], types.ModuleType) and stem[1].__name__ == "triton"
                if top and node.attr not in TRITON_TOP_LEVEL:
                    raise refuse(node, f"{function.name}: triton.{node.attr} is not part of Triton's language")


def _module_reached(node: ast.AST, namespace: dict[str, Any]) -> tuple[str, Any] | None:
    """For `tl` or `tl.core.x` rooted at a module global: the dotted path and what it names, else None."""
    if isinstance(node, ast.Name):
        value = namespace.get(node.id)
        return (node.id, value) if isinstance(value, types.ModuleType) else None
    if isinstance(node, ast.Attribute):
        stem = _module_reached(node.value, namespace)
        if stem is None or not isinstance(stem[1], types.ModuleType):
            return None
        if stem[1].__name__ not in KERNEL_MODULES:
            return None  # refused at the stem itself
        return f"{stem[0]}.{node.attr}", getattr(stem[1], node.attr, None)
    return None
