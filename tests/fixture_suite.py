"""The fixture suite: every known-correct, known-wrong and hostile kernel, graded for real.

Each fixture's expected verdict, decisive case, first bad row and exit code are data in
`tests/fixtures/<lab>/expected.toml`. Grading goes through the real command line
(`python -m labrunner grade ... --json`), so what is checked is exactly what a CI grading
job would see. Run it directly for the table: `python tests/fixture_suite.py --device gpu`.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from result_schema import validate_file

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPO = FIXTURES.parent.parent


@dataclass
class Fixture:
    lab: str
    path: Path
    expected: dict

    @property
    def name(self) -> str:
        if self.path.is_relative_to(FIXTURES / self.lab):
            return f"{self.lab}/{self.path.relative_to(FIXTURES / self.lab)}"
        return str(self.path.relative_to(REPO))

    def runs_on(self, backend: str) -> bool:
        return backend in self.expected.get("backends", ["gpu", "cpu"])


@dataclass
class Outcome:
    fixture: Fixture
    got: dict
    seconds: float
    backend: str = "cpu"

    @property
    def mismatches(self) -> list[str]:
        wrong = []
        expected = self.fixture.expected
        for key in ("verdict", "exit_code", "case", "row"):
            if key in expected or key in ("verdict", "exit_code"):
                # `gpu_case` and the like: where the backends' default case sets differ
                want = expected.get(f"{self.backend}_{key}", expected.get(key))
                if self.got.get(key) != want:
                    wrong.append(f"{key}: expected {want!r}, got {self.got.get(key)!r}")
        # Hints: a fixture that names one must get it first; a passing one must get none.
        want_hint = expected.get(
            f"{self.backend}_hint", expected.get("hint", "" if expected["verdict"] == "pass" else None)
        )
        if want_hint is not None and self.got.get("hint", "") != want_hint:
            wrong.append(f"hint: expected {want_hint or 'none'!r}, got {self.got.get('hint') or 'none'!r}")
        for needle in self.fixture.expected.get("gpu_diagnosis_names", []) if self.backend == "gpu" else []:
            if needle not in (self.got.get("diagnosis") or ""):
                wrong.append(f"diagnosis: expected it to name {needle!r}, got {self.got.get('diagnosis')!r}")
        return wrong


def load_fixtures(lab: str | None = None) -> list[Fixture]:
    fixtures = []
    for lab_dir in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        if lab and lab_dir.name != lab:
            continue
        with open(lab_dir / "expected.toml", "rb") as handle:
            table = tomllib.load(handle)
        # Entries under kernels/ are the shipped starter and solution, graded where they live.
        on_disk = {str(p.relative_to(lab_dir)) for pattern in ("*.cu", "*.py") for p in lab_dir.rglob(pattern)}
        missing = on_disk ^ {rel for rel in table if not rel.startswith("kernels/")}
        if missing:
            raise AssertionError(f"{lab_dir.name}: fixtures and expected.toml disagree about {sorted(missing)}")
        fixtures += [
            Fixture(lab_dir.name, (REPO if rel.startswith("kernels/") else lab_dir) / rel, expected)
            for rel, expected in table.items()
        ]
    return fixtures


def grade(
    fixture: Fixture,
    backend: str,
    extra: tuple[str, ...] = (),
    attnlab: tuple[str, ...] = (sys.executable, "-m", "labrunner"),
    cwd: Path = REPO,
    env: dict[str, str] | None = None,
) -> Outcome:
    """Grade `fixture` as a CI job would; `attnlab`, `cwd` and `env` grade it with an installed package
    (its `attnlab` command, run from a folder outside the repository) instead of the source tree."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "result.json"
        command = [
            *attnlab,
            "grade",
            fixture.lab,
            str(fixture.path),
            "--device",
            backend,
            "--json",
            str(report),
            *extra,
        ]
        if not fixture.expected.get("timing"):
            command.append("--no-timing")
        else:
            command += ["--budget", "0.3"]
        command += fixture.expected.get("args", [])
        if "timeout" in fixture.expected:
            command += ["--timeout", str(fixture.expected["timeout"])]
        started = time.perf_counter()
        completed = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        seconds = time.perf_counter() - started
        result = validate_file(report) if report.exists() else {}
    decisive = next((c for c in result.get("cases", []) if c["name"] == result.get("decisive_case")), None)
    got = {
        "verdict": result.get("verdict"),
        "exit_code": completed.returncode,
        "json_exit_code": result.get("exit_code"),
        "case": result.get("decisive_case"),
        "row": (decisive or {}).get("first_bad", {}).get("row") if decisive and decisive.get("first_bad") else None,
        "message": (decisive or {}).get("message") or result.get("error") or completed.stderr.strip()[-300:],
        "diagnosis": (decisive or {}).get("diagnosis"),
        "hint": ((result.get("hints") or [{}])[0]).get("hazard", ""),
        "hints": [h["hazard"] for h in result.get("hints") or []],
    }
    return Outcome(fixture, got, seconds, backend)


