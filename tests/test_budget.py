"""Budgets (gantry.model.budget): the check before each model call against the fake model,
the periods in the user's zone, the notices once per period, and the boot checks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gantry import config, db
from gantry.agent import Agent
from gantry.channel.base import Inbound
from gantry.model.budget import Budget, BudgetReached, Limit, limits_of, period
from gantry.model.client import Provider
from gantry.model.ledger import Charge, Meter, attributed, settle
from gantry.model.retry import RetryPolicy
from gantry.model.spend import spent
from gantry.prices import Price
from gantry.session import SessionStore
from gantry.tools import Registry, Tool, mcp_source
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.test_ledger import conn, fake

pytestmark = pytest.mark.anyio
__all__ = ["conn", "fake"]  # the ledger tests' fixtures

BERLIN = ZoneInfo("Europe/Berlin")
PRICES = {"fake-model": Price(1.0, 0.25, 4.0)}
BASE = {"LLM_BASE_URL": "http://127.0.0.1:1/v1", "LLM_API_KEY": "k", "LLM_MODEL": "m",
        "CHANNEL": "stdio"}


def tokens(name: str, amount: float, period_: str = "day", auto: bool = False) -> Limit:
    return Limit(name, period_, auto, False, amount)


def budget(conn: Any, *limits: Limit, **kw: Any) -> Budget:
    kw.setdefault("owner_session", "test:9")
    return Budget(conn, limits, BERLIN, **kw)


def agent_for(fake: FakeOpenAI, conn: Any, gate: Budget) -> Agent:
    meter = Meter(conn, PRICES)
    meter.gate = gate.admit
    model = Provider(fake.base_url, "sk-test", "fake-model", meter=meter,
                     retry=RetryPolicy(max_attempts=1, deadline=5))
    return Agent(model=model, sessions=SessionStore(conn), tools=Registry(),
                 persona=lambda: "You are Tim.")


def notices(conn: Any) -> list[tuple[str, str, str]]:
    return [(str(k).split(":")[0], str(k).split(":")[1], str(s)) for k, s in conn.execute(
        "SELECT key, session_id FROM budget_notice ORDER BY created_at, key")]


def chat(text: str, chat_id: str = "9", group: bool = False) -> Inbound:
    return Inbound(channel="test", chat_id=chat_id, user_id="u", text=text, group=group)


# ------------------------------------------------------------------ periods


@given(st.integers(946_684_800, 4_102_444_800),
       st.sampled_from(["UTC", "Europe/Berlin", "America/Sao_Paulo", "Asia/Kolkata",
                        "Pacific/Chatham", "America/St_Johns"]),
       st.sampled_from(["day", "month"]))
def test_a_period_holds_its_instant_in_the_users_zone(now: int, zone: str, kind: str) -> None:
    tz = ZoneInfo(zone)
    start, end, label = period(now, tz, kind)
    assert start <= now < end
    local = datetime.fromtimestamp(now, tz)
    assert label == (f"{local:%Y-%m-%d}" if kind == "day" else f"{local:%Y-%m}")
    assert (end - start) <= (25 * 3600 if kind == "day" else 31 * 86400 + 3600)


def test_the_day_is_berlins_not_utcs() -> None:
    late = datetime(2025, 3, 10, 23, 30, tzinfo=UTC).timestamp()  # 00:30 on the 11th there
    start, end, label = period(late, BERLIN, "day")
    assert label == "2025-03-11"
    assert start == datetime(2025, 3, 10, 23, 0, tzinfo=UTC).timestamp()
    assert end - start == 86400


# ------------------------------------------------------------------ never past by more than a call


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 5_000), st.lists(st.integers(1, 2_000), min_size=1, max_size=40),
       st.booleans())
def test_never_more_than_one_call_past_the_limit(tmp_path_factory: Any, limit: int,
                                                 calls: list[int], autonomous: bool) -> None:
    """Each admitted call is checked against everything before it (in flight ones at their
    estimate), so the total passes the limit by at most the last call."""
    conn = db.connect(tmp_path_factory.mktemp("b") / "g.db")
    try:
        gate = budget(conn, tokens("BUDGET_AUTO_DAILY_TOKENS" if autonomous
                                   else "BUDGET_DAILY_TOKENS", limit, auto=autonomous))
        meter = Meter(conn, {})
        meter.gate = gate.admit
        admitted: list[int] = []
        with attributed("cron:1" if autonomous else "chat", "test:9"):
            for size in calls:
                try:
                    row = meter.open("m", "e", 0)
                except BudgetReached as exc:
                    assert exc.standing.used >= limit
                    continue
                with conn:
                    settle(conn, Charge(row, size, 0, 0, False, None, None))
                admitted.append(size)
        used = spent(conn, 0).tokens
        assert used == sum(admitted)
        if admitted:
            assert used - admitted[-1] < limit  # the last one started under the limit
        assert admitted == calls[:len(admitted)]  # once refused, always refused
    finally:
        conn.close()


def test_a_call_in_flight_counts_at_its_estimate(conn: Any) -> None:
    gate = budget(conn, tokens("BUDGET_DAILY_TOKENS", 100))
    meter = Meter(conn, {})
    meter.gate = gate.admit
    meter.open("m", "e", 400 * 4)  # 400 tokens estimated, not closed yet
    with pytest.raises(BudgetReached):
        meter.open("m", "e", 4)


# ------------------------------------------------------------------ against the fake model


async def test_chat_at_the_limit_gets_the_notice_and_no_request(fake: FakeOpenAI,
                                                                conn: Any) -> None:
    gate = budget(conn, tokens("BUDGET_DAILY_TOKENS", 10))
    agent = agent_for(fake, conn, gate)
    assert await agent(chat("hello there")) == "echo: hello there"  # under: it goes out
    sent = len(fake.requests)
    text = await agent(chat("and again"))
    assert len(fake.requests) == sent  # no model request
    assert text.startswith("Budget reached: today's budget (BUDGET_DAILY_TOKENS) is used up,")
    used = spent(conn, 0).tokens
    assert f"{used:,} of 10 tokens" in text and "resets at 00:00 on " in text
    assert "(Europe/Berlin)" in text
    assert notices(conn) == []  # a chat reads the notice as its answer: nothing pushed
    await agent.model.aclose()  # type: ignore[attr-defined]


async def test_a_tool_round_is_checked_too(fake: FakeOpenAI, conn: Any) -> None:
    """The second call of a turn is refused once the first used the budget up."""
    gate = budget(conn, tokens("BUDGET_DAILY_TOKENS", 1))
    agent = agent_for(fake, conn, gate)

    async def add(args: dict[str, Any]) -> str:
        return str(args["a"] + args["b"])

    agent.tools.register(Tool("calc__add", "Add", {"type": "object"}, add, mcp_source("calc")))
    fake.push(ToolCalls([Call("calc__add", {"a": 2, "b": 3})]), Reply("5"))
    text = await agent(chat("2+3?"))
    assert text.startswith("Budget reached:")
    assert len(fake.requests) == 1
    await agent.model.aclose()  # type: ignore[attr-defined]


async def test_autonomous_exhausted_while_chat_answers(fake: FakeOpenAI, conn: Any) -> None:
    gate = budget(conn, tokens("BUDGET_AUTO_DAILY_TOKENS", 1, auto=True))
    agent = agent_for(fake, conn, gate)
    job = Inbound(channel="test", chat_id="9", user_id="cron", text="job", scheduled=True,
                  source="cron:3")
    assert await agent(job) == "echo: job"  # 0 used: admitted
    with pytest.raises(BudgetReached) as refused:
        await agent(job)  # scheduled: raised for the scheduler to record as skipped
    assert refused.value.reason.startswith("budget: BUDGET_AUTO_DAILY_TOKENS reached (")
    assert await agent(chat("still there?")) == "echo: still there?"
    assert notices(conn) == [("reached", "BUDGET_AUTO_DAILY_TOKENS", "test:9")]
    with pytest.raises(BudgetReached):
        await agent(job)
    assert len(notices(conn)) == 1  # told once, not per fire
    await agent.model.aclose()  # type: ignore[attr-defined]


async def test_owner_through(fake: FakeOpenAI, conn: Any) -> None:
    gate = budget(conn, tokens("BUDGET_DAILY_TOKENS", 1), owner_through=True,
                  is_owner=lambda s: s == "test:9")
    agent = agent_for(fake, conn, gate)
    assert await agent(chat("one")) == "echo: one"
    assert await agent(chat("two")) == "echo: two"  # the owner's private chat passes
    assert (await agent(chat("hi all", "-100", group=True))).startswith("Budget reached:")
    job = Inbound(channel="test", chat_id="9", user_id="cron", text="job", scheduled=True,
                  source="watch:2")
    with pytest.raises(BudgetReached):
        await agent(job)  # autonomous turns are still held
    await agent.model.aclose()  # type: ignore[attr-defined]


def test_warning_once_per_period_and_not_again_after_a_restart(conn: Any) -> None:
    now = [datetime(2025, 6, 1, 12, tzinfo=BERLIN).timestamp()]
    meter = Meter(conn, {}, clock=lambda: now[0])

    def gate() -> Budget:
        b = budget(conn, tokens("BUDGET_DAILY_TOKENS", 100), clock=lambda: now[0],
                   is_owner=lambda s: s == "test:9")
        meter.gate = b.admit
        return b

    gate()
    with attributed("chat", "test:9"):
        for _ in range(3):
            with conn:
                settle(conn, Charge(meter.open("m", "e", 0), 30, 0, 0, False, None, None))
        gate()  # a restart: a new Budget on the same database
        with conn:
            settle(conn, Charge(meter.open("m", "e", 0), 5, 0, 0, False, None, None))
        assert notices(conn) == [("warn", "BUDGET_DAILY_TOKENS", "test:9")]
        text = str(next(iter(conn.execute("SELECT text FROM budget_notice")))[0])
        assert text.startswith("Budget warning: today's budget (BUDGET_DAILY_TOKENS) is 90 of "
                               "100 tokens (90 %) used.")
        now[0] += 86400  # the next day: a fresh period, a fresh warning when it is due
        meter.open("m", "e", 0)
        assert len(notices(conn)) == 1
        with conn:
            settle(conn, Charge(meter.open("m", "e", 0), 85, 0, 0, False, None, None))
        meter.open("m", "e", 0)
    assert len(notices(conn)) == 2


async def test_notices_are_pushed_once(conn: Any) -> None:
    gate = budget(conn, tokens("BUDGET_AUTO_DAILY_TOKENS", 0, auto=True))
    pushed: list[tuple[str, str]] = []

    async def push(chat_id: str, text: str, **_: Any) -> None:
        pushed.append((chat_id, text))

    for _ in range(3):
        with pytest.raises(BudgetReached):
            gate.admit("cron:1", "test:77")
    async with anyio.create_task_group() as tg:
        tg.start_soon(gate.deliver, push)
        with anyio.fail_after(5):
            while not pushed:
                await anyio.sleep(0.01)
        with pytest.raises(BudgetReached):
            gate.admit("watch:4", "test:77")
        await anyio.sleep(0.1)
        tg.cancel_scope.cancel()
    assert len(pushed) == 1 and pushed[0][0] == "77"
    assert pushed[0][1].startswith("Budget reached: today's autonomous budget "
                                   "(BUDGET_AUTO_DAILY_TOKENS) is used up, 0 of 0 tokens.")
    assert [r[0] for r in conn.execute("SELECT state FROM budget_notice")] == ["sent"]
    again: list[tuple[str, str]] = []
    async with anyio.create_task_group() as tg:  # a restart: nothing pending, nothing sent

        async def record(chat_id: str, text: str, **_: Any) -> None:
            again.append((chat_id, text))

        tg.start_soon(budget(conn).deliver, record)
        await anyio.sleep(0.1)
        tg.cancel_scope.cancel()
    assert again == []


def test_cost_limit_reads_the_priced_ledger(conn: Any) -> None:
    gate = budget(conn, Limit("BUDGET_MONTHLY_COST", "month", False, True, 0.01))
    meter = Meter(conn, PRICES)
    meter.gate = gate.admit
    with conn:  # 2,000 prompt tokens at $1/1M + 1,000 completion at $4/1M = $0.006
        settle(conn, meter.charge(meter.open("fake-model", "e", 0), "fake-model", None,
                                  8_000, 4_000))
    meter.open("fake-model", "e", 0)  # $0.006 < $0.01: admitted
    with conn:
        settle(conn, meter.charge(meter.open("fake-model", "e", 0), "fake-model", None,
                                  8_000, 4_000))
    with pytest.raises(BudgetReached) as refused:
        meter.open("fake-model", "e", 0)
    assert "this month's budget (BUDGET_MONTHLY_COST) is used up, $0.01 of $0.01" in (
        refused.value.notice)
    assert gate.status().startswith("budget BUDGET_MONTHLY_COST: $0.01 of $0.01 (")
    assert gate.status().endswith(" — reached")


def test_status_lines(conn: Any) -> None:
    gate = budget(conn, tokens("BUDGET_DAILY_TOKENS", 1000),
                  tokens("BUDGET_AUTO_MONTHLY_TOKENS", 50, "month", auto=True))
    assert gate.status().splitlines()[0].startswith(
        "budget BUDGET_DAILY_TOKENS: 0 of 1,000 tokens (0 %), resets ")
    assert gate.status().splitlines()[1].startswith("budget BUDGET_AUTO_MONTHLY_TOKENS: 0 of 50")


def test_transcription_is_recorded_not_gated(conn: Any) -> None:
    """record_call books a call already made: never refused after the fact."""
    gate = budget(conn, tokens("BUDGET_DAILY_TOKENS", 0))
    meter = Meter(conn, {})
    meter.gate = gate.admit
    meter.record_call("whisper", "e", prompt_chars=40, source="transcription")
    assert spent(conn, 0).calls == 1


# ------------------------------------------------------------------ settings


def test_limits_from_the_environment() -> None:
    cfg = config.load({**BASE, "BUDGET_DAILY_TOKENS": "200000", "BUDGET_AUTO_DAILY_TOKENS": "0",
                       "BUDGET_MONTHLY_COST": "$20", "LLM_PRICES": "m=1/2",
                       "BUDGET_WARN_PERCENT": "90", "BUDGET_OWNER_THROUGH": "yes"})
    assert limits_of(cfg) == [Limit("BUDGET_DAILY_TOKENS", "day", False, False, 200000.0),
                              Limit("BUDGET_MONTHLY_COST", "month", False, True, 20.0),
                              Limit("BUDGET_AUTO_DAILY_TOKENS", "day", True, False, 0.0)]
    assert cfg.budget_warn_percent == 90 and cfg.budget_owner_through is True
    assert limits_of(config.load(BASE)) == []


@pytest.mark.parametrize(("env", "says"), [
    ({"BUDGET_DAILY_TOKENS": "lots"}, "BUDGET_DAILY_TOKENS must be a whole number"),
    ({"BUDGET_AUTO_MONTHLY_TOKENS": "-5"}, "BUDGET_AUTO_MONTHLY_TOKENS must be between 0"),
    ({"BUDGET_DAILY_COST": "2,50", "LLM_PRICES": "m=1/1"},
     "BUDGET_DAILY_COST must be an amount of USD between 0 and 1,000,000"),
    ({"BUDGET_DAILY_COST": "nan", "LLM_PRICES": "m=1/1"}, "BUDGET_DAILY_COST must be an amount"),
    ({"BUDGET_WARN_PERCENT": "0"}, "BUDGET_WARN_PERCENT must be between 1 and 100"),
    ({"BUDGET_OWNER_THROUGH": "maybe"}, "BUDGET_OWNER_THROUGH must be true or false"),
    ({"BUDGET_AUTO_DAILY_COST": "1"},
     "BUDGET_AUTO_DAILY_COST set, but LLM_PRICES has no price for 'm'"),
    ({"BUDGET_DAILY_COST": "1", "LLM_PRICES": "m=1/1", "LLM_FALLBACK_1_MODEL": "other"},
     "LLM_PRICES has no price for 'other'"),
])
def test_bad_budgets_are_refused_at_boot(env: dict[str, str], says: str) -> None:
    with pytest.raises(config.ConfigError) as err:
        config.load({**BASE, **env})
    assert says in str(err.value)


def test_a_priced_cost_budget_boots() -> None:
    cfg = config.load({**BASE, "BUDGET_DAILY_COST": "1.5", "LLM_PRICES": "m=0.15/0.6"})
    assert cfg.budget_daily_cost == 1.5


def test_refusal_is_logged_without_traceback(conn: Any, caplog: Any) -> None:
    gate = budget(conn, tokens("BUDGET_DAILY_TOKENS", 0))
    with pytest.raises(BudgetReached):
        gate.admit("chat", "test:9")
    assert [r.getMessage() for r in caplog.records if r.name == "gantry.budget"] == [
        "model call refused: budget reached"]
