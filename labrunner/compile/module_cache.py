"""The grader's own kernel files compiled once, kept in the grader's cache: no grade compiles a starter again.

Every timed grade sets the student's file against the lab's starter, and every grade compiled that
starter afresh (NVRTC in a box: a core for half a second to a second, in every process of a batch).
The starter is the grader's own file, so what its compile made is kept here
(`labrunner.grader_cache`, which no box can write), named by a digest of everything the compile read
or obeyed: the file's text and its label, the architecture, NVRTC's version, the headers every compile
includes (`labrunner/include`) and the compile gate's own code. A change to any of them makes a new
entry. A student's file is never kept: only the files a lab ships go through `compiled_grader_file`.

The entry is JSON: the module's fields, its machine code in base64 (loaded only by a box, as a fresh
compile's is), and the launch constants the gate derived. One that cannot be read as that shape is
compiled again and written anew.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labrunner.compile.gate import Submission
from labrunner.compile.nvrtc import INCLUDE_DIR, CompiledModule, KernelResources, nvrtc_version
from labrunner.grader_cache import grader_cache_dir

COMPILE_CODE = Path(__file__).resolve().parent  # the gate's own code: a change to it is a new entry


@functools.cache  # the grader's own files: read once a process, not at every grade's key
def _tree_digest(folder: Path, suffixes: tuple[str, ...] = ()) -> bytes:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and (not suffixes or p.suffix in suffixes)):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.digest()


def entry_key(source: bytes, label: str, arch: str) -> str:
    """The digest that names a compiled file's entry."""
    digest = hashlib.sha256()
    for part in (source, label.encode(), arch.encode(), nvrtc_version().encode()):
        digest.update(hashlib.sha256(part).digest())
    digest.update(_tree_digest(INCLUDE_DIR))
    digest.update(_tree_digest(COMPILE_CODE, (".py",)))
    return digest.hexdigest()[:32]


def compiled_grader_file(path: Path, label: str, arch: str, compile_now: Callable[[], Submission]) -> Submission:
    """The grader's file at `path` as the gate compiles it: from the cache where it is there, else
    `compile_now()`, kept for the next grade. Where the cache cannot be trusted, always `compile_now()`."""
    folder = grader_cache_dir("modules")
    if folder is None:
        return compile_now()
    entry = folder / f"{entry_key(path.read_bytes(), label, arch)}.json"
    kept = read_entry(entry, path)
    if kept is not None:
        return kept
    made = compile_now()
    write_entry(entry, made)
    return made


def read_entry(entry: Path, path: Path) -> Submission | None:
    try:
        data = json.loads(entry.read_text(encoding="utf-8"))
        module = dict(data["module"])
        module["cubin"] = base64.b64decode(module["cubin"])
        module["resources"] = {name: KernelResources(**r) for name, r in module["resources"].items()}
        return Submission(path, data["label"], data["source"], CompiledModule(**module), dict(data["constants"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing, or not what this code writes: compiled again


def write_entry(entry: Path, made: Submission) -> None:
    module: dict[str, Any] = dataclasses.asdict(made.module)
    if module.pop("triton"):
        return  # a Triton file's kernels are not kept here
    module["cubin"] = base64.b64encode(made.module.cubin).decode()
    data = {"label": made.label, "source": made.source, "module": module, "constants": made.constants}
    part = entry.with_name(f".{entry.name}.{os.getpid()}")
    try:
        part.write_text(json.dumps(data), encoding="utf-8")
        os.replace(part, entry)
    except OSError:
        part.unlink(missing_ok=True)  # a full disk: the next grade compiles again