def run_suite(
    backend: str,
    lab: str | None = None,
    extra: tuple[str, ...] = (),
    jobs: int = 1,
    finished: Callable[[Outcome], None] | None = None,
    match: str | None = None,
) -> list[Outcome]:
    """Every fixture of `lab` for `backend`, `jobs` grades at a time (each is a process of its own; on
    the GPU their checks share the card and their timing takes turns under attnlab's per-GPU lock).
    `finished` hears of each outcome as it comes, so a long suite shows its progress (and a suite cut
    short by a time limit still says what it found)."""
    from concurrent.futures import ThreadPoolExecutor

    def graded(fixture: Fixture) -> Outcome:
        outcome = grade(fixture, backend, extra)
        if finished:
            finished(outcome)
        return outcome

    chosen = [f for f in load_fixtures(lab) if f.runs_on(backend) and (match is None or re.search(match, f.name))]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(graded, chosen))


def table(outcomes: list[Outcome]) -> str:
    lines = [f"{'kernel':40} {'expected':32} {'got':32} {'hints':28} {'s':>6}  ok"]
    for o in outcomes:
        e, g = o.fixture.expected, o.got
        want = f"{e['verdict']} {e.get('case', '')} r{e.get('row', '-')} x{e['exit_code']}"
        have = f"{g['verdict']} {g.get('case') or ''} r{'-' if g.get('row') is None else g['row']} x{g['exit_code']}"
        hints = ", ".join(g.get("hints") or []) or "-"
        lines.append(
            f"{o.fixture.name:40} {want:32} {have:32} {hints:28} {o.seconds:6.1f}  "
            f"{'ok' if not o.mismatches else 'MISMATCH'}"
        )
    bad = sum(1 for o in outcomes if o.mismatches)
    lines.append(f"{len(outcomes) - bad} passed, {bad} failed")
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    parser.add_argument("--lab", default=None)
    parser.add_argument("--jobs", type=int, default=1, help="fixtures graded at once")
    parser.add_argument("--match", default=None, help="only fixtures whose name (lab/kind/file.cu) this regex finds")
    args = parser.parse_args()

    def progress(o: Outcome) -> None:
        print(
            f"{o.fixture.name}: {o.got['verdict']} x{o.got['exit_code']} {o.seconds:.1f}s "
            f"{'ok' if not o.mismatches else 'MISMATCH'}",
            file=sys.stderr,
            flush=True,
        )

    outcomes = run_suite(args.device, args.lab, jobs=args.jobs, finished=progress, match=args.match)
    for o in outcomes:
        for problem in o.mismatches:
            print(f"{o.fixture.name}: {problem}\n    {o.got['message']}")
    print(table(outcomes))
    sys.exit(1 if any(o.mismatches for o in outcomes) else 0)
