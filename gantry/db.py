"""SQLite access through apsw: one file, WAL, embedded migrations tracked by user_version."""

from __future__ import annotations

import os
from pathlib import Path

import apsw

from gantry.schema import DatabaseError, migrations, schema_version  # also gantry.db's names

BUSY_TIMEOUT_MS = 5000


def ensure_data_dir(data_dir: str | os.PathLike[str]) -> Path:
    """Create DATA_DIR if missing and prove it is writable, or raise DatabaseError."""
    d = Path(data_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseError(f"DATA_DIR {str(d)!r} cannot be created: {exc.strerror}") from None
    _usable(d)
    return d


def _usable(d: Path) -> None:
    """DatabaseError unless `d` (which exists) is a directory this user may write."""
    if not d.is_dir():
        raise DatabaseError(f"DATA_DIR {str(d)!r} is not a directory")
    if not os.access(d, os.W_OK | os.X_OK):
        raise DatabaseError(
            f"DATA_DIR {str(d)!r} is not writable by uid {os.getuid()}; "
            "mount it read-write and chown it to the user gantry runs as"
        )


def check_data_dir(data_dir: str | os.PathLike[str]) -> str:
    """What `ensure_data_dir` will find, without creating anything: a line, or DatabaseError.

    A missing DATA_DIR is fine when its nearest existing parent lets this user create it.
    """
    d = Path(data_dir)
    if d.exists():
        _usable(d)
        return f"{d} writable"
    parent = next(p for p in d.absolute().parents if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise DatabaseError(
            f"DATA_DIR {str(d)!r} does not exist and cannot be created: {str(parent)!r} is "
            f"not a directory writable by uid {os.getuid()}; create DATA_DIR for that user"
        )
    return f"{d} does not exist yet; gantry run creates it (in {parent}, writable)"


def inspect(data_dir: str | os.PathLike[str], path: str | os.PathLike[str]) -> str:
    """`gantry check`'s view of the database: one line, or DatabaseError. Never writes.

    The directory must let `run` create the file and its -wal/-shm; an existing file must
    be a database this gantry can migrate (its schema version not newer than it knows).
    """
    from gantry.readonly import ReadError, query

    where = check_data_dir(data_dir)
    p = Path(path)
    if not p.exists():
        return f"{where}; no database yet (gantry run creates {p})"
    if not os.access(p, os.R_OK | os.W_OK):
        raise DatabaseError(f"database {str(p)!r} is not writable by uid {os.getuid()}; "
                            "chown it to the user gantry runs as")
    try:
        version = int(query(p, lambda c: c.execute("PRAGMA user_version").fetchone()[0]))
    except ReadError as exc:
        raise DatabaseError(f"cannot open database {str(p)!r}: {exc}") from None
    known = schema_version()
    if version > known:
        raise DatabaseError(
            f"database schema version {version} is newer than this gantry understands "
            f"({known}); run a newer gantry or restore a backup of the database"
        )
    todo = "" if version == known else f" (gantry run migrates it to {known})"
    return f"{p} writable, schema version {version}{todo}"


def connect(path: str | os.PathLike[str]) -> apsw.Connection:
    """Open (creating 0600 if needed) the read-write database and migrate it.

    An existing file is examined first (gantry.store.examine) and refused with one sentence,
    untouched, when it is damaged, foreign or newer than this build. A new file is built
    under a temporary name and linked into place, so a crash never leaves an empty
    gantry.db that the next start would have to refuse.
    """
    from gantry.store.examine import examine

    p = Path(path)
    if not p.exists():
        _create(p)
    else:
        examine(p, allow_empty=True)
        if not os.access(p, os.R_OK | os.W_OK) or not os.access(p.parent, os.W_OK | os.X_OK):
            raise DatabaseError(
                f"database {str(p)!r} or its directory is read-only for uid {os.getuid()}; "
                "gantry writes there on every message: mount DATA_DIR read-write and chown it "
                "(and gantry.db) to the user gantry runs as")
    try:
        conn = apsw.Connection(str(p))
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        migrate(conn)
    except apsw.ReadOnlyError:
        raise DatabaseError(
            f"database {str(p)!r} is read-only (the file or its file system); gantry writes "
            "there on every message: mount DATA_DIR read-write and chown it to the user "
            "gantry runs as") from None
    except apsw.Error as exc:
        raise DatabaseError(f"cannot open database {str(p)!r}: {exc}") from None
    return conn


def _create(p: Path) -> None:
    """A migrated, owner-only database at `p`, appearing there complete or not at all."""
    tmp = p.with_name(f".{p.name}.new-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
        os.close(fd)
        conn = apsw.Connection(str(tmp))
        try:
            migrate(conn)
        finally:
            conn.close()
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        try:
            os.link(tmp, p)  # never replaces: another process may have just created it
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: rename, unless one appeared
            if not p.exists():
                os.rename(tmp, p)
    except OSError as exc:
        raise DatabaseError(f"cannot create database {str(p)!r}: {exc.strerror}") from None
    except apsw.Error as exc:
        raise DatabaseError(f"cannot create database {str(p)!r}: {exc}") from None
    finally:
        for leftover in (tmp, Path(f"{tmp}-journal")):
            leftover.unlink(missing_ok=True)


def migrate(conn: apsw.Connection) -> int:
    """Apply pending migrations in one transaction; return the resulting version."""
    known = migrations()
    current = int(conn.execute("PRAGMA user_version").fetchone()[0])  # type: ignore[index]
    if current > len(known):
        raise DatabaseError(
            f"database schema version {current} is newer than this gantry understands "
            f"({len(known)}); run a newer gantry or restore a backup of the database"
        )
    if current == len(known):
        return current
    with conn:
        for version, _name, sql in known[current:]:
            conn.execute(sql)
            conn.execute(f"PRAGMA user_version = {version}")
    return len(known)
