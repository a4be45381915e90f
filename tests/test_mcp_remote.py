"""Remote MCP servers against real HTTP servers: npm server-everything (streamableHttp and sse
modes) and the SDK fixture tests/fakes/mcp_http_fixture.py, each a process on a loopback port.
Every host runs in a task group cancelled at the end; every server process is stopped by PID.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from gantry import log as logsetup
from gantry.mcp import caller as callpath
from gantry.mcp import supervise
from gantry.mcp.deadline import held
from gantry.mcp.host import Host, ServerStartError
from gantry.mcp.manifest import load, parse
from gantry.tools import Registry
from tests.fakes.mcp_remote import (
    HttpServer,
    everything_http,
    fixture_http,
    free_port,
    toml_remote,
)
from tests.fakes.mcp_servers import everything_command, toml_server
from tests.test_mcp_host import until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp",
       "MCP_TOKEN": "hdr-secret-0123456789abcdef"}
BOOT = 120.0


@asynccontextmanager
async def running(manifest: str, environ: Mapping[str, str] = ENV,
                  path: Path | None = None) -> AsyncIterator[Host]:
    if path is not None:  # through load(), as boot does (it shares the header secrets)
        path.write_text(manifest)
        specs = load(str(path), environ)
    else:
        specs = parse(manifest, environ)
    host = Host(specs, Registry(), environ)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(BOOT):
            await host.start(tg)
        try:
            yield host
        finally:
            tg.cancel_scope.cancel()


@pytest.mark.parametrize("mode", ["streamableHttp", "sse"])
async def test_server_everything_over_http_lists_and_calls(mode: str) -> None:
    transport = "sse" if mode == "sse" else None
    with everything_http(mode) as srv:
        async with running(toml_remote("every", srv.url, transport=transport)) as host:
            names = {t.name for t in host.tools("every")}
            assert {"echo", "get-sum", "trigger-long-running-operation"} <= names
            result = await host.call("every", "echo", {"message": "over http"})
            assert (result.text, result.error) == ("Echo: over http", False)
            added = await host.call("every", "get-sum", {"a": 2, "b": 3})
            assert "5" in added.text and not added.error
            line = host.status_lines()[0]
            assert line.startswith("every: up, 13 tools"), line


async def test_legacy_sse_server_restart_is_reconnected() -> None:
    """Legacy SSE has one stream: it ends with the server, and gantry reconnects."""
    with everything_http("sse") as srv:
        async with running(toml_remote("every", srv.url, transport="sse")) as host:
            server = host.servers["every"]
            first = server.session
            await anyio.to_thread.run_sync(srv.restart)
            await until(lambda: server.session not in (None, first), what="a new session")
            result = await host.call("every", "echo", {"message": "two"})
            assert (result.text, result.error) == ("Echo: two", False)
            assert len(host.tools("every")) == 13


async def test_server_everything_restart_loses_the_session_and_it_is_renewed() -> None:
    """After a restart server-everything answers the old session id with HTTP 400 (a JSON-RPC
    error without an id); gantry re-initialises and the next call works. The restart blocks
    the event loop, so the call is the first to meet the lost session."""
    with everything_http() as srv:
        async with running(toml_remote("every", srv.url)) as host:
            server = host.servers["every"]
            first = server.session
            assert not (await host.call("every", "echo", {"message": "one"})).error
            srv.restart()
            result = await host.call("every", "echo", {"message": "two"})
            assert (result.text, result.error) == ("Echo: two", False)
            assert server.session is not first and server.state == "up"
            assert server.breaker.failures == 0 or server.breaker.state == "closed"


async def test_a_call_the_server_refused_for_its_lost_session_is_sent_again_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """The request was refused before the server read it: it provably never ran, so it is
    sent again on the new session, and runs exactly once."""
    counter = tmp_path / "count.txt"
    with fixture_http() as srv:
        # A session to lose is the 2025 handshake era's (2026 connections are stateless).
        async with running(toml_remote("fx", srv.url) + 'protocol = "2025"\n') as host:
            server = host.servers["fx"]
            first = server.session
            assert (await host.call("fx", "forget", {})).text == "forgotten"
            with caplog.at_level(logging.INFO, logger="gantry.mcp"):
                result = await host.call("fx", "count", {"path": str(counter)})
            assert (result.text, result.error) == ("1", False)
            assert counter.read_text() == "ran\n"
            assert server.session is not first
            assert any(r.getMessage() == "mcp call sent again: it never reached the server"
                       for r in caplog.records)


async def test_a_server_dying_mid_call_fails_the_call_which_is_not_replayed(
    tmp_path: Path,
) -> None:
    counter = tmp_path / "died.txt"
    with fixture_http() as srv:
        async with running(toml_remote("fx", srv.url)) as host:
            server = host.servers["fx"]
            with anyio.fail_after(60):
                result = await host.call("fx", "die", {"path": str(counter)})
            assert result.error
            assert "rejected" not in result.text, result.text
            assert counter.read_text() == "ran\n"  # it ran once, and was not sent again
            srv.start()  # the process is gone; bring it back on the same port
            await until(lambda: server.state == "up" and server.restarts >= 1,
                        what="a reconnect")
            assert (await host.call("fx", "echo", {"text": "back"})).text == "back"
            assert counter.read_text() == "ran\n"


def reached(calls: Path) -> list[str]:
    """The echo messages of the tools/calls that reached the server (node_calls.cjs)."""
    if not calls.exists():
        return []
    rows = [json.loads(line) for line in calls.read_text().splitlines()]
    return [str(r["arguments"]["message"]) for r in rows if r["name"] == "echo"]


async def test_a_flapping_remote_is_used_as_soon_as_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 35 #9: server-everything killed (-9, by PID) and started again on its port, down
    0.2 to 6 s each time. While it is down a call is answered at once that the server is not
    reachable (not "did not answer within N s") and charges the breaker nothing; the first
    call after it is back succeeds; the reconnect backoff stays short; no call ran twice and
    none sent while it was down reached it later."""
    calls = tmp_path / "calls.jsonl"
    with everything_http(calls=calls) as srv, caplog.at_level(logging.INFO, "gantry.mcp"):
        async with running(toml_remote("every", srv.url, timeout=5)) as host:
            server = host.servers["every"]
            for n, down in enumerate([0.2, 6.0, 1.0, 3.0, 0.5]):
                srv.kill()
                for k, pause in enumerate([0.0, down / 2]):
                    await anyio.sleep(pause)
                    started = time.monotonic()
                    result = await host.call("every", "echo", {"message": f"down {n}.{k}"})
                    assert result.error and "not reachable" in result.text, result.text
                    assert "did not answer" not in result.text
                    assert time.monotonic() - started < 4.0  # answered, not left to time out
                await anyio.sleep(down / 2)
                await anyio.to_thread.run_sync(srv.start)
                with anyio.fail_after(10):
                    result = await host.call("every", "echo", {"message": f"up {n}"})
                assert (result.text, result.error) == (f"Echo: up {n}", False)
            assert server.breaker.failures == 0 and server.breaker.state == "closed"
            assert server.status().startswith("every: up, "), server.status()
    assert reached(calls) == [f"up {n}" for n in range(5)]
    delays = [r.__dict__["in_seconds"] for r in caplog.records
              if r.getMessage() == "mcp server down; restarting"]
    assert delays and max(delays) <= supervise.REMOTE_BACKOFF_CAP, delays


