"""OAuth for remote MCP servers: `gantry mcp login`, stored tokens, refresh, expiry.

Against tests/fakes/mcp_oauth.py: the SDK's own authorization server and resource server on
127.0.0.1. The operator's browser is httpx following the authorize redirect once; what the
browser would show in its address bar is pasted into `gantry mcp login`'s stdin.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gantry import db
from gantry.mcp.login import LoginError, Pasted, parse_pasted
from gantry.mcp.tokens import TokenStore, problem
from tests.test_mcp_host import until

ROOT = Path(__file__).resolve().parent.parent


class OAuthServer:
    def __init__(self, proc: subprocess.Popen[str], base: str, path: str = "/mcp") -> None:
        self.proc = proc
        self.base = base
        self.url = f"{base}{path}"

    def stats(self) -> dict[str, int]:
        return dict(httpx.get(f"{self.base}/test/stats", timeout=5).json())

    def revoke_all(self) -> None:
        httpx.post(f"{self.base}/test/revoke", timeout=5).raise_for_status()


@pytest.fixture
def oauth_server() -> Iterator[Callable[..., OAuthServer]]:
    """Start the fixture (as a subprocess) with the given options; every one is stopped."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> OAuthServer:
        proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.mcp_oauth", *args],
                                cwd=ROOT, stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout is not None
        base = proc.stdout.readline().strip()
        assert base.startswith("http://127.0.0.1:"), base
        for _ in range(100):  # until uvicorn accepts (bounded)
            try:
                httpx.get(f"{base}/test/stats", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        return OAuthServer(proc, base, "/sse" if "--sse" in args else "/mcp")

    yield start
    for proc in started:
        proc.kill()
        proc.wait(timeout=10)


def follow_authorize(url: str) -> str:
    """The operator's browser: open the authorization address, consent (the fixture does at
    once), and return the address it is redirected to."""
    response = httpx.get(url, follow_redirects=False, timeout=5)
    assert response.status_code in (302, 303, 307), response.text
    return response.headers["location"]


def manifest(tmp_path: Path, server: OAuthServer, name: str = "remote", **extra: str) -> Path:
    lines = ["[[server]]", f'name = "{name}"', f'url = "{server.url}"', 'auth = "oauth"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    path = tmp_path / "mcp.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def gantry_env(tmp_path: Path, manifest_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "TELEGRAM_"))}
    env.update(DATA_DIR=str(tmp_path / "data"), MCP_MANIFEST=str(manifest_path),
               PERSONA_DIR=str(tmp_path), LOG_LEVEL="debug")
    return env


def cli_login(env: dict[str, str], name: str, answer: Callable[[str], str] = follow_authorize,
              argv: list[str] | None = None) -> tuple[int, str, str]:
    """`gantry mcp login NAME` as an operator runs it: read the address it prints, paste the
    answer. Returns (exit code, stdout, stderr). `argv`: another command line that runs it."""
    err_path = Path(env["DATA_DIR"]).parent / "login.stderr"
    with err_path.open("w+") as err_file:
        proc = subprocess.Popen(argv or [sys.executable, "-m", "gantry", "mcp", "login", name],
                                cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err_file, text=True)
        assert proc.stdout is not None and proc.stdin is not None
        seen: list[str] = []
        try:
            for _ in range(200):
                line = proc.stdout.readline()
                if not line:
                    break
                seen.append(line)
                if line.strip().startswith("http") and "/authorize?" in line:
                    proc.stdin.write(answer(line.strip()) + "\n")
                    proc.stdin.flush()
                    break
            proc.stdin.close()
            seen.append(proc.stdout.read())  # not communicate(): it skips what is buffered
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err_file.seek(0)
        return proc.returncode, "".join(seen), err_file.read()


def stored(tmp_path: Path, name: str = "remote") -> Any:
    return TokenStore(tmp_path / "data" / "gantry.db").get(name)


# ------------------------------------------------------------------ login


@pytest.mark.slow
def test_login_registers_itself_and_stores_tokens_never_printing_them(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer]
) -> None:
    server = oauth_server()
    env = gantry_env(tmp_path, manifest(tmp_path, server))
    code, out, err = cli_login(env, "remote")
    assert code == 0, out + err
    assert "Logged in to 'remote': 2 tools" in out
    record = stored(tmp_path)
    tokens = json.loads(record.tokens)
    assert tokens["access_token"] and tokens["refresh_token"]
    assert record.url == server.url and record.login_required is None
    assert json.loads(record.client_info)["client_id"]  # dynamic registration, stored
    assert json.loads(record.as_metadata)["token_endpoint"] == f"{server.base}/token"
    assert server.stats()["registered"] == 1 and server.stats()["code_grants"] == 1
    secret = json.loads(record.client_info).get("client_secret")
    for value in (tokens["access_token"], tokens["refresh_token"], secret):
        assert value and value not in out + err
    assert problem(record, "remote", server.url, 0) is None


@pytest.mark.slow
def test_login_again_reuses_the_registration(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer]
) -> None:
    server = oauth_server()
    env = gantry_env(tmp_path, manifest(tmp_path, server))
    assert cli_login(env, "remote")[0] == 0
    first = stored(tmp_path)
    assert cli_login(env, "remote")[0] == 0
    second = stored(tmp_path)
    assert server.stats()["registered"] == 1 and server.stats()["code_grants"] == 2
    assert json.loads(first.client_info)["client_id"] == json.loads(
        second.client_info)["client_id"]
    assert first.tokens != second.tokens
    env_argv = [sys.executable, "-m", "gantry", "mcp", "login", "remote", "--new-client"]
    assert cli_login(env, "remote", argv=env_argv)[0] == 0
    assert server.stats()["registered"] == 2
    assert json.loads(stored(tmp_path).client_info)["client_id"] != json.loads(
        first.client_info)["client_id"]


