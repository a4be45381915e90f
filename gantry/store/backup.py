"""`gantry backup`: a consistent copy of gantry.db taken while `gantry run` runs.

SQLite's online backup API (through apsw) copies the database as one read snapshot: in WAL
mode a reader blocks no writer, so turns carry on while it runs. The copy is written under a
temporary name, switched to a rollback journal (one self-contained file), integrity-checked,
fsynced and only then renamed into place: the final name never holds a half copy.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from gantry.db import DatabaseError

NAME_PREFIX = "gantry-"
NAME_SUFFIX = ".db"
FILES_SUFFIX = ".files"
FILE_DIRS = ("media", "outbox")  # DATA_DIR's folders that --with-files copies


class BackupError(DatabaseError):
    """A backup that could not be written; `str()` says why and nothing was left behind."""


@dataclass(frozen=True)
class Written:
    path: Path
    size: int
    detail: str


def stamped_name(now: float | None = None) -> str:
    """gantry-20261201T203000Z.db: sorts by time, no characters a shell or URL minds."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return f"{NAME_PREFIX}{stamp}{NAME_SUFFIX}"


def target(dest: str | os.PathLike[str] | None, backup_dir: str) -> Path:
    """Where a backup goes: PATH, a stamped name in PATH if it is a directory, else in
    BACKUP_DIR."""
    if dest is None:
        if not backup_dir:
            raise BackupError("say where the backup goes: `gantry backup PATH` (a file or a "
                              "directory), or set BACKUP_DIR")
        return Path(backup_dir) / stamped_name()
    p = Path(dest)
    return p / stamped_name() if p.is_dir() or os.fspath(dest).endswith("/") else p


def fsync_path(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_database(source: Path, dest: Path) -> Written:
    """Copy the database at `source` to `dest` atomically; BackupError (nothing left) if not."""
    import apsw

    from gantry.readonly import connection
    from gantry.store import space

    if not source.is_file():
        raise BackupError(f"no database at {str(source)!r} (is DATA_DIR right?)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    try:
        os.close(os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600))
        src = connection(source)
        try:
            out = apsw.Connection(str(tmp))
            try:
                with out.backup("main", src, "main") as job:
                    while not job.done:
                        job.step(-1)  # one snapshot; chunked steps restart on every write
                out.execute("PRAGMA journal_mode=DELETE")
                rows = [str(r[0]) for r in out.execute("PRAGMA integrity_check(5)")]
                version = int(out.execute("PRAGMA user_version").fetchone()[0])  # type: ignore[index]
            finally:
                out.close()
        finally:
            src.close()
        if rows != ["ok"]:
            raise BackupError(f"the copy of {str(source)!r} fails integrity_check "
                              f"({'; '.join(rows)[:200]}); the source may be damaged: "
                              f"run `gantry backup --verify {source}`")
        fsync_path(tmp)
        os.replace(tmp, dest)
        fsync_path(dest.parent, directory=True)
    except BaseException as exc:
        _remove(tmp)
        if space.is_full(exc):
            raise BackupError(f"backup to {str(dest)!r} failed: "
                              f"{space.full_message(dest.parent)}") from None
        if isinstance(exc, OSError):
            raise BackupError(f"cannot write the backup {str(dest)!r}: {exc.strerror}") from None
        if isinstance(exc, apsw.Error):
            raise BackupError(f"cannot back up {str(source)!r}: {exc}") from None
        raise
    return Written(dest, dest.stat().st_size, f"schema version {version}, integrity ok")


def copy_files(data_dir: Path, dest: Path) -> Written:
    """DATA_DIR's media and outbox folders into `dest` (a folder beside the database copy),
    built under a temporary name and renamed into place."""
    from gantry.store import space

    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    count = total = 0
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=0o700, parents=True)
        for name in FILE_DIRS:
            src = data_dir / name
            if src.is_dir():
                shutil.copytree(src, tmp / name, symlinks=True)
        for root, _dirs, files in os.walk(tmp):
            for f in files:
                p = Path(root) / f
                if not p.is_symlink():
                    count, total = count + 1, total + p.stat().st_size
                    fsync_path(p)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
        fsync_path(dest.parent, directory=True)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if space.is_full(exc):
            raise BackupError(f"backup of the files to {str(dest)!r} failed: "
                              f"{space.full_message(dest.parent)}") from None
        raise BackupError(f"cannot copy the files to {str(dest)!r}: {exc.strerror}") from None
    return Written(dest, total, f"{count} file{'s' if count != 1 else ''} from "
                   f"{' and '.join(FILE_DIRS)}")


def files_dir(db_copy: Path) -> Path:
    """gantry-….db → gantry-….files: where --with-files puts media and outbox."""
    name = db_copy.name.removesuffix(NAME_SUFFIX)
    return db_copy.with_name(name + FILES_SUFFIX)


def take(data_dir: str | os.PathLike[str], dest: Path, with_files: bool = False) -> list[Written]:
    """One backup of DATA_DIR's database (and its files) to `dest`."""
    d = Path(data_dir)
    written = [copy_database(d / "gantry.db", dest)]
    if with_files:
        written.append(copy_files(d, files_dir(dest)))
    return written


def prune(directory: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` stamped backups (and their .files) in `directory`."""
    found = sorted(p for p in directory.glob(f"{NAME_PREFIX}*{NAME_SUFFIX}") if p.is_file())
    gone = found[:-keep] if keep > 0 else found
    for p in gone:
        p.unlink(missing_ok=True)
        shutil.rmtree(files_dir(p), ignore_errors=True)
    return gone


def _remove(tmp: Path) -> None:
    for p in (tmp, Path(f"{tmp}-journal"), Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        with contextlib.suppress(OSError):
            p.unlink(missing_ok=True)
