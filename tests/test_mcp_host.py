"""The MCP host against real processes: the static C fixture, the SDK fixture, and servers
written by others (PyPI mcp-server-time, npm server-everything).

Every test runs its host inside a task group it cancels at the end, so every child is stopped
by the host itself; the assertions on live children and fds check exactly that.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from gantry.mcp import supervise
from gantry.mcp.breaker import Breaker
from gantry.mcp.host import Host, ServerStartError
from gantry.mcp.manifest import parse
from gantry.tools import Registry
from tests.fakes.mcp_servers import (
    alive,
    everything_command,
    live_children,
    open_fds,
    python_fixture_toml,
    raw_fixture_toml,
    static_fixture,
    time_command,
    toml_server,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SECRET = "sk-host-test-0123456789abcdef"
BASE_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "LLM_API_KEY": SECRET,
    "TELEGRAM_BOT_TOKEN": "12345:" + "t" * 35,
    "GRANTED": "granted-value",
}
BOOT = 120.0  # an SDK server takes ~10 s to import mcp on a loaded 2-core machine


@asynccontextmanager
async def running(
    manifest: str, environ: Mapping[str, str] = BASE_ENV, max_chars: int = 16_000,
    hidden: Mapping[str, set[str]] | None = None, registry: Registry | None = None,
) -> AsyncIterator[tuple[Host, Registry]]:
    registry = registry or Registry(result_max_chars=max_chars)
    host = Host(parse(manifest, environ), registry, environ, hidden)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(BOOT):
            await host.start(tg)
        try:
            yield host, registry
        finally:
            tg.cancel_scope.cancel()


async def until(predicate: object, timeout: float = 60.0, what: str = "condition") -> None:
    """Poll `predicate` until true (a ceiling, not a timing: the MCP tests share it)."""
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await anyio.sleep(0.05)


class _NoTasks:
    """A task group stand-in whose start() runs the server task in a group of its own."""

    def __init__(self) -> None:
        self.groups: list[anyio.abc.TaskGroup] = []

    async def start(self, fn: object) -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(fn)  # type: ignore[arg-type]
            tg.cancel_scope.cancel()


def static_toml(name: str = "st", **kw: object) -> str:
    return toml_server(name, [str(static_fixture())], **kw)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- static fixture


async def test_tools_call_validation_and_env_isolation() -> None:
    async with running(static_toml(env={"GRANTED": "${GRANTED}", "EXTRA": "x"})) as (host, reg):
        assert reg.names() == ["st__crash", "st__echo", "st__env", "st__pid"]
        assert host.instructions("st") == "A static fixture server."
        assert (await reg.call("st__echo", '{"text": "hello"}')).text == "hello"
        bad = await reg.call("st__echo", '{"text": 5}')
        assert bad.error and "at text" in bad.text and "not of type 'string'" in bad.text
        missing = await reg.call("st__echo", "{}")
        assert missing.error and "'text' is a required property" in missing.text

        async def env(name: str) -> str:
            return (await reg.call("st__env", json.dumps({"name": name}))).text

        assert await env("LLM_API_KEY") == "<unset>"
        assert await env("TELEGRAM_BOT_TOKEN") == "<unset>"
        assert await env("GRANTED") == "granted-value"
        assert await env("EXTRA") == "x"
        assert await env("LANG") == "C.UTF-8"
        assert await env("PATH") == BASE_ENV["PATH"]
        direct = await host.call("st", "echo", {"text": "via host"})
        assert direct.text == "via host" and not direct.error
        assert host.tools("st")[0].name in {"crash", "echo", "env", "pid"}
        status = host.status_lines()[0]
        assert status.startswith("st: up, 4 tools,")


async def test_a_crash_fails_the_call_at_once_and_the_server_comes_back() -> None:
    async with running(static_toml(timeout=30)) as (host, reg):
        pid = (await reg.call("st__pid", "{}")).text
        started = time.monotonic()
        crashed = await reg.call("st__crash", "{}")
        assert time.monotonic() - started < 5  # not the 30 s timeout
        assert crashed.error and "stopped while running 'crash'" in crashed.text
        server = host.servers["st"]
        await until(lambda: server.state == "up" and server.restarts == 1, what="a restart")
        again = await reg.call("st__pid", "{}")
        assert not again.error and again.text != pid
        assert "1 restarts" in host.status_lines()[0]


async def test_hidden_tools_stay_off_the_registry_across_restarts_but_answer_host_calls(
) -> None:
    """The memory backend's protocol tools: callable by gantry, never offered to the model."""
    async with running(static_toml(), hidden={"st": {"echo", "pid"}, "other": {"crash"}}) as (
        host, reg
    ):
        assert reg.names() == ["st__crash", "st__env"]
        assert sorted(t.name for t in host.tools("st")) == ["crash", "echo", "env", "pid"]
        assert (await host.call("st", "echo", {"text": "still here"})).text == "still here"
        assert (await reg.call("st__echo", '{"text": "x"}')).error
        assert host.status_lines()[0].startswith("st: up, 4 tools (2 for memory only), 1 calls")
        await reg.call("st__crash", "{}")
        server = host.servers["st"]
        await until(lambda: server.state == "up" and server.restarts == 1, what="a restart")
        assert reg.names() == ["st__crash", "st__env"]


