"""The ticker with a controllable clock: fire, push, cancel, overlap, [silent], restarts.

A real Agent talks to the fake OpenAI server over loopback; the clock is a FakeClock the
test advances, so nothing waits for wall time. The channel is a recorder with the push
signature of the real channels (parts split at "|" to exercise partial delivery).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import pytest

from gantry import db
from gantry.agent import Agent
from gantry.channel.base import Inbound, Progress
from gantry.config import Config
from gantry.cron import Cron, setup, ticker
from gantry.cron.store import NOTICE_AFTER
from gantry.cron.ticker import MAX_TURN_ATTEMPTS
from gantry.model.client import Provider
from gantry.model.retry import RetryPolicy
from gantry.runtime import Turns
from gantry.session import SessionStore
from gantry.tools import CALLER, Registry
from tests.fakes.openai import Call, FakeOpenAI, HTTPError, Reply, ToolCalls

pytestmark = pytest.mark.anyio

T0 = 1_772_712_000.0  # 2026-03-05T12:00:00Z
SESSION = "rec:chat1"


class FakeClock:
    """Time moves only when the test says so; sleepers wake when it passes their deadline."""

    def __init__(self, t: float) -> None:
        self.t = t
        self._moved = anyio.Event()

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        until = self.t + seconds
        while self.t < until:
            moved = self._moved
            await moved.wait()

    def advance(self, seconds: float) -> None:
        self.t += seconds
        moved, self._moved = self._moved, anyio.Event()
        moved.set()


@dataclass
class Recorder:
    """A channel: pushes recorded; `fail` raises that many times first."""

    name: str = "rec"
    pushes: list[tuple[str, str]] = field(default_factory=list)
    fail: list[BaseException] = field(default_factory=list)

    def can_push(self, chat_id: str) -> bool:
        return chat_id != "group"

    async def push(
        self, chat_id: str, text: str, sent: int = 0, progress: Progress | None = None,
        origin: str = "scheduled",
    ) -> None:
        parts = text.split("|")
        for i in range(sent, len(parts)):
            if self.fail:
                raise self.fail.pop(0)
            self.pushes.append((chat_id, parts[i]))
            if progress is not None:
                progress(i + 1, len(parts))


@dataclass
class Rig:
    fake: FakeOpenAI
    clock: FakeClock
    channel: Recorder
    agent: Agent
    cron: Cron
    turns: Turns
    conn: Any

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(sql))

    async def say(self, text: str) -> str:
        return await self.turns.wrap(self.agent)(
            Inbound(channel="rec", chat_id="chat1", user_id="u", text=text), None)


async def until(cond: Callable[[], Any], what: str, timeout: float = 5.0) -> Any:
    with anyio.fail_after(timeout):
        while not (value := cond()):
            await anyio.sleep(0.01)
    assert value, what
    return value


async def settle() -> None:
    """Let the ticker observe the clock (it runs on the real loop)."""
    for _ in range(5):
        await anyio.sleep(0.01)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as f:
        yield f


@pytest.fixture
async def make(fake: FakeOpenAI, tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Rig]]]:
    """Build (and on restart, rebuild) the cron parts over one database file."""
    providers: list[Provider] = []

    async def build(**env: Any) -> Rig:
        async def no_sleep(_: float) -> None:
            return None

        conn = db.connect(tmp_path / "g.db")
        provider = Provider(fake.base_url, "sk-test", "fake-model",
                            retry=RetryPolicy(max_attempts=1, deadline=5), sleep=no_sleep)
        providers.append(provider)
        registry = Registry()
        clock = env.pop("clock", None) or FakeClock(T0)
        tz = env.pop("tz", "Europe/Berlin")
        agent = Agent(model=provider, sessions=SessionStore(conn), tools=registry,
                      persona=lambda: "You are Tim.", zone=ZoneInfo(tz), clock=clock.now)
        turns = Turns()
        channel = Recorder()
        cfg = Config(llm_base_url="http://x", llm_api_key="k", llm_model="m", channel="stdio",
                     cron_tz=tz, cron_tick_seconds=15, **env)
        cron = setup(cfg, conn, registry, turns.wrap(agent), channel, clock)
        agent.status_lines.append(cron.status)
        return Rig(fake, clock, channel, agent, cron, turns, conn)

    yield build
    for p in providers:
        await p.aclose()


async def schedule(rig: Rig, **args: Any) -> str:
    token = CALLER.set(SESSION)
    try:
        return await rig.cron.tools.schedule(args)
    finally:
        CALLER.reset(token)


async def test_model_schedules_then_the_reply_is_pushed(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    rig = await make()
    fake.push(
        ToolCalls([Call("cron_schedule", {"when": "in 5 minutes", "prompt": "Tell them: stretch!"},
                        id="c1")]),
        Reply("I'll remind you in 5 minutes."),
        Reply("Time to stretch!"),
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.cron.run)
        assert await rig.say("remind me to stretch in 5 minutes") == "I'll remind you in 5 minutes."
        tool = next(m for m in fake.last_request.messages if m["role"] == "tool")
        assert tool["content"].startswith("scheduled job #1 (once); next run 2026-03-05 13:05 CET")
        assert "cron: 1 scheduled job(s) in this chat" in await rig.say("/status")
        assert "#1 once; next 2026-03-05 13:05 CET" in await rig.say("/status")
        rig.clock.advance(299)
        await settle()
        assert rig.channel.pushes == [] and len(fake.requests) == 2
        rig.clock.advance(1)
        await until(lambda: rig.channel.pushes, "a push")
        tg.cancel_scope.cancel()
    assert rig.channel.pushes == [("chat1", "Time to stretch!")]
    synthetic = fake.requests[2].last_user_text
    assert synthetic.startswith("[scheduled job #1, once at ")
    footer = fake.requests[2].messages[-1]["content"].removeprefix(synthetic)
    assert "Now: Thursday 2026-03-05 13:05, UTC+01:00 (Europe/Berlin, CET)." in footer
    assert footer.endswith("started by the scheduler, not typed by the user; it was due "
                           "Thu 2026-03-05 13:05 UTC+01:00."), footer
    assert synthetic.endswith("\nTell them: stretch!")
    assert rig.rows("SELECT state, sent_parts, reply FROM cron_run") == [
        ("delivered", 1, "Time to stretch!")]
    assert rig.rows("SELECT state, next_at FROM cron_job") == [("done", None)]
    # the fire is part of the chat's history, like any turn
    _, history = rig.agent.sessions.load(SESSION)
    assert history[-1].content == "Time to stretch!"
    assert "no scheduled jobs in this chat" in await rig.say("/status")


async def test_cancelled_job_never_fires(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    rig = await make()
    await schedule(rig, when="in 1 minute", prompt="x")
    token = CALLER.set(SESSION)
    try:
        assert await rig.cron.tools.cancel({"id": 1}) == "cancelled job #1"
    finally:
        CALLER.reset(token)
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.cron.run)
        rig.clock.advance(120)
        await settle()
        tg.cancel_scope.cancel()
    assert rig.channel.pushes == [] and fake.requests == []
    assert rig.rows("SELECT count(*) FROM cron_run") == [(0,)]


async def test_recurring_job_fires_each_time_and_silent_is_not_pushed(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    rig = await make()
    await schedule(rig, when="every 10 minutes", prompt="check the queue")
    fake.push(Reply("[silent] queue empty"), Reply("The queue has 3 items."))
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.cron.run)
        rig.clock.advance(600)
        await until(lambda: rig.rows("SELECT 1 FROM cron_run WHERE state = 'silent'"), "silent")
        rig.clock.advance(600)
        await until(lambda: rig.channel.pushes, "second fire pushed")
        tg.cancel_scope.cancel()
    assert rig.channel.pushes == [("chat1", "The queue has 3 items.")]
    assert [r[0] for r in rig.rows("SELECT state FROM cron_run ORDER BY id")] == [
        "silent", "delivered"]
    assert rig.rows("SELECT next_at FROM cron_job") == [(T0 + 1800,)]


async def test_overlapping_fire_is_skipped_not_stacked(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    rig = await make()
    gate = anyio.Event()
    inner = rig.cron.ticker.respond

    async def slow(msg: Inbound, stream: Any) -> str:
        await gate.wait()
        return await inner(msg, stream)

    rig.cron.ticker.respond = slow
    await schedule(rig, when="every 1 minute", prompt="tick")
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.cron.run)
        rig.clock.advance(60)
        await until(lambda: rig.cron.ticker.running, "first run in flight")
        rig.clock.advance(60)
        await until(lambda: rig.rows("SELECT 1 FROM cron_run WHERE state = 'skipped'"), "skip")
        gate.set()
        await until(lambda: rig.channel.pushes, "the first run's push")
        tg.cancel_scope.cancel()
    assert len(rig.channel.pushes) == 1 and len(fake.requests) == 1
    assert [r[0] for r in rig.rows("SELECT state FROM cron_run ORDER BY due_at")] == [
        "delivered", "skipped"]


async def test_restart_runs_missed_jobs_within_grace_once(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    rig = await make()
    await schedule(rig, when="in 10 minutes", prompt="one-shot, late but in grace")
    await schedule(rig, when="every 15 minutes", prompt="recurring, missed 3 times")
    await schedule(rig, when="in 1 minute", prompt="one-shot, too late")
    rig.conn.execute("UPDATE cron_job SET next_at = ? WHERE id = 3", (T0 - 2 * 3600,))
    # gantry was down for 50 minutes: job 1 is 40 min late, job 2 missed 15, 30 and 45
    later = await make(clock=FakeClock(T0 + 50 * 60))
    async with anyio.create_task_group() as tg:
        tg.start_soon(later.cron.run)
        await until(lambda: len(later.channel.pushes) == 2, "two pushes")
        await settle()
        tg.cancel_scope.cancel()
    assert len(fake.requests) == 2  # job 2 runs once for all its missed fires
    texts = sorted(r.last_user_text.rsplit("\n", 1)[1] for r in fake.requests)
    assert texts == ["one-shot, late but in grace", "recurring, missed 3 times"]
    jobs = later.rows("SELECT id, state, next_at FROM cron_job ORDER BY id")
    assert jobs == [(1, "done", None), (2, "active", T0 + 60 * 60), (3, "missed", None)]
    assert later.rows("SELECT job_id, state FROM cron_run ORDER BY job_id") == [
        (1, "delivered"), (2, "delivered"), (3, "missed")]


async def test_restart_outside_grace_moves_to_next_occurrence(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    rig = await make()
    await schedule(rig, when="every day at 07:30", prompt="digest")
    # next fire is 2026-03-06 07:30 CET; gantry comes back at 10:00 CET, 2.5 h late
    later = await make(clock=FakeClock(T0 + 21 * 3600))
    async with anyio.create_task_group() as tg:
        tg.start_soon(later.cron.run)
        await until(lambda: later.rows("SELECT 1 FROM cron_run"), "a run row")
        await settle()
        tg.cancel_scope.cancel()
    assert fake.requests == [] and later.channel.pushes == []
    assert later.rows("SELECT state, error FROM cron_run") == [("missed", "9000 s late")]
    next_at = later.rows("SELECT next_at FROM cron_job")[0][0]
    assert next_at == T0 + 24 * 3600 + 18 * 3600 + 30 * 60  # 2026-03-07 07:30 CET


async def test_crash_mid_turn_resumes_the_run_once(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    rig = await make()
    await schedule(rig, when="in 1 minute", prompt="ping")
    job = rig.cron.store.due(T0 + 60, "rec")[0]
    rig.cron.store.claim(job, job.next_at or 0, None, T0 + 60)  # claimed, then kill -9
    rig.cron.store.attempt(1)
    later = await make(clock=FakeClock(T0 + 120))
    fake.push(Reply("pong"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(later.cron.run)
        await until(lambda: later.channel.pushes, "the resumed push")
        rig.clock.advance(3600)
        await settle()
        tg.cancel_scope.cancel()
    assert later.channel.pushes == [("chat1", "pong")] and len(fake.requests) == 1
    assert later.rows("SELECT state, attempts FROM cron_run") == [("delivered", 2)]


async def test_kill_after_the_turn_answered_delivers_without_running_it_again(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    """The reply is stored in the transaction that records the turn's answer: a process that
    dies right after the turn (before the ticker's own bookkeeping) is not asked again."""
    rig = await make()
    await schedule(rig, when="in 1 minute", prompt="book it")
    fake.push(Reply("booked"))
    answered = anyio.Event()
    respond = rig.cron.ticker.respond

    async def dies_after_the_turn(msg: Inbound, stream: Any) -> str:
        reply = await respond(msg, stream)
        answered.set()
        await anyio.sleep_forever()  # kill -9 here: the turn is over, the ticker not yet
        return reply

    rig.cron.ticker.respond = dies_after_the_turn
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.cron.run)
        rig.clock.advance(60)
        with anyio.fail_after(10):
            await answered.wait()
        tg.cancel_scope.cancel()
    assert rig.channel.pushes == []
    later = await make(clock=FakeClock(T0 + 90))
    async with anyio.create_task_group() as tg:
        tg.start_soon(later.cron.run)
        await until(lambda: later.channel.pushes, "the stored reply pushed")
        tg.cancel_scope.cancel()
    assert later.channel.pushes == [("chat1", "booked")]
    assert len(fake.requests) == 1  # the turn was not run again
    assert later.rows("SELECT state FROM cron_run") == [("delivered",)]


