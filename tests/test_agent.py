"""The agent loop against the fake OpenAI server over real loopback HTTP."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gantry import db
from gantry.agent import CAP_NOTE, TURN_FAILED, Agent
from gantry.channel.base import Inbound
from gantry.model.client import Provider
from gantry.model.retry import RetryPolicy
from gantry.session import SessionStore
from gantry.tools import Registry, Tool, ToolError, mcp_source
from tests.fakes.openai import Call, FakeOpenAI, HTTPError, Reply, ToolCalls

pytestmark = pytest.mark.anyio


def msg(text: str, chat: str = "1") -> Inbound:
    return Inbound(channel="test", chat_id=chat, user_id="u", text=text)


_providers: list[Provider] = []


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as f:
        yield f
        while _providers:
            await _providers.pop().aclose()


def make_agent(fake: FakeOpenAI, tmp_path: Path, **kw: Any) -> Agent:
    async def no_sleep(_: float) -> None:
        return None

    provider = Provider(fake.base_url, "sk-test-123456", "fake-model",
                        retry=RetryPolicy(max_attempts=2, deadline=5), sleep=no_sleep)
    _providers.append(provider)
    registry = Registry(result_max_chars=kw.pop("result_max_chars", 16_000))

    async def add(args: dict[str, Any]) -> str:
        return str(args["a"] + args["b"])

    async def broken(args: dict[str, Any]) -> str:
        raise ToolError("the service is down")

    async def big(args: dict[str, Any]) -> str:
        return "x" * 50_000

    calc = mcp_source("calc")
    registry.register(Tool("calc__add", "add two numbers", {"type": "object"}, add, calc))
    registry.register(Tool("calc__broken", "always fails", {"type": "object"}, broken, calc))
    registry.register(Tool("calc__big", "huge output", {"type": "object"}, big, calc))
    return Agent(model=provider, sessions=SessionStore(db.connect(tmp_path / "g.db")),
                 tools=registry, persona=lambda: "You are Tim.", **kw)


async def test_plain_turn_and_history(fake: FakeOpenAI, tmp_path: Path) -> None:
    agent = make_agent(fake, tmp_path)
    assert await agent(msg("hello")) == "echo: hello"
    assert await agent(msg("again")) == "echo: again"
    sent = fake.last_request.messages
    assert sent[0] == {"role": "system", "content": "You are Tim."}
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "user"]
    assert fake.last_request.body["tools"][0]["type"] == "function"


async def test_tool_round_then_answer(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.push(ToolCalls([Call("calc__add", {"a": 2, "b": 3}, id="c1"),
                         Call("calc__broken", {}, id="c2")]), Reply("five"))
    agent = make_agent(fake, tmp_path)
    assert await agent(msg("2+3?")) == "five"
    tool_msgs = [m for m in fake.last_request.messages if m["role"] == "tool"]
    assert tool_msgs == [
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
        {"role": "tool", "tool_call_id": "c2", "content": "error: the service is down"},
    ]
    _, stored = agent.sessions.load("test:1")
    assert [type(m).__name__ for m in stored] == [
        "UserMessage", "AssistantMessage", "ToolMessage", "ToolMessage", "AssistantMessage"]


async def test_malformed_arguments_become_error_result(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.push(ToolCalls([Call("calc__add", '{"a": 2, "b":', id="c1")]), Reply("sorry"))
    agent = make_agent(fake, tmp_path)
    assert await agent(msg("add")) == "sorry"
    tool = next(m for m in fake.last_request.messages if m["role"] == "tool")
    assert tool["content"].startswith("error: arguments are not valid JSON")


async def test_unknown_tool_and_truncation(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.push(ToolCalls([Call("nope__x", {}, id="c1"), Call("calc__big", {}, id="c2")]),
              Reply("ok"))
    agent = make_agent(fake, tmp_path, result_max_chars=1000)
    await agent(msg("go"))
    tools = [m["content"] for m in fake.last_request.messages if m["role"] == "tool"]
    assert "unknown tool 'nope__x'" in tools[0]
    assert len(tools[1]) <= 1000 and "truncated" in tools[1]


async def test_iteration_cap_ends_with_call_without_tools(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.push(*[ToolCalls([Call("calc__add", {"a": 1, "b": 1}, id=f"c{i}")]) for i in range(3)],
              Reply("final answer"))
    agent = make_agent(fake, tmp_path, max_iterations=3)
    assert await agent(msg("loop")) == "final answer"
    last = fake.last_request.body
    assert "tools" not in last
    assert last["messages"][-1] == {"role": "user", "content": CAP_NOTE}
    assert len(fake.requests) == 4


async def test_model_failure_gives_clear_reply(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.push(HTTPError(500, "upstream exploded"), HTTPError(500, "upstream exploded"))
    agent = make_agent(fake, tmp_path)
    reply = await agent(msg("hi"))
    assert reply.startswith("Sorry — the model call failed") and "500" in reply
    assert "sk-test-123456" not in reply
    assert await agent(msg("hi again")) == "echo: hi again"
    # the failed turn's user message was kept, so no message is lost
    roles = [m["role"] for m in fake.last_request.messages]
    assert roles == ["system", "user", "user"]


async def test_commands(fake: FakeOpenAI, tmp_path: Path) -> None:
    agent = make_agent(fake, tmp_path)
    await agent(msg("one"))
    status = await agent(msg("/status"))
    assert "history: 2 messages" in status and "(est.)" in status
    assert "\ntools offered: 3 (0 built in + 3 MCP), ~" in status
    assert "model: fake-model" in status and "summary: no" in status
    assert "/new" in await agent(msg("/help"))
    await agent(msg("/new@gantry_bot"))
    assert "history: 0 messages" in await agent(msg("/status"))
    assert len(fake.requests) == 1


async def test_an_unknown_command_is_answered_not_sent_to_the_model(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    """Telegram too: a typo such as /stauts gets the pointer to /help, the model is not called;
    a path is still a message."""
    agent = make_agent(fake, tmp_path)
    assert await agent(msg("/stauts")) == "Unknown command /stauts. /help lists the commands."
    assert await agent(msg("/Remind@gantry_bot me")) == (
        "Unknown command /remind. /help lists the commands.")
    assert fake.requests == []
    assert await agent(msg("/usr/bin/env is broken")) == "echo: /usr/bin/env is broken"
    assert len(fake.requests) == 1


@contextlib.asynccontextmanager
async def folding(agent: Agent) -> AsyncIterator[None]:
    """Run the agent's background folder, as `gantry run` does."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.run_folds)
        yield
        tg.cancel_scope.cancel()


