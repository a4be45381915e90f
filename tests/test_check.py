"""`gantry check` against the loopback fakes: each failure is one FAIL line, exit 1, no secret."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai import FakeOpenAI, HTTPError
from tests.fakes.telegram import FakeTelegram

pytestmark = pytest.mark.slow

KEY = "sk-check-secret-0123456789"
TOKEN = "7000000001:AAcheckSecretTokenValue_0123456789abcd"


def _env(tmp_path: Path, base_url: str, **extra: str) -> dict[str, str]:
    persona = tmp_path / "persona"
    persona.mkdir(exist_ok=True)
    (persona / "PERSONA.md").write_text("Be brief.")
    return {"PATH": os.environ["PATH"], "CHANNEL": "stdio", "LLM_BASE_URL": base_url,
            "LLM_API_KEY": KEY, "LLM_MODEL": "fake-model", "DATA_DIR": str(tmp_path / "data"),
            "PERSONA_DIR": str(persona), **extra}


def _check(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "gantry", "check", *args], env)


def _run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    out = result.stdout + result.stderr
    assert "Traceback" not in out
    assert KEY not in out and TOKEN not in out and TOKEN.split(":")[1] not in out
    return result


def _line(out: str, name: str) -> str:
    for line in out.splitlines():
        if line[5:].split("  ", 1)[0] == name:
            return line
    raise AssertionError(f"no {name!r} line in:\n{out}")


def _telegram_env(tmp_path: Path, model_url: str, tg: FakeTelegram) -> dict[str, str]:
    return _env(tmp_path, model_url, CHANNEL="telegram", TELEGRAM_BOT_TOKEN=TOKEN,
                TELEGRAM_ALLOWED_USERS="42,43", TELEGRAM_API_URL=tg.base_url)


def test_all_ok_on_stdio(tmp_path: Path) -> None:
    with FakeOpenAI(api_key=KEY) as model:
        result = _check(_env(tmp_path, model.base_url))
        sent = [r.last_user_text for r in model.requests]
    assert result.returncode == 0, result.stdout
    for name in ("config", "persona", "database", "tls", "model"):
        assert _line(result.stdout, name).startswith("ok"), name
    assert "fake-model answered" in _line(result.stdout, "model")
    assert _line(result.stdout, "binary").startswith("skip")
    assert result.stdout.rstrip().endswith("all checks passed")
    assert len(sent) == 1  # one tiny completion, no retries


def test_telegram_ok_reports_the_bot_and_sends_nothing(tmp_path: Path) -> None:
    with FakeOpenAI(api_key=KEY) as model, FakeTelegram(token=TOKEN, webhook_active=True) as tg:
        result = _check(_telegram_env(tmp_path, model.base_url, tg))
        methods = {c.method.lower() for c in tg.calls()}
    assert result.returncode == 0, result.stdout
    assert "@gantry_test_bot" in _line(result.stdout, "telegram")
    assert "2 allowed user id(s)" in _line(result.stdout, "telegram allowlist")
    assert _line(result.stdout, "telegram webhook").startswith("warn")
    assert methods <= {"getme", "getwebhookinfo"}  # never sends, never deletes the webhook


def test_json_output(tmp_path: Path) -> None:
    with FakeOpenAI(api_key=KEY) as model:
        result = _check(_env(tmp_path, model.base_url), "--json")
    doc: dict[str, Any] = json.loads(result.stdout)
    assert doc["ok"] is True and result.returncode == 0
    assert {c["name"] for c in doc["checks"]} >= {"config", "persona", "database", "model"}


def test_rejected_key(tmp_path: Path) -> None:
    with FakeOpenAI(api_key="sk-the-right-one") as model:
        result = _check(_env(tmp_path, model.base_url))
    assert result.returncode == 1
    line = _line(result.stdout, "model")
    assert line.startswith("FAIL") and "rejected the key (HTTP 401)" in line
    assert "check LLM_API_KEY" in result.stdout


def test_wrong_model_name(tmp_path: Path) -> None:
    with FakeOpenAI(api_key=KEY) as model:
        model.push(HTTPError(404, "The model `fake-modle` does not exist"))
        result = _check(_env(tmp_path, model.base_url))
    assert result.returncode == 1
    assert "HTTP 404 for model 'fake-model'" in _line(result.stdout, "model")
    assert "check LLM_MODEL" in result.stdout


def test_unreachable_url(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = _check(_env(tmp_path, f"http://127.0.0.1:{port}/v1"))
    assert result.returncode == 1
    assert "cannot reach LLM_BASE_URL" in _line(result.stdout, "model")


def test_every_fallback_model_is_probed_on_its_own_line(tmp_path: Path) -> None:
    """The primary and each fallback probed alike; a fallback's own key reaches its endpoint
    and is never shown; a dead fallback is a FAIL line naming its settings."""
    from tests.fakes.openai import dead_base_url

    fb_key = "sk-check-fallback-secret-9876543210"
    with FakeOpenAI(api_key=KEY) as model, FakeOpenAI(api_key=fb_key) as other:
        result = _check(_env(tmp_path, model.base_url, LLM_FALLBACK_1_MODEL="small-model",
                             LLM_FALLBACK_2_MODEL="cloud-model",
                             LLM_FALLBACK_2_BASE_URL=other.base_url,
                             LLM_FALLBACK_2_API_KEY=fb_key,
                             LLM_FALLBACK_3_MODEL="gone-model",
                             LLM_FALLBACK_3_BASE_URL=dead_base_url()))
        asked = [r.body["model"] for r in model.requests + other.requests]
    assert result.returncode == 1, result.stdout
    assert fb_key not in result.stdout + result.stderr
    assert "(+3 fallback models)" in _line(result.stdout, "config")
    assert "fake-model answered" in _line(result.stdout, "model")
    assert _line(result.stdout, "model fallback 1").startswith("ok")
    assert "cloud-model at 127.0.0.1 answered" in _line(result.stdout, "model fallback 2")
    dead = _line(result.stdout, "model fallback 3")
    assert dead.startswith("FAIL") and "cannot reach LLM_FALLBACK_3_BASE_URL" in dead
    assert asked == ["fake-model", "small-model", "cloud-model"]
    assert result.stdout.rstrip().endswith("1 check(s) failed")


def test_https_to_a_plain_http_port_says_it_does_not_speak_tls(tmp_path: Path) -> None:
    with FakeOpenAI(api_key=KEY) as model:
        url = model.base_url.replace("http://", "https://", 1)
        result = _check(_env(tmp_path, url))
        assert model.requests == []
    assert result.returncode == 1
    assert "cannot reach LLM_BASE_URL" in _line(result.stdout, "model")
    assert "the endpoint does not speak TLS: use http:// or check the port" in result.stdout


def test_bad_bot_token(tmp_path: Path) -> None:
    with FakeOpenAI(api_key=KEY) as model, FakeTelegram(token="7000000001:other") as tg:
        result = _check(_telegram_env(tmp_path, model.base_url, tg))
    assert result.returncode == 1
    line = _line(result.stdout, "telegram")
    assert line.startswith("FAIL") and "rejected the bot token" in line


def test_bad_config_lists_every_problem(tmp_path: Path) -> None:
    env = _env(tmp_path, "ftp://nowhere", HISTORY_MAX_MESSAGES="lots")
    result = _check(env)
    assert result.returncode == 1
    line = _line(result.stdout, "config")
    assert "LLM_BASE_URL" in line and "HISTORY_MAX_MESSAGES" in line


def test_bad_proxy_variable_fails_the_config_check(tmp_path: Path) -> None:
    env = _env(tmp_path, "http://127.0.0.1:9/v1",
               HTTPS_PROXY="http://user:pr0xy-Secret@127.0.0.1:3128:bad")
    result = _check(env)
    assert result.returncode == 1 and "pr0xy-Secret" not in result.stdout
    line = _line(result.stdout, "config")
    assert line.startswith("FAIL") and "HTTPS_PROXY='http://[REDACTED]@127.0.0.1:3128:bad'" in line


def test_telegram_probe_ignores_proxy_variables(tmp_path: Path) -> None:
    """As the channel's aiohttp session does: through a dead proxy, getMe would fail."""
    with FakeOpenAI(api_key=KEY) as model, FakeTelegram(token=TOKEN) as tg:
        env = _telegram_env(tmp_path, model.base_url, tg)
        dead = "http://127.0.0.1:9"
        result = _check({**env, "HTTP_PROXY": dead, "NO_PROXY": model.base_url.rsplit("/", 1)[0]})
    assert result.returncode == 0, result.stdout
    assert _line(result.stdout, "telegram").startswith("ok")


