"""Free space, said plainly: the sentence a full disk gets, wherever it is hit."""

from __future__ import annotations

import errno
import os


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes an unprivileged writer may still use on `path`'s file system (None: unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def human(n: int) -> str:
    """1536 → "1.5 KiB": sizes for people (a backup's, the free space)."""
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # unreachable; keeps mypy sure of a str


def is_full(exc: BaseException) -> bool:
    """ENOSPC/EDQUOT from the OS, SQLite's SQLITE_FULL (apsw.FullError), or a StorageFull
    already raised for either."""
    if isinstance(exc, StorageFull):
        return True
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return type(exc).__name__ == "FullError" and type(exc).__module__ == "apsw"


def full_message(path: str | os.PathLike[str]) -> str:
    """"the disk holding /data is full (12 KiB free): free space there …" — one sentence."""
    where = os.fspath(path)
    free = free_bytes(where)
    shown = "unknown" if free is None else human(free)
    return (f"the file system holding {where} is full ({shown} free); nothing half-written "
            "was kept: free space there and gantry carries on by itself")


FULL_BYTES = 64 * 1024  # less free than this: no turn can be committed (a few 4 KiB pages)
FULL_POLL_SECONDS = 2.0  # how often a waiting writer looks for freed space


class StorageFull(Exception):
    """A write failed because DATA_DIR's disk is full; `str()` names the path and the free
    space. `update_id`: the Telegram update whose attempt it cut (its in-flight mark is
    undone once space is back, so the full disk is not counted against the message)."""

    def __init__(self, message: str, update_id: int | None = None) -> None:
        super().__init__(message)
        self.update_id = update_id


def db_dir(conn: object) -> str:
    """The directory of an apsw connection's main database file."""
    return os.path.dirname(str(getattr(conn, "filename", "") or "")) or "."


def full_error(conn: object, update_id: int | None = None) -> StorageFull:
    return StorageFull(full_message(db_dir(conn)), update_id)


def has_room(directory: str) -> bool:
    free = free_bytes(directory)
    return free is None or free >= FULL_BYTES


async def wait_for_room(directory: str) -> None:
    """Sleep until `directory`'s file system has room for a write again."""
    import anyio

    while not has_room(directory):
        await anyio.sleep(FULL_POLL_SECONDS)