async def test_progress_keeps_a_call_alive_past_its_timeout_over_http() -> None:
    with fixture_http() as srv:
        async with running(toml_remote("fx", srv.url, timeout=2)) as host:
            # 8 steps 0.5 s apart: 4 s in all, twice timeout_seconds, never 2 s of silence.
            result = await host.call("fx", "slow", {"steps": 8, "every": 0.5})
            assert (result.text, result.error) == ("done after 8 steps", False)


async def test_progress_keeps_a_stdio_call_alive_too() -> None:
    """server-everything's long-running operation reports progress at each step."""
    manifest = toml_server("every", everything_command(), timeout=2)
    async with running(manifest) as host:
        result = await host.call("every", "trigger-long-running-operation",
                                 {"duration": 4, "steps": 8})
        assert not result.error, result.text
        assert "Long running operation completed" in result.text


async def test_a_call_reporting_progress_forever_is_cut_at_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(callpath, "PROGRESS_CAP_FACTOR", 4)
    with fixture_http() as srv:
        async with running(toml_remote("fx", srv.url, timeout=0.5)) as host:
            assert callpath.call_cap(0.5) == 2.0
            result = await host.call("fx", "forever", {"every": 0.1})
            assert result.error
            assert "kept reporting progress" in result.text and "2 s" in result.text
            assert (await host.call("fx", "echo", {"text": "still up"})).text == "still up"