async def settled(agent: Agent) -> None:
    with anyio.fail_after(10):
        while agent.fold_pending:
            await anyio.sleep(0.01)


async def test_summary_folds_dropped_turns(fake: FakeOpenAI, tmp_path: Path) -> None:
    agent = make_agent(fake, tmp_path, max_messages=6)
    async with folding(agent):
        await _summary_folds_dropped_turns(agent, fake)


async def _summary_folds_dropped_turns(agent: Agent, fake: FakeOpenAI) -> None:
    for i in range(3):
        await agent(msg(f"m{i}"))
    fake.push(Reply("echo: m3"), Reply("they counted m0 to m3"))  # turn, then summariser
    await agent(msg("m3"))  # 8 messages > 6 → fold down to ≤ 4 (75%)
    await settled(agent)
    assert agent.sessions.summary("test:1") == "they counted m0 to m3"
    n, _ = agent.sessions.stats("test:1")
    assert n <= 4
    summarise_req = fake.requests[-1].messages
    assert "m0" in summarise_req[1]["content"]
    await agent(msg("m4"))
    system = fake.last_request.messages[0]["content"]
    assert "[summary of earlier conversation]\nthey counted m0 to m3" in system


async def test_summary_failure_keeps_history(fake: FakeOpenAI, tmp_path: Path) -> None:
    agent = make_agent(fake, tmp_path, max_messages=4)
    async with folding(agent):
        for i in range(2):
            await agent(msg(f"m{i}"))
        fake.push(Reply("echo: m2"), HTTPError(400, "no summaries today"))
        await agent(msg("m2"))
        await settled(agent)
    assert len(fake.requests) == 4  # the summariser was asked
    assert agent.sessions.stats("test:1")[0] == 6  # nothing deleted without a summary
    assert agent.sessions.summary("test:1") == ""