async def test_crash_mid_push_sends_only_the_missing_parts(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ticker, "DELIVERY_GRACE", 0.05)  # the shielded push is cut at once
    rig = await make()
    rig.channel.fail = [OSError("network down"), OSError("still down")]
    await schedule(rig, when="in 1 minute", prompt="x")
    fake.push(Reply("one|two|three"))
    rig.cron.ticker.push = _crash_after_first_part(rig.channel)
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.cron.run)
        rig.clock.advance(60)
        await until(lambda: rig.rows("SELECT 1 FROM cron_run WHERE sent_parts = 1"), "part 1")
        tg.cancel_scope.cancel()  # the process dies with one part out
    assert rig.rows("SELECT state, sent_parts FROM cron_run") == [("replied", 1)]
    later = await make(clock=FakeClock(T0 + 90))
    later.channel.fail = [OSError("flaky")]
    async with anyio.create_task_group() as tg:
        tg.start_soon(later.cron.run)

        def delivered() -> bool:
            later.clock.advance(1)  # past the backoff after the flaky push, whenever it sleeps
            return bool(later.rows("SELECT 1 FROM cron_run WHERE state = 'delivered'"))

        await until(delivered, "delivered")
        tg.cancel_scope.cancel()
    assert [p[1] for p in later.channel.pushes] == ["two", "three"]
    assert len(fake.requests) == 1  # the turn was not run again