def _unwritable(directory: Path, cmd: list[str]) -> list[str]:
    """`cmd` run where `directory` cannot be written, by this uid or by root."""
    if os.getuid() == 0:  # root writes through mode bits: use a read-only mount instead
        if shutil.which("unshare") is None:
            pytest.skip("root without unshare(1)")
        mount = f"mount -t tmpfs -o ro tmpfs {shlex.quote(str(directory))}"
        return ["unshare", "-m", "sh", "-c", f"{mount} && exec {shlex.join(cmd)}"]
    directory.chmod(0o555)
    return cmd


def test_read_only_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    cmd = _unwritable(data, [sys.executable, "-m", "gantry", "check"])
    with FakeOpenAI(api_key=KEY) as model:
        result = _run(cmd, _env(tmp_path, model.base_url))
    assert result.returncode == 1
    line = _line(result.stdout, "database")
    assert line.startswith("FAIL") and "not writable" in line
    assert _line(result.stdout, "model").startswith("ok")  # the other checks still ran


def test_missing_data_dir_in_an_unwritable_parent_fails(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    cmd = _unwritable(locked, [sys.executable, "-m", "gantry", "check"])
    with FakeOpenAI(api_key=KEY) as model:
        result = _run(cmd, _env(tmp_path, model.base_url, DATA_DIR=str(locked / "data")))
    assert result.returncode == 1
    line = _line(result.stdout, "database")
    assert line.startswith("FAIL") and "does not exist and cannot be created" in line


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


def test_check_creates_no_data_dir_and_status_then_says_no_database(tmp_path: Path) -> None:
    """`check` writes nothing; it used to create DATA_DIR/gantry.db, which status misread."""
    with FakeOpenAI(api_key=KEY) as model:
        env = _env(tmp_path, model.base_url)
        before = _tree(tmp_path)
        result = _check(env)
    assert result.returncode == 0, result.stdout
    line = _line(result.stdout, "database")
    assert line.startswith("ok") and "does not exist yet; gantry run creates it" in line
    assert _tree(tmp_path) == before and not (tmp_path / "data").exists()
    status = _run([sys.executable, "-m", "gantry", "status"], env)
    assert status.returncode == 1 and "no database at" in status.stdout
    for cmd in (["cron", "list"], ["memory", "list"]):
        listed = _run([sys.executable, "-m", "gantry", *cmd], env)
        assert listed.returncode == 1 and "no database at" in listed.stdout + listed.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("version,status,said", [
    (None, "ok", "schema version {known}"),
    (2, "ok", "schema version 2 (gantry run migrates it to {known})"),
    (99, "FAIL", "schema version 99 is newer than this gantry understands ({known})"),
])
def test_an_existing_database_is_read_not_written(
    tmp_path: Path, version: int | None, status: str, said: str
) -> None:
    from gantry import db

    data = tmp_path / "data"
    data.mkdir()
    conn = db.connect(data / "gantry.db")
    if version is not None:
        conn.execute(f"PRAGMA user_version = {version}")
    conn.close()
    before = _tree(data)
    with FakeOpenAI(api_key=KEY) as model:
        result = _check(_env(tmp_path, model.base_url))
    line = _line(result.stdout, "database")
    assert line.startswith(status) and said.format(known=db.schema_version()) in line, line
    assert _tree(data) == before  # no -wal, no -shm, no migration
    assert result.returncode == (status == "FAIL")


def test_mcp_servers_are_started_listed_and_stopped(tmp_path: Path) -> None:
    from tests.fakes.mcp_servers import python_fixture_toml, toml_server

    manifest = tmp_path / "mcp.toml"
    manifest.write_text(python_fixture_toml("fx") + toml_server("broken", ["/bin/false"]))
    with FakeOpenAI(api_key=KEY) as model:
        result = _check(_env(tmp_path, model.base_url, MCP_MANIFEST=str(manifest)))
    assert result.returncode == 1
    assert "2 server(s)" in _line(result.stdout, "mcp manifest")
    ok = _line(result.stdout, "mcp fx")
    assert ok.startswith("ok") and "tools, stopped again; speaks MCP 2026-07-28 (stateless)" in ok
    bad = _line(result.stdout, "mcp broken")
    assert bad.startswith("FAIL") and "broken" in bad


def test_bad_manifest_fails_the_check(tmp_path: Path) -> None:
    manifest = tmp_path / "mcp.toml"
    manifest.write_text('[[server]]\nname = "bad name"\ncommand = "nope"\n')
    with FakeOpenAI(api_key=KEY) as model:
        result = _check(_env(tmp_path, model.base_url, MCP_MANIFEST=str(manifest)))
    assert result.returncode == 1
    assert _line(result.stdout, "mcp manifest").startswith("FAIL")


def test_env_file_readable_by_others_is_a_warning(tmp_path: Path) -> None:
    """The file holds the key and the token: group/world-readable is worth a line (not a FAIL)."""
    with FakeOpenAI(api_key=KEY) as model:
        env = _env(tmp_path, model.base_url)
        env_file = tmp_path / "gantry.env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items() if k != "PATH"))
        out = {}
        for mode in (0o644, 0o640, 0o600):
            env_file.chmod(mode)
            result = _check({"PATH": env["PATH"]}, "--env-file", str(env_file))
            assert result.returncode == 0, result.stdout
            out[mode] = result.stdout
    world, group, owner = (_line(out[m], "env file") for m in (0o644, 0o640, 0o600))
    assert world.startswith("warn")
    assert f"{env_file} is readable by group and others (mode 0644)" in world
    assert f"→ chmod 600 {env_file}" in out[0o644]
    assert group.startswith("warn") and "readable by group (mode 0640)" in group
    assert owner.startswith("ok") and "(mode 0600)" in owner
    assert "chmod" not in out[0o600]


ODD_BOT_API = [
    ("true", "with true, not a Bot API reply"),
    ("[]", "with [], not a Bot API reply"),
    ('"x"', 'with "x", not a Bot API reply'),
    ('{"ok": true}', "with no result, not"),
    ('{"ok": true, "result": true}', "with true, not"),
    ('{"ok": true, "result": []}', "with [], not"),
    ("<html>proxy says hi</html>", "a body that is not JSON: <html>proxy says hi</html>"),
    ("", "a body that is not JSON: (empty)"),
]


@pytest.mark.parametrize("body,said", ODD_BOT_API, ids=[b or "empty" for b, _ in ODD_BOT_API])
@pytest.mark.parametrize("method", ["getMe", "getWebhookInfo"])
def test_odd_bot_api_answers_are_a_fail_line_naming_the_probe(
    tmp_path: Path, method: str, body: str, said: str
) -> None:
    """A self-hosted or proxy Bot API may answer anything: a FAIL line, never an internal error."""
    with FakeOpenAI(api_key=KEY) as model, FakeTelegram(token=TOKEN) as tg:
        tg.fail(method, "raw", status=200, description=body)
        result = _check(_telegram_env(tmp_path, model.base_url, tg))
    assert result.returncode == 1, result.stdout
    name = "telegram" if method == "getMe" else "telegram webhook"
    line = _line(result.stdout, name)
    assert line.startswith("FAIL") and f"{method} answered HTTP 200 " in line and said in line
    assert "report this as a bug" not in result.stdout and "Error:" not in result.stdout
    assert "TELEGRAM_API_URL must be a Bot API server" in result.stdout
    assert _line(result.stdout, "model").startswith("ok")  # the other probes still ran


def test_bot_api_error_reply_names_the_method_and_description(tmp_path: Path) -> None:
    with FakeOpenAI(api_key=KEY) as model, FakeTelegram(token=TOKEN) as tg:
        tg.fail("getWebhookInfo", "server_error", description="Internal Server Error: busy")
        result = _check(_telegram_env(tmp_path, model.base_url, tg))
    assert result.returncode == 1
    line = _line(result.stdout, "telegram webhook")
    assert line.startswith("FAIL") and "getWebhookInfo answered HTTP 500: Internal" in line
    assert "try again later" in result.stdout


ODD_MODEL = [b"true", b"[]", b'"x"', b"{}", b'{"choices": []}', b"not json at all"]


@pytest.mark.parametrize("body", ODD_MODEL, ids=[b.decode() for b in ODD_MODEL])
def test_odd_model_replies_are_a_fail_line_not_unreachable(tmp_path: Path, body: bytes) -> None:
    """The endpoint answered: saying it cannot be reached would send the operator to DNS."""
    from tests.fakes.openai import RawSSE

    with FakeOpenAI(api_key=KEY) as model:
        model.push(RawSSE(body, content_type="application/json"))
        result = _check(_env(tmp_path, model.base_url))
    assert result.returncode == 1
    line = _line(result.stdout, "model")
    assert line.startswith("FAIL") and "answered, but not with a chat completion" in line
    assert "cannot reach" not in result.stdout and "report this as a bug" not in result.stdout
    assert "OpenAI-compatible root" in result.stdout


def test_check_env_file_after_init_reads_what_init_wrote(tmp_path: Path) -> None:
    """The issue's first hour: `init --persona-dir ./persona --manifest ./mcp.toml`, then
    `check --env-file .env` (from elsewhere) must not say /persona is missing."""
    work = tmp_path / "work"
    work.mkdir()
    env = {"PATH": os.environ["PATH"]}
    init = subprocess.run([sys.executable, "-m", "gantry", "init", "--persona-dir", "./persona",
                           "--manifest", "./mcp.toml"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=60)
    assert init.returncode == 0, init.stderr
    with FakeOpenAI(api_key=KEY) as model:
        with (work / ".env").open("a") as fh:
            fh.write(f"LLM_BASE_URL={model.base_url}\nLLM_API_KEY={KEY}\nLLM_MODEL=fake-model\n"
                     f"CHANNEL=stdio\nDATA_DIR={tmp_path / 'data'}\n")
        result = _run([sys.executable, "-m", "gantry", "check", "--env-file",
                       str(work / ".env")], env)
    assert result.returncode == 0, result.stdout
    persona = _line(result.stdout, "persona")
    assert persona.startswith("ok") and f"from {work / 'persona'}" in persona
    assert f"no MCP servers ({work / 'mcp.toml'})" in _line(result.stdout, "mcp manifest")
    assert _line(result.stdout, "env file").startswith("ok")  # 0600 from init


def test_backups_check_fails_when_the_newest_backup_is_too_old(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 39 item 2: a run of failed scheduled backups shows in `gantry check`."""
    import os
    import time

    from gantry.check import check_backups
    from gantry.config import load

    base = {"LLM_BASE_URL": "http://x", "LLM_API_KEY": "k", "LLM_MODEL": "m",
            "CHANNEL": "stdio"}
    assert check_backups(load(base)).status == "skip"
    cfg = load({**base, "BACKUP_DIR": str(tmp_path / "b"), "BACKUP_EVERY": "1d"})
    assert check_backups(cfg).detail == f"every 1d to {tmp_path / 'b'}; none written yet"
    (tmp_path / "b").mkdir()
    old = tmp_path / "b" / "gantry-20260101T000000Z.db"
    old.write_bytes(b"x")
    os.utime(old, (time.time() - 3 * 86400, time.time() - 3 * 86400))
    result = check_backups(cfg)
    assert result.failed and "is 72.0 h old but BACKUP_EVERY is 1d" in result.detail
    os.utime(old, None)
    assert check_backups(cfg).status == "ok"
    (tmp_path / "file").write_text("")
    assert check_backups(load({**base, "BACKUP_DIR": str(tmp_path / "file" / "b")})).failed
