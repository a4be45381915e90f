"""Issue 39: `gantry backup` and `gantry restore` as subprocesses against a live `gantry run`
(CHANNEL=telegram on the fake Bot API and model), and boot refusals of damaged files."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

from tests.fakes.openai import Echo, FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.test_telegram_e2e import USER, fakes, run, wait

__all__ = ["fakes", "run"]  # fixtures shared with the other e2e tests

pytestmark = pytest.mark.slow

USERS = (USER, USER + 1, USER + 2)
STORM = 60


def gantry(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gantry", *args], capture_output=True,
                          text=True, timeout=120, env=env or dict(os.environ))


def answered_texts(db: Path) -> set[str]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(5000)  # gantry may be writing (or switching to WAL at its start)
    try:
        rows = conn.execute("SELECT text FROM telegram_update WHERE state = 'answered'")
        return {str(t) for (t,) in rows}
    finally:
        conn.close()


def history(db: Path) -> list[tuple[str, str]]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute("SELECT role, body FROM session_message ORDER BY id").fetchall()
        return [(str(r), str(json.loads(str(b)).get("content"))) for r, b in rows]
    finally:
        conn.close()


def integrity(db: Path) -> list[str]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


def test_backup_during_a_storm_restores_every_answered_message(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run, tmp_path: Path
) -> None:
    tg, llm = fakes
    llm.default = Echo(delay=0.05)
    # LOG_LEVEL=warning: nothing drains the child's stderr until it stops, and a storm's
    # debug lines would fill the pipe and stall it
    g = run(TELEGRAM_ALLOWED_USERS=",".join(map(str, USERS)), LOG_LEVEL="warning")
    live = Path(g.env["DATA_DIR"]) / "gantry.db"
    for i in range(STORM):
        tg.push_text(USERS[i % len(USERS)], f"storm {i}")
    wait(lambda: live.exists() and len(answered_texts(live)) >= 10, 120, "the first answers")
    before = answered_texts(live)
    assert len(before) < STORM  # the storm is still running while the backup is taken
    out = tmp_path / "backups"
    took = gantry("backup", str(out) + "/", "--data-dir", str(live.parent))
    assert took.returncode == 0, took.stderr
    assert g.proc is not None and g.proc.poll() is None  # gantry kept running
    [copy] = list(out.glob("gantry-*.db"))
    assert took.stdout.startswith(f"wrote {copy} (") and "integrity ok" in took.stdout
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert not [p for p in out.iterdir() if p != copy]  # no temporary file left behind
    # a restore into the live DATA_DIR is refused while gantry run holds it
    refused = gantry("restore", str(copy), "--data-dir", str(live.parent))
    assert refused.returncode == 1 and "a `gantry run` is using DATA_DIR" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not list(live.parent.glob("gantry.db.before-restore-*"))
    wait(lambda: len(answered_texts(live)) == STORM, 180, "the whole storm answered")
    verified = gantry("backup", "--verify", str(copy))
    assert verified.returncode == 0 and "integrity ok" in verified.stdout, verified.stderr
    fresh = tmp_path / "fresh"
    restored = gantry("restore", str(copy), "--data-dir", str(fresh))
    assert restored.returncode == 0, restored.stderr
    db = fresh / "gantry.db"
    assert integrity(db) == ["ok"]
    assert before <= answered_texts(db)  # every message answered before the backup began
    said = history(db)
    for text in before:
        assert ("user", text) in said and ("assistant", f"echo: {text}") in said
    assert g.stop() == 0
    # stopped: a restore over the live database keeps the old one aside
    again = gantry("restore", str(copy), "--data-dir", str(live.parent))
    assert again.returncode == 0, again.stderr
    [aside] = live.parent.glob("gantry.db.before-restore-*")
    assert f"kept as {aside}" in again.stdout
    assert answered_texts(aside) == {f"storm {i}" for i in range(STORM)}
    assert answered_texts(live) == answered_texts(db)
    assert not (live.parent / "gantry.db-wal").exists()


def _gantry_db(path: Path) -> bytes:
    from gantry import db

    conn = db.connect(path)
    conn.execute("INSERT INTO heartbeat (id, ts, version, pid) VALUES (1, 1, 'x', 0)")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path.read_bytes()


def _future(path: Path) -> None:
    from gantry import db

    _gantry_db(path)
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA user_version = {db.schema_version() + 1}")
    conn.close()


def _foreign(path: Path) -> None:
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.close()


DAMAGES = {
    "zero-byte": (lambda p: p.write_bytes(b""), "is empty (0 bytes)"),
    "truncated": (lambda p: p.write_bytes(_gantry_db(p)[: 4096 * 3]), "is truncated"),
    "not SQLite": (lambda p: p.write_bytes(b"%PDF-1.7\n" + b"x" * 5000),
                   "is not an SQLite database"),
    "foreign SQLite": (_foreign, "not a gantry one"),
    "future schema": (_future, "newer than this gantry understands"),
    "damaged pages": (lambda p: _scribble(p), "fails SQLite's "),
}


def _scribble(path: Path) -> None:
    data = bytearray(_gantry_db(path))
    for page in range(2, len(data) // 4096):  # every page after the first: b-tree garbage
        data[page * 4096 + 8: page * 4096 + 40] = b"\xff" * 32
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_boot_refuses_a_damaged_or_foreign_database(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run, tmp_path: Path, damage: str
) -> None:
    make, why = DAMAGES[damage]
    data = tmp_path / "data"
    data.mkdir()
    db = data / "gantry.db"
    make(db)
    before = db.read_bytes()
    g = run()
    assert g.proc is not None
    g.proc.wait(timeout=120)
    code = g.stop()
    assert code == 1
    last = g.stderr.strip().splitlines()[-1]
    assert last.startswith(f"gantry: database {str(db)!r} ") and why in last, g.stderr
    assert "gantry restore" in last and "Traceback" not in g.stderr
    assert db.read_bytes() == before  # never "repaired" by overwriting
    assert sorted(p.name for p in data.iterdir()) == ["gantry.db", "gantry.lock"]


def test_read_only_data_dir_is_refused_in_one_sentence(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run, tmp_path: Path
) -> None:
    """A read-only DATA_DIR (a read-only bind mount, which binds root too) or, for other
    users, a read-only gantry.db: one sentence, no traceback, the file unchanged."""
    data = tmp_path / "data"
    data.mkdir()
    db = data / "gantry.db"
    before = _gantry_db(db)
    mounted = False
    if os.getuid() == 0:
        if subprocess.run(["mount", "--bind", str(data), str(data)]).returncode:
            pytest.skip("cannot bind-mount here")
        mounted = True
        subprocess.run(["mount", "-o", "remount,ro,bind", str(data)], check=True)
        why = "is not writable by uid 0"
    else:
        os.chmod(db, 0o444)
        why = "is read-only"
    try:
        g = run()
        assert g.proc is not None
        g.proc.wait(timeout=120)
        assert g.stop() == 1
    finally:
        if mounted:
            subprocess.run(["umount", str(data)], check=True)
    last = g.stderr.strip().splitlines()[-1]
    assert last.startswith("gantry: ") and why in last and "Traceback" not in g.stderr, last
    assert db.read_bytes() == before


def test_restore_refuses_a_bad_backup_and_changes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    current = _gantry_db(data / "gantry.db")
    for name, (make, why) in DAMAGES.items():
        bad = tmp_path / f"bad-{name.replace(' ', '-')}.db"
        make(bad)
        result = gantry("restore", str(bad), "--data-dir", str(data))
        assert result.returncode == 1, name
        assert why in result.stderr and "Traceback" not in result.stderr, result.stderr
        assert "pick another backup" in result.stderr or "pick an older backup" in result.stderr
        checked = gantry("backup", "--verify", str(bad))
        assert checked.returncode == 1 and why in checked.stderr, name
    assert (data / "gantry.db").read_bytes() == current
    assert sorted(p.name for p in data.iterdir()) == ["gantry.db"]


def test_older_backup_is_restored_and_migrated_on_the_next_start(tmp_path: Path) -> None:
    """A backup from an older gantry (schema version 11) restores; `run` migrates it."""
    from gantry import db

    old = tmp_path / "old.db"
    conn = apsw.Connection(str(old))
    with conn:
        for version, _name, sql in db.migrations()[:-1]:
            conn.execute(sql)
            conn.execute(f"PRAGMA user_version = {version}")
    conn.close()
    result = gantry("restore", str(old), "--data-dir", str(tmp_path / "data"))
    assert result.returncode == 0, result.stderr
    known = db.schema_version()
    assert f"migrates it from schema version {known - 1} to {known}" in result.stdout
    conn = db.connect(tmp_path / "data" / "gantry.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == known  # type: ignore[index]
    conn.close()


def test_backup_with_files_copies_media_and_outbox(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "media" / "ab").mkdir(parents=True)
    (data / "media" / "ab" / "photo.jpg").write_bytes(b"\xff\xd8" + b"j" * 1000)
    (data / "outbox").mkdir()
    (data / "outbox" / "report.pdf").write_bytes(b"%PDF" + b"p" * 500)
    _gantry_db(data / "gantry.db")
    dest = tmp_path / "b" / "nightly.db"
    result = gantry("backup", str(dest), "--with-files", "--data-dir", str(data))
    assert result.returncode == 0, result.stderr
    files = tmp_path / "b" / "nightly.files"
    assert result.stdout.splitlines()[1].startswith(f"wrote {files} (1.5 KiB, 2 files")
    assert (files / "media" / "ab" / "photo.jpg").read_bytes()[:2] == b"\xff\xd8"
    fresh = tmp_path / "fresh"
    restored = gantry("restore", str(dest), "--data-dir", str(fresh))
    assert restored.returncode == 0, restored.stderr
    assert (fresh / "outbox" / "report.pdf").read_bytes().startswith(b"%PDF")
    assert (fresh / "media" / "ab" / "photo.jpg").exists()


def test_backup_needs_a_destination(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "BACKUP_DIR"}
    result = gantry("backup", "--data-dir", str(tmp_path), env=env)
    assert result.returncode == 1 and "set BACKUP_DIR" in result.stderr
    env["BACKUP_DIR"] = str(tmp_path / "nightly")
    (tmp_path / "gantry.db").write_bytes(_gantry_db(tmp_path / "gantry.db"))
    started = time.time()
    result = gantry("backup", "--data-dir", str(tmp_path), env=env)
    assert result.returncode == 0, result.stderr
    [copy] = (tmp_path / "nightly").glob("gantry-*.db")
    assert abs(copy.stat().st_mtime - started) < 120


def test_scheduled_backups_rotate_while_turns_are_answered(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run, tmp_path: Path
) -> None:
    from gantry.store.examine import examine

    tg, _ = fakes
    out = tmp_path / "nightly"
    g = run(BACKUP_DIR=str(out), BACKUP_EVERY="5s", BACKUP_KEEP="2", LOG_LEVEL="warning")
    seen: set[str] = set()

    def rotated() -> bool:
        seen.update(p.name for p in out.glob("gantry-*.db"))
        return len(seen) >= 3

    for i in range(3):
        tg.push_text(USER, f"during backups {i}")
    wait(rotated, 120, "three scheduled backups")
    assert tg.wait_sent_sync(USER, 3, timeout=60)[:3] == [f"echo: during backups {i}"
                                                           for i in range(3)]
    kept = sorted(out.glob("gantry-*.db"))
    assert 1 <= len(kept) <= 2  # BACKUP_KEEP
    for p in kept:
        assert examine(p, thorough=True).version > 0
    tg.push_text(USER, "/status")
    status = tg.wait_sent_sync(USER, 4, timeout=60)[3]
    assert f"backups: every 5s to {out}, keeping 2; last gantry-" in status
    assert g.stop() == 0
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_failing_scheduled_backups_are_logged_counted_and_block_no_turn(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run, tmp_path: Path
) -> None:
    tg, _ = fakes
    g = run(BACKUP_DIR="/proc/gantry-backups", BACKUP_EVERY="5s", LOG_LEVEL="warning")
    tg.push_text(USER, "hello")
    assert tg.wait_sent_sync(USER, 1, timeout=90) == ["echo: hello"]
    tg.push_text(USER, "/status")
    status = tg.wait_sent_sync(USER, 2, timeout=60)[1]
    assert "backups: every 5s to /proc/gantry-backups" in status
    assert "FAILING (1 in a row, 1 in all): /proc/gantry-backups:" in status
    assert g.stop() == 0
    assert '"scheduled backup failed"' in g.stderr and "Traceback" not in g.stderr


def test_restore_as_root_gives_the_database_to_data_dirs_owner(tmp_path: Path) -> None:
    """systemd's dynamic user or the image's 65532 owns DATA_DIR; a root restore must not
    leave it a root-owned gantry.db it cannot write."""
    if os.getuid() != 0:
        pytest.skip("chown needs root")
    backup = tmp_path / "b.db"
    _gantry_db(backup)
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, 65532, 65532)
    result = gantry("restore", str(backup), "--data-dir", str(data))
    assert result.returncode == 0, result.stderr
    st = (data / "gantry.db").stat()
    assert (st.st_uid, st.st_gid) == (65532, 65532)
    assert stat.S_IMODE(st.st_mode) == 0o600
