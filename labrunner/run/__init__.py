"""The run: where a student's kernels execute, apart from the driver, and what happens when they misbehave.

The worker process and its protocol (`worker`), the GPU device (`gpu_device`: CuPy RawModule),
the CPU device (`cpu_device`, with the fiber shim in `cpu/`), and the crash replay under
compute-sanitizer (`diagnose`, `replay`). It may use measuring (the worker runs timed calls),
the build's include folder, the lab definitions and the truth's poison patterns; the oracle,
the checks and the verdicts stay on the driver's side, above it.
"""
