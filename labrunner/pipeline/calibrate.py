"""`attnlab calibrate`: time the shipped solution against the starter and write this GPU's speed gate."""

from __future__ import annotations

from labrunner.exit_codes import AttnlabError, ExitCode
from labrunner.labs import get_lab
from labrunner.measure.gates import (
    DEFAULT_FRACTION,
    load_gates,
    write_gate,
)
from labrunner.pipeline.backend import refuse_without_gpu
from labrunner.pipeline.bench import bench_submission
from labrunner.pipeline.requests import CalibrateRequest
from labrunner.records.gate import Gate
from labrunner.records.timing import SpeedupTiming
from labrunner.report.reporter import Reporter
from labrunner.report.results import RunResult


def calibrate_gate(request: CalibrateRequest, result: RunResult, reporter: Reporter) -> None:
    lab = get_lab(request.lab)
    output, fraction = request.output, request.fraction
    lab.timing_strategy.refuse_calibration(lab.name)
    if output.exists():
        load_gates(output, "-o")  # a broken file is refused now, not after the timing
    # calibrate's own words where no GPU times: bench, which it runs, would name itself
    refuse_without_gpu(
        "calibrate",
        request.device,
        f"a speed gate is a time taken on the GPU it gates; nothing was written to {output}",
    )
    bench_submission(request, result, reporter)
    timing = result.timing
    if result.decisive_case is not None or not isinstance(timing, SpeedupTiming):
        raise AttnlabError("calibration needs a correct, timed solution; see the failure above", ExitCode.WRONG_ANSWER)
    name = result.device_name or "unknown GPU"
    comparison = timing.comparison
    entry = write_gate(
        output,
        lab.name,
        name,
        timing.speedup,
        fraction or DEFAULT_FRACTION,
        {
            "ci_low": comparison.ci_low,
            "ci_high": comparison.ci_high,
            "solution_ms": comparison.student.median_ms,
            "starter_ms": comparison.baseline.median_ms,
            "shape": {"rows": timing.rows, "prefix": timing.prefix},
        },
    )
    result.gate = Gate(
        status="calibrated",
        passed=True,
        message=f"wrote the {lab.name} gate for {name} to {output}: a student needs SPEEDUP >= "
        f"{entry['fraction'] * entry['solution_speedup']:.2f}x "
        f"({entry['fraction']:g} of the solution's {entry['solution_speedup']:.2f}x)",
        file=str(output),
        calibration=entry,
    )
    reporter.gated(result)
