"""The usage ledger against the fake model: one row per HTTP attempt, the tokens the server
reported (or an estimate, marked), closed with what the reply became, lost rows billed once."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gantry import config, db
from gantry.agent import Agent
from gantry.channel.base import Inbound
from gantry.model.client import Done, Provider
from gantry.model.errors import ProviderError
from gantry.model.ledger import Meter, Tab, attributed, settle_lost, start
from gantry.model.messages import UserMessage
from gantry.model.retry import RetryPolicy
from gantry.model.spend import breakdown, spent
from gantry.model.usage_view import reply, since_of
from gantry.prices import Price, PricesError, cost, parse_prices
from gantry.session import SessionStore
from gantry.tools import Registry, Tool, mcp_source
from tests.fakes.openai import Call, CutStream, FakeOpenAI, HTTPError, Reply, ToolCalls

pytestmark = pytest.mark.anyio

PRICES = {"fake-model": Price(1.0, 0.25, 4.0)}


async def _no_sleep(_: float) -> None:
    return None


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as f:
        yield f


@pytest.fixture
def conn(tmp_path: Path) -> Any:
    c = db.connect(tmp_path / "g.db")
    yield c
    c.close()


def provider(fake: FakeOpenAI, conn: Any) -> Provider:
    return Provider(fake.base_url, "sk-test", "fake-model", meter=Meter(conn, PRICES),
                    retry=RetryPolicy(max_attempts=3, deadline=10), sleep=_no_sleep)


def rows(conn: Any) -> list[dict[str, Any]]:
    cur = conn.execute("SELECT * FROM usage ORDER BY id")
    names = [d[0] for d in cur.getdescription()]
    return [dict(zip(names, r, strict=True)) for r in cur]


def closed(conn: Any, completion: Any) -> None:
    tab = Tab(conn)
    tab.add(completion.charge)
    with conn:
        tab.settle()


async def streamed(p: Provider, text: str) -> Any:
    done = None
    async for event in p.stream([UserMessage(text)]):
        if isinstance(event, Done):
            done = event.completion
    return done


async def test_reported_usage_is_the_row(fake: FakeOpenAI, conn: Any) -> None:
    fake.cached_tokens = 3
    async with provider(fake, conn) as p:
        with attributed("cron:7", "test:1"):
            done = await p.complete([UserMessage("hello there, how are you today?")])
    (row,) = rows(conn)
    assert row["state"] == "open"  # committed before the reply; closed by whoever stores it
    closed(conn, done)
    (row,) = rows(conn)
    reply_id, usage = fake.reported[-1]
    assert (row["state"], row["source"], row["chat"], row["model"]) == (
        "done", "cron:7", "test:1", "fake-model")
    assert row["endpoint"] == fake.base_url and row["reply_id"] == reply_id
    assert (row["prompt_tokens"], row["completion_tokens"], row["cached_tokens"]) == (
        usage["prompt_tokens"], usage["completion_tokens"], 3)
    assert row["estimated"] == 0
    assert row["cost"] == pytest.approx(cost(PRICES["fake-model"], usage["prompt_tokens"], 3,
                                             usage["completion_tokens"]))
    assert done.model == "fake-model" and done.endpoint == fake.base_url


async def test_missing_usage_is_estimated_and_marked(fake: FakeOpenAI, conn: Any) -> None:
    fake.report_usage = False
    async with provider(fake, conn) as p:
        done = await p.complete([UserMessage("x" * 400)])
    closed(conn, done)
    (row,) = rows(conn)
    assert row["estimated"] == 1 and not fake.reported
    assert row["prompt_tokens"] >= 100  # the request body, about 4 bytes a token
    assert row["completion_tokens"] == (len(done.text) + 3) // 4


@pytest.mark.parametrize("report", [True, False])
async def test_stream_with_and_without_a_usage_chunk(fake: FakeOpenAI, conn: Any,
                                                     report: bool) -> None:
    fake.report_usage = report
    fake.push(Reply("a streamed answer, in pieces", chunk_size=3))
    async with provider(fake, conn) as p:
        done = await streamed(p, "stream please")
    assert fake.last_request.body["stream_options"] == {"include_usage": True}
    closed(conn, done)
    (row,) = rows(conn)
    assert row["estimated"] == (0 if report else 1)
    if report:
        assert row["completion_tokens"] == fake.reported[-1][1]["completion_tokens"]
        assert row["reply_id"] == fake.reported[-1][0]
    else:
        assert row["completion_tokens"] == (len("a streamed answer, in pieces") + 3) // 4


async def test_each_attempt_is_a_row_and_a_failed_one_closes_at_once(fake: FakeOpenAI,
                                                                     conn: Any) -> None:
    fake.push(HTTPError(503), Reply("fine now"))
    async with provider(fake, conn) as p:
        done = await p.complete([UserMessage("hi")])
    closed(conn, done)
    failed, ok = rows(conn)
    assert (failed["state"], failed["prompt_tokens"], failed["completion_tokens"]) == (
        "failed", 0, 0)
    assert ok["state"] == "done" and len(fake.requests) == 2


async def test_a_cut_stream_is_failed_with_its_text_estimated(fake: FakeOpenAI,
                                                              conn: Any) -> None:
    fake.push(CutStream("partial text that never finishes", after_chunks=3, chunk_size=4))
    async with provider(fake, conn) as p:
        with pytest.raises(ProviderError):
            await streamed(p, "go")
    (row,) = rows(conn)
    assert row["state"] == "failed" and row["estimated"] == 1
    assert row["completion_tokens"] == 3  # 12 characters streamed before the cut
    assert row["prompt_tokens"] == row["prompt_estimate"] > 0


async def test_an_abandoned_stream_is_closed(fake: FakeOpenAI, conn: Any) -> None:
    fake.push(Reply("one two three four five six", chunk_size=2, chunk_delay=0.05))
    async with provider(fake, conn) as p:
        events = p.stream([UserMessage("go")])
        await anext(events)  # type: ignore[call-overload]
        await events.aclose()  # type: ignore[attr-defined]
    (row,) = rows(conn)
    assert row["state"] == "failed"


async def test_open_rows_become_lost_once(fake: FakeOpenAI, conn: Any) -> None:
    async with provider(fake, conn) as p:
        await p.complete([UserMessage("the answer is lost to a kill")])  # never stored
    assert settle_lost(conn, PRICES) == 1 and settle_lost(conn, PRICES) == 0
    (row,) = rows(conn)
    assert row["state"] == "lost" and row["estimated"] == 1
    assert row["prompt_tokens"] == row["prompt_estimate"] > 0
    assert row["cost"] == pytest.approx(row["prompt_tokens"] / 1e6)
    assert spent(conn, 0).calls == 1 and spent(conn, 0).lost == 1
    assert isinstance(start(conn, PRICES), Meter)


def agent_with(fake: FakeOpenAI, conn: Any, seen: list[str]) -> Agent:
    registry = Registry()

    async def add(args: dict[str, Any]) -> str:
        # The round's row was closed in the transaction that recorded the tool calls.
        seen.extend(r["state"] for r in rows(conn))
        return str(args["a"] + args["b"])

    registry.register(Tool("calc__add", "add", {"type": "object"}, add, mcp_source("calc")))
    return Agent(model=provider(fake, conn), sessions=SessionStore(conn), tools=registry,
                 persona=lambda: "You are Tim.")


async def test_a_turn_closes_each_call_with_what_it_made(fake: FakeOpenAI, conn: Any) -> None:
    seen: list[str] = []
    agent = agent_with(fake, conn, seen)
    fake.push(ToolCalls([Call("calc__add", {"a": 2, "b": 3})]), Reply("5"))
    assert await agent(Inbound(channel="test", chat_id="9", user_id="u", text="2+3?")) == "5"
    assert seen == ["done"]  # stored with the tool-call message, before the tool ran
    assert [(r["state"], r["source"], r["chat"]) for r in rows(conn)] == [
        ("done", "chat", "test:9"), ("done", "chat", "test:9")]
    assert sum(r["prompt_tokens"] for r in rows(conn)) == sum(
        u["prompt_tokens"] for _, u in fake.reported)
    msg = Inbound(channel="test", chat_id="9", user_id="u", text="x", source="cron:4",
                  scheduled=True)
    await agent(msg)
    assert rows(conn)[-1]["source"] == "cron:4"
    await agent.model.aclose()  # type: ignore[attr-defined]


async def test_usage_command_is_the_owners(fake: FakeOpenAI, conn: Any) -> None:
    async with provider(fake, conn) as p:
        closed(conn, await p.complete([UserMessage("hi")]))
    text = reply(conn, ZoneInfo("UTC"), "/usage", False, time.time())
    assert "1 calls" in text and "chat" in text
    assert "private chat" in reply(conn, ZoneInfo("UTC"), "/usage", True, time.time())


def test_days_are_the_users(conn: Any) -> None:
    meter = Meter(conn, {}, clock=lambda: 1_700_000_000.0 - 1_000)  # 21:36 UTC, 03:06 in Kolkata
    meter.record_call("m", "http://x/v1", prompt_chars=40, completion_chars=8)
    kolkata = ZoneInfo("Asia/Kolkata")
    (day,) = breakdown(conn, 0, None, "day", lambda t: __import__("datetime").datetime
                       .fromtimestamp(t, kolkata).strftime("%Y-%m-%d"))
    assert day.key == "2023-11-15" and day.spent.estimated == 1 and day.spent.cost == 0.0
    assert not day.spent.priced
    assert since_of("today", kolkata, 1_700_000_000.0) == 1_699_986_600.0


def test_autonomous_split(conn: Any) -> None:
    meter = Meter(conn, PRICES)
    for source in ("chat", "cron:1", "watch:2", "consolidation", "summary"):
        with attributed(source):
            meter.record_call("fake-model", "http://x", prompt_chars=400, completion_chars=40)
    assert spent(conn, 0, autonomous=True).calls == 3
    assert spent(conn, 0, autonomous=False).calls == 2
    whole = spent(conn, 0)
    assert whole.tokens == 5 * 110 and whole.cost == pytest.approx(5 * (100 + 40) / 1e6)
    assert spent(conn, 0, 1.0).calls == 0


@given(st.dictionaries(
    st.text("abcdefghijklmnopqrstuvwxyz0123456789-._:/", min_size=1, max_size=20),
    st.tuples(*[st.floats(0, 1000, allow_nan=False).map(lambda f: round(f, 4))] * 3),
    max_size=8))
def test_prices_round_trip(table: dict[str, tuple[float, float, float]]) -> None:
    text = "; ".join(f"{m}={a}/{b}/{c}" for m, (a, b, c) in table.items())
    assert parse_prices(text) == {m: Price(*v) for m, v in table.items()}


@pytest.mark.parametrize("bad", ["gpt", "gpt=1", "gpt=1/2/3/4", "=1/2", "gpt=a/b",
                                 "gpt=-1/0/0", "gpt=1/1/1;gpt=2/2/2", "gpt=inf/0/0"])
def test_bad_prices_are_refused_at_boot(bad: str) -> None:
    with pytest.raises(PricesError):
        parse_prices(bad)
    env = {"LLM_BASE_URL": "http://x/v1", "LLM_API_KEY": "k", "LLM_MODEL": "m",
           "CHANNEL": "stdio", "LLM_PRICES": bad}
    with pytest.raises(config.ConfigError, match="LLM_PRICES"):
        config.load(env)


def test_two_prices_charge_cached_as_input() -> None:
    assert parse_prices("llama3=0.5/2\nmeta/x:8b=1/0.1/3") == {
        "llama3": Price(0.5, 0.5, 2.0), "meta/x:8b": Price(1.0, 0.1, 3.0)}
    assert json.dumps(cost(None, 1, 0, 1)) == "null"


async def test_consolidation_is_counted_and_closed_with_its_rows(fake: FakeOpenAI,
                                                                 conn: Any) -> None:
    from gantry.memory.consolidate import Consolidator
    from gantry.memory.store import MemoryStore

    store = MemoryStore(conn)
    store.add("episode", "chris", "had sencha again")
    fake.push(Reply("not json"), Reply('{"memories": [{"kind": "preference", "subject": '
                                       '"chris", "content": "likes sencha"}]}'))
    async with provider(fake, conn) as p:
        out = await Consolidator(store, p, lambda: "P").run_once()
    assert out.status == "done"
    assert [(r["state"], r["source"], r["chat"]) for r in rows(conn)] == [
        ("done", "consolidation", None), ("done", "consolidation", None)]


async def test_a_fold_is_counted_as_summary(fake: FakeOpenAI, conn: Any) -> None:
    agent = Agent(model=provider(fake, conn), sessions=SessionStore(conn), tools=Registry(),
                  persona=lambda: "P", max_messages=4)
    for i in range(4):
        await agent(Inbound(channel="test", chat_id="5", user_id="u", text=f"message {i}"))
    fake.push(Reply("they talked"))
    await agent._fold("test:5")
    assert agent.sessions.summary("test:5") == "they talked"
    assert rows(conn)[-1]["source"] == "summary" and rows(conn)[-1]["chat"] == "test:5"
    assert {r["state"] for r in rows(conn)} == {"done"}
    await agent.model.aclose()  # type: ignore[attr-defined]


async def test_transcription_is_a_row(fake: FakeOpenAI, conn: Any, tmp_path: Path) -> None:
    from gantry.media.transcribe import Transcriber

    audio = tmp_path / "a.ogg"
    audio.write_bytes(b"OggS....")
    t = Transcriber(fake.base_url, "sk-test", "whisper-1", meter=Meter(conn, {}))
    try:
        fake.transcript = "hello there"  # type: ignore[attr-defined]
        assert await t(audio, "a.ogg", "audio/ogg") == "hello there"
        fake.transcribe_status = 503  # type: ignore[attr-defined]
        with pytest.raises(Exception, match="HTTP 503"):
            await t(audio, "a.ogg", "audio/ogg")
    finally:
        await t.aclose()
    done, failed = rows(conn)
    assert (done["source"], done["model"], done["state"], done["estimated"]) == (
        "transcription", "whisper-1", "done", 1)
    assert done["completion_tokens"] == 3 and done["endpoint"] == fake.base_url
    assert failed["state"] == "failed"


async def test_speech_is_a_row(conn: Any) -> None:
    from gantry.media.speech import Speaker, SpeechFailed

    async with FakeOpenAI() as llm:
        speaker = Speaker(llm.base_url, "sk-test", "tts-1", "nova", meter=Meter(conn, {}))
        try:
            await speaker("Hello there.")
            llm.speech_status = 503
            with pytest.raises(SpeechFailed, match="HTTP 503"):
                await speaker("again")
        finally:
            await speaker.aclose()
    done, failed = rows(conn)
    assert (done["source"], done["model"], done["state"], done["estimated"]) == (
        "speech", "tts-1", "done", 1)
    assert done["prompt_tokens"] > 0 and done["endpoint"] == llm.base_url
    assert (failed["source"], failed["state"]) == ("speech", "failed")


def test_transcription_usage_as_reported() -> None:
    from gantry.media.transcribe import transcript_usage

    usage, text = transcript_usage(b'{"text": "hi", "usage": {"type": "tokens", '
                                   b'"input_tokens": 51, "output_tokens": 2}}')
    assert (usage.prompt_tokens, usage.completion_tokens, text) == (51, 2, "hi")
    assert transcript_usage(b'{"text": "hi", "usage": {"type": "duration", "seconds": 3}}') == (
        None, "hi")
    assert transcript_usage(b"\xff not json") == (None, "")
    assert transcript_usage(None) == (None, "")