async def test_without_progress_the_timeout_is_timeout_seconds() -> None:
    manifest = toml_server("every", everything_command(), timeout=1)
    async with running(manifest) as host:
        # steps=1: the only progress comes at the end, after 3 s of silence.
        result = await host.call("every", "trigger-long-running-operation",
                                 {"duration": 3, "steps": 1})
        assert result.error and "did not answer within 1 s" in result.text


async def test_headers_are_sent_and_never_shown(tmp_path: Path) -> None:
    headers = {"Authorization": "Bearer ${MCP_TOKEN}", "X-Team": "blue"}
    stream = io.StringIO()
    logsetup.setup("debug", [], stream=stream)
    try:
        with fixture_http() as srv:
            manifest = toml_remote("fx", srv.url, headers=headers)
            async with running(manifest, path=tmp_path / "mcp.toml") as host:
                got = await host.call("fx", "header", {"name": "x-team"})
                assert got.text == "blue"
                auth = await host.call("fx", "header", {"name": "authorization"})
                assert auth.text == "Bearer " + ENV["MCP_TOKEN"]  # it reached the server
                status = "\n".join(host.status_lines())
                spec_text = repr(host.servers["fx"].spec)
    finally:
        logging.getLogger().removeHandler(next(h for h in logging.getLogger().handlers
                                               if h.get_name() == "gantry"))
    for text in (stream.getvalue(), status, spec_text):
        assert ENV["MCP_TOKEN"] not in text
    assert "[REDACTED]" in spec_text


async def test_a_server_quoting_the_token_back_never_gets_it_shown(tmp_path: Path) -> None:
    """A careless server answers 401 with our Authorization header in its error: the start
    failure (boot's and check's message) shows it redacted."""
    from gantry.log import Redactor

    with fixture_http(env={"FIXTURE_LEAK": "1"}) as srv:
        path = tmp_path / "mcp.toml"
        path.write_text(toml_remote("fx", srv.url, headers={"Authorization":
                                                            "Bearer ${MCP_TOKEN}"}))
        specs = load(str(path), ENV)
        host = Host(specs, Registry(), ENV)
        async with anyio.create_task_group() as tg:
            with pytest.raises(ServerStartError) as info:
                await host.start(tg)
    raw = str(info.value)
    assert "could not connect" in raw and "401" in raw and "refused" in raw, raw
    shown = Redactor().text(raw)  # what boot and check print (their redactors share it)
    assert ENV["MCP_TOKEN"] not in shown


async def test_an_optional_server_that_is_down_does_not_stop_boot_and_comes_up_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    srv = HttpServer([sys.executable, "-m", "tests.fakes.mcp_http_fixture", "{port}"], "/mcp",
                     port=port)
    with caplog.at_level(logging.DEBUG, logger="gantry.mcp"):
        async with running(toml_remote("opt", url, required=False)) as host:
            server = host.servers["opt"]
            assert server.session is None
            line = host.status_lines()[0]
            assert "optional, last error:" in line and "could not connect" in line, line
            call = await host.call("opt", "echo", {"text": "x"})
            assert call.error
            srv.start()
            try:
                await until(lambda: server.state == "up", timeout=120, what="the optional server")
                assert (await host.call("opt", "echo", {"text": "late"})).text == "late"
                assert "last error" not in host.status_lines()[0]
            finally:
                srv.stop()
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING
              and getattr(r, "server", None) == "opt"]
    assert [r.getMessage() for r in warned] == [
        "optional mcp server unavailable; gantry runs without it and keeps retrying"]


