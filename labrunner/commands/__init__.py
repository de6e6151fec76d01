"""The commands: the CLI and the orchestration it drives, the top of the pipeline.

`cli` parses options and renders (nothing else); `runs` carries out `grade`, `bench` and
`calibrate`; `grade` runs every case through a worker and judges it; `benchmark` is the
driver's side of timing; `profile` looks inside a correct kernel (trace, Range pass, roofline);
`doctor` reports what the machine can do. Commands may import every
stage below; no stage imports a command.
"""