def builtin_registry(tmp_path: Path) -> Registry:
    """A registry holding gantry's real memory_* and cron_* tools, as `gantry run` has."""
    from gantry import db
    from gantry.cron.store import CronStore
    from gantry.cron.tools import CronTools
    from gantry.memory.store import BuiltinMemory, MemoryStore
    from gantry.memory.tools import SOURCE, memory_tools

    conn = db.connect(tmp_path / "g.db")
    registry = Registry()
    registry.replace_source(SOURCE, memory_tools(BuiltinMemory(MemoryStore(conn))))
    for tool in CronTools(CronStore(conn), "UTC", 5, time.time).tools():
        registry.register(tool)
    return registry


BUILTINS = ["cron_cancel", "cron_list", "cron_schedule", "memory_forget", "memory_recall",
            "memory_store"]


async def test_servers_named_memory_and_cron_never_touch_the_builtin_tools(
    tmp_path: Path,
) -> None:
    """Issue 24 #6: a server's source was its bare name, the built-ins' too ("memory",
    "cron"): registering a server named cron removed cron_*, restarting one named memory
    removed memory_*. MCP servers now have a namespace of their own."""
    registry = builtin_registry(tmp_path)
    async with running(static_toml("memory") + static_toml("cron"), registry=registry) as (
        host, reg
    ):
        mcp = ["cron__crash", "cron__echo", "cron__env", "cron__pid",
               "memory__crash", "memory__echo", "memory__env", "memory__pid"]
        assert reg.names() == sorted(BUILTINS + mcp)
        await reg.call("memory__crash", "{}")
        server = host.servers["memory"]
        await until(lambda: server.state == "up" and server.restarts == 1, what="a restart")
        assert reg.names() == sorted(BUILTINS + mcp)
        assert [t.name for t in reg.tools() if t.builtin] == BUILTINS


