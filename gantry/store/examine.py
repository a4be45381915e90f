"""Is this file a gantry database this build can open? One sentence when it is not.

Used at boot (before anything opens the file read-write, so a damaged or foreign file is
never "repaired" by overwriting), by `gantry check`, by `gantry backup --verify` and before
`gantry restore` swaps a file in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gantry.schema import DatabaseError, schema_version

MAGIC = b"SQLite format 3\x00"
HEADER = 100
GANTRY_TABLE = "heartbeat"  # created by migration 0001; every gantry database has it
RESTORE_HINT = ("gantry did not open or change it: stop gantry and run `gantry restore BACKUP`, "
                "or move the file away to start with an empty database")
BACKUP_HINT = ("it cannot be restored: pick another backup (`gantry backup --verify PATH` "
               "checks one)")


@dataclass(frozen=True)
class Header:
    """What the first 100 bytes of an SQLite file promise."""

    page_size: int
    pages: int  # 0 when the header's count is not trustworthy (old writers)

    @property
    def expected_bytes(self) -> int:
        return self.page_size * self.pages


def parse_header(head: bytes) -> Header | None:
    """The header of an SQLite database file, or None if `head` is not one.

    The in-header page count is valid only when the version-valid-for number (offset 92)
    equals the change counter (offset 24), as SQLite's file format says.
    """
    if len(head) < HEADER or not head.startswith(MAGIC):
        return None
    raw = int.from_bytes(head[16:18], "big")
    page_size = 65536 if raw == 1 else raw
    if page_size < 512 or page_size & (page_size - 1):
        return None
    counter = int.from_bytes(head[24:28], "big")
    pages = int.from_bytes(head[28:32], "big")
    valid_for = int.from_bytes(head[92:96], "big")
    return Header(page_size, pages if counter == valid_for else 0)


@dataclass(frozen=True)
class Verdict:
    """A file that passed: its schema version and how it was checked."""

    path: Path
    version: int
    size: int
    check: str  # "quick_check" or "integrity_check"


def refuse(path: Path, what: str, hint: str = RESTORE_HINT) -> DatabaseError:
    return DatabaseError(f"database {str(path)!r} {what}; {hint}")


def examine(path: str | os.PathLike[str], thorough: bool = False,
            allow_empty: bool = False, backup: bool = False) -> Verdict:
    """Check `path` without writing to it: DatabaseError (one sentence) unless it is a gantry
    database whose schema this build knows. `thorough` runs integrity_check (every index
    entry too) instead of quick_check. `allow_empty`: a valid SQLite file with no tables at
    all is accepted as version 0 (gantry run migrates it). `backup`: the file is a backup
    about to be restored or verified, and the sentence says so."""
    p = Path(path)
    hint = BACKUP_HINT if backup else RESTORE_HINT
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            head = f.read(HEADER)
    except OSError as exc:
        raise DatabaseError(f"cannot read database {str(p)!r}: {exc.strerror}") from None
    if size == 0:
        raise refuse(p, "is empty (0 bytes), not a gantry database", hint)
    header = parse_header(head)
    if header is None:
        raise refuse(p, "is not an SQLite database (its first bytes are not SQLite's header)",
                     hint)
    wal = Path(f"{p}-wal")
    if header.pages and size < header.expected_bytes and not _nonempty(wal):
        raise refuse(p, f"is truncated ({size} of the {header.expected_bytes} bytes its "
                     "header promises)", hint)
    check = "integrity_check" if thorough else "quick_check"
    version, tables, problems = _read(p, check)
    if problems:
        raise refuse(p, f"fails SQLite's {check} ({problems})", hint)
    known = schema_version()
    if version > known:
        raise DatabaseError(
            f"database {str(p)!r} has schema version {version}, newer than this gantry "
            f"understands ({known}); "
            + ("restore it with a newer gantry, or pick an older backup" if backup else
               "gantry did not open or change it: run a newer gantry, or stop gantry and run "
               "`gantry restore BACKUP` with a backup this version wrote"))
    if not tables and version == 0 and allow_empty:
        return Verdict(p, 0, size, check)
    if GANTRY_TABLE not in tables:
        raise refuse(p, "is an SQLite database but not a gantry one (it has no "
                     f"{GANTRY_TABLE} table)", hint)
    return Verdict(p, version, size, check)


def _nonempty(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def _read(path: Path, check: str) -> tuple[int, set[str], str]:
    """(user_version, table names, the check's complaints joined — "" when it says ok)."""
    import apsw

    from gantry.readonly import connection

    try:
        conn = connection(path)
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            tables = {str(r[0]) for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            rows = [str(r[0]) for r in conn.execute(f"PRAGMA {check}(20)")]
        finally:
            conn.close()
    except apsw.Error as exc:
        return 0, set(), _reason(exc)
    if rows == ["ok"]:
        return version, tables, ""
    shown = "; ".join(rows[:3])
    return version, tables, shown[:300] + (" …" if len(shown) > 300 or len(rows) > 3 else "")


def _reason(exc: Exception) -> str:
    """apsw's error without its class name: "database disk image is malformed"."""
    text = str(exc)
    return text.split(": ", 1)[1] if text.startswith(type(exc).__name__) else text