async def test_an_optional_remote_that_is_down_for_a_while_is_back_within_seconds() -> None:
    """Issue 36 #17: down long enough for 5 failed tries, an optional remote server still
    shows as restarting (not "open circuit": failing to reach it charges no breaker), and
    its tools are back within seconds of the server (the tries stay at most 2 s apart)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    srv = HttpServer([sys.executable, "-m", "tests.fakes.mcp_http_fixture", "{port}"], "/mcp",
                     port=port)
    async with running(toml_remote("opt", url, required=False)) as host:
        server = host.servers["opt"]
        await until(lambda: server.restarts >= 6, timeout=30, what="6 failed tries")
        line = host.status_lines()[0]
        assert line.startswith("opt: restarting (optional, last error:"), line
        assert server.breaker.state == "closed"
        await anyio.to_thread.run_sync(srv.start)
        try:
            back = time.monotonic()
            await until(lambda: host.tools("opt"), timeout=60, what="its tools")
            assert time.monotonic() - back < 5.0  # within the 2 s between tries, and then some
            assert host.status_lines()[0].startswith("opt: up, ")
        finally:
            srv.stop()


async def test_a_required_server_that_is_down_fails_boot_naming_it() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    host = Host(parse(toml_remote("req", url), ENV), Registry(), ENV)
    async with anyio.create_task_group() as tg:
        with pytest.raises(ServerStartError) as info:
            await host.start(tg)
    text = str(info.value)
    assert text.startswith(f"MCP server 'req' ({url}) could not connect:"), text
    assert "ConnectError" in text


async def test_https_trusts_the_ca_bundle_gantry_trusts(tmp_path: Path) -> None:
    from tests.fakes.pki import make_pki

    pki = make_pki(tmp_path)
    ca = tmp_path / "ca.pem"
    ca.write_text(pki.ca_pem)
    with fixture_http(env={"FIXTURE_TLS_CERT": str(pki.cert_file),
                           "FIXTURE_TLS_KEY": str(pki.key_file)}) as srv:
        url = srv.url.replace("http://", "https://")
        trusted = {**ENV, "SSL_CERT_FILE": str(ca)}
        async with running(toml_remote("tls", url), trusted) as host:
            assert (await host.call("tls", "echo", {"text": "over tls"})).text == "over tls"
        host = Host(parse(toml_remote("tls", url), ENV), Registry(), ENV)  # certifi only
        async with anyio.create_task_group() as tg:
            with pytest.raises(ServerStartError) as info:
                await host.start(tg)
    text = str(info.value)
    assert "CERTIFICATE_VERIFY_FAILED" in text and "add its CA to the bundle" in text, text


async def test_proxy_variables_are_obeyed_and_no_proxy_bypasses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HTTP_PROXY/NO_PROXY as the model client reads them (the process environment)."""
    seen: list[str] = []

    async def proxy(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            head = await stream.receive()
            seen.append(head.split(b"\r\n", 1)[0].decode())
            await stream.send(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n"
                              b"connection: close\r\n\r\n")

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    with fixture_http() as srv:
        for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY",
                     "no_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        async with anyio.create_task_group() as outer:
            outer.start_soon(listener.serve, proxy)
            host = Host(parse(toml_remote("px", srv.url), ENV), Registry(), ENV)
            async with anyio.create_task_group() as tg:
                with pytest.raises(ServerStartError) as info:
                    await host.start(tg)
            assert "HTTP 502" in str(info.value)
            assert seen and seen[0] == f"POST {srv.url} HTTP/1.1"
            proxied = len(seen)  # server/discover, then the fallback's initialize
            monkeypatch.setenv("NO_PROXY", "127.0.0.1")
            async with running(toml_remote("px", srv.url)) as direct:
                assert (await direct.call("px", "echo", {"text": "direct"})).text == "direct"
            assert len(seen) == proxied
            outer.cancel_scope.cancel()


async def test_a_call_waiting_on_a_person_is_off_the_clock() -> None:
    """Holding the deadlines of a server's calls in flight (what an elicitation relayed to
    the user does): 3 s of silence pass a 1 s timeout."""
    manifest = toml_server("every", everything_command(), timeout=1)
    async with running(manifest) as host:
        server = host.servers["every"]
        done: list[object] = []

        async def call() -> None:
            done.append(await host.call("every", "trigger-long-running-operation",
                                        {"duration": 3, "steps": 1}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await until(lambda: server.inflight.calls, what="the call in flight")
            with held([d for _, d in server.inflight.calls.values()]):
                await until(lambda: done, what="the call's answer")
        (result,) = done
        assert not result.error, result.text  # type: ignore[attr-defined]
        assert not server.inflight.calls


async def test_an_optional_child_that_cannot_start_does_not_stop_boot() -> None:
    manifest = toml_server("broken", ["/bin/false"]) + "required = false\n"
    async with running(manifest) as host:
        server = host.servers["broken"]
        assert server.session is None
        line = host.status_lines()[0]
        assert line.startswith("broken: restarting (optional, last error: MCP server 'broken'")
        assert "it exited with code 1" in line, line
