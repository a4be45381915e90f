"""Telegram `/stop` (and `/cancel`) in-process: the real channel over the fake Bot API, the
real agent over the fake model, the turns wrapped as `gantry run` wraps them.

A stopped model call is one scripted to take 30 s; every test is bounded well below that,
so passing proves the stop did not wait for the model. The latency is printed (`-s`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gantry import db
from gantry.agent import Agent
from gantry.channel.base import NOTHING_TO_STOP, STOPPED_REPLY, Inbound
from gantry.mcp.host import Host
from gantry.mcp.manifest import parse
from gantry.model.client import Provider
from gantry.session import CANCELLED_RESULT, STOPPED_ANSWER, SessionStore
from gantry.tools import Registry, Tool
from gantry.turns import Turns
from tests.fakes.mcp_servers import python_fixture_toml
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.fakes.telegram import FakeTelegram
from tests.test_mcp_host import BASE_ENV, BOOT
from tests.test_telegram import TOKEN, USER, quick, running, settle, states  # noqa: F401

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("quick")]  # quick backoff

SLOW = 30.0  # the model call a /stop cuts; every test here ends long before it would
BOUND = 15.0  # what a test may take, start-up included


class Work:
    """A tool that runs until released, then records that it finished."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.finished = 0

    async def __call__(self, args: dict[str, Any]) -> str:
        self.started.set()
        await self.release.wait()
        self.finished += 1
        return "work done"


@contextlib.asynccontextmanager
async def released(gate: anyio.Event) -> AsyncIterator[None]:
    """Set `gate` on the way out, passed or failed: a turn waiting on it is shielded, so a
    failing test would otherwise hang in teardown instead of reporting."""
    try:
        yield
    finally:
        gate.set()


@contextlib.asynccontextmanager
async def stack(tmp_path: Path, *, manifest: str = "", **kw: Any) -> AsyncIterator[
        tuple[FakeTelegram, FakeOpenAI, Any, Work, SessionStore]]:
    """Bot API and model fakes, and the channel serving a real agent through Turns. The
    agent has `work` (a built-in tool) and, given a `manifest`, its MCP servers' tools."""
    conn = db.connect(tmp_path / "g.db")
    sessions = SessionStore(conn)
    work = Work()
    registry = Registry()
    registry.register(Tool("work", "does work", {"type": "object"}, work))
    async with FakeTelegram(token=TOKEN) as tg, FakeOpenAI() as llm, \
            anyio.create_task_group() as servers:
        if manifest:
            with anyio.fail_after(BOOT):
                await Host(parse(manifest, BASE_ENV), registry, BASE_ENV).start(servers)
        provider = Provider(llm.base_url, "sk-test-123456", "fake-model")
        try:
            agent = Agent(model=provider, sessions=sessions, tools=registry,
                          persona=lambda: "You are a test bot.")
            respond = Turns(settle=sessions.settle_stopped).wrap(agent)
            async with running(tg, tmp_path / "g.db", respond, conn=conn, **kw) as ch:
                yield tg, llm, ch, work, sessions
        finally:
            await provider.aclose()
            servers.cancel_scope.cancel()


def shape(history: list[Any]) -> list[tuple[str, str | None]]:
    return [(type(m).__name__.removesuffix("Message").lower(), m.content) for m in history]


async def requests(llm: FakeOpenAI, count: int) -> None:
    with anyio.fail_after(BOUND):
        while len(llm.requests) < count:
            await anyio.sleep(0.01)