@pytest.mark.slow
def test_login_with_a_manifest_client_id_and_a_pasted_code(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer]
) -> None:
    """A server without dynamic registration: the manifest names the client registered in
    advance; the operator pastes the bare code instead of the whole address."""
    from urllib.parse import parse_qs, urlsplit

    server = oauth_server("--no-registration", "gantry-test-client")
    env = gantry_env(tmp_path, manifest(tmp_path, server, client_id="gantry-test-client"))

    def just_the_code(url: str) -> str:
        return parse_qs(urlsplit(follow_authorize(url)).query)["code"][0]

    code, out, err = cli_login(env, "remote", just_the_code)
    assert code == 0, out + err
    record = stored(tmp_path)
    assert record.client_info is None  # the manifest's client: nothing registered to keep
    assert server.stats()["registered"] == 0 and server.stats()["code_grants"] == 1


@pytest.mark.slow
def test_login_without_registration_or_client_id_says_what_to_set(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer]
) -> None:
    server = oauth_server("--no-registration", "someone-else")
    env = gantry_env(tmp_path, manifest(tmp_path, server))
    code, out, err = cli_login(env, "remote")
    assert code == 1
    assert "client registration failed" in out and "set client_id" in out, out
    assert "Traceback" not in out + err
    assert stored(tmp_path) is None


