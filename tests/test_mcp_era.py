"""Protocol eras (gantry/mcp/era.py, listen.py; issue 42 items 1 and 3) against real servers:
the Python SDK's own server, which serves both eras (2026-07-28 stateless and the 2025
handshake), over stdio (tests/fakes/mcp_fixture.py) and Streamable HTTP
(tests/fakes/mcp_http_fixture.py), and npm server-everything in whatever era its version
speaks. Broken calls: the servers' own counters show how often a tool really ran.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from gantry.mcp.host import Host, ServerStartError
from gantry.mcp.manifest import ManifestError, parse
from gantry.tools import Registry
from tests.fakes.mcp_remote import fixture_http, toml_remote
from tests.fakes.mcp_servers import (
    ROOT,
    everything_command,
    python_fixture_toml,
    toml_server,
)
from tests.test_mcp_host import BASE_ENV, running, until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MODERN = "2026-07-28"


def pinned(table: str, protocol: str) -> str:
    return table + f"protocol = {json.dumps(protocol)}\n"


def runs(path: Path) -> int:
    """How many times the fixture's tool ran (its own counter file)."""
    return len(path.read_text().splitlines()) if path.exists() else 0


# ------------------------------------------------------------------------ the manifest key


def test_protocol_key_defaults_to_auto_and_is_validated() -> None:
    table = toml_server("a", ["/bin/true"])
    assert parse(table, BASE_ENV)[0].protocol == "auto"
    assert parse(pinned(table, "2025"), BASE_ENV)[0].protocol == "2025"
    with pytest.raises(ManifestError) as bad:
        parse(pinned(table, "2024"), BASE_ENV)
    assert ("server 'a': protocol must be one of 'auto', '2026', '2025' (got '2024')"
            in str(bad.value))
    sse = toml_remote("r", "https://mcp.example.com/sse", transport="sse")
    with pytest.raises(ManifestError) as bad:
        parse(pinned(sse, "2026"), BASE_ENV)
    assert "needs transport = \"streamable-http\"" in str(bad.value)


# ------------------------------------------------------------------------ item 1: which era


async def test_sdk_server_over_stdio_speaks_2026_unless_pinned_to_2025() -> None:
    async with running(python_fixture_toml()) as (host, reg):
        server = host.servers["fx"]
        assert server.protocol == MODERN
        assert server.session.initialize_result is None  # no handshake happened
        assert (await reg.call("fx__echo", '{"text": "new era"}')).text == "new era"
        assert f"0 errors, MCP {MODERN} (stateless), 0 restarts" in host.status_lines()[0]
        assert server.instructions == "A fixture server for gantry's tests."
    async with running(pinned(python_fixture_toml(), "2025")) as (host, reg):
        server = host.servers["fx"]
        assert server.protocol == "2025-11-25"
        assert server.session.initialize_result is not None
        assert (await reg.call("fx__echo", '{"text": "old era"}')).text == "old era"
        assert "0 errors, MCP 2025-11-25 (handshake), 0 restarts" in host.status_lines()[0]


async def test_server_everything_falls_back_to_the_handshake_and_refuses_a_2026_pin() -> None:
    """npm server-everything (its SDK has no server/discover): auto falls back, "2026" is a
    clear start failure naming the key."""
    argv = everything_command()
    async with running(toml_server("every", argv)) as (host, _reg):
        server = host.servers["every"]
        assert server.protocol == "2025-11-25"
        result = await host.call("every", "echo", {"message": "fallback"})
        assert (result.text, result.error) == ("Echo: fallback", False)
        assert "(handshake)" in host.status_lines()[0]
    host = Host(parse(pinned(toml_server("every", argv), "2026"), BASE_ENV), Registry(),
                BASE_ENV)
    async with anyio.create_task_group() as tg:
        with pytest.raises(ServerStartError) as failed:
            await host.start(tg)
        tg.cancel_scope.cancel()
    assert "does not speak the 2026-07-28 protocol that protocol = \"2026\" pins" in str(
        failed.value)


async def test_sdk_server_over_http_is_stateless_at_2026_and_has_a_session_at_2025() -> None:
    with fixture_http() as srv:
        async with running(toml_remote("web", srv.url)) as (host, _reg):
            assert host.servers["web"].protocol == MODERN
            sid = await host.call("web", "header", {"name": "mcp-session-id"})
            version = await host.call("web", "header", {"name": "mcp-protocol-version"})
            assert (sid.text, version.text) == ("(no output)", MODERN)  # no session id, ever
        async with running(pinned(toml_remote("web", srv.url), "2025")) as (host, _reg):
            assert host.servers["web"].protocol == "2025-11-25"
            sid = await host.call("web", "header", {"name": "mcp-session-id"})
            assert sid.text and not sid.error


# ------------------------------------------------------------------- item 3: broken calls


async def test_stdio_broken_call_is_reissued_only_for_readonly_or_idempotent_tools(
    tmp_path: Path,
) -> None:
    """Each tool runs, then the server dies before answering (a 2026 stream cannot be
    resumed). `tally` is reported broken and ran once; `peek` (readOnlyHint) and `settle`
    (idempotentHint) are sent again to the restarted server and answer."""
    async with running(python_fixture_toml(timeout=30)) as (host, _reg):
        server = host.servers["fx"]
        assert server.protocol == MODERN
        tally = tmp_path / "tally"
        first = server.session
        result = await host.call("fx", "tally", {"path": str(tally)})
        assert result.error and "it may or may not have run" in result.text
        assert "not sent again" in result.text
        await until(lambda: server.session not in (None, first), what="the restarted server")
        assert runs(tally) == 1  # the server's own counter: one execution, no replay
        for tool in ("peek", "settle"):
            path = tmp_path / tool
            result = await host.call("fx", tool, {"path": str(path)})
            assert (result.text, result.error) == ("ran 2 times", False), tool
            assert runs(path) == 2


