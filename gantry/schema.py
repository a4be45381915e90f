"""What a gantry database is, below any connection: the error an operator must act on and
the embedded migrations that define the schema (gantry.db and gantry.store.examine share it)."""

from __future__ import annotations


class DatabaseError(Exception):
    """A database problem the operator must fix; `str()` says what and how."""


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every embedded migration, in order."""
    from importlib import resources

    found: list[tuple[int, str, str]] = []
    for entry in resources.files("gantry.migrations").iterdir():
        name = entry.name
        if not name.endswith(".sql"):
            continue
        found.append((int(name.split("_", 1)[0]), name, entry.read_text(encoding="utf-8")))
    found.sort()
    for i, (version, name, _) in enumerate(found, 1):
        if version != i:
            raise RuntimeError(f"migration {name} is out of sequence (expected {i:04d}_*.sql)")
    return found


def schema_version() -> int:
    return len(migrations())
