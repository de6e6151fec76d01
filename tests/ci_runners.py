"""The CI recipes of examples/ run here as their CI systems run them, as far as one machine can.

A recipe is read with a YAML 1.2 parser (ruamel.yaml, the one check-jsonschema reads it with; YAML 1.1
parsers read GitHub's `on:` as a boolean) and its jobs are run here, each in a folder that stands for
its checkout:

- GitHub Actions: each step's `run` is a bash script of its own (`bash -e`, the default shell of a Linux
  runner), with the workflow's, the job's and the step's `env`; `${{ secrets.NAME }}` and
  `${{ vars.NAME }}` are replaced by the values given, an unset one by "" (as Actions does). A folder a
  step appends to `$GITHUB_PATH` goes in front of PATH for the steps after it. After a failing step only
  the steps marked `if: always()` run. `actions/checkout` is the folder itself; `actions/upload-artifact`
  fails where its `path` holds nothing.
- GitLab CI: a job's `before_script` and `script` lines run in one bash shell under `set -eo pipefail`,
  as GitLab's runner runs them (a variable or an `export` of one line holds in the next), with the
  pipeline's and the job's `variables` and the CI/CD variables given; the first failing line ends the
  job. Each `artifacts:paths` entry and `artifacts:reports:junit` must exist when the job ends.

Anything else in a recipe (a key, an expression or an action this module does not know) raises
`NotEmulated`, so a recipe never gains a command that no test has run.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ruamel.yaml import YAML


class NotEmulated(Exception):
    """A recipe uses something these runners do not emulate: teach them, then test it."""


@dataclass
class Ran:
    name: str  # a step's name, or a GitLab job's
    exit_code: int | None  # None: skipped after an earlier step failed
    stdout: str = ""
    stderr: str = ""
    missing_artifacts: tuple[str, ...] = ()  # GitLab: declared artifacts the job did not leave


def load_recipe(path: Path) -> dict:
    return YAML(typ="safe").load(path.read_text())


def _known(where: str, mapping: dict, keys: set[str]) -> None:
    unknown = set(mapping) - keys
    if unknown:
        raise NotEmulated(f"{where}: {sorted(unknown)} (known here: {sorted(keys)})")


EXPRESSION = re.compile(r"\$\{\{\s*(secrets|vars)\.(\w+)\s*\}\}")


def _expanded(text: object, contexts: dict[str, dict[str, str]]) -> str:
    expanded = EXPRESSION.sub(lambda m: contexts[m[1]].get(m[2], ""), str(text))
    if "${{" in expanded:
        raise NotEmulated(f"an expression other than secrets.NAME or vars.NAME: {text!r}")
    return expanded


def _bash(script: str, folder: Path, environment: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-e", "-c", script], cwd=folder, env=environment, capture_output=True, text=True, timeout=900
    )


def run_github_job(
    workflow: dict,
    job: str,
    folder: Path,
    environment: dict[str, str],
    secrets: dict[str, str],
    variables: dict[str, str],
    rewrite: Callable[[str], str] = lambda script: script,
) -> list[Ran]:
    """Run `job` of a GitHub Actions workflow in `folder`: what each step gave. `rewrite` takes each `run`
    script as the runner would run it (after the expressions are replaced) and returns what to run here."""
    _known("workflow", workflow, {"name", "on", "env", "jobs"})
    spec = workflow["jobs"][job]
    _known(f"job {job}", spec, {"runs-on", "steps", "env"})
    contexts = {"secrets": secrets, "vars": variables}
    base = dict(environment)
    for scope in (workflow.get("env") or {}, spec.get("env") or {}):
        base.update({name: _expanded(value, contexts) for name, value in scope.items()})
    github_path = folder.parent / f"{folder.name}.github_path"
    github_path.write_text("")
    base["GITHUB_PATH"] = str(github_path)
    ran: list[Ran] = []
    for step in spec["steps"]:
        _known(f"a step of {job}", step, {"name", "run", "uses", "with", "if", "env"})
        name = step.get("name") or step.get("uses") or step["run"].splitlines()[0]
        if step.get("if") not in (None, "always()"):
            raise NotEmulated(f"step {name!r}: if: {step['if']}")
        if any(r.exit_code != 0 for r in ran) and step.get("if") != "always()":
            ran.append(Ran(name, None))
            continue
        env = {**base, **{n: _expanded(v, contexts) for n, v in (step.get("env") or {}).items()}}
        added = [line for line in github_path.read_text().splitlines() if line]
        env["PATH"] = os.pathsep.join([*reversed(added), env["PATH"]])  # the latest addition first
        if "run" in step:
            completed = _bash(rewrite(_expanded(step["run"], contexts)), folder, env)
            ran.append(Ran(name, completed.returncode, completed.stdout, completed.stderr))
        elif step["uses"].startswith("actions/checkout@"):
            ran.append(Ran(name, 0))  # the folder is the checkout
        elif step["uses"].startswith("actions/upload-artifact@"):
            path = folder / _expanded(step["with"]["path"], contexts)
            found = path.exists() and (path.is_file() or any(path.iterdir()))
            ran.append(Ran(name, 0 if found else 1, "", "" if found else f"no files were found with {path}"))
        else:
            raise NotEmulated(f"the action {step['uses']}")
    return ran


def run_gitlab_job(
    pipeline: dict,
    job: str,
    folder: Path,
    environment: dict[str, str],
    variables: dict[str, str],
    rewrite: Callable[[str], str] = lambda line: line,
) -> Ran:
    """Run `job` of a GitLab CI pipeline in `folder`: its exit code, output and missing artifacts. `rewrite`
    takes each script line and returns what to run here."""
    spec = pipeline[job]
    _known(f"job {job}", spec, {"tags", "image", "before_script", "script", "artifacts", "variables"})
    for name, value in pipeline.items():
        if name != "variables" and not (isinstance(value, dict) and "script" in value):
            raise NotEmulated(f"the pipeline's key {name!r}")
    env = {**environment, **(pipeline.get("variables") or {}), **(spec.get("variables") or {}), **variables}
    lines = [*(spec.get("before_script") or []), *spec["script"]]
    completed = _bash("set -eo pipefail\n" + "\n".join(rewrite(line) for line in lines), folder, env)
    artifacts = spec.get("artifacts") or {}
    _known(f"artifacts of {job}", artifacts, {"when", "paths", "reports"})
    _known(f"artifact reports of {job}", artifacts.get("reports") or {}, {"junit"})
    declared = [*(artifacts.get("paths") or []), *filter(None, [(artifacts.get("reports") or {}).get("junit")])]
    missing = tuple(path for path in declared if not (folder / path).exists())
    return Ran(job, completed.returncode, completed.stdout, completed.stderr, missing)