async def test_stdio_broken_call_at_2025_is_not_reissued(tmp_path: Path) -> None:
    async with running(pinned(python_fixture_toml(timeout=30), "2025")) as (host, _reg):
        path = tmp_path / "peek"
        result = await host.call("fx", "peek", {"path": str(path)})
        assert result.error and "stopped while running" in result.text
        assert runs(path) == 1


async def test_http_cut_stream_reissues_readonly_and_reports_the_rest_broken(
    tmp_path: Path,
) -> None:
    """The server stays up; the HTTP response carrying the first answer is cut."""
    with fixture_http() as srv:
        async with running(toml_remote("web", srv.url, timeout=30)) as (host, _reg):
            server = host.servers["web"]
            tally = tmp_path / "tally"
            first = server.session
            result = await host.call("web", "tally", {"path": str(tally)})
            assert result.error and "it may or may not have run" in result.text
            assert runs(tally) == 1
            # The SDK's transport dies with the cut response: gantry connects again.
            await until(lambda: server.session not in (None, first), what="a new connection")
            peek = tmp_path / "peek"
            result = await host.call("web", "peek", {"path": str(peek)})
            assert (result.text, result.error) == ("ran 2 times", False)
            assert runs(peek) == 2
            again = await host.call("web", "tally", {"path": str(tally)})
            assert (again.text, again.error) == ("ran 2 times", False)


async def test_a_call_to_an_unreachable_2026_server_is_not_sent(tmp_path: Path) -> None:
    """Provably never sent (connection refused): said so, nothing ran."""
    with fixture_http() as srv:
        async with running(toml_remote("web", srv.url, timeout=5)) as (host, _reg):
            assert host.servers["web"].protocol == MODERN
            await anyio.to_thread.run_sync(srv.stop)
            path = tmp_path / "tally"
            result = await host.call("web", "tally", {"path": str(path)})
            assert result.error and "the call was not sent" in result.text
            assert runs(path) == 0


# -------------------------------------------------- item 3: subscriptions/listen (2026)


async def test_listen_carries_tools_list_changed_at_2026() -> None:
    async with running(python_fixture_toml()) as (host, reg):
        server = host.servers["fx"]
        await until(lambda: server.supervisor.listener.open, what="the listen stream")
        assert (await reg.call("fx__grow", "{}")).text == "grown"
        await until(lambda: "fx__extra" in reg.names(), what="tools/list_changed via listen")


async def test_watch_push_path_rides_listen_at_2026(tmp_path: Path) -> None:
    """A subscribed resource's updates arrive on the subscriptions/listen stream."""
    feed = tmp_path / "feed.jsonl"
    feed.write_text("")
    table = toml_server("feed", [sys.executable, "-m", "tests.fakes.mcp_feed"],
                        env={"FEED_FILE": str(feed), "FEED_SUBSCRIBE": "1"}, cwd=str(ROOT))
    heard: list[tuple[str, str]] = []
    async with running(table) as (host, _reg):
        host.on_resource_updated(lambda server, uri: heard.append((server, uri)))
        server = host.servers["feed"]
        assert server.protocol == MODERN and host.can_subscribe("feed")
        await host.subscribe("feed", "feed://items")
        assert server.supervisor.listener.open
        assert not (tmp_path / "feed.jsonl.subscribes").exists()  # no resources/subscribe
        feed.write_text('{"id": 1}\n')
        await until(lambda: ("feed", "feed://items") in heard, what="the update via listen")
        # The server dies: the new session's listen stream names the URI again, and the
        # resource is read again once (no replay of what changed meanwhile).
        heard.clear()
        first = server.session
        server.link.process.kill()
        await until(lambda: server.session not in (None, first), what="the restart")
        await until(lambda: heard == [("feed", "feed://items")], what="the re-read")
        await until(lambda: server.supervisor.listener.open, what="the new listen stream")
        heard.clear()
        feed.write_text('{"id": 1}\n{"id": 2}\n')
        await until(lambda: ("feed", "feed://items") in heard, what="an update after it")


async def test_a_timed_out_call_at_2026_is_probed_without_ping() -> None:
    """2026 has no `ping` (the SDK server answers it HTTP 404): the hang probe after a
    timeout asks server/discover, so a live server is neither restarted nor left with an
    HTTP error as its last trouble (which "the call was not sent" messages would quote)."""
    with fixture_http() as srv:
        async with running(toml_remote("web", srv.url, timeout=1)) as (host, _reg):
            server = host.servers["web"]
            result = await host.call("web", "slow", {"steps": 1, "every": 4})
            assert result.error and "did not answer within 1 s" in result.text
            await until(lambda: not server._probe, what="the probe")
            await anyio.sleep(1.0)
            assert (server.state, server.restarts) == ("up", 0)
            assert server.link is not None and "HTTP 404" not in server.link.tail()
            assert (await host.call("web", "echo", {"text": "alive"})).text == "alive"