def _crash_after_first_part(channel: Recorder) -> Callable[..., Awaitable[None]]:
    async def push(chat_id: str, text: str, sent: int = 0,
                   progress: Progress | None = None, origin: str = "scheduled") -> None:
        channel.fail.clear()
        channel.pushes.append((chat_id, text.split("|")[0]))
        assert progress is not None
        progress(1, 3)
        await anyio.sleep_forever()

    return push


async def test_push_refused_or_failing_ends_failed_not_forever(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    rig = await make()
    rig.channel.fail = [PermissionError("chat 1 is not in TELEGRAM_ALLOWED_USERS")]
    await schedule(rig, when="in 1 minute", prompt="x")
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.cron.run)
        rig.clock.advance(60)
        await until(lambda: rig.rows("SELECT 1 FROM cron_run WHERE state = 'failed'"), "failed")
        tg.cancel_scope.cancel()
    assert rig.rows("SELECT error FROM cron_run") == [("chat 1 is not in TELEGRAM_ALLOWED_USERS",)]

    rig2 = await make()
    rig2.channel.fail = [OSError("down")] * 100
    await schedule(rig2, when="in 1 minute", prompt="y")
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig2.cron.run)
        rig2.clock.advance(60)
        for _ in range(20):
            await settle()
            rig2.clock.advance(60)
        await until(lambda: rig2.rows("SELECT 1 FROM cron_run WHERE job_id = 2 AND "
                                      "state = 'failed'"), "gave up")
        tg.cancel_scope.cancel()
    assert rig2.rows("SELECT error FROM cron_run WHERE job_id = 2") == [("push failed 8 times",)]
    assert len(rig2.channel.fail) == 100 - 8


