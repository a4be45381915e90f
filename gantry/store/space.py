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
    """ENOSPC/EDQUOT from the OS, or SQLite's SQLITE_FULL (apsw.FullError)."""
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
