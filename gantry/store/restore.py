"""`gantry restore PATH`: put a backup in place of DATA_DIR/gantry.db, keeping the old one.

Refused while a `gantry run` holds DATA_DIR (gantry.store.lock). The backup is examined
first (integrity_check, a gantry database, a schema this build knows; an older schema is
migrated by the next `gantry run`), copied next to the database under a temporary name and
checked again, and the current database is kept as gantry.db.before-restore-<time> before
the copy is renamed over it.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from gantry.db import ensure_data_dir, schema_version
from gantry.store.backup import FILE_DIRS, copy_database, files_dir, fsync_path

ASIDE = ".before-restore-"


def _checkpoint(db: Path) -> bool:
    """Fold the -wal into the file so one file is the whole database; False if it cannot be
    opened (a damaged database: its -wal is then kept aside with it)."""
    import apsw

    try:
        conn = apsw.Connection(str(db))
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    except apsw.Error:
        return False
    return True


def _keep(src: Path, aside: Path) -> None:
    """`aside` becomes another name of `src` (a copy where hard links are not supported)."""
    try:
        os.link(src, aside)
    except OSError:
        shutil.copy2(src, aside)


def _set_aside(db: Path, stamp: str) -> Path | None:
    """Keep the current database (and a -wal it could not fold) under a dated name."""
    if not db.exists():
        return None
    aside = db.with_name(db.name + ASIDE + stamp)
    n = 1
    while aside.exists() or Path(f"{aside}-wal").exists():  # two restores in one second
        n += 1
        aside = db.with_name(f"{db.name}{ASIDE}{stamp}-{n}")
    wal = Path(f"{db}-wal")
    if not _checkpoint(db) and wal.exists():
        _keep(wal, Path(f"{aside}-wal"))
    _keep(db, aside)
    for leftover in (wal, Path(f"{db}-shm")):
        leftover.unlink(missing_ok=True)  # a stale -wal would be replayed onto the restored file
    return aside


def _restore_files(backup: Path, data_dir: Path, stamp: str) -> list[str]:
    """Media and outbox from the backup's .files folder, the current ones kept aside."""
    src = files_dir(backup)
    if not src.is_dir():
        return []
    done = []
    for name in FILE_DIRS:
        if not (src / name).is_dir():
            continue
        here = data_dir / name
        if here.exists():
            here.rename(data_dir / f"{name}{ASIDE}{stamp}")
        shutil.copytree(src / name, here, symlinks=True)
        done.append(name)
    return done


def _give_to_owner(data_dir: Path, written: list[Path]) -> None:
    """Run as root, hand what was restored to DATA_DIR's owner (the user gantry runs as),
    or the next `gantry run` would find its database read-only."""
    if os.geteuid() != 0:
        return
    st = data_dir.stat()
    for top in written:
        os.chown(top, st.st_uid, st.st_gid)
        for root, dirs, names in os.walk(top) if top.is_dir() else ():
            for name in (*dirs, *names):
                os.chown(os.path.join(root, name), st.st_uid, st.st_gid, follow_symlinks=False)


def restore(backup: str | os.PathLike[str], data_dir: str | os.PathLike[str]) -> list[str]:
    """Restore `backup` into DATA_DIR; the lines to print. DatabaseError (one sentence, and
    nothing changed) when the backup is unfit or a `gantry run` holds DATA_DIR."""
    from gantry.store import lock
    from gantry.store.examine import examine

    src = Path(backup)
    verdict = examine(src, thorough=True, backup=True)
    d = ensure_data_dir(data_dir)
    fd = lock.exclusive(d)
    try:
        db = d / "gantry.db"
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        tmp = d / f".gantry.db.restore-{os.getpid()}"
        copy_database(src, tmp)  # checked and fsynced; the live name is not touched yet
        try:
            examine(tmp, thorough=False)
            aside = _set_aside(db, stamp)
            os.replace(tmp, db)
            fsync_path(d, directory=True)
        finally:
            tmp.unlink(missing_ok=True)
        files = _restore_files(src, d, stamp)
        _give_to_owner(d, [db, *(d / name for name in files)])
    finally:
        lock.release(fd)
    known = schema_version()
    later = "" if verdict.version == known else (
        f"; gantry run migrates it from schema version {verdict.version} to {known} on its "
        "next start")
    lines = [f"restored {src} into {db} (schema version {verdict.version}, integrity ok{later})"]
    if files:
        lines.append(f"restored {' and '.join(files)} from {files_dir(src)}")
    lines.append(f"the previous database is kept as {aside}" if aside
                 else "there was no database before")
    return lines

