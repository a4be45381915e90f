"""gantry: one persona, one model, MCP tools, one SQLite file."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    """`gantry.__version__`, read on first use from its one source: the frozen binary's build
    info, else gantry/VERSION (which pyproject.toml and build/build.py read too)."""
    if name != "__version__":
        raise AttributeError(f"module 'gantry' has no attribute {name!r}")
    try:
        from gantry._build_info import VERSION  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        import os

        with open(os.path.join(os.path.dirname(__file__), "VERSION"), encoding="ascii") as f:
            VERSION = f.read().strip()
    globals()["__version__"] = VERSION
    return str(VERSION)
