"""Memory in the agent loop: tools in the registry, hydration, /status, MEMORY_ENABLED=false."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gantry import db
from gantry.agent import Agent
from gantry.channel.base import Inbound
from gantry.config import load
from gantry.mcp.convert import CallResult
from gantry.memory.mcp_backend import SHAPE_AIGPT, SHAPE_TOOLS
from gantry.memory.store import KINDS
from gantry.memory.wiring import MemoryParts, build, counts_line
from gantry.model.client import Provider
from gantry.model.retry import RetryPolicy
from gantry.prompt import PRECEDENCE
from gantry.session import SessionStore
from gantry.tools import Registry, Tool, mcp_source
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls

pytestmark = pytest.mark.anyio


def msg(text: str) -> Inbound:
    return Inbound(channel="test", chat_id="1", user_id="u", text=text)


def cfg(**env: str) -> Any:
    return load({"LLM_BASE_URL": "http://127.0.0.1:1/v1", "LLM_API_KEY": "k", "LLM_MODEL": "m",
                 "CHANNEL": "stdio", **env})


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as f:
        yield f


@pytest.fixture
async def setup(
    fake: FakeOpenAI, tmp_path: Path
) -> AsyncIterator[Any]:
    made: list[Any] = []

    async def make(host: Any = None, **env: str) -> tuple[Agent, MemoryParts, Registry]:
        async def no_sleep(_: float) -> None:
            return None

        conn = db.connect(tmp_path / "g.db")
        provider = Provider(fake.base_url, "sk-test", "fake-model",
                            retry=RetryPolicy(max_attempts=1, deadline=5), sleep=no_sleep)
        made.append((conn, provider))
        registry = Registry()
        parts = await build(cfg(**env), conn, registry, provider, lambda: "You are Tim.", host)
        agent = Agent(model=provider, sessions=SessionStore(conn), tools=registry,
                      persona=lambda: "You are Tim.", private_status_lines=parts.status_lines,
                      max_tokens=2_000)
        if parts.memory_block is not None:
            agent.memory_block = parts.memory_block
        return agent, parts, registry

    yield make
    for conn, provider in made:
        await provider.aclose()
        conn.close()


async def test_store_then_recall_across_new(fake: FakeOpenAI, setup: Any) -> None:
    agent, _parts, registry = await setup()
    assert registry.names() == ["memory_forget", "memory_recall", "memory_store"]
    fake.push(
        ToolCalls([Call("memory_store", {"kind": "person", "subject": "mom",
                                         "content": "prefers calls over texts"}, id="c1")]),
        Reply("noted"),
    )
    assert await agent(msg("remember: mom prefers calls")) == "noted"
    tool_msg = next(m for m in fake.last_request.messages if m["role"] == "tool")
    assert tool_msg["content"] == "stored #1: (person) mom: prefers calls over texts"
    await agent(msg("/new"))
    fake.push(ToolCalls([Call("memory_recall", {"query": "mom texts"}, id="c2")]), Reply("calls"))
    assert await agent(msg("how should I reach mom?")) == "calls"
    first = fake.requests[-2].messages
    turn = first[-1]["content"]  # recalled for this message: after it, with the time
    assert "[memory]\n- (person) mom: prefers calls over texts" in turn
    assert PRECEDENCE in turn and "[memory]" not in first[0]["content"]
    assert [m["role"] for m in first] == ["system", "user"]  # /new wiped history, not memory
    recalled = next(m for m in fake.last_request.messages if m["role"] == "tool")["content"]
    assert recalled.startswith("#1 (person) mom: prefers calls over texts (")
    status = await agent(msg("/status"))
    assert "memory (builtin): 0 facts, 0 preferences, 1 person" in status


def in_group(text: str) -> Inbound:
    return Inbound(channel="test", chat_id="-100", user_id="u", text=text, group=True)


def offered(request: Any) -> list[str]:
    return [t["function"]["name"] for t in request.body.get("tools", [])]


async def test_memory_tools_run_in_private_and_are_neither_offered_nor_run_in_a_group(
    fake: FakeOpenAI, setup: Any
) -> None:
    """docs/telegram.md: nothing remembered in private reaches a reply the group reads, and
    the group cannot change the owner's memory. Checked on the requests the model server got:
    a private turn offers and runs the memory tools; a group turn is offered none, and the
    calls the model makes anyway are refused, not run."""
    agent, parts, registry = await setup()

    async def clock(args: dict[str, Any]) -> str:
        return "noon"

    registry.register(
        Tool("clock__now", "the time", {"type": "object"}, clock, mcp_source("clock")))
    mom = {"kind": "person", "subject": "mom", "content": "prefers calls over texts"}
    fake.push(ToolCalls([Call("memory_store", mom, id="p1")]),
              ToolCalls([Call("memory_recall", {"query": "mom"}, id="p2")]), Reply("noted"))
    assert await agent(msg("remember: mom prefers calls")) == "noted"
    private = fake.requests[:3]
    assert offered(private[0]) == ["clock__now", "memory_forget", "memory_recall", "memory_store"]
    results = {m["tool_call_id"]: m["content"] for m in private[2].messages if m["role"] == "tool"}
    assert results["p1"] == "stored #1: (person) mom: prefers calls over texts"
    assert results["p2"].startswith("#1 (person) mom: prefers calls over texts (")

    fake.push(
        ToolCalls([Call("memory_recall", {"query": "mom"}, id="g1"),
                   Call("memory_store", {"kind": "fact", "subject": "group",
                                         "content": "said in the group"}, id="g2"),
                   Call("memory_forget", {"query": "mom"}, id="g3"),
                   Call("clock__now", {}, id="g4")]),
        Reply("it is noon"),
    )
    assert await agent(in_group("@bot what does mom prefer, and the time?")) == "it is noon"
    group = fake.requests[3:]
    assert len(group) == 2
    for request in group:
        assert offered(request) == ["clock__now"]
        assert "[memory]" not in str(request.messages)
    results = {m["tool_call_id"]: m["content"] for m in group[1].messages if m["role"] == "tool"}
    for call_id, tool in (("g1", "memory_recall"), ("g2", "memory_store"),
                          ("g3", "memory_forget")):
        assert results[call_id].startswith(f"error: {tool} is not available in this chat"), results
        assert "prefers calls" not in results[call_id]
    assert results["g4"] == "noon"
    # nothing was run: the private row is still there, the group's statement was not stored
    assert [r.line() for r in await parts.memory.recall("mom group said")] == [
        "(person) mom: prefers calls over texts"]


async def test_group_status_shows_no_memory_counts_and_the_group_tools(
    fake: FakeOpenAI, setup: Any
) -> None:
    """The row counts are the owner's private data: a group's /status says memory is not
    used there, and counts the tools a group turn is offered (no memory_*)."""
    agent, parts, _registry = await setup()
    await parts.memory.store("person", "mom", "prefers calls over texts")
    private = await agent(msg("/status"))
    assert "memory (builtin): 0 facts, 0 preferences, 1 person" in private
    assert "\ntools offered: 3 (3 built in), ~" in private
    group = await agent(in_group("/status"))
    assert "memory (builtin)" not in group and "1 person" not in group
    assert "\nmemory: not used in group chats" in group
    assert "\ntools offered: 0 (0 built in), ~0 " in group
    assert fake.requests == []  # a command, not a model turn


async def test_forget_tool_and_bad_input_are_results_not_crashes(
    fake: FakeOpenAI, setup: Any
) -> None:
    agent, parts, _ = await setup()
    await parts.memory.store("fact", "car", "drives a red van")
    fake.push(
        ToolCalls([Call("memory_store", {"kind": "mood", "subject": "x", "content": "y"}, id="a"),
                   Call("memory_forget", {}, id="b")]),
        ToolCalls([Call("memory_forget", {"id": "abc"}, id="c"),
                   Call("memory_recall", {"query": 'NEAR( "*'}, id="d"),
                   Call("memory_forget", {"id": 1}, id="e")]),
        Reply("done"),
    )
    assert await agent(msg("clean up")) == "done"
    results = {m["tool_call_id"]: m["content"]  # older results collapse, so read both rounds
               for r in fake.requests[-2:] for m in r.messages
               if m["role"] == "tool" and not m["content"].startswith("[tool ")}
    assert results["a"].startswith("error: kind must be one of")
    assert results["b"].startswith("error: give 'id'")
    assert results["c"].startswith("error: id must be a number")
    assert results["d"] == "no memories match 'NEAR( \"*'"
    assert results["e"] == f"deleted 1:\n#1 (fact) car: drives a red van ({results['e'][-11:-1]})"
    assert await parts.memory.recall("van") == []


async def test_hydration_counts_in_the_budget(fake: FakeOpenAI, setup: Any) -> None:
    agent, parts, _ = await setup()
    for i in range(40):
        await parts.memory.store("fact", f"s{i}", "x" * 200 + f" {i}")
    await agent(msg("a" * 1000))
    await agent(msg("b" * 1000))
    sent = fake.last_request.messages
    turn = sent[-1]["content"]  # the block rides at the end of the turn's message
    assert turn.count("\n- (fact)") == 30  # the block is capped
    # the block (~6.5k chars ≈ 1.6k tokens est.) leaves no room for old turns under 2k tokens
    assert [m["role"] for m in sent] == ["system", "user"]


async def test_disabled_means_nothing(fake: FakeOpenAI, setup: Any) -> None:
    agent, parts, registry = await setup(MEMORY_ENABLED="false")
    assert len(registry) == 0 and parts.memory_block is None and parts.tasks == []
    assert parts.status_lines == []
    await agent(msg("hello"))
    assert fake.last_request.messages[0]["content"] == "You are Tim."
    assert "tools" not in fake.last_request.body


async def test_consolidation_task_only_when_enabled(setup: Any) -> None:
    _, on, _ = await setup()
    _, off, _ = await setup(MEMORY_CONSOLIDATE_MINUTES="0")
    assert len(on.tasks) == 1 and off.tasks == []


async def test_mcp_backend_without_its_server_stops_boot(setup: Any) -> None:
    with pytest.raises(ValueError, match=r"MEMORY_BACKEND=mcp:mem needs MCP servers.*builtin"):
        await setup(MEMORY_BACKEND="mcp:mem")


class RestartingHost:
    """The MCP host's public API answering as it does while the memory server restarts."""

    def __init__(self, tools: tuple[str, ...]) -> None:
        self.listed = [SimpleNamespace(name=n) for n in tools]
        self.calls: list[str] = []

    def names(self) -> list[str]:
        return ["mem"]

    def tools(self, server: str) -> list[Any]:
        return self.listed

    def instructions(self, server: str) -> str:
        return ""

    async def call(self, server: str, tool: str, args: dict[str, Any]) -> CallResult:
        self.calls.append(tool)
        return CallResult("MCP server 'mem' is restarting; retry shortly", error=True)