@pytest.mark.slow
def test_login_with_closed_stdin_says_how_to_run_it(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer]
) -> None:
    server = oauth_server()
    env = gantry_env(tmp_path, manifest(tmp_path, server))
    proc = subprocess.run([sys.executable, "-m", "gantry", "mcp", "login", "remote"], cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1
    assert "no input (stdin is closed)" in proc.stdout and "docker compose run" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_login_names_the_oauth_servers_when_the_name_is_wrong(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer]
) -> None:
    server = oauth_server()
    env = gantry_env(tmp_path, manifest(tmp_path, server))
    proc = subprocess.run([sys.executable, "-m", "gantry", "mcp", "login", "nope"], cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1
    assert "'nope': no server of that name" in proc.stderr and "remote" in proc.stderr


def test_pasted_answers() -> None:
    url = "http://127.0.0.1/callback?code=abc&state=s1&iss=http%3A%2F%2Fas"
    assert parse_pasted(url, "s0") == Pasted(code="abc", state="s1", iss="http://as")
    assert parse_pasted("?code=abc&state=s1", "s0") == Pasted(code="abc", state="s1")
    assert parse_pasted("  abc  \n", "s0") == Pasted(code="abc", state="s0")
    assert parse_pasted("abc", "s0", needs_iss=True).retry
    assert parse_pasted("", "s0").retry == "nothing pasted"
    assert parse_pasted("http://127.0.0.1/callback?state=x", "s0").retry
    assert parse_pasted("two words", "s0").retry
    with pytest.raises(LoginError, match="refused: access_denied"):
        parse_pasted("http://127.0.0.1/callback?error=access_denied&state=x", "s0")


# ------------------------------------------------------------------ storage


def test_store_rows_and_repr_keep_secrets_out(tmp_path: Path) -> None:
    path = tmp_path / "gantry.db"
    db.connect(path).close()
    store = TokenStore(path, clock=lambda: 100.0)
    tokens = json.dumps({"access_token": "AT-secret-1", "refresh_token": "RT-secret-1"})
    store.save_login("s", "https://x/mcp", client_info='{"client_id": "c"}', tokens=tokens,
                     expires_at=160.0, as_metadata=None, resource_metadata=None)
    record = store.get("s")
    assert record is not None and "secret" not in repr(record) and "secret" not in repr(store)
    assert problem(record, "s", "https://x/mcp", 200.0) is None  # expired, but refreshable
    assert "another URL" in str(problem(record, "s", "https://y/mcp", 0))
    assert store.require_login("s", "https://x/mcp", "refused", tokens="other") is False
    assert store.require_login("s", "https://x/mcp", "refused", tokens=tokens) is True
    assert problem(store.get("s"), "s", "https://x/mcp", 0) == \
        "refused; run `gantry mcp login s`"
    assert problem(None, "s", "https://x/mcp", 0) == "not logged in; run `gantry mcp login s`"
    read_only = TokenStore(path, read_only=True)
    assert read_only.get("s") is not None and read_only.get("t") is None
    with pytest.raises(PermissionError):
        read_only.delete("s")
    assert TokenStore(tmp_path / "absent.db", read_only=True).get("s") is None


# ------------------------------------------------------------------ run time


def oauth_spec(server: OAuthServer, name: str = "remote", transport: str = "streamable-http"
               ) -> Any:
    from gantry.mcp.manifest import ServerSpec

    return ServerSpec(name=name, url=server.url, auth="oauth", transport=transport)


async def call_whoami(hook: Any, spec: Any) -> str:
    """One connection through the run-time provider: initialize, tools/call whoami."""
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(auth=hook(spec)) as client, \
            streamable_http_client(spec.url, http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        with anyio.fail_after(30):
            await session.initialize()
            result = await session.call_tool("whoami", {})
    return str(result.content[0].text)  # type: ignore[union-attr]


async def fails(hook: Any, spec: Any) -> None:
    """The connection fails as the SDK fails a request answered with an HTTP error."""
    from mcp.shared.exceptions import MCPError

    with pytest.RaisesGroup(pytest.RaisesGroup(MCPError)):
        await call_whoami(hook, spec)


@pytest.mark.slow
@pytest.mark.anyio
async def test_run_time_refreshes_the_token_and_turns_a_refused_refresh_into_login_needed(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer], caplog: pytest.LogCaptureFixture
) -> None:
    from gantry.mcp.oauth import OAuthHook

    caplog.set_level(logging.DEBUG)
    server = oauth_server()
    env = gantry_env(tmp_path, manifest(tmp_path, server))
    assert (await anyio.to_thread.run_sync(cli_login, env, "remote"))[0] == 0
    store = TokenStore(tmp_path / "data" / "gantry.db")
    hook = OAuthHook(store)
    spec = oauth_spec(server)
    seen = [json.loads(store.get("remote").tokens)]

    assert await call_whoami(hook, spec) == "operator"  # the stored access token, as is
    assert server.stats()["refresh_grants"] == 0

    # Expired (as far as gantry knows): refreshed before it is sent, the new tokens stored.
    record = store.get("remote")
    store.expire_access("remote", spec.url, record.tokens)
    assert await call_whoami(hook, spec) == "operator"
    assert server.stats()["refresh_grants"] == 1
    after = store.get("remote")
    seen.append(json.loads(after.tokens))
    assert after.tokens != record.tokens and after.expires_at > time.time()

    # The server forgot the access token (it looks valid to gantry): refreshed on its 401,
    # and the request sent again.
    httpx.post(f"{server.base}/test/forget-access", timeout=5).raise_for_status()
    assert await call_whoami(hook, spec) == "operator"
    assert server.stats()["refresh_grants"] == 2 and hook.gates["remote"].reason is None
    seen.append(json.loads(store.get("remote").tokens))

    # The authorization server is down (503): that request fails, no login is needed, and
    # once it is back the refresh happens.
    httpx.post(f"{server.base}/test/token-down", timeout=5).raise_for_status()
    store.expire_access("remote", spec.url, store.get("remote").tokens)
    await fails(hook, spec)
    assert hook.gates["remote"].reason is None and store.get("remote").login_required is None
    httpx.post(f"{server.base}/test/token-up", timeout=5).raise_for_status()
    assert await call_whoami(hook, spec) == "operator"
    assert server.stats()["refresh_grants"] == 3
    seen.append(json.loads(store.get("remote").tokens))

    # Revoked refresh token: no interactive flow, no retry — a login is needed, said clearly.
    server.revoke_all()
    store.expire_access("remote", spec.url, store.get("remote").tokens)
    await fails(hook, spec)
    want = ("the authorization server refused the refresh token (HTTP 400); "
            "run `gantry mcp login remote`")
    assert hook.gates["remote"].reason == want
    assert problem(store.get("remote"), "remote", spec.url, time.time()) == want
    assert hook.gates["remote"].check() == want  # what the host sees before reconnecting
    assert server.stats()["authorized"] == 1  # only the login's
    grants = server.stats()["refresh_grants"] + server.stats()["refresh_refused"]
    await fails(hook, spec)  # a connection anyway: nothing is sent to the token endpoint
    assert server.stats()["refresh_grants"] + server.stats()["refresh_refused"] == grants

    logged = caplog.text + "".join(str(r.__dict__) for r in caplog.records)
    assert "mcp server needs an OAuth login" in caplog.text
    for tokens in seen:
        for key in ("access_token", "refresh_token"):
            assert tokens[key] not in logged
    assert "Traceback" not in logged


# ------------------------------------------------------------------ the host


@pytest.mark.slow
@pytest.mark.anyio
async def test_host_boots_without_a_login_waits_for_one_and_says_so(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer], caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Never logged in: boot goes on, /status and every call say "run gantry mcp login";
    a login in another process is picked up; a revoked refresh token turns back into that
    message, with no retry against the token endpoint while it waits."""
    from gantry.mcp import oauth
    from gantry.mcp.auth import oauth_hook
    from gantry.mcp.host import Host
    from gantry.tools import Registry

    monkeypatch.setattr(oauth, "LOGIN_POLL", 0.1)
    caplog.set_level(logging.DEBUG)
    server = oauth_server()
    env = gantry_env(tmp_path, manifest(tmp_path, server))
    (tmp_path / "data").mkdir()
    db.connect(tmp_path / "data" / "gantry.db").close()
    spec = oauth_spec(server)
    host = Host([spec], Registry(), env,
                auth=oauth_hook([spec], tmp_path / "data" / "gantry.db"))
    hint = "run `gantry mcp login remote`"
    async with anyio.create_task_group() as tg:
        await host.start(tg)  # a required server, not logged in: boot goes on
        [line] = host.status_lines()
        assert line.startswith(f"remote: needs login (not logged in; {hint})"), line
        result = await host.call("remote", "whoami", {})
        assert result.error and result.text == (
            f"MCP server 'remote' needs an OAuth login: not logged in; {hint}")

        assert (await anyio.to_thread.run_sync(cli_login, env, "remote"))[0] == 0
        await until(lambda: host.servers["remote"].state == "up", what="up after the login")
        assert (await host.call("remote", "whoami", {})).text == "operator"
        tokens = json.loads(stored(tmp_path).tokens)

        server.revoke_all()  # the refresh token too; the next call gets a 401 first
        result = await host.call("remote", "whoami", {})
        want = ("the authorization server refused the refresh token (HTTP 400); " + hint)
        assert result.error and result.text == f"MCP server 'remote' needs an OAuth login: {want}"
        await until(lambda: host.servers["remote"].state == "needs login", what="waiting")
        assert host.status_lines()[0].startswith(f"remote: needs login ({want})")
        asked = server.stats()
        await anyio.sleep(0.5)  # five looks at the row: none reaches the token endpoint
        assert server.stats() == asked
        assert host.servers["remote"].breaker.state == "closed"
        tg.cancel_scope.cancel()
    logged = caplog.text + "".join(str(r.__dict__) for r in caplog.records)
    assert tokens["access_token"] not in logged and tokens["refresh_token"] not in logged
    assert "Traceback" not in logged
    said = [r.__dict__.get("reason") for r in caplog.records
            if r.getMessage() == "mcp server needs an OAuth login"]
    assert said == [f"not logged in; {hint}", want]  # each reason once, however many looks


@pytest.mark.slow
@pytest.mark.anyio
async def test_legacy_sse_server_logs_in_and_is_called_with_the_token(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer]
) -> None:
    from gantry.mcp.auth import oauth_hook
    from gantry.mcp.host import Host
    from gantry.tools import Registry

    server = oauth_server("--sse")
    env = gantry_env(tmp_path, manifest(tmp_path, server, transport="sse"))
    code, out, err = await anyio.to_thread.run_sync(cli_login, env, "remote")
    assert code == 0 and "2 tools" in out, out + err
    spec = oauth_spec(server, transport="sse")
    host = Host([spec], Registry(), env, auth=oauth_hook([spec], tmp_path / "data" / "gantry.db"))
    async with anyio.create_task_group() as tg:
        await host.start(tg)
        assert (await host.call("remote", "whoami", {})).text == "operator"
        tg.cancel_scope.cancel()


@pytest.mark.slow
@pytest.mark.anyio
async def test_check_names_the_login_problem_and_probes_with_the_stored_token(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer]
) -> None:
    from gantry.check import _probe_server

    server = oauth_server()
    env = gantry_env(tmp_path, manifest(tmp_path, server))
    spec = oauth_spec(server)
    path = tmp_path / "data" / "gantry.db"
    result = await _probe_server(spec, env, path)  # no database at all yet
    assert result.failed and result.detail == \
        "not logged in; run `gantry mcp login remote`", result
    assert "gantry mcp login remote" in result.hint and not path.exists()

    assert (await anyio.to_thread.run_sync(cli_login, env, "remote"))[0] == 0
    before = stored(tmp_path).tokens
    result = await _probe_server(spec, env, path)
    assert not result.failed and "2 tools" in result.detail, result

    store = TokenStore(path)
    store.expire_access("remote", spec.url, stored(tmp_path).tokens)
    result = await _probe_server(spec, env, path)
    assert not result.failed and "not probed" in result.detail, result
    assert server.stats()["refresh_grants"] == 0  # check refreshes nothing
    assert stored(tmp_path).tokens == before


# ------------------------------------------------------------------ the frozen build's mcp

from tests.test_build_mcp_lean import WEB_STACK, lean_mcp, mcp_lean  # noqa: E402, F401

REPORT_WEB = """
import atexit, json, sys
def _report():
    loaded = sorted({{m.split('.')[0] for m in sys.modules}} & set({web!r}))
    loaded += [m for m in sys.modules for n in {not_followed!r}
               if m == n or m.startswith(n + '.')]
    loaded += [m for m in sys.modules if m.startswith('mcp.server')]
    import mcp
    open({report!r}, 'w').write(json.dumps({{'web': loaded, 'file': mcp.__file__,
        'auth': 'mcp.client.auth.oauth2' in sys.modules}}))
atexit.register(_report)
"""


@pytest.mark.slow
def test_login_and_a_call_run_on_the_lean_mcp_without_the_server_half(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer], lean_mcp: Path  # noqa: F811
) -> None:
    """The binary's mcp (build/mcp_lean.py): the SDK's client auth is used, and neither the
    server-side auth stack nor the web stack is imported, by the login or by a tool call."""
    server = oauth_server()
    env = gantry_env(tmp_path, manifest(tmp_path, server))
    env["PYTHONPATH"] = f"{lean_mcp}{os.pathsep}{ROOT}"
    web = [*WEB_STACK, "click", "python_multipart"]

    def script(report: Path, body: str) -> list[str]:
        head = REPORT_WEB.format(web=web, not_followed=list(mcp_lean.NOT_FOLLOWED),
                                 report=str(report))
        return [sys.executable, "-c", head + body]

    login_report = tmp_path / "login.json"
    code, out, err = cli_login(env, "remote", argv=script(
        login_report, "from gantry.cli import main\nsys.exit(main(['mcp', 'login', 'remote']))"))
    assert code == 0, out + err
    call_report = tmp_path / "call.json"
    proc = subprocess.run(script(call_report, (
        "import anyio, os\n"
        "from gantry import config\n"
        "from gantry.runtime import load_mcp\n"
        "from gantry.tools import Registry\n"
        "async def main():\n"
        "    cfg = config.load(os.environ, offline=True)\n"
        "    host = load_mcp(cfg, os.environ, Registry())\n"
        "    async with anyio.create_task_group() as tg:\n"
        "        await host.start(tg)\n"
        "        print((await host.call('remote', 'whoami', {})).text)\n"
        "        tg.cancel_scope.cancel()\n"
        "anyio.run(main)\n")), env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "operator", proc.stderr[-3000:]
    for report in (login_report, call_report):
        found = json.loads(report.read_text())
        assert found["file"].startswith(str(lean_mcp)) and found["auth"], found
        assert found["web"] == [], found


# ------------------------------------------------------------------ CIMD, issuers, iss


class MetadataDocument:
    """gantry's client metadata document, served over https on 127.0.0.1 (the test CA's
    certificate), as an operator publishes it; counts the fetches."""

    def __init__(self, tmp_path: Path, redirect: str = "http://127.0.0.1/callback") -> None:
        import http.server
        import threading

        from tests.fakes.pki import make_pki

        pki = make_pki(tmp_path)
        self.ca_file = tmp_path / "ca.pem"
        self.ca_file.write_text(pki.ca_pem)
        self.fetches = 0
        doc = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                doc.fetches += 1
                body = json.dumps(doc.body).encode()
                found = self.path == "/clients/gantry.json"
                self.send_response(200 if found else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body) if found else 0))
                self.end_headers()
                if found:
                    self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.socket = pki.server_context().wrap_socket(self.httpd.socket,
                                                             server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}/clients/gantry.json"
        from gantry.mcp.cimd import document

        self.body = document(self.url, redirect, "gantry")
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def metadata_document(tmp_path: Path) -> Iterator[MetadataDocument]:
    doc = MetadataDocument(tmp_path)
    yield doc
    doc.close()


def registrations(server: OAuthServer) -> list[Any]:
    return list(httpx.get(f"{server.base}/test/registrations", timeout=5).json())


@pytest.mark.slow
@pytest.mark.anyio
async def test_login_names_gantry_by_its_metadata_document_and_registers_nothing(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer],
    metadata_document: MetadataDocument,
) -> None:
    """The authorization server advertises Client ID Metadata Documents: the manifest's
    https address is gantry's client_id, fetched by the authorization server; no registration;
    the daemon refreshes as that client."""
    from gantry.mcp.oauth import OAuthHook

    server = oauth_server("--cimd-ca", str(metadata_document.ca_file))
    env = gantry_env(tmp_path, manifest(tmp_path, server,
                                        oauth_client_metadata_url=metadata_document.url))
    code, out, err = await anyio.to_thread.run_sync(cli_login, env, "remote")
    assert code == 0, out + err
    assert f"client metadata document, {metadata_document.url}" in out
    assert server.stats()["registered"] == 0 and registrations(server) == []
    assert server.stats()["cimd_fetches"] >= 1 and metadata_document.fetches >= 1
    record = stored(tmp_path)
    assert json.loads(record.client_info)["client_id"] == metadata_document.url

    store = TokenStore(tmp_path / "data" / "gantry.db")
    store.expire_access("remote", server.url, record.tokens)
    hook = OAuthHook(store)
    assert await call_whoami(hook, oauth_spec(server)) == "operator"
    assert server.stats()["refresh_grants"] == 1  # as the document's client

    assert (await anyio.to_thread.run_sync(cli_login, env, "remote"))[0] == 0  # again
    assert server.stats()["registered"] == 0 and server.stats()["code_grants"] == 2


@pytest.mark.slow
def test_login_registers_when_the_server_takes_no_metadata_document(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer],
    metadata_document: MetadataDocument,
) -> None:
    """Dynamic registration is the fallback, and gantry says it is a native application."""
    server = oauth_server()  # no client_id_metadata_document_supported in its metadata
    env = gantry_env(tmp_path, manifest(tmp_path, server,
                                        oauth_client_metadata_url=metadata_document.url))
    code, out, err = cli_login(env, "remote")
    assert code == 0, out + err
    assert server.stats()["registered"] == 1 and metadata_document.fetches == 0
    [sent] = registrations(server)
    assert sent["application_type"] == "native"
    assert sent["redirect_uris"] == ["http://127.0.0.1/callback"]
    assert json.loads(stored(tmp_path).client_info)["client_id"] != metadata_document.url


@pytest.mark.slow
def test_login_refuses_an_authorization_response_from_another_issuer(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer]
) -> None:
    """RFC 9207: the redirect's `iss` must be the authorization server's issuer; RFC 8414:
    so must the metadata's `issuer`."""
    server = oauth_server("--iss", "wrong")
    env = gantry_env(tmp_path, manifest(tmp_path, server))
    code, out, err = cli_login(env, "remote")
    assert code == 1, out + err
    assert "refused: the answer does not come from the authorization server gantry asked" \
        in out and "http://wrong.invalid/" in out, out
    assert "nothing was stored" in out and "Traceback" not in out + err
    assert stored(tmp_path) is None and server.stats()["code_grants"] == 0

    other = oauth_server("--metadata-issuer", "http://127.0.0.1:9/")  # RFC 8414 §3.3
    env = gantry_env(tmp_path, manifest(tmp_path, other))
    code, out, err = cli_login(env, "remote")
    assert code == 1, out + err
    assert "refused: the answer does not come from the authorization server gantry asked " \
        "(Authorization server metadata issuer mismatch: http://127.0.0.1:9/" in out, out
    assert stored(tmp_path) is None and other.stats()["registered"] == 0

    right = oauth_server("--iss", "right")
    env = gantry_env(tmp_path, manifest(tmp_path, right))
    code, out, err = cli_login(env, "remote")
    assert code == 0, out + err


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_server_whose_issuer_changed_asks_for_a_new_login_and_gets_no_old_token(
    tmp_path: Path, oauth_server: Callable[..., OAuthServer]
) -> None:
    """The server now names another authorization server: the stored tokens are not sent to
    it (no refresh there), the reason names both and `gantry mcp login NAME`; the login
    registers anew with the new one, and calls work again."""
    from urllib.parse import urlsplit

    from gantry.mcp.auth import oauth_hook
    from gantry.mcp.host import Host
    from gantry.mcp.oauth import OAuthHook
    from gantry.tools import Registry

    old = oauth_server()
    port = str(urlsplit(old.base).port)
    env = gantry_env(tmp_path, manifest(tmp_path, old))
    assert (await anyio.to_thread.run_sync(cli_login, env, "remote"))[0] == 0
    first = stored(tmp_path)
    store = TokenStore(tmp_path / "data" / "gantry.db")
    hook = OAuthHook(store)
    spec = oauth_spec(old)
    assert await call_whoami(hook, spec) == "operator"

    old.proc.kill()
    old.proc.wait(timeout=10)
    new = oauth_server("--port", port, "--issuer-host", "localhost")
    assert new.url == old.url
    want = (f"the server's authorization server changed from http://127.0.0.1:{port} to "
            f"http://localhost:{port}: the login for the old one is not sent to the new one; "
            "run `gantry mcp login remote`")
    host = Host([spec], Registry(), env, auth=oauth_hook([spec], tmp_path / "data" / "gantry.db"))
    async with anyio.create_task_group() as tg:
        await host.start(tg)  # the stored token meets the new server's 401
        await until(lambda: host.servers["remote"].state == "needs login", what="needs login")
        assert host.status_lines()[0].startswith(f"remote: needs login ({want})")
        result = await host.call("remote", "whoami", {})
        assert result.text == f"MCP server 'remote' needs an OAuth login: {want}"
        tg.cancel_scope.cancel()
    await fails(hook, spec)  # a connection anyway: refused the same way, before any refresh
    assert hook.gates["remote"].reason == want
    assert problem(store.get("remote"), "remote", spec.url, time.time()) == want
    stats = new.stats()
    assert stats["refresh_grants"] == 0 and stats["refresh_refused"] == 0, stats

    code, out, err = await anyio.to_thread.run_sync(cli_login, env, "remote")
    assert code == 0, out + err
    assert f"changed from http://127.0.0.1:{port} to http://localhost:{port}:" in out
    assert new.stats()["registered"] == 1  # not the old registration
    second = stored(tmp_path)
    assert json.loads(second.client_info)["client_id"] != json.loads(
        first.client_info)["client_id"]
    assert json.loads(second.as_metadata)["issuer"] == f"http://localhost:{port}"
    assert await call_whoami(OAuthHook(store), spec) == "operator"


