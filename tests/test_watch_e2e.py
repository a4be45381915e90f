"""Watches end to end: `gantry run` (stdio, fake model) with the feed fixture MCP server.

The model adds a watch once; after that gantry polls the tool itself. Twenty quiet polls
cost no model call; one new item wakes exactly one turn naming it, whose reply appears on
stdout with no user message; a kill -9 after the new item was found and before its reply
was delivered delivers it once after the restart. WATCH_MIN_INTERVAL_SECONDS (test-only,
docs/configuration.md) lets a watch poll every second.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import pytest

from tests.fakes.mcp_servers import ROOT, toml_server
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.test_stdio_e2e import Gantry, fake, spawn

pytestmark = pytest.mark.slow
__all__ = ["fake", "spawn"]

BOOT = 90.0
FAST = {"CRON_TICK_SECONDS": "1", "WATCH_MIN_INTERVAL_SECONDS": "1"}


def setup_feed(tmp_path: Path) -> tuple[Path, str]:
    feed = tmp_path / "feed.jsonl"
    feed.write_text(json.dumps({"id": "a1", "title": "old alert"}) + "\n")
    path = tmp_path / "mcp.toml"
    path.write_text(toml_server("fx", [sys.executable, "-m", "tests.fakes.mcp_feed"],
                                env={"FEED_FILE": str(feed)}, cwd=str(ROOT)))
    return feed, str(path)


def add_script() -> list[Any]:
    return [ToolCalls([Call("watch_add", {"tool": "fx__items", "interval_seconds": 1,
                                          "label": "alerts",
                                          "instruction": "Tell the user about new alerts."},
                            id="w1")]),
            Reply("Watching.")]


def polls(feed: Path) -> int:
    p = Path(f"{feed}.calls")
    return len(p.read_text().splitlines()) if p.exists() else 0


def wait(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


def test_quiet_polls_cost_no_model_call_and_one_item_wakes_one_turn(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    feed, manifest = setup_feed(tmp_path)
    g = spawn(MCP_MANIFEST=manifest, **FAST)
    fake.push(*add_script(), Reply("New alert: flood warning (a2)."))
    g.ask("tell me when a new alert posts", "Watching.", timeout=BOOT)
    tool = next(m for m in fake.requests[1].messages if m["role"] == "tool")
    assert tool["content"].startswith("watch #1 (alerts) added: checks every 1 s")
    wait(lambda: polls(feed) >= 21, 60, "the seed poll and 20 quiet polls")
    assert len(fake.requests) == 2  # the add turn only
    with open(feed, "a") as fh:
        fh.write(json.dumps({"id": "a2", "title": "flood warning"}) + "\n")
    g.expect("New alert: flood warning (a2).\n", timeout=30)
    assert len(fake.requests) == 3
    woke = fake.requests[2].last_user_text
    assert woke.startswith("[watch #1, alerts: this message is from a watch")
    assert "flood warning" in woke and "old alert" not in woke
    seen = polls(feed)
    wait(lambda: polls(feed) >= seen + 3, 30, "three more polls")
    assert len(fake.requests) == 3
    g.send("/status")
    status = g.expect("checks\n")
    assert "watch: 1 watch(es) in this chat\n  #1 alerts · fx__items · every 1 s" in status
    listing = subprocess.run([sys.executable, "-m", "gantry", "watch", "list"], env=g.env,
                             cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert listing.returncode == 0, listing.stderr
    assert "#1 [active] stdio:local · alerts · fx__items · every 1 s" in listing.stdout
    assert "1 wakes (last delivered)" in listing.stdout
    assert g.stop() == 0
    g.assert_clean()


def test_kill_9_between_detection_and_delivery_delivers_once(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    feed, manifest = setup_feed(tmp_path)
    db = tmp_path / "data" / "gantry.db"
    g = spawn(MCP_MANIFEST=manifest, **FAST)
    fake.push(*add_script(), Reply("too slow", delay=15))
    g.ask("watch the alerts", "Watching.", timeout=BOOT)
    g.wait_log("watch seeded", timeout=30)
    with open(feed, "a") as fh:
        fh.write(json.dumps({"id": "a2", "title": "flood warning"}) + "\n")
    wait(lambda: len(fake.requests) >= 3, 30, "the wake's turn to reach the model")
    g.stop(signal.SIGKILL)
    assert rows(db, "SELECT state FROM watch_wake") == [("started",)]

    fake.push(Reply("Flood warning posted (a2)."))
    g2 = spawn(MCP_MANIFEST=manifest, **FAST)
    g2.expect("Flood warning posted (a2).\n", timeout=BOOT)
    wait(lambda: rows(db, "SELECT state FROM watch_wake") == [("delivered",)], 10,
         "the wake to be delivered")
    seen = polls(feed)
    wait(lambda: polls(feed) >= seen + 3, 30, "three more polls")
    assert len(fake.requests) == 4  # the cut turn, then the resumed one: no third
    assert "flood warning" in fake.requests[3].last_user_text
    assert g2.stdout == "Flood warning posted (a2).\n"
    assert g2.stop() == 0
    g2.assert_clean()


def test_push_watch_reads_only_when_the_server_says_it_changed(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    """A resource watch on a server with subscriptions: no periodic reads (a polled watch
    next to it is the clock: 20 of its polls pass), one read per notification."""
    feed = tmp_path / "feed.jsonl"
    feed.write_text(json.dumps({"id": "a1"}) + "\n")
    path = tmp_path / "mcp.toml"
    path.write_text(toml_server("fx", [sys.executable, "-m", "tests.fakes.mcp_feed"],
                                env={"FEED_FILE": str(feed), "FEED_SUBSCRIBE": "1"},
                                cwd=str(ROOT)))
    g = spawn(MCP_MANIFEST=str(path), **FAST)
    fake.push(
        ToolCalls([Call("watch_add", {"resource": "feed://items", "label": "pushed",
                                      "instruction": "Tell the user what changed."}, id="w1"),
                   Call("watch_add", {"tool": "fx__items", "interval_seconds": 1,
                                      "label": "clock", "instruction": "[silent] always."},
                        id="w2")]),
        Reply("Watching both."),
    )
    g.ask("watch the feed", "Watching both.", timeout=BOOT)
    tools = [m["content"] for m in fake.requests[1].messages if m["role"] == "tool"]
    assert "the server notifies changes (no polling)" in tools[0], tools
    reads = Path(f"{feed}.reads")
    wait(lambda: polls(feed) >= 21, 60, "20 polls of the clock watch")
    assert len(reads.read_text().splitlines()) == 1  # the seed read only
    assert len(fake.requests) == 2
    # One change: the push watch and the clock watch both see a2; the clock says [silent].
    fake.push(Reply("a2 appeared."), Reply("[silent] clock"))
    with open(feed, "a") as fh:
        fh.write(json.dumps({"id": "a2", "title": "pushed item"}) + "\n")
    g.expect("a2 appeared.\n", timeout=30)
    wait(lambda: len(fake.requests) == 4, 30, "both wakes")
    woke = [r.last_user_text for r in fake.requests[2:]]
    assert sorted(t.split(",", 1)[0] for t in woke) == ["[watch #1", "[watch #2"]
    assert all("pushed item" in t for t in woke)
    assert len(reads.read_text().splitlines()) == 2
    assert g.stop() == 0
    assert g.stdout == "Watching both.\na2 appeared.\n"
    g.assert_clean()
