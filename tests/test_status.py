"""`gantry status`: read-only, correct while a writer works, one line for every outcome."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gantry import db, heartbeat


def _fresh_db(tmp_path: Path, age: float | None = 0.0) -> Path:
    path = tmp_path / "gantry.db"
    conn = db.connect(path)
    if age is not None:
        heartbeat.touch(conn, "9.9.9", now=time.time() - age)
    conn.close()
    return path


def test_no_database(tmp_path: Path) -> None:
    ok, line = heartbeat.check(tmp_path / "gantry.db")
    assert not ok and "no database" in line
    assert not (tmp_path / "gantry.db").exists()


def test_no_table(tmp_path: Path) -> None:
    import apsw

    apsw.Connection(str(tmp_path / "gantry.db")).execute("CREATE TABLE other (x)")
    ok, line = heartbeat.check(tmp_path / "gantry.db")
    assert not ok and "no heartbeat table" in line


def test_no_row(tmp_path: Path) -> None:
    ok, line = heartbeat.check(_fresh_db(tmp_path, age=None))
    assert not ok and "no heartbeat row" in line


def test_a_database_nothing_ever_ran_on_says_so(tmp_path: Path) -> None:
    """Not "has not finished booting" when no process has the database open."""
    path = _fresh_db(tmp_path, age=None)
    ok, line = heartbeat.check(path)
    assert not ok and "gantry run has never run with" in line and "booting" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gantry.db"]  # and creates nothing


def test_no_row_while_a_run_has_the_database_open_is_booting(tmp_path: Path) -> None:
    path = _fresh_db(tmp_path, age=None)
    booting = db.connect(path)  # `run` between its migration and its first heartbeat
    try:
        ok, line = heartbeat.check(path)
    finally:
        booting.close()
    assert not ok and "has not finished booting" in line


def test_stale(tmp_path: Path) -> None:
    ok, line = heartbeat.check(_fresh_db(tmp_path, age=300))
    assert not ok and "stale by 240 s" in line
    ok, _ = heartbeat.check(tmp_path / "gantry.db", max_age=600)
    assert ok


def test_fresh(tmp_path: Path) -> None:
    ok, line = heartbeat.check(_fresh_db(tmp_path))
    assert ok and "version 9.9.9" in line and "pid" in line


def test_unreadable(tmp_path: Path) -> None:
    (tmp_path / "gantry.db").write_bytes(b"this is not a database" * 100)
    ok, line = heartbeat.check(tmp_path / "gantry.db")
    assert not ok and "cannot read" in line


def test_correct_while_writer_holds_lock(tmp_path: Path) -> None:
    path = _fresh_db(tmp_path)
    writer = db.connect(path)
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute("INSERT INTO session_summary VALUES ('x', 'y', 0)")
    heartbeat.touch(writer, "in-flight")
    try:
        ok, line = heartbeat.check(path)
        assert ok and "9.9.9" in line  # sees the committed row, not the uncommitted one
    finally:
        writer.execute("COMMIT")
        writer.close()


def _digest(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), os.stat(path).st_mtime_ns


@pytest.mark.parametrize("age", [0.0, 300.0, None])
def test_status_never_modifies_db(tmp_path: Path, age: float | None) -> None:
    path = _fresh_db(tmp_path, age)
    before = _digest(path)
    time.sleep(0.01)
    for _ in range(3):
        heartbeat.check(path)
    assert _digest(path) == before


@pytest.mark.slow
def test_status_cli_exit_codes(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "DATA_DIR": str(tmp_path)}

    def status(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gantry", "status", *extra], env=env,
                              capture_output=True, text=True, timeout=60)

    r = status()
    assert r.returncode == 1 and r.stdout.count("\n") == 1 and "no database" in r.stdout
    _fresh_db(tmp_path, age=120)
    r = status()
    assert r.returncode == 1 and "stale" in r.stdout
    assert status("--max-age", "600").returncode == 0
    assert status("--max-age", "-1").returncode == 2
    assert status("--bogus").returncode == 2


@pytest.mark.slow
def test_healthcheck_leaves_without_teardown_but_with_its_output(tmp_path: Path) -> None:
    """status/version skip interpreter teardown (os._exit) yet flush what they printed.

    An atexit hook stands in for teardown: it runs for `run`-style exits, not for these.
    Output goes to a pipe (block-buffered), so a missing flush would lose the line.
    """
    _fresh_db(tmp_path)
    hook = ("import atexit, sys; atexit.register(lambda: sys.stderr.write('TEARDOWN'));"
            "sys.argv = ['gantry', *sys.argv[1:]]; from gantry.cli import entry; entry()")
    env = {"PATH": os.environ["PATH"], "DATA_DIR": str(tmp_path)}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", hook, *argv], env=env,
                              capture_output=True, text=True, timeout=60)

    r = run("status")
    assert (r.returncode, r.stdout.count("\n"), r.stderr) == (0, 1, ""), r
    assert r.stdout.startswith("healthy")
    r = run("status", "--data-dir", str(tmp_path / "none"))
    assert r.returncode == 1 and "no database" in r.stdout and "TEARDOWN" not in r.stderr
    r = run("version", "--json")
    assert r.returncode == 0 and '"version"' in r.stdout and r.stderr == ""
    r = run("status", "--bogus")  # argparse's usage error: an ordinary exit
    assert r.returncode == 2 and "TEARDOWN" in r.stderr
    r = run("cron", "list")  # every other command exits normally
    assert "TEARDOWN" in r.stderr


@pytest.mark.slow
def test_healthcheck_exit_code_survives_a_closed_stdout(tmp_path: Path) -> None:
    _fresh_db(tmp_path)
    env = {"PATH": os.environ["PATH"], "DATA_DIR": str(tmp_path)}
    for data_dir, code in ((tmp_path, 0), (tmp_path / "none", 1)):
        argv = [sys.executable, "-m", "gantry", "status", "--data-dir", str(data_dir)]
        r = subprocess.run(argv, env=env, capture_output=True, timeout=60,
                           preexec_fn=lambda: os.close(1))
        assert r.returncode == code and r.stderr == b"", r


# Never imported by `status`/`version`: the client stacks, and the stdlib modules that cost a
# healthcheck the most (argparse ~15 ms with what it loads at parse time, typing ~10 ms).
NOT_ON_HEALTHCHECK = {"aiogram", "mcp", "mcp_types", "jsonschema", "httpx", "pydantic", "aiohttp",
                      "anyio", "msgspec", "httpcore", "argparse", "typing"}


def _imported(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """`argv` run in a fresh interpreter, reporting what it imported. Proxy variables are set
    (one unusable): only the commands that make model calls check them, importing httpx."""
    code = (
        f"import sys; from gantry.cli import main; rc = main({argv!r}); "
        f"top = {{m.split('.')[0] for m in sys.modules}}; "
        f"print('HEAVY', sorted(top & {NOT_ON_HEALTHCHECK!r})); "
        "print('DB', 'gantry.db' in sys.modules); "
        "print('PROXYENV', 'gantry.proxyenv' in sys.modules); sys.exit(rc)"
    )
    env = {**os.environ, "HTTPS_PROXY": "proxy:3128:bad", "NO_PROXY": "localhost"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)


def test_status_imports_are_lean(tmp_path: Path) -> None:
    """The healthcheck must not import the client libraries, argparse or typing."""
    _fresh_db(tmp_path)
    r = _imported(["status", "--data-dir", str(tmp_path)])
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout
    assert "DB False" in r.stdout  # migrations machinery (importlib.resources) stays out
    assert "PROXYENV False" in r.stdout


def test_status_env_file_is_read_leanly(tmp_path: Path) -> None:
    """`status --env-file` reads DATA_DIR from the file as `run` does, importing nothing heavy."""
    _fresh_db(tmp_path)
    env_file = tmp_path / "gantry.env"
    env_file.write_text(f"# from gantry init\nexport DATA_DIR='{tmp_path}'\nLLM_MODEL=m\n")
    r = _imported(["status", "--env-file", str(env_file)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("healthy:") and "HEAVY []" in r.stdout and "DB False" in r.stdout


def test_status_with_a_bad_env_file_says_which_line(tmp_path: Path) -> None:
    env_file = tmp_path / "gantry.env"
    env_file.write_text("DATA_DIR=/x\nnot a line\n")
    r = _imported(["status", "--env-file", str(env_file)])
    assert r.returncode == 1 and f"{env_file}:2: expected KEY=VALUE" in r.stderr
    assert "Traceback" not in r.stderr


def test_version_imports_are_lean() -> None:
    r = _imported(["version"])
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout and "PROXYENV False" in r.stdout
    assert "sqlite      3." in r.stdout


def test_version_json_imports_are_lean_where_the_list_is_bundled(tmp_path: Path) -> None:
    """The binary's `version --json` reads its bundled distribution list, a JSON file: no
    importlib.metadata (and its typing). From source it walks the installed metadata instead,
    which imports typing, and nothing heavier."""
    (tmp_path / "distributions.json").write_text('{"aiogram": "3.31.0"}')
    code = ("import sys; from gantry import buildinfo; "
            f"d = buildinfo.distributions({str(tmp_path)!r}); "
            f"print(d, sorted({{m.split('.')[0] for m in sys.modules}} & {NOT_ON_HEALTHCHECK!r}),"
            " 'importlib.metadata' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "{'aiogram': '3.31.0'} [] False"
    r = _imported(["version", "--json"])
    assert r.returncode == 0, r.stderr
    assert "HEAVY ['typing']" in r.stdout and "PROXYENV False" in r.stdout
    assert '"sqlite": "3.' in r.stdout and '"distributions": {"aiofiles": ' in r.stdout


# ----------------------------------------------------------------------------- stopped mark


def test_clean_stop_is_unhealthy_at_once(tmp_path: Path) -> None:
    path = _fresh_db(tmp_path)
    conn = db.connect(path)
    try:
        assert heartbeat.mark_stopped(conn) is True
    finally:
        conn.close()
    ok, line = heartbeat.check(path)
    assert not ok
    assert line.startswith("unhealthy: gantry stopped cleanly 0 s ago (version 9.9.9)"), line
    assert "gantry run" in line  # says what to do
    ok, _ = heartbeat.check(path, max_age=10**9)
    assert not ok, "a stopped mark is not a matter of age"


def test_next_heartbeat_clears_the_stopped_mark(tmp_path: Path) -> None:
    conn = db.connect(_fresh_db(tmp_path))
    try:
        heartbeat.mark_stopped(conn)
        heartbeat.touch(conn, "9.9.10")
        ok, line = heartbeat.check(tmp_path / "gantry.db")
    finally:
        conn.close()
    assert ok and "version 9.9.10" in line and f"pid {os.getpid()}" in line


def test_stopping_never_marks_another_process_row(tmp_path: Path) -> None:
    """Two runs on one database by mistake: the one that stops leaves the other's row alone."""
    path = _fresh_db(tmp_path)
    conn = db.connect(path)
    try:
        conn.execute("UPDATE heartbeat SET pid = ?", (os.getpid() + 1,))
        assert heartbeat.mark_stopped(conn) is False
    finally:
        conn.close()
    ok, line = heartbeat.check(path)
    assert ok and f"pid {os.getpid() + 1}" in line


