"""`python -m labrunner` is the `attnlab` command."""

from labrunner.cli import main

main(prog_name="attnlab")
