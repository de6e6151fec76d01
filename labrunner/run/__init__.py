"""The run: where a student's kernels execute, apart from the driver, and what happens when they misbehave.

The driver's handle on a worker (`worker`) and the worker process itself (`worker_main`), the
box it runs in (`sandbox`: session, environment, private directory, limits, the tree killed at
the end), the wire between them (`wire`: a JSON header and raw buffers, never pickle) and what
the driver accepts back (`replies`), what the worker printed (`kernel_output`, capped) and how
any text from student code is shown (`untrusted_text`), the GPU device (`gpu_device`: CuPy
RawModule), the CPU device (`cpu_device`, with the fiber shim in `cpu/`), and the crash replay
under compute-sanitizer (`diagnose`, `replay`). It may use measuring (the worker runs timed calls),
the build's include folder, the lab definitions and the truth's poison patterns; the oracle,
the checks and the verdicts stay on the driver's side, above it.
"""
