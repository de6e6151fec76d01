"""CPU and GPU backends on the same inputs: the shipped solutions' outputs must agree within 1e-5.

Runs each solution through both workers (the same code path `grade` uses) on the CPU backend's
default cases and prints the largest difference per case. Needs the GPU and a C++ compiler.
"""

from __future__ import annotations

import sys

import numpy as np

from labrunner.compile.gate import load_submission
from labrunner.labs import LABS
from labrunner.pipeline.correctness import resolved_cases
from labrunner.run.worker import Worker
from labrunner.truth.cases import DEFAULT_SEED, make_inputs
from labrunner.truth.contract import HEAD_DIM, QUERY_HEADS

AGREEMENT = 1e-5


def outputs(backend: str, lab, submission, cases) -> dict[str, np.ndarray]:
    results = {}
    with Worker(backend) as worker:
        worker.load("student", submission.module.composed_source, submission.label, lab.entry_point_types())
        for case in cases:  # as `grade` runs a case: the file's own geometry, every input buffer of the case
            inputs = make_inputs(case, DEFAULT_SEED)
            run = worker.run_case(
                "student",
                lab.plan_launches(submission.constants, case.rows, case.prefix),
                inputs.buffers(),
                {
                    "out": case.rows * QUERY_HEADS * HEAD_DIM,
                    **lab.workspace(submission.constants, case.rows, case.prefix),
                },
                ("out",),
                timeout_s=300,
            )
            results[case.name] = run.outputs["out"]
    return results


def main(backends: tuple[str, str] = ("gpu", "cpu")) -> None:
    """`backends`: the two to compare; `python scripts/compare_backends.py cpu cpu` runs the same
    path with no GPU (the CPU backend against itself), which is how CI keeps this script working."""
    worst = 0.0
    print(f"{'solution':28} {'case':22} {f'max |{backends[1]} - {backends[0]}|':>16}")
    for lab in LABS.values():
        submission = load_submission(
            lab, lab.solution_path, str(lab.solution_path.relative_to(lab.solution_path.parents[2]))
        )
        cases = [c for c in resolved_cases(lab, lab.catalogue, submission.constants) if c.cpu]
        gpu, cpu = outputs(backends[0], lab, submission, cases), outputs(backends[1], lab, submission, cases)
        for case in cases:
            difference = float(np.max(np.abs(gpu[case.name].astype(np.float64) - cpu[case.name])))
            worst = max(worst, difference)
            print(f"{submission.label:28} {case.name:22} {difference:16.3e}")
    verdict = "agree" if worst <= AGREEMENT else "DISAGREE"
    print(f"{backends[0]} and {backends[1]} outputs {verdict}: largest difference {worst:.3e} (bound {AGREEMENT:g})")
    raise SystemExit(0 if worst <= AGREEMENT else 1)


if __name__ == "__main__":
    main(tuple(sys.argv[1:3]) if len(sys.argv) == 3 else ("gpu", "cpu"))