async def test_shutdown_leaves_the_run_for_the_next_start(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    rig = await make()
    await schedule(rig, when="in 1 minute", prompt="x")
    rig.turns.closing = True  # SIGTERM arrived: no new turn starts
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.cron.run)
        rig.clock.advance(60)
        await until(lambda: rig.rows("SELECT 1 FROM cron_run WHERE attempts = 1"), "attempted")
        await settle()
        tg.cancel_scope.cancel()
    assert fake.requests == [] and rig.rows("SELECT state FROM cron_run") == [("started",)]
    rig.conn.execute("UPDATE cron_run SET attempts = ?", (MAX_TURN_ATTEMPTS,))
    later = await make(clock=FakeClock(T0 + 70))
    async with anyio.create_task_group() as tg:
        tg.start_soon(later.cron.run)
        await until(lambda: later.rows("SELECT 1 FROM cron_run WHERE state = 'failed'"), "failed")
        tg.cancel_scope.cancel()
    assert fake.requests == []  # a run cut too often is given up, not retried forever


async def test_cron_turn_drains_like_any_turn(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    rig = await make()
    await schedule(rig, when="in 1 minute", prompt="x")
    fake.push(Reply("done in time", delay=0.3))
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.cron.run)
        rig.clock.advance(60)
        await until(lambda: rig.agent.busy, "turn in flight")
        rig.turns.closing = True
        await rig.agent.wait_idle()  # what runtime._drain does on SIGTERM
        tg.cancel_scope.cancel()
    assert rig.rows("SELECT state, reply FROM cron_run") in (
        [("replied", "done in time")], [("delivered", "done in time")])