async def test_stop_cuts_a_slow_model_call_and_the_next_message_is_answered(
    tmp_path: Path
) -> None:
    """/stop is handled out of band: not queued behind the running turn nor the message that
    arrived during it, which is answered next. The stopped message is finished (never run
    again), the /stop itself gets no reply of its own, the history says the turn stopped."""
    with anyio.fail_after(BOUND):
        async with stack(tmp_path) as (tg, llm, ch, _work, sessions):
            llm.push(Reply("too late", delay=SLOW))
            tg.push_text(USER, "think hard")
            await requests(llm, 1)
            tg.push_text(USER, "meanwhile")
            t0 = time.monotonic()
            tg.push_text(USER, "/stop")
            assert (await tg.wait_sent(USER, 1, timeout=BOUND))[:1] == [STOPPED_REPLY]
            latency = time.monotonic() - t0
            print(f"\n/stop → '{STOPPED_REPLY}' in {latency * 1000:.0f} ms "
                  f"(the model call would have taken {SLOW:.0f} s)")
            assert await tg.wait_sent(USER, 2, timeout=BOUND) == [STOPPED_REPLY,
                                                                   "echo: meanwhile"]
            final = await settle(tg, ch, ["think hard", "meanwhile", "/stop"])
    assert final == {"think hard": "answered", "meanwhile": "answered", "/stop": "answered"}
    assert len(tg.sent(USER)) == 2
    _ids, history = sessions.load(f"telegram:{USER}")
    assert shape(history) == [
        ("user", "think hard"), ("assistant", STOPPED_ANSWER),
        ("user", "meanwhile"), ("assistant", "echo: meanwhile")]
    assert [m["role"] for m in llm.last_request.messages] == [
        "system", "user", "assistant", "user"]


async def test_stop_during_a_builtin_tool_call_lets_it_finish_and_runs_nothing_after(
    tmp_path: Path
) -> None:
    """A built-in tool's call (local, short, it may have side effects) is not cut: it
    finishes and its result is recorded, then the turn ends before the next model call. The
    stop is on record the moment it arrives: the message is replied "stopped" even while the
    call still runs, so a crash there would not run the turn again."""
    with anyio.fail_after(BOUND):
        async with stack(tmp_path) as (tg, llm, ch, work, sessions), released(work.release):
            llm.push(ToolCalls([Call("work", {}, id="call_w")]), Reply("never asked"))
            tg.push_text(USER, "do the work")
            await work.started.wait()
            tg.push_text(USER, "/cancel")
            await tg.wait_for(lambda: states(ch).get("do the work") == "replied" or None,
                              BOUND, "the stop recorded")
            row = ch.store.next_pending(USER)
            assert row is not None and row.reply == STOPPED_REPLY
            await anyio.sleep(0.3)
            assert tg.sent(USER) == [] and work.finished == 0  # the call still runs
            work.release.set()
            assert await tg.wait_sent(USER, 1, timeout=BOUND) == [STOPPED_REPLY]
            await settle(tg, ch, ["do the work", "/cancel"])
    assert work.finished == 1
    assert len(llm.requests) == 1 and llm.pending == 1  # no model call after the tool
    _ids, history = sessions.load(f"telegram:{USER}")
    assert shape(history) == [
        ("user", "do the work"), ("assistant", None), ("tool", "work done"),
        ("assistant", STOPPED_ANSWER)]


async def test_stop_during_an_mcp_tool_call_cancels_it_at_once(tmp_path: Path) -> None:
    """Issue 35 #10: /stop while a real MCP server's 30 s call runs: "Stopped." comes within
    seconds, the server is sent notifications/cancelled (the fixture's `slow` writes it
    down), nothing runs after it, and the call is recorded as cancelled."""
    marks = tmp_path / "slow.txt"
    with anyio.fail_after(BOOT + BOUND):
        async with stack(tmp_path, manifest=python_fixture_toml("fx")) as (
                tg, llm, ch, _work, sessions):
            llm.push(ToolCalls([Call("fx__slow", {"path": str(marks), "seconds": 30},
                                     id="call_s")]), Reply("never asked"))
            tg.push_text(USER, "do the slow work")
            await tg.wait_for(lambda: marks.exists() or None, BOUND, "the call started")
            t0 = time.monotonic()
            tg.push_text(USER, "/stop")
            assert await tg.wait_sent(USER, 1, timeout=5.0) == [STOPPED_REPLY]
            print(f"\n/stop during an MCP call → '{STOPPED_REPLY}' in "
                  f"{(time.monotonic() - t0) * 1000:.0f} ms (the call would take 30 s)")
            await tg.wait_for(lambda: "cancelled" in marks.read_text() or None, 5.0,
                              "notifications/cancelled at the server")
            await settle(tg, ch, ["do the slow work", "/stop"])
    assert marks.read_text().split() == ["started", "cancelled"]
    assert len(llm.requests) == 1 and llm.pending == 1  # no model call after the tool
    _ids, history = sessions.load(f"telegram:{USER}")
    assert shape(history) == [
        ("user", "do the slow work"), ("assistant", None), ("tool", CANCELLED_RESULT),
        ("assistant", STOPPED_ANSWER)]


