"""`python -m gantry` is the same as the `gantry` executable."""

from gantry.cli import entry

entry()
