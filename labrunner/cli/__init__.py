"""The command line: click's parsing, each option declared once, and the calls into the pipeline."""

from labrunner.cli.main import main

__all__ = ["main"]
