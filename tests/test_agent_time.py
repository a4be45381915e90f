"""The time footer through the real agent loop and provider, against the fake server."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from gantry.channel.base import Inbound
from gantry.prompt import TIME_MARK
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.test_agent import fake, make_agent, msg

__all__ = ["fake"]
pytestmark = pytest.mark.anyio

T0 = datetime(2026, 12, 1, 9, 14, 30, tzinfo=UTC).timestamp()  # a Tuesday


async def test_every_turn_carries_the_local_time_and_keeps_the_prefix(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    now = [T0]
    agent = make_agent(fake, tmp_path, zone=ZoneInfo("Europe/Berlin"), clock=lambda: now[0])
    fake.push(ToolCalls([Call("calc__add", {"a": 1, "b": 2}, id="c1")]), Reply("3"))
    assert await agent(msg("what is 1+2?")) == "3"
    now[0] += 3600
    assert await agent(msg("what's on tomorrow?")) == "echo: what's on tomorrow?"
    first, within, second = (r.raw for r in fake.requests)
    user = fake.requests[0].messages[-1]
    assert user["role"] == "user"
    assert user["content"].startswith(f"what is 1+2?\n\n{TIME_MARK} Now: Tuesday 2026-12-01 10:14,"
                                      " UTC+01:00 (Europe/Berlin, CET).\nTomorrow: Wed 2026-12-02.")
    # the tool round's call sends the turn's bytes unchanged, then the round
    assert within.startswith(first[: first.index(b'],"tools"')])
    # the next turn: every byte up to where the previous footer began is the same
    cut = first.index(b"\\n\\n" + TIME_MARK.encode())
    assert second.startswith(first[:cut])
    assert b"11:14, UTC+01:00" in second and second.count(TIME_MARK.encode()) == 1
    # the stored history has the user's words only
    _, history = agent.sessions.load("test:1")
    assert [m.content for m in history if m.content and TIME_MARK in m.content] == []


async def test_a_scheduled_turn_knows_it_and_when_it_was_due(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    agent = make_agent(fake, tmp_path, zone=ZoneInfo("America/Los_Angeles"), clock=lambda: T0)
    due = T0 - 90
    inbound = Inbound(channel="test", chat_id="1", user_id="cron", text="[scheduled job #1]",
                      scheduled=True, scheduled_for=due)
    await agent(inbound)
    content = fake.last_request.messages[-1]["content"]
    assert "Now: Tuesday 2026-12-01 01:14, UTC-08:00 (America/Los_Angeles, PST)." in content
    assert content.endswith("This turn was started by the scheduler, not typed by the user; "
                            "it was due Tue 2026-12-01 01:13 UTC-08:00.")
    await agent(msg("hi"))
    assert "scheduler" not in fake.last_request.messages[-1]["content"]
