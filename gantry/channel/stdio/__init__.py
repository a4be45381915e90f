"""The stdio channel: the development REPL (repl.py), its keyboard and its elicitation."""

from gantry.channel.stdio.output import Intro
from gantry.channel.stdio.repl import StdioChannel

__all__ = ["Intro", "StdioChannel"]
