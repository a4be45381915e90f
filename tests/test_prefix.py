"""The prompt prefix stays byte-identical from request to request, so providers can cache it:
checked on the real requests the fake model received, with a memory block that changes every
turn (as recall by the user's message does) and a tool round in between."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gantry import db
from gantry.agent import Agent
from gantry.channel.base import Inbound
from gantry.model.client import Provider
from gantry.model.retry import RetryPolicy
from gantry.prompt import TIME_MARK
from gantry.session import SessionStore
from gantry.tools import Registry, Tool, mcp_source
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls

pytestmark = pytest.mark.anyio


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as f:
        yield f


def messages_bytes(raw: bytes) -> bytes:
    """The request body up to the end of its last message (what precedes the tools)."""
    start = raw.index(b'"messages":[')
    return raw[: raw.index(b'],"tools"', start) if b'],"tools"' in raw else raw.rindex(b"]")]


async def test_each_request_starts_with_the_bytes_of_the_one_before(
        fake: FakeOpenAI, tmp_path: Path) -> None:
    async def recall(_session: str, text: str) -> str:
        return f"[memory]\n- (note) recalled for {text!r}"  # differs with every message

    async def add(args: dict[str, Any]) -> str:
        return str(args["a"] + args["b"])

    registry = Registry()
    registry.register(Tool("calc__add", "add", {"type": "object"}, add, mcp_source("calc")))
    provider = Provider(fake.base_url, "sk-test", "fake-model", retry=RetryPolicy(deadline=5))
    agent = Agent(model=provider, sessions=SessionStore(db.connect(tmp_path / "g.db")),
                  tools=registry, persona=lambda: "You are Tim.", memory_block=recall)
    fake.push(ToolCalls([Call("calc__add", {"a": 2, "b": 3})]), Reply("It is 5."),
              Reply("Still 5."))
    say = Inbound(channel="test", chat_id="1", user_id="u", text="what is 2+3?")
    assert await agent(say) == "It is 5."
    again = Inbound(channel="test", chat_id="1", user_id="u", text="are you sure?")
    assert await agent(again) == "Still 5."
    await provider.aclose()
    first, second, third = (messages_bytes(r.raw) for r in fake.requests)
    # Within a turn: the tool round's request extends the first call's, byte for byte.
    assert second.startswith(first)
    # Across turns: everything up to the previous turn's per-turn block (time, memory) at
    # the end of its user message is sent again unchanged.
    mark = b"\\n\\n" + TIME_MARK.encode()
    cut = second.index(mark)
    assert third.startswith(second[:cut])
    assert b"You are Tim." in second[:cut] and b"recalled for" not in second[:cut]
    assert third.count(mark) == 1 and b"recalled for 'are you sure?'" in third[third.index(mark):]
