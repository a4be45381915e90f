"""Consolidation against the fake OpenAI server returning scripted JSON."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gantry import db
from gantry.memory.consolidate import (
    Consolidator,
    InvalidOutput,
    build_prompt,
    parse_plan,
)
from gantry.memory.store import MemoryStore
from gantry.model.client import Provider
from gantry.model.retry import RetryPolicy
from tests.fakes.openai import Echo, FakeOpenAI, HTTPError, Reply

pytestmark = pytest.mark.anyio
PERSONA = "# USER.md\nChris is vegetarian."


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as f:
        yield f


@pytest.fixture
async def parts(
    fake: FakeOpenAI, tmp_path: Path
) -> AsyncIterator[tuple[MemoryStore, Consolidator]]:
    async def no_sleep(_: float) -> None:
        return None

    conn = db.connect(tmp_path / "g.db")
    provider = Provider(fake.base_url, "sk-test", "fake-model",
                        retry=RetryPolicy(max_attempts=1, deadline=5), sleep=no_sleep)
    store = MemoryStore(conn)
    yield store, Consolidator(store, provider, lambda: PERSONA)
    await provider.aclose()
    conn.close()


def plan(**kw: Any) -> Reply:
    return Reply("```json\n" + json.dumps(kw) + "\n```")


async def test_dedupes_links_and_marks_episodes(
    fake: FakeOpenAI, parts: tuple[MemoryStore, Consolidator]
) -> None:
    store, c = parts
    a, _ = store.add("preference", "chris", "likes tea")
    b, _ = store.add("preference", "chris", "enjoys green tea")
    ep1, _ = store.add("episode", "chris", "had sencha again this morning")
    ep2, _ = store.add("episode", "chris", "bought more sencha")
    fake.push(plan(memories=[
        {"kind": "preference", "subject": "chris", "content": "drinks green tea (sencha) daily",
         "confidence": 0.9, "supersedes": [int(a.id), int(b.id), 999]},
        {"kind": "insight", "subject": "chris", "content": "buys tea when it runs out"},
    ]))
    out = await c.run_once()
    assert out.status == "done" and len(out.created) == 2
    assert set(out.linked) == {int(a.id), int(b.id)}  # 999 was not shown, so not touched
    new = store.get(out.created[0])
    assert new is not None and new.source == "consolidation" and new.confidence == 0.9
    assert store.get(int(a.id)).superseded_by == out.created[0]  # type: ignore[union-attr]
    assert {r.id for r in store.search("tea")} == {str(i) for i in out.created}  # a, b inactive
    states = dict(store.conn.execute("SELECT id, consolidation FROM memory WHERE kind='episode'"))
    assert states == {int(ep1.id): "done", int(ep2.id): "done"}
    sent = fake.last_request.messages[1]["content"]
    assert "Chris is vegetarian" in sent and f"#{ep1.id} (episode) chris" in sent
    assert (await c.run_once()).status == "idle"  # nothing pending: no model call
    assert len(fake.requests) == 1


async def test_contradiction_is_flagged_not_stored(
    fake: FakeOpenAI, parts: tuple[MemoryStore, Consolidator]
) -> None:
    store, c = parts
    ep, _ = store.add("episode", "dinner", "chris ordered a steak")
    fake.push(plan(contradictions=[{"statement": "chris eats meat",
                                    "persona_says": "Chris is vegetarian",
                                    "source_ids": [int(ep.id)]}]))
    out = await c.run_once()
    assert out.status == "done" and out.created == () and len(out.flagged) == 1
    assert store.flags()[0][1:4] == ("chris eats meat", "Chris is vegetarian", f"[{ep.id}]")
    assert store.search("meat") == []  # nothing durable was written
    assert store.rows() == [ep]


async def test_garbage_is_retried_then_quarantined(
    fake: FakeOpenAI, parts: tuple[MemoryStore, Consolidator]
) -> None:
    store, c = parts
    ep, _ = store.add("episode", "x", "something happened")
    fake.push(Reply("sure! here you go"), Reply('{"memories": [{"kind": "mood"'),
              Reply('{"memories": [{"kind": "fact", "subject": "a:b", "content": "x"}]}'))
    out = await c.run_once()
    assert out.status == "quarantined" and len(fake.requests) == 3
    q = list(store.conn.execute("SELECT memory_ids, error, output FROM memory_quarantine"))
    assert json.loads(q[0][0]) == [int(ep.id)] and "':'" in q[0][1] and "a:b" in q[0][2]
    state = store.conn.execute("SELECT consolidation FROM memory WHERE id = ?", (int(ep.id),))
    assert state.fetchone()[0] == "quarantined"
    assert (await c.run_once()).status == "idle"  # quarantined work is never retried


async def test_garbage_then_valid_recovers(
    fake: FakeOpenAI, parts: tuple[MemoryStore, Consolidator]
) -> None:
    store, c = parts
    store.add("episode", "x", "met Ana at the climbing gym")
    fake.push(Reply("not json"), plan(memories=[{"kind": "person", "subject": "ana",
                                                 "content": "climbs at the same gym"}]))
    out = await c.run_once()
    assert out.status == "done" and len(out.created) == 1 and len(fake.requests) == 2


async def test_provider_failures_defer_then_quarantine(
    fake: FakeOpenAI, parts: tuple[MemoryStore, Consolidator]
) -> None:
    store, c = parts
    store.add("episode", "x", "a thing")
    for _ in range(3):
        fake.push(HTTPError(500))
    assert (await c.run_once()).status == "deferred"
    assert (await c.run_once()).status == "deferred"
    assert (await c.run_once()).status == "quarantined"
    assert (await c.run_once()).status == "idle"


async def test_session_summaries_are_read_once(
    fake: FakeOpenAI, parts: tuple[MemoryStore, Consolidator]
) -> None:
    store, c = parts
    store.conn.execute("INSERT INTO session_summary VALUES ('s1', 'Chris plans a trip to Oslo', 5)")
    fake.push(plan(memories=[{"kind": "fact", "subject": "chris",
                              "content": "plans a trip to Oslo"}]))
    assert (await c.run_once()).status == "done"
    assert "trip to Oslo" in fake.last_request.messages[1]["content"]
    assert (await c.run_once()).status == "idle"


async def test_never_runs_concurrently(
    fake: FakeOpenAI, parts: tuple[MemoryStore, Consolidator]
) -> None:
    store, c = parts
    store.add("episode", "x", "slow day")
    fake.push(Reply('{"memories": []}', delay=0.5))
    results = []

    async def go() -> None:
        results.append((await c.run_once()).status)

    async with anyio.create_task_group() as tg:
        tg.start_soon(go)
        await anyio.sleep(0.1)
        tg.start_soon(go)
    assert sorted(results) == ["busy", "done"] and len(fake.requests) == 1


async def test_every_contains_failures(parts: tuple[MemoryStore, Consolidator]) -> None:
    _, c = parts
    calls = 0

    async def boom() -> Any:
        nonlocal calls
        calls += 1
        raise RuntimeError("disk on fire")

    c.run_once = boom  # type: ignore[method-assign]
    with anyio.move_on_after(0.35):
        await c.every(0.1)
    assert calls >= 2  # the loop survived the first failure


def test_build_prompt_lists_everything() -> None:
    text = build_prompt("", [], [], ["s"])
    assert "(no persona files)" in text and "- s" in text


@given(st.text(max_size=200))
def test_parse_plan_raises_only_invalid_output(text: str) -> None:
    with contextlib.suppress(InvalidOutput):
        parse_plan(text)


def test_echo_default_is_invalid() -> None:
    assert Echo().delay == 0.0
    with pytest.raises(InvalidOutput):
        parse_plan("echo: hello")
