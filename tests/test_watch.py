"""Watches in-process: the pure item rules, then the runner against the real feed fixture
(tests/fakes/mcp_feed.py) through a real MCP host, with the turn and the channel recorded.

The runner is driven tick by tick (no wall-clock intervals); waits are bounded polls on the
state the test expects, never sleeps that decide pass or fail.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from gantry import db
from gantry.channel.base import Inbound, Progress, TurnFailed
from gantry.config import Config
from gantry.cron.store import CronStore
from gantry.cron.ticker import Ticker
from gantry.mcp.child import Child
from gantry.mcp.host import Host
from gantry.mcp.manifest import parse
from gantry.tools import CALLER, Registry, ToolError
from gantry.watch import items as it
from gantry.watch import setup
from gantry.watch.store import PAUSE_AFTER
from tests.fakes.mcp_servers import ROOT, toml_server

SESSION = "rec:chat1"
BOOT = 120.0
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "LANG": "C.UTF-8"}


# ---------------------------------------------------------------------- pure rules


def test_first_poll_only_seeds() -> None:
    new, cursor = it.diff([{"id": 1}, {"id": 2}], None, "id")
    assert new == [] and cursor == ["id=1", "id=2"]


def test_new_items_are_those_not_in_the_cursor() -> None:
    _, cursor = it.diff([{"id": 1}], None, "id")
    new, cursor = it.diff([{"id": 2, "t": "b"}, {"id": 1}], cursor, "id")
    assert new == [{"id": 2, "t": "b"}] and cursor == ["id=2", "id=1"]
    again, _ = it.diff([{"id": 2, "t": "changed"}, {"id": 1}], cursor, "id")
    assert again == []  # identity is the id, not the content


def test_an_item_that_drops_off_and_returns_is_not_new() -> None:
    _, cursor = it.diff([{"id": 1}, {"id": 2}], None, "id")
    _, cursor = it.diff([{"id": 2}], cursor, "id")
    new, _ = it.diff([{"id": 1}, {"id": 2}], cursor, "id")
    assert new == []


def test_cursor_is_bounded_but_keeps_the_current_result() -> None:
    feed = [{"id": n} for n in range(it.CURSOR_MAX + 50)]
    _, cursor = it.diff(feed, None, "id")
    assert len(cursor) == it.CURSOR_MAX + 50  # never forgets what the feed still shows
    _, cursor = it.diff([{"id": "x"}], cursor, "id")
    assert len(cursor) == it.CURSOR_MAX and cursor[-1] == "id=x"


def test_custom_id_field_and_items_without_one() -> None:
    _, cursor = it.diff([{"sku": "a", "n": 1}], None, "sku")
    new, _ = it.diff([{"sku": "a", "n": 2}, {"sku": "b"}], cursor, "sku")
    assert new == [{"sku": "b"}]
    _, cursor = it.diff([{"status": "packed"}], None, "id")  # no id: content is identity
    new, _ = it.diff([{"status": "shipped"}], cursor, "id")
    assert new == [{"status": "shipped"}]


def test_extract_shapes() -> None:
    assert it.extract([1, 2]) == [1, 2]
    assert it.extract({"items": [1], "other": [2]}) == [1]
    assert it.extract({"results": [3], "total": 1}) == [3]
    assert it.extract({"status": "ok"}) == [{"status": "ok"}]
    with pytest.raises(it.ItemsError, match="several lists"):
        it.extract({"a": [], "b": []})
    with pytest.raises(it.ItemsError, match="not a list or an object"):
        it.extract("text")
    with pytest.raises(it.ItemsError, match="not JSON"):
        it.parse_text("Internal Server Error")


def test_sdk_wrapped_results_are_unwrapped() -> None:
    assert it.structured({"result": '[{"id": 1}]'}) == [{"id": 1}]
    assert it.structured({"result": [{"id": 1}]}) == [{"id": 1}]
    assert it.structured({"items": [], "result": "x"}) == {"items": [], "result": "x"}


def test_wake_text_is_bounded() -> None:
    many = [{"id": n, "body": "x" * 2000} for n in range(it.WAKE_ITEMS)]
    text = it.wake_text(3, "alerts", "Tell the user.", many, 40)
    assert text.startswith("[watch #3, alerts: this message is from a watch, not the user;")
    assert "40 new item(s)" in text and "more new item(s) not shown" in text
    assert len(text) < it.WAKE_CHARS + 1_000


# ---------------------------------------------------------------------- the runner


class Clock:
    def __init__(self) -> None:
        self.t = 1_772_712_000.0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(0)


@dataclass
class Rec:
    """The channel and the agent at once: turns recorded and answered from `replies`."""

    name: str = "rec"
    pushes: list[tuple[str, str]] = field(default_factory=list)
    turns: list[Inbound] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    block: anyio.Event | None = None  # a turn waits on it (to cut it mid-way)

    def can_push(self, chat_id: str) -> bool:
        return chat_id != "group"

    async def push(self, chat_id: str, text: str, sent: int = 0,
                   progress: Progress | None = None, origin: str = "scheduled") -> None:
        self.pushes.append((chat_id, text))
        if progress is not None:
            progress(1, 1)

    async def respond(self, msg: Inbound, stream: Any) -> str:
        self.turns.append(msg)
        if self.block is not None:
            await self.block.wait()
        reply = self.replies.pop(0) if self.replies else "noted"
        if reply == "FAIL":
            raise TurnFailed("model down", "sorry")
        assert msg.on_answer is not None
        msg.on_answer(reply)
        return reply


def feed_toml(feed: Path, subscribe: bool, protocol: str = "auto") -> str:
    env = {"FEED_FILE": str(feed)} | ({"FEED_SUBSCRIBE": "1"} if subscribe else {})
    return toml_server("fx", [sys.executable, "-m", "tests.fakes.mcp_feed"], env=env,
                       cwd=str(ROOT), timeout=10) + f'protocol = "{protocol}"\n'


def cfg(**kw: Any) -> Config:
    return Config(llm_base_url="http://127.0.0.1:1", llm_api_key="k", llm_model="m",
                  channel="stdio", **kw)


@dataclass
class World:
    conn: Any
    host: Host
    rec: Rec
    ticker: Ticker
    watches: Any
    registry: Registry
    clock: Clock
    tg: Any

    async def call(self, tool: str, args: dict[str, Any]) -> str:
        token = CALLER.set(SESSION)
        try:
            return await self.registry.get(tool).call(args)  # type: ignore[union-attr]
        finally:
            CALLER.reset(token)

    def tick(self) -> None:
        self.watches.runner.tick(self.clock.now(), self.tg)

    async def settle(self) -> None:
        """Wait (bounded) until no poll and no wake is in flight."""
        r = self.watches.runner
        deadline = time.monotonic() + 30
        await anyio.sleep(0.01)
        while r.polling or r.waking:
            assert time.monotonic() < deadline, "a poll or wake did not finish"
            await anyio.sleep(0.02)

    async def poll(self, seconds: float = 60.0) -> None:
        self.clock.t += seconds
        self.tick()
        await self.settle()


@asynccontextmanager
async def world(tmp_path: Path, subscribe: bool = False, db_name: str = "g.db",
                rec: Rec | None = None, max_chars: int = 16_000,
                protocol: str = "auto") -> AsyncIterator[World]:
    feed = tmp_path / "feed.jsonl"
    feed.touch()
    conn = db.connect(tmp_path / db_name)
    registry = Registry(result_max_chars=max_chars)
    host = Host(parse(feed_toml(feed, subscribe, protocol), ENV), registry, ENV)
    rec = rec or Rec()
    clock = Clock()
    ticker = Ticker(CronStore(conn), rec.respond, rec.push, rec.name, 15, clock)
    watches = setup(cfg(watch_max=3), conn, registry, host, ticker, rec.can_push)
    try:
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(BOOT):
                await host.start(tg)
            ticker._tg = tg
            watches.runner.resume(tg)
            try:
                yield World(conn, host, rec, ticker, watches, registry, clock, tg)
            finally:
                tg.cancel_scope.cancel()
    finally:
        conn.close()


def append(tmp_path: Path, *items: dict[str, Any]) -> None:
    with open(tmp_path / "feed.jsonl", "a") as fh:
        for item in items:
            fh.write(json.dumps(item) + "\n")


def count(tmp_path: Path, kind: str) -> int:
    p = tmp_path / f"feed.jsonl.{kind}"
    return len(p.read_text().splitlines()) if p.exists() else 0




@pytest.mark.slow
@pytest.mark.anyio
async def test_poll_quiet_ticks_never_turn_and_a_new_item_wakes_once(tmp_path: Path) -> None:
    append(tmp_path, {"id": "a1", "title": "old alert"})
    async with world(tmp_path) as w:
        out = await w.call("watch_add", {"tool": "fx__items", "instruction": "Tell the user.",
                                         "interval_seconds": 60, "label": "alerts"})
        assert out.startswith("watch #1 (alerts) added: checks every 1 min")
        await w.poll(0)  # the first poll seeds the cursor
        for _ in range(20):
            await w.poll()
        assert count(tmp_path, "calls") == 21 and w.rec.turns == []
        append(tmp_path, {"id": "a2", "title": "flood warning"})
        w.rec.replies.append("New alert: flood warning")
        await w.poll(30)  # not due yet: nothing happens
        assert count(tmp_path, "calls") == 21
        await w.poll(30)
        assert len(w.rec.turns) == 1
        turn = w.rec.turns[0]
        assert turn.scheduled and turn.user_id == "watch"
        assert "flood warning" in turn.text and "old alert" not in turn.text
        assert turn.text.splitlines()[1] == "Tell the user."
        assert w.rec.pushes == [("chat1", "New alert: flood warning")]
        for _ in range(3):
            await w.poll()
        assert len(w.rec.turns) == 1
        states = list(w.conn.execute("SELECT state FROM watch_wake"))
        assert states == [("delivered",)]
        listing = await w.call("watch_list", {})
        assert listing.startswith("#1 alerts · fx__items · every 1 min") and "25 checks" in listing


@pytest.mark.slow
@pytest.mark.anyio
async def test_structured_content_and_silent(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.call("watch_add", {"tool": "fx__feed", "instruction": "Only if urgent.",
                                   "id_field": "key"})
        await w.poll(0)
        append(tmp_path, {"key": "k1", "urgent": False})
        w.rec.replies.append("[silent] not urgent")
        await w.poll(900)
        assert len(w.rec.turns) == 1 and '"key":"k1"' in w.rec.turns[0].text
        assert w.rec.pushes == []
        assert list(w.conn.execute("SELECT state FROM watch_wake")) == [("silent",)]
        await w.call("watch_add", {"tool": "fx__wrapped", "instruction": "Say."})
        w.tick()
        await w.settle()
        append(tmp_path, {"key": "k2"})
        await w.poll(900)
        assert len(w.rec.turns) == 3  # both watches saw k2 (the wrapped one by content)
        assert all('"key":"k2"' in t.text for t in w.rec.turns[1:])


@pytest.mark.slow
@pytest.mark.anyio
async def test_results_are_parsed_whole_not_cut_at_tool_result_max_chars(tmp_path: Path) -> None:
    append(tmp_path, *({"id": n, "body": "x" * 100} for n in range(50)))  # ~6 kB of JSON
    async with world(tmp_path, max_chars=100) as w:
        await w.call("watch_add", {"tool": "fx__items", "instruction": "Say."})
        await w.poll(0)
        append(tmp_path, {"id": "late"})
        await w.poll(900)
        assert len(w.rec.turns) == 1 and '"id":"late"' in w.rec.turns[0].text
        assert next(iter(w.conn.execute("SELECT failures FROM watch")))[0] == 0


@pytest.mark.slow
@pytest.mark.anyio
async def test_failures_back_off_then_pause_with_one_message(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.call("watch_add", {"tool": "fx__broken", "instruction": "x",
                                   "label": "bad feed", "interval_seconds": 60})
        gaps = []
        for _ in range(PAUSE_AFTER):
            before = w.clock.t
            nxt = next(iter(w.conn.execute("SELECT next_at FROM watch")))[0]
            w.clock.t = max(w.clock.t, nxt)
            w.tick()
            await w.settle()
            gaps.append(w.clock.t - before)
        row = next(iter(w.conn.execute("SELECT state, failures, last_error, notice_state "
                                       "FROM watch")))
        assert row[:2] == ("paused", PAUSE_AFTER) and "not JSON" in row[2]
        assert row[3] == "sent"
        assert gaps[2] < gaps[3] < gaps[4]  # each failure waits longer
        assert len(w.rec.pushes) == 1
        assert w.rec.pushes[0][1].startswith("Watch #1 (bad feed, on fx__broken) failed 5 times")
        await w.poll(86400)
        assert len(w.rec.pushes) == 1 and w.rec.turns == []
        assert "paused after 5 failures" in await w.call("watch_list", {})


@pytest.mark.slow
@pytest.mark.anyio
async def test_push_subscribes_reads_on_update_and_resubscribes_after_restart(
    tmp_path: Path,
) -> None:
    append(tmp_path, {"id": 1})
    # resources/subscribe is the 2025 era's (2026: tests/test_mcp_era.py, listen).
    async with world(tmp_path, subscribe=True, protocol="2025") as w:
        out = await w.call("watch_add", {"resource": "feed://items", "instruction": "Say it."})
        assert "the server notifies changes (no polling)" in out
        w.tick()
        await w.settle()
        assert count(tmp_path, "reads") == 1  # the seed read
        for _ in range(20):
            await w.poll(3600)
        assert count(tmp_path, "reads") == 1 and count(tmp_path, "calls") == 0
        append(tmp_path, {"id": 2, "text": "pushed item"})
        r = w.watches.runner
        deadline = time.monotonic() + 20
        while not r.dirty:  # the server's notification marks it
            assert time.monotonic() < deadline, "no notifications/resources/updated"
            await anyio.sleep(0.02)
        w.tick()
        await w.settle()
        assert len(w.rec.turns) == 1 and "pushed item" in w.rec.turns[0].text
        # The server dies; the host restarts it and subscribes again, then reads once.
        server = w.host.servers["fx"]
        assert isinstance(server.link, Child)
        server.link.process.kill()
        deadline = time.monotonic() + 60
        while count(tmp_path, "subscribes") < 2:
            assert time.monotonic() < deadline, "no resubscribe after the restart"
            await anyio.sleep(0.05)
        while not r.dirty:
            assert time.monotonic() < deadline, "no re-read after the resubscribe"
            await anyio.sleep(0.02)
        w.tick()
        await w.settle()
        assert len(w.rec.turns) == 1  # nothing new meanwhile
        append(tmp_path, {"id": 3, "text": "after restart"})
        while not r.dirty:
            assert time.monotonic() < deadline, "no notification after the restart"
            await anyio.sleep(0.02)
        w.tick()
        await w.settle()
        assert len(w.rec.turns) == 2 and "after restart" in w.rec.turns[1].text
        assert await w.call("watch_cancel", {"id": 1}) == "cancelled watch #1"
        assert server.subscriptions == set()  # not subscribed again after a restart


@pytest.mark.slow
@pytest.mark.anyio
async def test_resource_without_subscriptions_is_polled(tmp_path: Path) -> None:
    async with world(tmp_path, subscribe=False) as w:
        out = await w.call("watch_add", {"resource": "feed://items", "instruction": "Say it.",
                                         "interval_seconds": 120})
        assert "checks every 2 min" in out
        await w.poll(0)
        await w.poll(120)
        assert count(tmp_path, "reads") == 2
        append(tmp_path, {"id": "r1"})
        await w.poll(120)
        assert len(w.rec.turns) == 1 and "r1" in w.rec.turns[0].text


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_wake_cut_mid_turn_is_resumed_once(tmp_path: Path) -> None:
    """Detection committed, turn cut (the process gone): the next runner delivers it once."""
    rec = Rec(block=anyio.Event())
    async with world(tmp_path, rec=rec) as w:
        await w.call("watch_add", {"tool": "fx__items", "instruction": "Tell."})
        await w.poll(0)
        append(tmp_path, {"id": "n1"})
        w.clock.t += 900
        w.tick()
        deadline = time.monotonic() + 30
        while not rec.turns:
            assert time.monotonic() < deadline
            await anyio.sleep(0.02)
    # the task group is gone, as after a kill: the wake row is still started
    rec2 = Rec(replies=["n1 is new"])
    async with world(tmp_path, rec=rec2) as w2:
        await w2.settle()
        assert [t.text.count("n1") for t in rec2.turns] == [1]
        assert rec2.pushes == [("chat1", "n1 is new")]
        await w2.poll(900)
        assert len(rec2.turns) == 1


@pytest.mark.slow
@pytest.mark.anyio
async def test_tool_checks(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        async def refused(args: dict[str, Any], match: str) -> None:
            with pytest.raises(ToolError, match=match):
                await w.call("watch_add", args)

        await refused({"tool": "fx__items"}, "`instruction` is required")
        await refused({"tool": "cron_list", "instruction": "x"}, "no MCP tool named")
        await refused({"tool": "fx__items", "resource": "feed://items", "instruction": "x"},
                      "exactly one of")
        await refused({"tool": "fx__items", "instruction": "x", "interval_seconds": 59},
                      "between 60 and")
        for _ in range(3):
            await w.call("watch_add", {"tool": "fx__items", "instruction": "x"})
        await refused({"tool": "fx__items", "instruction": "x"}, "WATCH_MAX")
        assert await w.call("watch_cancel", {"id": "#2"}) == "cancelled watch #2"
        with pytest.raises(ToolError, match="no watch #2"):
            await w.call("watch_cancel", {"id": 2})
        token = CALLER.set("rec:other")
        try:
            assert await w.registry.get("watch_list").call({}) == "no watches in this chat"  # type: ignore[union-attr]
        finally:
            CALLER.reset(token)


def test_watch_list_without_a_database_or_tables(tmp_path: Path) -> None:
    from gantry.watch.report import list_watches

    ok, text = list_watches(str(tmp_path / "none.db"))
    assert not ok and text.startswith("no database at")
    import apsw

    apsw.Connection(str(tmp_path / "old.db")).execute("CREATE TABLE t (x)")
    ok, text = list_watches(str(tmp_path / "old.db"))
    assert not ok and "no watch tables" in text and "start `gantry run` once" in text
    conn = db.connect(tmp_path / "new.db")
    conn.close()
    assert list_watches(str(tmp_path / "new.db")) == (
        True, "0 active, 0 paused watch(es); --all shows cancelled ones too")
