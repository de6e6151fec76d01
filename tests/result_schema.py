"""The JSON Schema of `--json` (labrunner/report/schema/result-1.json), checked with jsonschema.

jsonschema is a development dependency only: attnlab ships the schema for its readers and never
validates at run time."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "labrunner" / "report" / "schema" / "result-1.json"


@functools.lru_cache(maxsize=1)
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def validate_result(data: dict) -> dict:
    """Raise with every way `data` breaks the schema; return it unchanged when it keeps it."""
    problems = sorted(validator().iter_errors(data), key=lambda e: list(e.path))
    if problems:
        raise AssertionError(
            "the JSON result breaks schema result-1: "
            + "; ".join(f"{'/'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in problems)
        )
    return data


def validate_file(path: Path) -> dict:
    return validate_result(json.loads(Path(path).read_text()))


def timing_json(outcome: tuple) -> tuple:
    """(timing, failure) as `time_speedup` and `time_pipeline` return them, the timing written as the JSON
    carries it (the result's `timing`), checked against the schema on the way."""
    from labrunner.report.results import RunResult

    timing, failure = outcome
    if timing is None:
        return None, failure
    return validate_result(RunResult("bench", timing=timing).to_json())["timing"], failure
