"""Issue 39 in the frozen binary, in the distroless-like rootfs: `gantry backup` while
`gantry run` answers, `gantry restore` refused while it runs and then into a fresh DATA_DIR,
`backup --verify`, and boot refusals of a truncated, a zero-byte and a non-SQLite database.
"""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from tests.binary.rootfs import INSTALL_PATH, Sandbox
from tests.fakes.openai import FakeOpenAI
from tests.procs import ChildIO

pytestmark = [pytest.mark.binary, pytest.mark.slow]
WAIT = 90.0


def _env(fake: FakeOpenAI) -> dict[str, str]:
    return {"CHANNEL": "stdio", "LLM_BASE_URL": fake.base_url, "LLM_API_KEY": "sk-binary-smoke",
            "LLM_MODEL": "fake-model", "DATA_DIR": "/data", "PERSONA_DIR": "/persona",
            "MCP_MANIFEST": "/etc/gantry/mcp.toml"}


def _user_texts(db: Path) -> list[str]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert [r[0] for r in conn.execute("PRAGMA integrity_check")] == ["ok"]
        rows = conn.execute("SELECT body FROM session_message WHERE role = 'user'").fetchall()
        return [str(json.loads(str(b))["content"]) for (b,) in rows]
    finally:
        conn.close()


def test_backup_while_running_then_restore_into_a_fresh_data_dir(
    sandbox: Sandbox, persona_dir: Path, fake_openai: FakeOpenAI
) -> None:
    data = sandbox.new_data_dir("backup-live")
    run = ChildIO(sandbox.popen([INSTALL_PATH, "run"], env=_env(fake_openai), data=data,
                                binds={"/persona": persona_dir}))
    run.default_wait = WAIT
    try:
        run.send("before the backup")
        run.expect("echo: before the backup")
        took = sandbox.run([INSTALL_PATH, "backup", "/data/backups/"],
                           env={"DATA_DIR": "/data"}, data=data, timeout=WAIT)
        assert took.returncode == 0, took.stderr
        assert took.stdout.startswith("wrote /data/backups/gantry-") and "integrity ok" in \
            took.stdout
        [copy] = (data / "backups").glob("gantry-*.db")
        refused = sandbox.run([INSTALL_PATH, "restore", f"/data/backups/{copy.name}"],
                              env={"DATA_DIR": "/data"}, data=data, timeout=WAIT)
        assert refused.returncode == 1 and "a `gantry run` is using DATA_DIR" in refused.stderr
        run.send("after the backup")
        run.expect("echo: after the backup")
    finally:
        run.close_stdin()
        run.kill()
    backups = {"/secrets": data / "backups"}
    verified = sandbox.run([INSTALL_PATH, "backup", "--verify", f"/secrets/{copy.name}"],
                           binds=backups, timeout=WAIT)
    assert verified.returncode == 0 and "integrity ok" in verified.stdout, verified.stderr
    fresh = sandbox.new_data_dir("backup-fresh")
    restored = sandbox.run([INSTALL_PATH, "restore", f"/secrets/{copy.name}"],
                           env={"DATA_DIR": "/data"}, data=fresh, binds=backups, timeout=WAIT)
    assert restored.returncode == 0, restored.stderr
    assert _user_texts(fresh / "gantry.db") == ["before the backup"]
    assert "after the backup" in _user_texts(data / "gantry.db")


def _truncated(p: Path, source: Path) -> None:
    p.write_bytes(source.read_bytes()[: 4096 * 2])


@pytest.mark.parametrize("damage", ["truncated", "zero-byte", "not SQLite"])
def test_boot_refuses_a_damaged_database(
    sandbox: Sandbox, persona_dir: Path, fake_openai: FakeOpenAI, damage: str,
    tmp_path: Path,
) -> None:
    data = sandbox.new_data_dir(f"damaged-{damage.replace(' ', '-')}")
    db = data / "gantry.db"
    if damage == "truncated":
        good = tmp_path / "good.db"
        conn = apsw.Connection(str(good))
        conn.execute("CREATE TABLE heartbeat (id INTEGER PRIMARY KEY, ts REAL, version TEXT, "
                     "pid INTEGER); CREATE TABLE big (x)")
        with conn:
            for _ in range(50):
                conn.execute("INSERT INTO big VALUES (randomblob(3000))")
        conn.execute("PRAGMA user_version = 1")
        conn.close()
        _truncated(db, good)
        why = "is truncated"
    elif damage == "zero-byte":
        db.write_bytes(b"")
        why = "is empty (0 bytes)"
    else:
        db.write_bytes(b"%PDF-1.7\n" + b"x" * 5000)
        why = "is not an SQLite database"
    before = db.read_bytes()
    booted = sandbox.run([INSTALL_PATH, "run"], env=_env(fake_openai), data=data,
                         binds={"/persona": persona_dir}, timeout=WAIT, input="")
    assert booted.returncode == 1
    last = booted.stderr.strip().splitlines()[-1]
    assert last.startswith("gantry: database '/data/gantry.db' ") and why in last, booted.stderr
    assert "gantry restore" in last and "Traceback" not in booted.stderr
    assert db.read_bytes() == before