def test_client_metadata_urls_and_issuers() -> None:
    from gantry.mcp import cimd, issuer

    assert cimd.url_problem("https://example.com/gantry.json") is None
    assert cimd.url_problem("https://example.com:8443/c/gantry?v=1") is None
    for bad in ("http://example.com/gantry.json", "https://example.com", "https://example.com/",
                "https://u:p@example.com/g", "https://example.com/g#x", "https:///g",
                "https://example.com/a/../g", "https://example.com:99999/g",
                "https://example.com/a b", " https://example.com/g",
                "https://example.com/" + "a" * 3000):
        assert cimd.url_problem(bad) is not None, bad
    assert cimd.reusable("https://example.com/g", "https://example.com/g")
    assert not cimd.reusable("https://example.com/old", "https://example.com/g")
    assert cimd.reusable("dcr-issued-id", None)
    assert issuer.stored('{"issuer": "https://as/"}') == "https://as/"
    assert issuer.stored(None) is None and issuer.stored("not json") is None
    assert issuer.same("https://as", "https://as/") and not issuer.same("https://as/x",
                                                                         "https://as/x/")
    assert issuer.moved("https://as/", ["https://as"]) is None
    assert issuer.moved("https://as/", []) is None
    assert "from https://as/ to https://other/" in str(issuer.moved("https://as/",
                                                                    ["https://other/"]))


@given(st.text(max_size=300))
def test_any_text_gets_a_verdict_not_an_exception(text: str) -> None:
    from gantry.mcp import cimd, issuer

    why = cimd.url_problem(text)
    assert why is None or isinstance(why, str)
    if why is None:
        assert text.lower().startswith("https://") and "#" not in text
    assert issuer.moved(text or "x", [text or "x"]) is None
    issuer.stored(text)


@given(st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z]{2,6}){1,2}", fullmatch=True),
       st.lists(st.from_regex(r"[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,15}", fullmatch=True),
                min_size=1, max_size=4))
def test_an_https_address_with_a_path_is_a_client_id(host: str, segments: list[str]) -> None:
    from gantry.mcp import cimd

    path = "/".join(segments)
    url = f"https://{host}/{path}"
    if any(seg in (".", "..") for seg in segments):
        assert cimd.url_problem(url) is not None
    else:
        assert cimd.url_problem(url) is None, url
        assert cimd.url_problem(f"http://{host}/{path}") is not None
        assert cimd.url_problem(f"{url}#frag") is not None