async def test_stop_with_nothing_running_says_so_and_stops_nothing_later(
    tmp_path: Path
) -> None:
    with anyio.fail_after(BOUND):
        async with stack(tmp_path) as (tg, _llm, ch, _work, _sessions):
            tg.push_text(USER, "/stop")
            assert await tg.wait_sent(USER, 1, timeout=BOUND) == [NOTHING_TO_STOP]
            tg.push_text(USER, "hello")
            assert await tg.wait_sent(USER, 2, timeout=BOUND) == [NOTHING_TO_STOP,
                                                                   "echo: hello"]
            assert (await settle(tg, ch, ["/stop", "hello"])) == {
                "/stop": "answered", "hello": "answered"}


async def test_a_turn_whose_answer_is_recorded_is_not_stopped(
    tmp_path: Path
) -> None:
    """Past its final answer a turn is not affected: /stop says there is nothing to stop
    and the answer is delivered."""
    recorded = anyio.Event()
    finish = anyio.Event()

    async def answering(msg: Inbound, stream: Any) -> str:
        assert msg.on_answer is not None
        msg.on_answer("the answer")
        recorded.set()
        await finish.wait()  # still winding down (a checkpoint a stop could cut)
        return "the answer"

    respond = Turns().wrap(answering)
    with anyio.fail_after(BOUND):
        async with FakeTelegram(token=TOKEN) as tg, running(
                tg, tmp_path / "g.db", respond) as ch, released(finish):
            tg.push_text(USER, "question")
            await recorded.wait()
            tg.push_text(USER, "/stop")
            assert await tg.wait_sent(USER, 1, timeout=BOUND) == [NOTHING_TO_STOP]
            finish.set()
            assert await tg.wait_sent(USER, 2, timeout=BOUND) == [NOTHING_TO_STOP,
                                                                   "the answer"]
            await settle(tg, ch, ["question", "/stop"])


GROUP = -1001
OTHER = 5151


async def test_stop_stops_only_its_own_chat_and_any_allowed_member_may_stop(
    tmp_path: Path
) -> None:
    """A /stop in one chat leaves another chat's turn alone. In a group, any allowlisted
    member may stop the running turn, not only its sender (a stranger's /stop is dropped
    like anything a stranger sends)."""
    gate = anyio.Event()

    async def slow(msg: Inbound, stream: Any) -> str:
        await gate.wait()
        return f"echo: {msg.text}"

    respond = Turns().wrap(slow)
    bot = "@gantry_test_bot"
    with anyio.fail_after(BOUND):
        async with FakeTelegram(token=TOKEN) as tg:
            async with running(tg, tmp_path / "g.db", respond, users=(USER, OTHER),
                               groups="mention") as ch, released(gate):
                tg.push_text(USER, f"/ask{bot} group question", chat_id=GROUP)
                tg.push_text(USER, "private question")
                await tg.wait_for(lambda: len(ch._turning) == 2 or None, BOUND, "two turns")
                tg.push_text(666, f"/stop{bot}", chat_id=GROUP)  # not allowlisted
                tg.push_text(OTHER, f"/stop{bot}", chat_id=GROUP)
                assert await tg.wait_sent(GROUP, 1, timeout=BOUND) == [STOPPED_REPLY]
                gate.set()
                assert await tg.wait_sent(USER, 1, timeout=BOUND) == ["echo: private question"]
                await settle(tg, ch, ["private question", f"/ask{bot} group question"])
            assert len(tg.sent(GROUP)) == 1
