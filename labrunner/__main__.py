"""`python -m labrunner` is the `attnlab` command."""

from labrunner.commands.cli import main

main(prog_name="attnlab")