def test_tool_schemas_are_json(tmp_path: Path) -> None:
    registry = Registry()
    cfg = Config(llm_base_url="http://x", llm_api_key="k", llm_model="m", channel="stdio")
    setup(cfg, db.connect(tmp_path / "g.db"), registry, _never, Recorder())
    assert registry.names() == ["cron_cancel", "cron_list", "cron_schedule"]
    for schema in registry.schemas():
        json.dumps(schema.function.parameters)


async def _never(msg: Inbound, stream: Any) -> str:
    raise AssertionError("not called")


async def test_job_that_cannot_be_moved_on_ends_failed(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    rig = await make()
    await schedule(rig, when="every day at 07:30", prompt="x")
    rig.conn.execute("UPDATE cron_job SET tz = 'Mars/Olympus', next_at = ?", (T0 + 60,))
    assert "#1 every day at 07:30; next 2026-03-05 12:01 UTC" in rig.cron.status(SESSION)
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.cron.run)
        rig.clock.advance(60)
        await until(lambda: rig.rows("SELECT 1 FROM cron_job WHERE state = 'failed'"), "failed")
        tg.cancel_scope.cancel()
    assert fake.requests == []
    assert rig.rows("SELECT state FROM cron_run") == [("failed",)]


async def test_daily_job_across_spring_forward_fires_once_a_day(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    """02:30 every day in Los Angeles over 7–9 March 2026 (02:00 → 03:00 on the 8th)."""
    start = 1_772_841_600.0  # 2026-03-07T00:00:00Z
    rig = await make(clock=FakeClock(start), tz="America/Los_Angeles")
    await schedule(rig, when="every day at 02:30", prompt="nightly")
    fired: list[float] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.cron.run)
        for n in range(1, 4):
            next_at = rig.rows("SELECT next_at FROM cron_job")[0][0]
            rig.clock.advance(next_at - rig.clock.now())
            await until(lambda n=n: len(rig.channel.pushes) == n, f"fire {n}")
            fired.append(rig.clock.now())
        tg.cancel_scope.cancel()
    assert [f - start for f in fired] == [10.5 * 3600, 34 * 3600, 57.5 * 3600]  # 10:30Z,
    # then 10:00Z (03:00 PDT: the first instant after the gap), then 09:30Z (02:30 PDT)
    assert rig.rows("SELECT count(*) FROM cron_run WHERE state = 'delivered'") == [(3,)]


async def fire(rig: Rig, runs: int) -> None:
    """Move to the job's next fire and wait until `runs` runs have finished."""
    next_at = rig.rows("SELECT next_at FROM cron_job")[0][0]
    rig.clock.advance(next_at - rig.clock.now())
    await until(lambda: rig.rows("SELECT count(*) FROM cron_run WHERE state NOT IN "
                                 "('started', 'replied')")[0][0] == runs, f"run {runs}")
    await until(lambda: not rig.rows("SELECT 1 FROM cron_run WHERE notice_state = 'pending'"),
                "notices out")


