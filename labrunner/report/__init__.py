"""Reporting: what the user and a CI system read.

`results` holds a run's result and its machine-readable forms (the versioned `--json` schema and
`--junit`); `terminal` draws the rich tables, progress and verdict lines, and is the only module
that imports rich. `trace_events` writes the Trace timeline as a file Perfetto opens, and
`roofline_plot` draws the roofline with matplotlib. Reporting reads results; it never computes a verdict.
"""
