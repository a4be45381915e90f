"""One read-only query on gantry.db for operator commands (`status`, `cron list`).

No migrations, no writes, nothing imported but apsw (on first use): `status` is the container
healthcheck and must not load gantry.db and its importlib.resources.
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
        conn = apsw.Connection(os.fspath(db_path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            conn.set_busy_timeout(BUSY_TIMEOUT_MS)
            return read(conn)
        finally:
            conn.close()
    except apsw.SQLError as exc:
        raise ReadError(str(exc), missing_table="no such table" in str(exc)) from None
    except apsw.Error as exc:
        raise ReadError(str(exc)) from None
