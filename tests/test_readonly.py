"""gantry.readonly: the one read-only query that `status` and `cron list` share."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from gantry.readonly import ReadError, query


def _db(tmp_path: Path) -> Path:
    path = tmp_path / "gantry.db"
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE t (x); INSERT INTO t VALUES (1)")
    conn.close()
    return path


def test_reads_and_returns_what_the_reader_returns(tmp_path: Path) -> None:
    assert query(_db(tmp_path), lambda c: c.execute("SELECT x FROM t").fetchall()) == [(1,)]


def test_a_missing_table_says_so(tmp_path: Path) -> None:
    with pytest.raises(ReadError) as info:
        query(_db(tmp_path), lambda c: c.execute("SELECT * FROM heartbeat").fetchall())
    assert info.value.missing_table


def test_it_never_writes(tmp_path: Path) -> None:
    path = _db(tmp_path)
    with pytest.raises(ReadError) as info:
        query(path, lambda c: c.execute("INSERT INTO t VALUES (2)"))
    assert not info.value.missing_table
    assert query(path, lambda c: c.execute("SELECT count(*) FROM t").fetchone()) == (1,)


def test_not_a_database_is_a_read_error(tmp_path: Path) -> None:
    junk = tmp_path / "gantry.db"
    junk.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(ReadError):
        query(junk, lambda c: c.execute("SELECT 1").fetchone())


def test_the_connection_is_closed_when_the_reader_raises(tmp_path: Path) -> None:
    seen: list[apsw.Connection] = []

    def boom(conn: apsw.Connection) -> None:
        seen.append(conn)
        raise ValueError("reader bug")

    with pytest.raises(ValueError):
        query(_db(tmp_path), boom)
    with pytest.raises(apsw.ConnectionClosedError):
        seen[0].execute("SELECT 1")


@pytest.mark.parametrize("name", ["gantry.db", "odd?name#1%.db", "spaces in name.db"])
def test_a_wal_database_nobody_has_open_is_read_without_creating_files(
    tmp_path: Path, name: str
) -> None:
    """SQLite's read-only open would leave -wal and -shm next to a WAL database."""
    path = tmp_path / name
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL").fetchall()  # a row: apsw runs no later statement
    conn.execute("CREATE TABLE t (x); INSERT INTO t VALUES (1)")
    conn.close()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert before == [name]
    assert query(path, lambda c: c.execute("SELECT x FROM t").fetchall()) == [(1,)]
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_wal_database_open_in_a_writer_sees_its_uncheckpointed_rows(tmp_path: Path) -> None:
    path = tmp_path / "gantry.db"
    writer = apsw.Connection(str(path))
    try:
        writer.execute("PRAGMA journal_mode=WAL").fetchall()
        writer.execute("PRAGMA wal_autocheckpoint=0").fetchall()
        writer.execute("CREATE TABLE t (x); INSERT INTO t VALUES (1)")
        assert (tmp_path / "gantry.db-wal").exists()
        assert query(path, lambda c: c.execute("SELECT x FROM t").fetchall()) == [(1,)]
    finally:
        writer.close()