@pytest.mark.parametrize("shape", [SHAPE_TOOLS, (*SHAPE_AIGPT, "read_core")])
async def test_a_down_mcp_backend_costs_the_block_and_tool_errors_not_the_reply(
    fake: FakeOpenAI, setup: Any, caplog: pytest.LogCaptureFixture, shape: tuple[str, ...]
) -> None:
    caplog.set_level(logging.INFO)
    host = RestartingHost(shape)
    agent, _parts, _ = await setup(host, MEMORY_BACKEND="mcp:mem")
    fake.push(ToolCalls([Call("memory_recall", {"query": "mom"}, id="r"),
                         Call("memory_store", {"kind": "fact", "subject": "a", "content": "b"},
                              id="s"),
                         Call("memory_forget", {"query": "mom"}, id="f")]),
              Reply("memory is down"))
    assert await agent(msg("what about mom?")) == "memory is down"
    assert host.calls  # the backend was asked
    assert fake.requests[0].messages[0]["content"].startswith("You are Tim.")
    assert "[memory]" not in str(fake.requests[0].messages)
    results = {m["tool_call_id"]: m["content"] for m in fake.last_request.messages
               if m["role"] == "tool"}
    for call_id in "rsf":
        assert results[call_id].startswith("error: "), results
        assert "restarting" in results[call_id] and "MemoryInputError" not in results[call_id]
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
    assert "memory hydration skipped: the memory backend failed" in caplog.messages


def test_status_counts_are_plural_but_for_one() -> None:
    """Issue 36 item 13: '0 fact, 0 preference' read wrong."""
    counts = {"fact": 1, "preference": 0, "person": 2, "episode": 1, "insight": 3,
              "inactive": 4, "flagged": 1}
    assert counts_line(counts, "builtin") == (
        "memory (builtin): 1 fact, 0 preferences, 2 people, 1 episode, 3 insights; "
        "4 inactive, 1 flagged")
    plural = counts_line(dict.fromkeys(KINDS, 5), "builtin")
    assert plural.startswith("memory (builtin): 5 facts, 5 preferences, 5 people, 5 episodes, "
                             "5 insights;")
