"""The labs attnlab knows, by name."""

from __future__ import annotations

from labrunner.exit_codes import usage_error
from labrunner.labs.definition import Lab
from labrunner.labs.lab1 import LAB1
from labrunner.labs.lab2 import LAB2
from labrunner.labs.lab3 import LAB3

LABS: dict[str, Lab] = {lab.name: lab for lab in (LAB1, LAB2, LAB3)}


def get_lab(name: str) -> Lab:
    if name not in LABS:
        raise usage_error(f"unknown lab '{name}': choose one of {', '.join(LABS)} (`attnlab labs` lists them)")
    return LABS[name]
