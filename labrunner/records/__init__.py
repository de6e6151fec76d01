"""The records a run's results travel in, from where the figures are made to the reports.

They sit below the measuring stage (`measure/` returns them: the speed gate a `Gate`, the sampling loop
its `Stats` and `Comparison`) and use only the truth, the labs and the compile stage, so every stage
above holds the same typed record and none converts a dict into one and back.

Each is a dataclass built in one go (frozen), or, where a record truly fills step by step as a command
goes on, a mutable one whose docstring says why. Its JSON, exactly what `--json` carries, comes from one
serializer (`serialize`: `to_json`, and `from_json` where a reader holds only the JSON, as a batch reading
every submission's result file); no record writes its own. Figures derived from raw numbers (TFLOP/s,
TB/s, a fraction of the device copy, a ratio to the floor) are computed here, once, by the record's
properties and carried in the JSON, so the terminal only formats them.

- `serialize`: the JSON of every record, from its fields, their type hints and its declared layout.
- `compile`: what the compile gate found in a file (`attnlab check`).
- `device`: the device a run used, and how it was doing.
- `gate`: the speed gate's decision, or calibration's record of one.
- `profile`: `attnlab profile`'s trace, Range pass and roofline (schema attnlab.profile/1).
- `roofline`: what a GPU said of itself, its two roofs, and a kernel's point under them.
- `traffic`: the lesson's HBM traffic model at one shape.
- `kernel_slice`: one kernel launch on the Trace timeline.
- `timing`: a timed series, the comparison (labs 2 and 3), lab 1's cost table, lab 3's bandwidth.
"""
