"""One read-only query on gantry.db for operator commands (`status`, `cron list`, `check`).

No migrations, no writes, no file created, nothing imported but apsw (on first use): `status`
is the container healthcheck and must not load gantry.db and its importlib.resources.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs a healthcheck ~10 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T")
BUSY_TIMEOUT_MS = 2000


class ReadError(Exception):
    """The database could not be read; `missing_table` when it is not migrated yet."""

    def __init__(self, message: str, missing_table: bool = False) -> None:
        super().__init__(message)
        self.missing_table = missing_table


def query(db_path: str | os.PathLike[str], read: Callable[[Any], T]) -> T:
    """`read(conn)` on a read-only connection that is always closed; apsw errors → ReadError."""
    import apsw

    try:
        conn = connection(db_path)
        try:
            return read(conn)
        finally:
            conn.close()
    except apsw.SQLError as exc:
        raise ReadError(str(exc), missing_table="no such table" in str(exc)) from None
    except apsw.Error as exc:
        raise ReadError(str(exc)) from None


def connection(db_path: str | os.PathLike[str]) -> Any:
    """A read-only apsw connection to `db_path` (the caller closes it; apsw errors propagate).

    SQLite's read-only open of a WAL database creates its -wal and -shm files and leaves them
    behind. When they are absent no writer has the database open (a writer keeps them), so
    the file is read as immutable instead: complete as it is, and nothing is created.
    """
    import apsw

    path = os.fspath(db_path)
    flags = apsw.SQLITE_OPEN_READONLY
    if not (os.path.exists(path + "-wal") and os.path.exists(path + "-shm")):
        path, flags = immutable_uri(path), flags | apsw.SQLITE_OPEN_URI
    conn = apsw.Connection(path, flags=flags)
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    return conn


def immutable_uri(path: str) -> str:
    """`path` as an SQLite `file:` URI with immutable=1 (the characters URIs reserve escaped)."""
    path = os.path.abspath(path)
    path = "/" + path.lstrip("/")  # POSIX keeps a leading "//", which a URI reads as a host
    for char, code in (("%", "%25"), ("?", "%3f"), ("#", "%23")):
        path = path.replace(char, code)
    return f"file:{path}?immutable=1"
