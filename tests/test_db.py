"""Migrations are idempotent, a newer schema is refused, files are private."""

from __future__ import annotations

import os
import stat

import apsw
import pytest

from gantry import db


def test_migrate_creates_schema_0600_wal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "gantry.db"
    conn = db.connect(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # type: ignore[index]
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1  # type: ignore[index]
    version = conn.execute("PRAGMA user_version").fetchone()[0]  # type: ignore[index]
    assert version == db.schema_version() >= 1
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"heartbeat", "session_message", "session_summary"} <= tables


def test_migrate_is_idempotent(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "gantry.db"
    db.connect(path).close()
    before = path.read_bytes()
    conn = db.connect(path)
    assert db.migrate(conn) == db.schema_version()
    conn.close()
    assert path.read_bytes() == before


def test_newer_schema_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "gantry.db"
    conn = db.connect(path)
    conn.execute(f"PRAGMA user_version = {db.schema_version() + 5}")
    conn.close()
    with pytest.raises(db.DatabaseError, match="newer than this gantry"):
        db.connect(path)


def test_failed_migration_rolls_back(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    real = db.migrations()
    broken = [*real, (len(real) + 1, "9999_broken.sql", "CREATE TABLE ok (x); SELECT * FROM nope;")]
    monkeypatch.setattr(db, "migrations", lambda: broken)
    conn = apsw.Connection(str(tmp_path / "x.db"))
    with pytest.raises(apsw.SQLError):
        db.migrate(conn)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 0  # type: ignore[index]
    assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0  # type: ignore[index]


def test_unwritable_data_dir_is_clear(tmp_path) -> None:  # type: ignore[no-untyped-def]
    if os.getuid() == 0:
        target = "/proc/gantry-data"  # even root cannot create directories in /proc
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        target = str(ro / "data")
    with pytest.raises(db.DatabaseError, match="DATA_DIR"):
        db.ensure_data_dir(target)
    assert db.ensure_data_dir(tmp_path / "new" / "dir").is_dir()
