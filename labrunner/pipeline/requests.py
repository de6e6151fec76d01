"""What a command asks for, as frozen records built from the command line's options.

Each option is declared once, in `labrunner/cli/options.py`, whose defaults are read from these
fields: a default is stated here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from labrunner.compile.compiler_process import DEFAULT_COMPILE_TIMEOUT_S, CompileLimits
from labrunner.compile.nvrtc import DEFAULT_ARCH
from labrunner.compile.triton_build import is_triton_file
from labrunner.exit_codes import usage_error
from labrunner.labs.definition import Lab
from labrunner.measure.sampling import TimingOptions

_TIMING = TimingOptions()  # the sampling loop's own defaults, which the command line shows


class FromOptions:
    """Built from click's parameters by name: a field is filled by the option of the same name."""

    @classmethod
    def from_options(cls, options: dict[str, Any], **given: Any) -> Any:
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{name: value for name, value in options.items() if name in names}, **given)


@dataclass(frozen=True)
class RunRequest(FromOptions):
    """What grade, bench and calibrate share: the file, the backend, and how to time."""

    lab: str
    file: Path | None
    device: str = "auto"  # the GPU where there is one, else the CPU: the one default that works everywhere
    seed: int | None = None
    public_seed: bool = False  # --public-seed: in CI without a secret, the public inputs on purpose
    timeout_s: float | None = None
    arch: str = DEFAULT_ARCH
    compile_timeout_s: float | None = None  # --compile-timeout; None: each compiler's own default
    budget_s: float = _TIMING.budget_s
    noise_target: float = _TIMING.noise_target
    rounds: int = 1
    unsafe_cpu: bool = False  # --unsafe-cpu: the CPU worker without its syscall filter
    with_profile: bool = False  # --profile: the Range pass's one line after a correct GPU run
    require_box: bool = False  # --require-box: no compiler or worker starts outside the box

    @property
    def compile_limits(self) -> CompileLimits:
        return compile_limits(self.compile_timeout_s, unboxed_python=self.unsafe_cpu)

    def timing_options(self, seed: int) -> TimingOptions:
        return TimingOptions(budget_s=self.budget_s, noise_target=self.noise_target, seed=seed, rounds=self.rounds)

    @property
    def load_options(self) -> dict[str, Any]:
        """What the worker's compile needs beyond the source: the CPU build defines the arch the gate compiled for."""
        timeout_s = self.compile_timeout_s or DEFAULT_COMPILE_TIMEOUT_S
        return {"arch": self.arch, "sandboxed": not self.unsafe_cpu, "timeout_s": timeout_s}


@dataclass(frozen=True)
class GradeRequest(RunRequest):
    full: bool = False
    race_check: bool = False
    only: tuple[str, ...] = ()
    diagnose: bool = True
    gates_path: Path | None = None
    no_timing: bool = False  # --no-timing: correctness only


@dataclass(frozen=True)
class BenchRequest(RunRequest):
    chunk: int | None = None
    prefix: int | None = None
    versus: str = "starter"


@dataclass(frozen=True)
class CalibrateRequest(BenchRequest):
    output: Path = Path("gates.json")
    fraction: float = 0.5


@dataclass(frozen=True)
class CheckRequest(FromOptions):
    lab: str
    file: Path
    arch: str = DEFAULT_ARCH
    compile_timeout_s: float | None = None
    require_box: bool = False

    @property
    def compile_limits(self) -> CompileLimits:
        return compile_limits(self.compile_timeout_s)


def compile_limits(timeout_s: float | None, unboxed_python: bool = False) -> CompileLimits:
    """--compile-timeout for every compiler where it is given: NVRTC's wall seconds and each Triton step's
    CPU seconds; where it is not, each its own default (20 s for NVRTC, 120 CPU seconds for Triton)."""
    if timeout_s is None:
        return CompileLimits(unboxed_python=unboxed_python)
    return CompileLimits(timeout_s=timeout_s, triton_cpu_s=timeout_s, unboxed_python=unboxed_python)


@dataclass(frozen=True)
class ProfileRequest(FromOptions):
    lab: str
    file: Path
    device: str = "auto"  # profile needs a GPU; auto and cpu without one are refused in one line
    seed: int | None = None
    public_seed: bool = False
    timeout_s: float | None = None
    arch: str = DEFAULT_ARCH
    calls: int = 5
    trace_path: Path | None = None
    plot_path: Path | None = None
    ncu_csv_path: Path | None = None
    range_pass: bool = True
    cupti: bool = True
    unsafe_cpu: bool = False  # what `prepare` reads of every request: profile runs on the GPU alone

    @property
    def compile_limits(self) -> CompileLimits:
        return compile_limits(None)


def default(request: type, name: str) -> Any:
    """A field's default, for the option that fills it: the one place each default is written."""
    return next(f.default for f in fields(request) if f.name == name)


def refuse_speedup_options(lab: Lab, request: RunRequest) -> None:
    """Options that shape a SPEEDUP mean nothing to a lab that times a pipeline: said before any work."""
    given = [
        flag
        for flag, present in (
            ("--chunk", getattr(request, "chunk", None) is not None),
            ("--prefix", getattr(request, "prefix", None) is not None),
            ("--vs", getattr(request, "versus", "starter") not in ("starter", lab.peer)),
            ("--rounds", request.rounds > 1),
        )
        if present
    ]
    lab.timing_strategy.refuse_shape_options(lab.name, lab.peer, given)


def refuse_triton_options(request: RunRequest) -> None:
    """What a Triton file cannot be given yet, said before any work: compute-sanitizer's race check and
    Nsight's range pass replay a `.cu` file's source, and a Triton file's kernels exist only as cubins."""
    if request.file is None or not is_triton_file(request.file):
        return
    given = [
        flag
        for flag, present in (
            ("--race-check", getattr(request, "race_check", False)),
            ("--profile", request.with_profile),
        )
        if present
    ]
    if given:
        verb = "takes" if len(given) == 1 else "take"
        raise usage_error(
            f"{' and '.join(given)} {verb} a .cu file: {request.file} is a Triton file, graded without it "
            "(leave the option out)"
        )