async def test_a_ref_cycle_in_an_input_schema_is_warned_once_and_calls_go_through(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 24 #11: the cycle failed every call with RecursionError and a traceback."""
    cyclic = {"type": "object", "properties": {"text": {"$ref": "#/$defs/a"}},
              "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}
    tools = {"tools": [{"name": "echo", "description": "Echo.", "inputSchema": cyclic}]}
    caplog.set_level(logging.INFO)
    async with running(static_toml(env={"STATIC_TOOLS": json.dumps(tools)})) as (_host, reg):
        assert reg.names() == ["st__echo"]
        for word in ("one", "two", "three"):
            result = await reg.call("st__echo", json.dumps({"text": word}))
            assert (result.text, result.error) == (word, False)
    warned = [r for r in caplog.records
              if r.getMessage() == "tool input schema is unusable; arguments not validated"]
    assert len(warned) == 1 and getattr(warned[0], "tool", "") == "st__echo"
    assert "RecursionError" in getattr(warned[0], "error", "")
    assert not [r for r in caplog.records if r.exc_info or r.getMessage() == "tool raised"]


async def test_100_crash_restart_cycles_leave_one_child_and_no_fd_growth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(supervise, "BACKOFF_BASE", 0.001)
    monkeypatch.setattr(supervise, "BACKOFF_CAP", 0.005)
    async with running(static_toml()) as (host, reg):
        server = host.servers["st"]
        server.breaker = Breaker(threshold=10**6)
        fds = 0
        for cycle in range(101):
            if cycle == 1:
                gc.collect()  # earlier tests' unreferenced sockets close now, not mid-count
                fds = open_fds()  # after one full cycle: lazily opened fds exist by now
            await reg.call("st__crash", "{}")
            await until(lambda c=cycle: server.state == "up" and server.restarts == c + 1,
                        what=f"restart {cycle + 1}")
        assert (await reg.call("st__echo", '{"text": "still here"}')).text == "still here"
        assert len(live_children()) == 1
        gc.collect()
        assert open_fds() <= fds  # growth is the leak; fewer is an earlier test's late close
    assert live_children() == []


async def test_breaker_opens_after_repeated_failures_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(supervise, "BACKOFF_BASE", 0.001)
    monkeypatch.setattr(supervise, "BACKOFF_CAP", 0.005)
    async with running(static_toml()) as (host, reg):
        server = host.servers["st"]
        server.breaker = Breaker(threshold=3, cooldown=1.0)
        for n in range(3):
            await reg.call("st__crash", "{}")
            if n < 2:
                await until(lambda n=n: server.state == "up" and server.restarts == n + 1,
                            what="a restart")
        refused = await reg.call("st__echo", '{"text": "x"}')
        assert refused.error and "'st' is unavailable; retry in about" in refused.text
        assert "open circuit" in host.status_lines()[0]
        await until(lambda: server.state == "up" and server.restarts == 3, timeout=30,
                    what="the half-open restart")
        assert (await reg.call("st__echo", '{"text": "back"}')).text == "back"
        assert server.breaker.state == "closed"


async def test_boot_failure_names_the_server_and_its_stderr_once_and_whole() -> None:
    long_line = "config error: " + "x" * 400 + " (end)"
    manifest = static_toml() + toml_server(
        "broken", ["sh", "-c", f"echo '{long_line}' >&2; echo 'cannot open /data/x.db' >&2; "
                               "exit 3"])
    registry = Registry()
    host = Host(parse(manifest, BASE_ENV), registry, BASE_ENV)
    with pytest.raises(ServerStartError) as info:
        with anyio.fail_after(BOOT):
            await host.start(_NoTasks())  # type: ignore[arg-type]
    text = str(info.value)
    assert text.startswith("MCP server 'broken' (")
    assert "could not start: it exited with code 3" in text
    assert text.count("could not start") == 1 and text.count("last lines of its stderr") == 1
    assert text.count("cannot open /data/x.db") == 1
    assert long_line in text
    assert "'st'" not in text
    assert live_children() == []


# ----------------------------------------------------------------------------- raw fixture
# The server is given an hour per call: whatever answers here answers at once, and the
# fail_after bounds (a bound, not a timing assert) turn a hang back into a failing test.
HOUR = 3600


async def holding(reg: Registry, n: int) -> None:
    """Until the raw server holds `n` calls (it answers `held` after reading what came first)."""
    for _ in range(200):
        if (await reg.call("raw__held", "{}")).text == str(n):
            return
        await anyio.sleep(0.05)
    pytest.fail(f"the server never held {n} calls")


async def test_lone_surrogates_and_bad_bytes_in_replies_decode_leniently_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gantry.mcp")
    async with running(raw_fixture_toml(timeout=HOUR)) as (host, reg):
        with anyio.fail_after(60):
            cut = await reg.call("raw__surrogate", "{}")
            bad = await reg.call("raw__badbyte", "{}")
            again = await reg.call("raw__surrogate", "{}")
        assert (cut.text, cut.error) == ("cut here: \ufffd", False)
        assert (bad.text, bad.error) == ("cut here: \ufffd", False)
        assert again.text == "cut here: \ufffd"
        server = host.servers["raw"]
        assert server.breaker.failures == 0 and server.restarts == 0
        assert host.telemetry()["raw/surrogate"]["timeouts"] == 0
    warnings = [r for r in caplog.records if "not valid Unicode" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert getattr(warnings[0], "server", None) == "raw"


async def test_a_reply_that_cannot_be_decoded_fails_its_call_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gantry.mcp")
    async with running(raw_fixture_toml(timeout=HOUR)) as (host, reg):
        with anyio.fail_after(60):
            cut = await reg.call("raw__truncated", "{}")
            shapeless = await reg.call("raw__shapeless", "{}")
            noise = await reg.call("raw__noise", "{}")
            echo = await reg.call("raw__echo", '{"text": "still fine"}')
        assert cut.error and cut.text.endswith(
            "MCP server 'raw' sent an invalid message in reply to 'truncated'")
        assert shapeless.error and "invalid message in reply to 'shapeless'" in shapeless.text
        assert (noise.text, noise.error) == ("ok", False)  # a stray line is dropped, not fatal
        assert echo.text == "still fine"
        server = host.servers["raw"]
        assert server.breaker.failures == 0 and server.restarts == 0
        assert host.telemetry()["raw/truncated"]["timeouts"] == 0
    invalid = [r for r in caplog.records if "sent an invalid message" in r.getMessage()]
    assert len(invalid) == 1, [r.getMessage() for r in invalid]
    stray = [r for r in caplog.records if "not JSON-RPC" in r.getMessage()]
    assert len(stray) == 1


@pytest.mark.parametrize("spoiler", ["surrogate", "badbyte"])
async def test_boot_survives_a_tools_list_that_is_not_valid_unicode(spoiler: str) -> None:
    with anyio.fail_after(60):
        async with running(raw_fixture_toml(env={"RAW_LIST": spoiler})) as (host, reg):
            echo = next(t for t in host.tools("raw") if t.name == "echo")
            assert echo.description == "the echo tool\ufffd"
            assert (await reg.call("raw__echo", '{"text": "up"}')).text == "up"


async def test_a_lone_surrogate_in_arguments_fails_that_call_only_before_writing() -> None:
    async with running(raw_fixture_toml(timeout=HOUR)) as (host, reg):
        server = host.servers["raw"]
        held: list[str] = []
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:

                async def hold() -> None:
                    held.append((await reg.call("raw__hold", "{}")).text)

                tg.start_soon(hold)
                await holding(reg, 1)
                before = int((await reg.call("raw__calls", "{}")).text)
                torn = await reg.call("raw__echo", '{"text": "half an emoji: \\ud83d"}')
                assert torn.error and "invalid arguments: at text: " in torn.text
                assert "lone surrogate" in torn.text
                nested = await host.call("raw", "echo", {"text": ["ok", {"k": "\udc00"}]})
                assert nested.error and "at text.1.k:" in nested.text
                after = int((await reg.call("raw__calls", "{}")).text)
                assert after == before + 1  # this `calls` only: neither echo was written
                assert (await reg.call("raw__release", "{}")).text == "1"
        assert held == ["released"]
        assert server.restarts == 0 and server.breaker.failures == 0


async def test_the_transport_refuses_an_unencodable_request_without_dying() -> None:
    """Below Server.call's check: a request the writer cannot encode fails at once, alone."""
    from mcp.shared.exceptions import MCPError

    async with running(raw_fixture_toml(timeout=HOUR)) as (host, reg):
        server = host.servers["raw"]
        with anyio.fail_after(60):
            with pytest.raises(MCPError) as info:
                await server.session.call_tool("echo", {"text": "\ud83d"}, 3600)
            assert "gantry could not encode the request" in info.value.message
            assert (await reg.call("raw__calls", "{}")).text == "1"
            assert (await reg.call("raw__echo", '{"text": "alive"}')).text == "alive"
        assert server.restarts == 0


async def test_one_crash_with_calls_in_flight_is_one_breaker_failure() -> None:
    async with running(raw_fixture_toml(timeout=HOUR)) as (host, reg):
        server = host.servers["raw"]
        results: list[str] = []
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:

                async def hold() -> None:
                    results.append((await reg.call("raw__hold", "{}")).text)

                for _ in range(6):
                    tg.start_soon(hold)
                await holding(reg, 6)
                crashed = await reg.call("raw__crash", "{}")
            assert crashed.error and "stopped while running 'crash'" in crashed.text
            assert len(results) == 6 and all("stopped while running 'hold'" in r
                                               for r in results)
            assert server.breaker.failures == 1 and server.breaker.state == "closed"
            await until(lambda: server.state == "up" and server.restarts == 1, what="restart")
            assert (await reg.call("raw__echo", '{"text": "back"}')).text == "back"


async def test_concurrent_timeouts_while_the_server_answers_pings_are_one_failure() -> None:
    async with running(raw_fixture_toml(timeout=1)) as (host, reg):
        server = host.servers["raw"]
        results: list[str] = []
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:

                async def hold() -> None:
                    results.append((await reg.call("raw__hold", "{}")).text)

                for _ in range(5):
                    tg.start_soon(hold)
            assert len(results) == 5 and all("did not answer within 1 s" in r for r in results)
            assert server.breaker.failures == 1 and server.breaker.state == "closed"
            assert host.telemetry()["raw/hold"]["timeouts"] == 5
            await until(lambda: not server._probe, what="the ping")
            assert (await reg.call("raw__release", "{}")).text == "5"
        assert server.state == "up" and server.restarts == 0


async def test_a_hang_that_gets_the_server_restarted_is_one_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(supervise, "PING_TIMEOUT", 0.5)
    async with running(raw_fixture_toml(timeout=1)) as (host, reg):
        server = host.servers["raw"]
        results: list[str] = []
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:

                async def call(tool: str) -> None:
                    results.append((await reg.call(tool, "{}")).text)

                for tool in ("raw__hold", "raw__hold", "raw__freeze", "raw__hold", "raw__hold"):
                    tg.start_soon(call, tool)
            assert len(results) == 5 and all("did not answer within 1 s" in r for r in results)
            assert server.breaker.failures == 1 and server.breaker.state == "closed"
            await until(lambda: server.state == "up" and server.restarts == 1, what="restart")
        assert server.breaker.failures == 1 and server.breaker.state == "closed"
        assert (await reg.call("raw__echo", '{"text": "thawed"}')).text == "thawed"


# ----------------------------------------------------------------------------- SDK fixture


async def test_sdk_fixture_misbehaviours(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """One SDK server (slow to start) through hang, big, list_changed, flood, freeze, grandchild."""
    caplog.set_level(logging.INFO, logger="gantry.mcp")
    manifest = python_fixture_toml(timeout=2)
    async with running(manifest, max_chars=5000) as (host, reg):
        server = host.servers["fx"]
        assert "fx__echo" in reg.names()
        echo = next(t for t in host.tools("fx") if t.name == "echo")
        assert echo.description.startswith("Return the text unchanged.")

        big = await reg.call("fx__big", '{"chars": 1000000}')
        assert len(big.text) <= 5000 and "[truncated: " in big.text and big.chars == 1_000_000

        picture = await reg.call("fx__picture", "{}")
        assert picture.text == "[image/png, 3 kB]"
        failed = await reg.call("fx__fail", '{"reason": "disk full"}')
        assert failed.error

        started = time.monotonic()
        hung = await reg.call("fx__hang", "{}")
        assert hung.error and "did not answer within 2 s" in hung.text
        assert time.monotonic() - started < 10
        stats = host.telemetry()["fx/hang"]
        assert (stats["calls"], stats["errors"], stats["timeouts"]) == (1, 1, 1)
        assert server.breaker.failures == 1
        await anyio.sleep(1)
        assert server.state == "up" and server.restarts == 0  # it still answers pings

        # The compiled validator follows the schema a tools/list_changed refresh brings.
        bad = await reg.call("fx__size", '{"n": "seven"}')
        assert bad.error and "at n: 'seven' is not of type 'integer'" in bad.text
        assert (await reg.call("fx__size", '{"n": 7}')).text == "int 7"
        assert (await reg.call("fx__reshape", "{}")).text == "reshaped"

        def n_type() -> str:
            size = next(t for t in host.tools("fx") if t.name == "size")
            return str(size.schema["properties"]["n"]["type"])

        await until(lambda: n_type() == "string", what="the reshaped schema")
        assert (await reg.call("fx__size", '{"n": "seven"}')).text == "str seven"
        bad = await reg.call("fx__size", '{"n": 7}')
        assert bad.error and "at n: 7 is not of type 'string'" in bad.text

        assert (await reg.call("fx__grow", "{}")).text == "grown"
        await until(lambda: "fx__extra" in reg.names(), what="tools/list_changed refresh")
        assert (await reg.call("fx__extra", "{}")).text == "extra!"

        caplog.clear()
        assert (await reg.call("fx__flood", '{"lines": 2000}')).text == "wrote 2000 lines"
        await anyio.sleep(1.0)
        lines = [r for r in caplog.records if r.getMessage() == "mcp server stderr"]
        assert 50 <= len(lines) < 400, len(lines)
        assert all(getattr(r, "server", None) == "fx" for r in lines)

        grandchild = int((await reg.call("fx__grandchild", "{}")).text)
        assert alive(grandchild)

        frozen = await reg.call("fx__freeze", "{}")
        assert frozen.error and "did not answer" in frozen.text
        await until(lambda: server.restarts == 1, timeout=30, what="restart after a failed ping")
        await until(lambda: not alive(grandchild), timeout=10, what="the grandchild to go")
        await until(lambda: server.state == "up", timeout=BOOT, what="the restarted server")
        assert (await reg.call("fx__echo", '{"text": "back"}')).text == "back"
        grandchild = int((await reg.call("fx__grandchild", "{}")).text)
    await until(lambda: not alive(grandchild), timeout=10, what="the grandchild after shutdown")
    assert live_children() == []
    reasons = [getattr(r, "reason", "") for r in caplog.records]
    assert any("stopped answering" in r for r in reasons), reasons


# ----------------------------------------------------------------------------- real servers


async def test_pypi_mcp_server_time() -> None:
    async with running(toml_server("time", [time_command()])) as (_host, reg):
        assert {"time__get_current_time", "time__convert_time"} <= set(reg.names())
        result = await reg.call("time__get_current_time", '{"timezone": "Europe/Oslo"}')
        assert not result.error
        assert json.loads(result.text)["timezone"] == "Europe/Oslo"
        wrong = await reg.call("time__get_current_time", '{"timezone": "Mars/Olympus"}')
        assert wrong.error


async def test_npm_server_everything_echo_and_env_isolation() -> None:
    argv = everything_command()
    manifest = toml_server("every", argv, env={"GRANTED": "${GRANTED}"})
    async with running(manifest) as (_host, reg):
        assert {"every__echo", "every__get-env"} <= set(reg.names())
        echo = await reg.call("every__echo", '{"message": "hi there"}')
        assert not echo.error and "hi there" in echo.text
        env = await reg.call("every__get-env", "{}")
        assert not env.error
        assert "granted-value" in env.text
        assert SECRET not in env.text and "TELEGRAM_BOT_TOKEN" not in env.text
        assert "LLM_API_KEY" not in env.text


async def test_a_half_open_probe_that_ends_without_a_verdict_does_not_lock_the_server_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A probe that is cancelled (its turn stopped) or fails in a way that says nothing of the
    server (the SDK refusing a result) releases the probe: the next call probes again."""
    async with running(raw_fixture_toml(timeout=HOUR)) as (host, reg):
        server = host.servers["raw"]
        server.breaker = Breaker(threshold=1, cooldown=0.0)
        server.breaker.failure()
        assert server.breaker.state == "half-open"
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(reg.call, "raw__hold", "{}")
                await until(lambda: server.breaker.probing, what="the probe to start")
                tg.cancel_scope.cancel()
            assert server.breaker.state == "half-open" and not server.breaker.probing
            real = server.session.call_tool

            async def refuses(*args: object, **kw: object) -> object:
                raise RuntimeError("Invalid structured content returned by tool")

            monkeypatch.setattr(server.session, "call_tool", refuses)
            odd = await reg.call("raw__echo", '{"text": "x"}')
            assert odd.error and "RuntimeError" in odd.text
            monkeypatch.setattr(server.session, "call_tool", real)
            back = await reg.call("raw__echo", '{"text": "back"}')
        assert (back.text, back.error) == ("back", False)
        assert server.breaker.state == "closed"


async def test_npm_server_everything_task_only_tool_is_offered_across_restarts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 24 #12, now issue 42 #4: `simulate-research-query` has taskSupport "required";
    gantry calls it as a task (tests/test_mcp_tasks.py), so it is offered, and stays so
    after a restart, with no "not offered" warning."""
    caplog.set_level(logging.INFO, logger="gantry.mcp")
    async with running(toml_server("every", everything_command())) as (host, reg):
        assert "every__simulate-research-query" in reg.names()
        assert "every__echo" in reg.names()
        listed = {t.name: t for t in host.tools("every")}
        assert listed["simulate-research-query"].needs_task
        assert not listed["echo"].needs_task
        assert "task-only" not in host.status_lines()[0]
        server = host.servers["every"]
        from gantry.mcp.child import Child

        assert isinstance(server.link, Child)
        os.kill(server.link.pid, 9)
        await until(lambda: server.state == "up" and server.restarts == 1, timeout=BOOT,
                    what="a restart")
        assert "every__simulate-research-query" in reg.names()
    assert not [r for r in caplog.records if r.getMessage().startswith("mcp tools not offered")]
