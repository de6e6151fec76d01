"""A re-run of a batch reuses what has not changed: a submission's report stands when the file's bytes,
the lab, the options that change a verdict, the seed and the attnlab version are all what they were.

Courses re-run a batch for ordinary reasons (a late submission added, a cluster job that died, a CI job
re-run), and grading twelve unchanged files again costs minutes of a GPU for the same verdicts. Every
report already records the sha256 of the bytes it graded; the batch keeps, beside the reports in
--out-dir, one record (`attnlab-reuse.keys`, JSON) of the key each report was graded under, and a report is
reused only when its key is the key the file would be graded under now. A report that says the grader
did not finish (a dead job, an interrupted batch, a missing environment) is never reused: only a verdict
about the student's file is. `--regrade` grades every file again.

The seed is part of the key, and a secret seed is itself secret: the record holds a slow salted hash of
it (scrypt), never the text, so a record left where students can read it gives no cheap way to test
guesses of the secret.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

from labrunner.compile.backend import Backend
from labrunner.compile.source import submission_sha256
from labrunner.exit_codes import ExitCode
from labrunner.pipeline.batch.submission import Outcome, SubmissionTask
from labrunner.report.results import ResultJson, attnlab_version
from labrunner.truth.cases import environment_seed

RECORD_NAME = "attnlab-reuse.keys"  # JSON, named so that a `*.json` over --out-dir finds the reports alone
RECORD_SCHEMA = "attnlab.batch-reuse/1"
# A result whose exit code is one of these is a verdict on the student's file, and may be reused.
VERDICT_CODES = {
    int(code)
    for code in (
        ExitCode.PASS,
        ExitCode.WRONG_ANSWER,
        ExitCode.COMPILE_ERROR,
        ExitCode.MISBEHAVED,
        ExitCode.SPEED_GATE,
    )
}


def grading_key(task: SubmissionTask, sha256: str, machine: str, seed_hash: str) -> str:
    """What a report's verdict depends on, as one hash: the file (where it is and what its bytes are), the
    lab, the grade options as passed on and the bytes of the files they name (a gates file recalibrated
    changes every gate's verdict), where it ran (`grading_machine`), the seed and attnlab's version."""
    parts = {
        "file": os.path.abspath(task.file),
        "sha256": sha256,
        "lab": task.lab,
        "options": list(task.options),
        "named_files": named_file_hashes(task.options),
        "machine": machine,
        "seed": seed_hash,
        "version": attnlab_version(),
        "grader": grader_fingerprint(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@functools.cache
def grader_fingerprint() -> str:
    """The grader's own bytes: its code, its case catalogues and its reference kernels, hashed. The version
    number alone misses a checkout edited between two batches (a fixed rule, a new case), which grades
    differently under the same number."""
    import labrunner
    from labrunner.labs.definition import KERNELS_DIR
    from labrunner.truth.catalogue import CASES_DIR

    digest = hashlib.sha256()
    for root in (Path(labrunner.__file__).parent, CASES_DIR, KERNELS_DIR):
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(str(path.relative_to(root)).encode("utf-8", "surrogateescape") + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


FILE_OPTIONS = ("--gates",)  # grade options whose value is a file the verdict reads


def named_file_hashes(options: tuple[str, ...]) -> dict[str, str]:
    hashes = {}
    for i, word in enumerate(options[:-1]):
        if word in FILE_OPTIONS:
            try:
                hashes[word] = hashlib.sha256(Path(options[i + 1]).read_bytes()).hexdigest()
            except OSError:
                hashes[word] = "unreadable"
    return hashes


def grading_machine(backend: str, cluster_request: str | None = None) -> str:
    """Where the verdicts come from, as far as they depend on it: the GPU's name (a speed gate is per GPU
    model, and timings are), the CPU backend, or a cluster's request (its nodes' GPU is theirs to say)."""
    if cluster_request is not None:
        return f"cluster {cluster_request}"
    if backend != Backend.GPU:
        return backend
    try:
        import cupy

        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        return f"gpu {name.decode() if isinstance(name, bytes) else name}"
    except Exception:
        return "gpu"


def seed_hash(salt: str) -> str:
    """The seed's part of every key: `public` without a secret, else the secret's scrypt hash under `salt`."""
    secret = environment_seed().strip()
    if not secret:
        return "public"
    digest = hashlib.scrypt(secret.encode("utf-8", "surrogateescape"), salt=salt.encode(), n=2**14, r=8, p=1)
    return digest.hex()


class ReuseRecord:
    """The record in --out-dir of the key each report was graded under."""

    def __init__(self, folder: Path):
        self.path = folder / RECORD_NAME
        try:
            data = json.loads(self.path.read_text())
            if data.get("schema") != RECORD_SCHEMA:
                raise ValueError
            self.salt: str = str(data["salt"])
            self.keys: dict[str, str] = {str(k): str(v) for k, v in data["keys"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self.salt, self.keys = os.urandom(16).hex(), {}

    def reusable(self, task: SubmissionTask, machine: str, seed: str) -> ResultJson | None:
        """The report to reuse for `task`, or None where it must be graded."""
        name = Path(task.json_path).name
        if name not in self.keys:
            return None
        sha256 = submission_sha256(Path(task.file))
        if sha256 is None or self.keys[name] != grading_key(task, sha256, machine, seed):
            return None
        try:
            result = json.loads(Path(task.json_path).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(result, dict) or result.get("sha256") != sha256:
            return None
        if result.get("exit_code") not in VERDICT_CODES or result.get("grader_died"):
            return None
        if not isinstance(result.get("seconds"), (int, float, type(None))):
            return None
        return result

    def remember(self, outcomes: list[Outcome], machine: str, seed: str) -> None:
        """Keys for the outcomes that are verdicts on the file graded (under the sha256 the result itself
        records: a file changed while it was graded is keyed by the bytes that were graded)."""
        for outcome in outcomes:
            name = Path(outcome.task.json_path).name
            sha256 = outcome.result.get("sha256")
            if outcome.exit_code in VERDICT_CODES and sha256 and not outcome.result.get("grader_died"):
                self.keys[name] = grading_key(outcome.task, sha256, machine, seed)
            else:
                self.keys.pop(name, None)
        data = {"schema": RECORD_SCHEMA, "salt": self.salt, "keys": dict(sorted(self.keys.items()))}
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            temporary.write_text(json.dumps(data, indent=1) + "\n")
            os.replace(temporary, self.path)
        except OSError:
            pass  # without the record the next batch grades everything again: slower, never wrong
