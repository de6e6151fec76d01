"""The pipeline: what each command does, step by step, below the command line that parses it.

One file per step or command: `requests` (what a command asks for), `backend`, `prepare` (oracle
proof, compile gate, seed), `cases` and `explain` (correctness), `timing`, then the commands built
from them: `grade`, `bench`, `calibrate`, `profile`, `check`, `batch`, `doctor`, `starter`, `traffic`.
The command line (`labrunner.cli`) parses options into a request and calls one of these.
"""