async def test_fold_runs_after_the_reply_and_outside_the_turn(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    """A slow summariser neither delays the reply nor keeps the turn (drain) busy."""
    agent = make_agent(fake, tmp_path, max_messages=4)
    async with folding(agent):
        for i in range(2):
            await agent(msg(f"m{i}"))
        fake.push(Reply("echo: m2"), Reply("a summary", delay=2.0))
        started = anyio.current_time()
        assert await agent(msg("m2")) == "echo: m2"
        assert anyio.current_time() - started < 1.5  # not waiting for the summariser
        with anyio.fail_after(5):
            while len(fake.requests) < 4:
                await anyio.sleep(0.01)
        assert agent.fold_pending and not agent.busy  # folding, yet no turn in flight
        with anyio.fail_after(1):
            await agent.wait_idle()  # a shutdown drain would not wait for the fold
        await settled(agent)
    assert agent.sessions.summary("test:1") == "a summary"


async def test_fold_after_reset_is_dropped(fake: FakeOpenAI, tmp_path: Path) -> None:
    """/new while the summary is being written: the stale summary is not resurrected."""
    agent = make_agent(fake, tmp_path, max_messages=4)
    async with folding(agent):
        for i in range(2):
            await agent(msg(f"m{i}"))
        fake.push(Reply("echo: m2"), Reply("stale summary", delay=1.0))
        await agent(msg("m2"))
        with anyio.fail_after(5):
            while len(fake.requests) < 4:
                await anyio.sleep(0.01)
        await agent(msg("/new"))
        await settled(agent)
    assert agent.sessions.summary("test:1") == ""
    assert agent.sessions.stats("test:1") == (0, 0)


async def test_one_turn_at_a_time_per_session(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.push(Reply("slow", delay=0.5))
    agent = make_agent(fake, tmp_path)
    order: list[str] = []

    async def send(text: str, chat: str) -> None:
        order.append(await agent(msg(text, chat)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(send, "a", "1")
        await anyio.sleep(0.1)
        tg.start_soon(send, "b", "1")
        await anyio.sleep(0.1)
        tg.start_soon(send, "c", "2")
    # chat 2 ran while chat 1's slow turn was in flight; chat 1's turns stayed in order
    assert order == ["echo: c", "slow", "echo: b"]


async def test_streaming_turn(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.push(ToolCalls([Call("calc__add", {"a": 1, "b": 2}, id="c1")], text="let me see"),
              Reply("three it is", chunk_size=3))
    agent = make_agent(fake, tmp_path)
    events: list[str] = []

    class Stream:
        async def write(self, delta: str) -> None:
            events.append(delta)

        async def discard(self) -> None:
            events.append("<discard>")

        async def finish(self, final_text: str) -> None:
            events.append(f"<finish {final_text}>")

    reply = await agent(msg("1+2"), Stream())
    assert reply == "three it is"
    assert "".join(events) == "let me see<discard>three it is"


async def test_group_messages_get_no_memory_block(fake: FakeOpenAI, tmp_path: Path) -> None:
    recalled: list[str] = []

    async def memory(session_id: str, text: str) -> str:
        recalled.append(text)
        return "Remembered: the user's bank is ExampleBank."

    agent = make_agent(fake, tmp_path, memory_block=memory)
    assert await agent(msg("in private")) == "echo: in private"
    assert "ExampleBank" in fake.last_request.messages[-1]["content"]  # the turn's footer
    group = Inbound(channel="test", chat_id="-100", user_id="u", text="in a group", group=True)
    assert await agent(group) == "echo: in a group"
    assert "ExampleBank" not in str(fake.last_request.messages)
    assert recalled == ["in private"]


async def test_unexpected_exception_is_contained_and_logged(
    fake: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Anything a turn raises (here: a reply stream that breaks) ends that turn only, with
    a short apology and one error record carrying the traceback."""

    class Broken:
        async def write(self, delta: str) -> None:
            raise RuntimeError("the stream broke")

        async def discard(self) -> None:
            raise RuntimeError("still broken")

        async def finish(self, final_text: str) -> None:
            return None

    agent = make_agent(fake, tmp_path)
    caplog.set_level(logging.INFO)
    assert await agent(msg("hi"), Broken()) == TURN_FAILED
    failed = [r for r in caplog.records if r.getMessage() == "turn failed"]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert failed[0].levelno == logging.ERROR
    assert await agent(msg("hi again")) == "echo: hi again"  # the agent lives on
    assert not agent.busy


async def test_locks_do_not_grow_with_sessions(fake: FakeOpenAI, tmp_path: Path) -> None:
    agent = make_agent(fake, tmp_path)
    fake.push(Reply("slow", delay=0.3))
    async with anyio.create_task_group() as tg:
        for chat in range(30):
            tg.start_soon(agent, msg("x", chat=str(chat)))
        tg.start_soon(agent, msg("y", chat="0"))  # a waiter on a held lock
        await anyio.sleep(0.1)
        assert 0 < len(agent._locks) <= 30
    assert agent._locks == {}


async def test_many_tool_calls_in_one_turn_all_reach_the_model(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    """Six rounds in one turn: the last model call still sees every result in full."""
    fake.push(*[ToolCalls([Call("calc__add", {"a": k, "b": 1000}, id=f"c{k}")])
                for k in range(6)], Reply("done"))
    agent = make_agent(fake, tmp_path)
    assert await agent(msg("add a lot")) == "done"
    results = [m["content"] for m in fake.last_request.messages if m["role"] == "tool"]
    assert results == [str(k + 1000) for k in range(6)]
    await agent(msg("and now?"))  # the next turn: earlier results may be collapsed
    later = [m["content"] for m in fake.last_request.messages if m["role"] == "tool"]
    assert sum("truncated" in c for c in later) == 2


# ----------------------------------------------------------------------------- rounds


async def test_tool_calls_of_one_message_run_concurrently_results_in_model_order(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    agent = make_agent(fake, tmp_path)
    finished: list[str] = []
    both_running = anyio.Event()
    running = 0

    async def slow(args: dict[str, Any]) -> str:
        nonlocal running
        running += 1
        if running == 2:
            both_running.set()
        with anyio.fail_after(5):  # sequential calls would never see both running
            await both_running.wait()
        await anyio.sleep(args["delay"])
        finished.append(args["tag"])
        return args["tag"]

    agent.tools.register(Tool("t__slow", "slow", {"type": "object"}, slow, mcp_source("t")))
    fake.push(ToolCalls([Call("t__slow", {"delay": 0.3, "tag": "first"}, id="a"),
                         Call("t__slow", {"delay": 0.0, "tag": "second"}, id="b")]),
              Reply("done"))
    assert await agent(msg("go")) == "done"
    assert finished == ["second", "first"]  # ran together: the quick one finished first
    tools = [m for m in fake.last_request.messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tools] == [("a", "first"), ("b", "second")]
    # Stored as they finished, replayed in the model's order.
    _ids, stored = agent.sessions.load("test:1")
    from gantry.model.messages import ToolMessage

    assert [m.tool_call_id for m in stored if isinstance(m, ToolMessage)] == ["b", "a"]
    fake.push(Reply("ok"))
    await agent(msg("next"))
    tools = [m for m in fake.last_request.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["a", "b"]


async def test_a_retried_turn_resumes_and_reruns_no_finished_call(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    """A crash mid-turn (simulated by a cancelled turn) leaves finished calls recorded."""
    agent = make_agent(fake, tmp_path)
    ran: list[str] = []

    async def effect(args: dict[str, Any]) -> str:
        ran.append(args["n"])
        if args["n"] == "3-hang":
            await anyio.sleep(3600)
        return f"did {args['n']}"

    agent.tools.register(
        Tool("t__effect", "side effect", {"type": "object"}, effect, mcp_source("t")))
    fake.push(
        ToolCalls([Call("t__effect", {"n": "1"}, id="r1")]),
        ToolCalls([Call("t__effect", {"n": "2"}, id="r2a"),
                   Call("t__effect", {"n": "3-hang"}, id="r2b")]),
    )
    with anyio.move_on_after(1.5):  # the "kill" lands while round 2's second call hangs
        await agent(msg("book it"))
    assert ran == ["1", "2", "3-hang"]

    async def effect_ok(args: dict[str, Any]) -> str:
        ran.append(args["n"])
        return f"did {args['n']}"

    agent.tools.replace_source(
        mcp_source("t"), [Tool("t__effect", "e", {"type": "object"}, effect_ok, mcp_source("t"))])
    fake.push(Reply("booked"))
    assert await agent(msg("book it")) == "booked"
    assert ran == ["1", "2", "3-hang", "3-hang"]  # only the unfinished call ran again
    sent = fake.last_request.messages
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant",
                                        "tool", "tool"]
    assert [m["content"] for m in sent if m["role"] == "tool"] == ["did 1", "did 2", "did 3-hang"]
    assert len(fake.requests) == 3  # the retried turn did not ask the model to redo rounds


def test_resume_point_is_pure_and_strict() -> None:
    from gantry.agent import resume_point, unanswered_calls
    from gantry.model.messages import (
        AssistantMessage,
        FunctionCall,
        ToolCall,
        ToolMessage,
        UserMessage,
    )

    u = UserMessage("x")
    call = AssistantMessage(content=None, tool_calls=[ToolCall("c1", FunctionCall("f", "{}")),
                                                      ToolCall("c2", FunctionCall("f", "{}"))])
    assert resume_point([], u) is None
    assert resume_point([u], u) == 0
    assert resume_point([u, call], u) == 1
    assert resume_point([u, call, AssistantMessage(content="done")], u) is None
    assert resume_point([UserMessage("y"), call], u) is None
    half = [u, call, ToolMessage(tool_call_id="c2", content="r")]
    assert [c.id for c in unanswered_calls(half)] == ["c1"]
    assert unanswered_calls([u]) == []


async def test_final_answer_and_the_channel_record_commit_together(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    """on_answer runs inside the transaction that records the answer: seen from another
    connection both appear at once, and if the channel's write fails the answer is not kept
    either, so the retried turn resumes from its recorded tool round (no call re-run)."""
    agent = make_agent(fake, tmp_path)
    other = db.connect(tmp_path / "g.db")
    seen: list[int] = []

    def record(reply: str) -> None:
        conn = agent.sessions.conn
        conn.execute("CREATE TABLE IF NOT EXISTS replies (text TEXT)")  # type: ignore[attr-defined]
        conn.execute("INSERT INTO replies VALUES (?)", (reply,))  # type: ignore[attr-defined]
        seen.append(other.execute("SELECT count(*) FROM session_message "
                                  "WHERE role = 'assistant'").fetchone()[0])  # type: ignore[index]

    assert await agent(Inbound(channel="test", chat_id="1", user_id="u", text="hi",
                               on_answer=record)) == "echo: hi"
    assert seen == [0]  # not committed before the channel's write
    assert other.execute("SELECT text FROM replies").fetchall() == [("echo: hi",)]

    def broken(reply: str) -> None:
        raise OSError("disk full")

    fake.push(ToolCalls([Call("calc__add", {"a": 1, "b": 2}, id="c1")]), Reply("three"))
    failed = Inbound(channel="test", chat_id="1", user_id="u", text="1+2?", on_answer=broken)
    assert await agent(failed) == TURN_FAILED
    _, stored = agent.sessions.load("test:1")
    assert [type(m).__name__ for m in stored][-3:] == [
        "UserMessage", "AssistantMessage", "ToolMessage"]  # no answer without its record
    assert await agent(msg("1+2?")) == "echo: 1+2?"
    assert len(fake.requests) == 4  # hi, the tool round, "three", the resumed answer
    assert [m["role"] for m in fake.last_request.messages][-3:] == ["user", "assistant", "tool"]
