"""Measuring: how a kernel is timed, and the conditions a figure was taken under.

The sampling loop and its statistics (`timing`, pure Python), the CuPy event timer that loop
drives (`gpu_timer`), the worker's side of a timed run (`timed_runs`: fresh inputs and poison
before every call), the GPU's state (`device_state`), the per-GPU speed gates (`gates`) and what no
timed figure can beat (`physics`: the same run's device copy, the tensor cores' peak).
These run inside the worker, so they sit below the run stage and never import it, nor the
checker: timing does not know what a correct answer is. The driver's side of timing (sending
input sets, checking verified calls, deriving SPEEDUP) talks to a worker, so it lives in the
pipeline (`labrunner.pipeline.timing_stage`).

Looking inside (`attnlab profile`): the Trace timeline's worker side (`trace`: CUPTI or CUDA events),
Nsight Compute's Range pass and its CSV (`range_pass`), the roofline's arithmetic (`roofline`) and the
GPU facts it needs (`gpu_facts`), and the lesson's HBM traffic model (`traffic`).

What these find is handed up as records (`labrunner.records`: a `Gate`, `Stats` and `Comparison`, a
`RooflinePoint`), the layer just below, so no stage above turns a dict into a record.
"""
