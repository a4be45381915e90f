"""DATA_DIR/gantry.lock: `gantry run` holds it shared, `gantry restore` exclusive.

Before issue 39 nothing locked DATA_DIR (two `run`s on one database were only told apart by
the heartbeat's pid). A shared lock keeps that as it was, and lets `restore` refuse while any
`run` has the database open instead of swapping the file under it. flock(2) locks go with
the process: a killed `run` holds nothing.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from gantry.db import DatabaseError

LOCK_NAME = "gantry.lock"


class Held(DatabaseError):
    """The lock is taken by another process in the way this one cannot share."""


def _open(data_dir: str | os.PathLike[str]) -> int:
    path = Path(data_dir) / LOCK_NAME
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise DatabaseError(f"cannot open the DATA_DIR lock {str(path)!r}: {exc.strerror}") \
            from None


def _take(data_dir: str | os.PathLike[str], mode: int, refusal: str) -> int:
    fd = _open(data_dir)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Held(refusal) from None
    return fd


def shared(data_dir: str | os.PathLike[str]) -> int:
    """`gantry run`'s hold on DATA_DIR: the fd to keep open while it runs."""
    return _take(data_dir, fcntl.LOCK_SH, (
        f"DATA_DIR {os.fspath(data_dir)!r} is locked by a `gantry restore` swapping the "
        "database; start gantry again when it has finished"))


def exclusive(data_dir: str | os.PathLike[str]) -> int:
    """`gantry restore`'s hold: refused while any `gantry run` has DATA_DIR."""
    return _take(data_dir, fcntl.LOCK_EX, (
        f"a `gantry run` is using DATA_DIR {os.fspath(data_dir)!r} (it holds "
        f"{LOCK_NAME}); stop it first (docker compose stop gantry, systemctl stop gantry, "
        "or scale the Deployment to 0), then restore"))


def release(fd: int) -> None:
    os.close(fd)  # closing the last descriptor drops the flock