def test_stopped_before_any_heartbeat_changes_nothing(tmp_path: Path) -> None:
    conn = db.connect(_fresh_db(tmp_path, age=None))
    try:
        assert heartbeat.mark_stopped(conn) is False
    finally:
        conn.close()
    ok, line = heartbeat.check(tmp_path / "gantry.db")
    assert not ok and "no heartbeat row" in line


@pytest.mark.slow
def test_status_cli_says_stopped(tmp_path: Path) -> None:
    conn = db.connect(_fresh_db(tmp_path))
    try:
        heartbeat.mark_stopped(conn)
    finally:
        conn.close()
    r = subprocess.run([sys.executable, "-m", "gantry", "status"],
                       env={"PATH": os.environ["PATH"], "DATA_DIR": str(tmp_path)},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stdout.startswith("unhealthy: gantry stopped cleanly") and r.stdout.count("\n") == 1


def test_the_heartbeat_row_counts_the_loops_tasks(tmp_path: Path) -> None:
    """bench/soak.py reads the live task count from the row (no port, no log scraping)."""
    import anyio

    conn = db.connect(tmp_path / "gantry.db")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(anyio.sleep, 5)
            await anyio.sleep(0)
            heartbeat.touch(conn, "9.9.9", tasks=heartbeat.live_tasks())
            tg.cancel_scope.cancel()

    anyio.run(main)
    assert conn.execute("SELECT tasks FROM heartbeat").fetchone()[0] == 4  # main + 3
    assert heartbeat.live_tasks() is None  # outside a loop
    heartbeat.touch(conn, "9.9.9")
    assert conn.execute("SELECT tasks FROM heartbeat").fetchone()[0] is None
    conn.close()
