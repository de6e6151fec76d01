"""The records a run's results travel in, from the stage that measures them to the reports.

Each is a dataclass built by the pipeline in one go (frozen), or, where a record truly fills step by
step as a command goes on, a mutable one whose docstring says why. Each writes exactly the JSON that
`--json` carries (`to_json`), and is read back from it (`from_json`) where a reader holds only the
JSON: a batch reads every submission's result file. Figures derived from raw numbers (TFLOP/s, TB/s,
a fraction of the device copy, a ratio to the floor) are computed here, once, and carried in the JSON,
so the terminal only formats them.

- `compile`: what the compile gate found in a file (`attnlab check`).
- `device`: the device a run used, and how it was doing.
- `gate`: the speed gate's decision, or calibration's record of one.
- `batch_row`: a submission's row in a batch's gradebook.
- `profile`: `attnlab profile`'s trace, Range pass and roofline (schema attnlab.profile/1).
- `timing`: the timed comparison (labs 2 and 3), lab 1's cost table, lab 3's bandwidth.
"""