async def test_failed_model_call_is_recorded_not_pushed_and_a_streak_earns_one_notice(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    assert NOTICE_AFTER == 3
    rig = await make()
    await schedule(rig, when="every 10 minutes", prompt="check the queue")
    down = HTTPError(503, "upstream overloaded at internal-host-7 for key sk-test")
    fake.push(down, down, down, down, Reply("The queue has 3 items."), down, down, down)
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.cron.run)
        await fire(rig, 1)
        assert rig.channel.pushes == []  # no "Please try again in a moment." for nobody
        await fire(rig, 2)
        assert rig.channel.pushes == []
        await fire(rig, 3)
        assert len(rig.channel.pushes) == 1  # the third failure in a row: one notice
        await fire(rig, 4)
        assert len(rig.channel.pushes) == 1  # the same streak: no second notice
        await fire(rig, 5)  # a success ends the streak
        await fire(rig, 6)
        await fire(rig, 7)
        await fire(rig, 8)  # a new streak of three: its own notice
        tg.cancel_scope.cancel()
    runs = rig.rows("SELECT state, error, notice_state FROM cron_run ORDER BY due_at")
    failed = ("failed", "model call failed (HTTP 503)")
    assert [r[:2] for r in runs] == [failed] * 4 + [("delivered", None)] + [failed] * 3
    assert [r[2] for r in runs] == [None, None, "sent", None, None, None, None, "sent"]
    texts = [text for _, text in rig.channel.pushes]
    assert texts[1] == "The queue has 3 items."
    assert len(texts) == 3
    for notice in (texts[0], texts[2]):  # they differ only in the next run's time
        assert notice.startswith("Scheduled job #1 every 10 minutes; next 2026-03-05 ")
        assert "prompt: check the queue" in notice
        assert "failed 3 times in a row (last: model call failed (HTTP 503))" in notice
        assert "cancel job #1" in notice
    everything = " ".join(texts) + repr(runs)
    assert "sk-test" not in everything and "internal-host-7" not in everything
    assert "try again in a moment" not in everything


async def test_failure_notice_survives_a_restart(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    """The notice is stored with the third failure: a process that dies before pushing it
    pushes it at the next start, once."""
    rig = await make()
    rig.channel.fail = [OSError("network down")] * 100
    await schedule(rig, when="every 10 minutes", prompt="x")
    fake.push(HTTPError(500), HTTPError(500), HTTPError(500))
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.cron.run)
        for n in (1, 2, 3):
            next_at = rig.rows("SELECT next_at FROM cron_job")[0][0]
            rig.clock.advance(next_at - rig.clock.now())
            await until(lambda n=n: rig.rows("SELECT count(*) FROM cron_run WHERE state = "
                                             "'failed'")[0][0] == n, f"failure {n}")
        await until(lambda: len(rig.channel.fail) < 100, "the notice push was tried")
        tg.cancel_scope.cancel()  # killed while the notice push backs off
    assert rig.channel.pushes == []
    assert rig.rows("SELECT count(*) FROM cron_run WHERE notice_state = 'pending'") == [(1,)]
    later = await make(clock=FakeClock(rig.clock.now() + 1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(later.cron.run)
        await until(lambda: later.channel.pushes, "the notice after the restart")
        await until(lambda: later.rows("SELECT 1 FROM cron_run WHERE notice_state = 'sent'"),
                    "marked sent")
        tg.cancel_scope.cancel()
    assert len(later.channel.pushes) == 1
    assert "failed 3 times in a row (last: model call failed (HTTP 500))" in (
        later.channel.pushes[0][1])


async def test_a_failed_user_turn_still_gets_the_apology(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    rig = await make()
    fake.push(HTTPError(503))
    assert await rig.say("hello") == "Sorry — the model call failed (HTTP 503). Please try " \
        "again in a moment."


async def test_a_turn_that_breaks_is_recorded_by_its_kind_only(
    make: Callable[..., Awaitable[Rig]], fake: FakeOpenAI
) -> None:
    rig = await make()

    def broken() -> str:
        raise RuntimeError("persona store at /srv/private/token=abc123 is gone")

    rig.agent.persona = broken
    await schedule(rig, when="in 1 minute", prompt="x")
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.cron.run)
        rig.clock.advance(60)
        await until(lambda: rig.rows("SELECT 1 FROM cron_run WHERE state = 'failed'"), "failed")
        tg.cancel_scope.cancel()
    assert rig.channel.pushes == [] and fake.requests == []
    assert rig.rows("SELECT error FROM cron_run") == [("turn failed (RuntimeError)",)]
