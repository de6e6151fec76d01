"""The labs attnlab knows, by name: the three it ships, and any lab registered from its definition.

A lab is data (`labs.definition.Lab`: its kernels, launches, timing strategy, case file and kernel
folder), so a lab defined anywhere joins by `register` and every command grades it by name, with
nothing in the command line or the pipeline changed.
"""

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


def register(lab: Lab) -> Lab:
    """Make `lab` known by its name; a name already taken is refused (unregister the other first)."""
    if lab.name in LABS:
        raise ValueError(f"a lab named {lab.name} is registered already: unregister it first")
    LABS[lab.name] = lab
    return lab


def unregister(name: str) -> Lab:
    """Forget the lab of this name (a registered one, or a shipped one), and return it."""
    if name not in LABS:
        raise ValueError(f"no lab named {name} is registered")
    return LABS.pop(name)
