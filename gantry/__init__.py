"""gantry: one persona, one model, MCP tools, one SQLite file."""

__version__ = "0.1.0"
