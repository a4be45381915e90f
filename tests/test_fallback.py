"""Fallback models: fail-over, cooldown, stream restart and who answered, against two fake
model servers over real loopback HTTP (and the settings that name them)."""

from __future__ import annotations

import io
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gantry import config, db
from gantry.agent import Agent, model_failed_reply
from gantry.channel.base import Inbound
from gantry.channel.stdio.output import RESTART_MARK, StdioStream
from gantry.config import ConfigError
from gantry.model import cooldown, fallback
from gantry.model.client import Done, TextDelta
from gantry.model.errors import ProviderError
from gantry.model.fallback import Fallback, Restart, fails_over, model_missing
from gantry.model.messages import UserMessage
from gantry.model.retry import RetryPolicy
from gantry.session import SessionStore
from gantry.tools import Registry
from tests.fakes.openai import (
    MODEL_NOT_FOUND,
    CutStream,
    Echo,
    FakeOpenAI,
    HTTPError,
    Reply,
    dead_base_url,
    model_not_found,
    rate_limited,
)

PRIMARY = "primary-model"
FALLBACK = "fb-model"
KEY = "sk-primary-0123456789abcdef"
FB_KEY = "sk-fallback-fedcba9876543210"
BASE = {"LLM_API_KEY": KEY, "LLM_MODEL": PRIMARY, "CHANNEL": "stdio"}


def settings_for(primary_url: str, fallback_url: str, **extra: str) -> config.Config:
    return config.load({**BASE, "LLM_BASE_URL": primary_url, "LLM_FALLBACK_1_MODEL": FALLBACK,
                        "LLM_FALLBACK_1_BASE_URL": fallback_url,
                        "LLM_FALLBACK_1_API_KEY": FB_KEY, **extra})


class Clock:
    """The cooldown's clock, moved by the test (the calls themselves run in real time)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def pair() -> AsyncIterator[tuple[FakeOpenAI, FakeOpenAI]]:
    async with FakeOpenAI(api_key=KEY) as primary, FakeOpenAI(api_key=FB_KEY) as backup:
        yield primary, backup


@pytest.fixture
async def closing() -> AsyncIterator[list[Fallback]]:
    made: list[Fallback] = []
    yield made
    for model in made:
        await model.aclose()


def make(cfg: config.Config, closing: list[Fallback], **kw: Any) -> Fallback:
    model = fallback.build(cfg.endpoints, **kw)
    model.clock = Clock()
    closing.append(model)
    return model


def agent_for(model: Fallback, tmp_path: Path, **kw: Any) -> Agent:
    return Agent(model=model, sessions=SessionStore(db.connect(tmp_path / "g.db")),
                 tools=Registry(), persona=lambda: "You are Tim.", model_status=model.status,
                 **kw)


def msg(text: str) -> Inbound:
    return Inbound(channel="test", chat_id="1", user_id="u", text=text)


def failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("model endpoint failed")]


pytestmark = pytest.mark.anyio


# ----------------------------------------------------------------------------- pure parts


@given(st.integers(1, 10_000))
def test_cooldown_doubles_from_a_minute_up_to_ten(failures_in_a_row: int) -> None:
    wait = cooldown.period(failures_in_a_row)
    assert cooldown.period(1) == 60.0 and cooldown.period(0) == 0.0
    assert cooldown.period(failures_in_a_row + 1) == min(600.0, 2 * wait)
    assert 60.0 <= wait <= 600.0


def test_cooldown_passes_over_then_an_answer_clears_it() -> None:
    book = cooldown.Cooldown()
    assert book.failed("a", 0.0) == 60 and book.failed("a", 60.0) == 120
    assert book.remaining("a", 100.0) == 80 and book.remaining("b", 100.0) == 0
    book.answered("a")
    assert book.remaining("a", 100.0) == 0 and book.failed("a", 200.0) == 60


@pytest.mark.parametrize("err, over", [
    (ProviderError("refused", endpoint_fault=True), True),
    (ProviderError("gave up", status=429, retryable=True), True),
    (ProviderError("bad gateway", status=502, retryable=True), True),
    (ProviderError("stream cut", endpoint_fault=True), True),
    (ProviderError("Incorrect API key provided.", status=401), True),
    (ProviderError("nothing here", status=404), True),
    (ProviderError("model not found", status=400), True),
    (ProviderError("Invalid schema for function 'x'", status=400), False),
    (ProviderError("Request too large", status=413), False),
    (ProviderError("messages: field required", status=422), False),
    (ProviderError("image input is not supported", status=500), False),  # vision: not retried
    (ProviderError("the provider reported an error: content policy"), False),
])
def test_what_fails_over(err: ProviderError, over: bool) -> None:
    assert fails_over(err) is over


@pytest.mark.parametrize("flavour", sorted(MODEL_NOT_FOUND))
def test_model_missing_reads_every_endpoints_wording(flavour: str) -> None:
    from gantry.model.errors import body_message

    script = model_not_found(flavour)
    assert script.raw_body is not None and model_missing(body_message(script.raw_body.encode()))


@pytest.mark.parametrize("text", [
    "This model's maximum context length is 8192 tokens.",
    "fake-model is not a multimodal model",
    "Invalid 'messages[1].content': string too long.",
])
def test_model_missing_is_not_any_error_about_a_model(text: str) -> None:
    assert not model_missing(text)


# ----------------------------------------------------------------------------- settings


def test_fallbacks_default_to_the_primary_url_and_key() -> None:
    cfg = config.load({**BASE, "LLM_BASE_URL": "http://a.example/v1",
                       "LLM_FALLBACK_1_MODEL": "small", "LLM_FALLBACK_2_MODEL": "cloud",
                       "LLM_FALLBACK_2_BASE_URL": "https://b.example/v1",
                       "LLM_FALLBACK_2_API_KEY": FB_KEY})
    assert [(e.label, e.base_url, e.api_key, e.model) for e in cfg.endpoints] == [
        ("primary", "http://a.example/v1", KEY, PRIMARY),
        ("fallback 1", "http://a.example/v1", KEY, "small"),
        ("fallback 2", "https://b.example/v1", FB_KEY, "cloud"),
    ]
    assert cfg.model_secrets == [KEY, KEY, FB_KEY]
    assert config.load({**BASE, "LLM_BASE_URL": "http://a.example/v1"}).endpoints[1:] == ()


def test_a_gap_a_sixth_an_orphan_or_a_typo_stops_boot_naming_each() -> None:
    with pytest.raises(ConfigError) as err:
        config.load({**BASE, "LLM_BASE_URL": "http://a.example/v1",
                     "LLM_FALLBACK_2_MODEL": "two", "LLM_FALLBACK_6_MODEL": "six",
                     "LLM_FALLBACK_3_API_KEY": FB_KEY, "LLM_FALLBACK_MODEL": "typo",
                     "LLM_FALLBACK_4_MODEL": "four", "LLM_FALLBACK_4_BASE_URL": "ftp://x",
                     "LLM_FALLBACK_5_MODEL": "five",
                     "LLM_FALLBACK_5_BASE_URL": "https://user:pw@c.example/v1"})
    problems = err.value.problems
    assert any(p.startswith("LLM_FALLBACK_2_MODEL is set but LLM_FALLBACK_1_MODEL is not")
               for p in problems)
    assert any(p.startswith("LLM_FALLBACK_6_MODEL: fallback models are numbered 1 to 5")
               for p in problems)
    assert any(p.startswith("LLM_FALLBACK_3_API_KEY is set but LLM_FALLBACK_3_MODEL is not")
               for p in problems)
    assert any(p.startswith("LLM_FALLBACK_MODEL is not a setting") for p in problems)
    assert any(p.startswith("LLM_FALLBACK_4_BASE_URL must start with http") for p in problems)
    assert any(p.startswith("LLM_FALLBACK_5_BASE_URL must not hold a user:password@")
               for p in problems)
    assert FB_KEY not in str(err.value) and "pw@" not in str(err.value)


def test_empty_fallback_variables_count_as_unset() -> None:
    cfg = config.load({**BASE, "LLM_BASE_URL": "http://a.example/v1",
                       "LLM_FALLBACK_1_MODEL": "", "LLM_FALLBACK_7_MODEL": " "})
    assert len(cfg.endpoints) == 1


# ----------------------------------------------------------------------------- fail-over


async def test_a_503_primary_is_answered_by_fallback_1_logged_and_shown_in_status(
    pair: tuple[FakeOpenAI, FakeOpenAI], closing: list[Fallback], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    primary, backup = pair
    primary.default = HTTPError(503, message="overloaded")
    model = make(settings_for(primary.base_url, backup.base_url), closing)
    agent = agent_for(model, tmp_path)
    caplog.set_level(logging.DEBUG)
    assert await agent(msg("hello")) == "echo: hello"
    assert len(primary.requests) == fallback.SHORT_RETRY.max_attempts  # its short budget
    assert [r.body["model"] for r in backup.requests] == [FALLBACK]
    assert backup.last_request.headers["Authorization"] == f"Bearer {FB_KEY}"
    (failed,) = failures(caplog)
    assert (failed.endpoint, failed.status, failed.next) == ("primary", 503, "fallback 1")  # type: ignore[attr-defined]
    done = [r for r in caplog.records if r.getMessage() == "provider call done"]
    assert [(r.model, r.endpoint) for r in done] == [(FALLBACK, backup.base_url)]  # type: ignore[attr-defined]
    assert "model: primary-model (last answer: fb-model, primary cooling down 1m)" in \
        agent.status("1").splitlines()
    answered = await model.complete([UserMessage("who?")])
    assert (answered.model, answered.endpoint) == (FALLBACK, backup.base_url)
    assert KEY not in caplog.text and FB_KEY not in caplog.text


async def test_a_429_storm_fails_over_after_the_retry_budget(
    pair: tuple[FakeOpenAI, FakeOpenAI], closing: list[Fallback],
) -> None:
    primary, backup = pair
    primary.default = rate_limited(retry_after="0")
    model = make(settings_for(primary.base_url, backup.base_url), closing)
    done = await model.complete([UserMessage("one")])
    assert done.text == "echo: one" and done.model == FALLBACK
    assert len(primary.requests) == 2 and len(backup.requests) == 1
    await model.complete([UserMessage("two")])  # the primary cools down: not asked again
    assert len(primary.requests) == 2 and len(backup.requests) == 2


async def test_a_dead_primary_cools_down_then_is_tried_again(
    pair: tuple[FakeOpenAI, FakeOpenAI], closing: list[Fallback], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _primary, backup = pair
    model = make(settings_for(dead_base_url(), backup.base_url), closing)
    clock = model.clock
    assert isinstance(clock, Clock)
    agent = agent_for(model, tmp_path)
    caplog.set_level(logging.INFO)
    assert await agent(msg("one")) == "echo: one"
    assert len(failures(caplog)) == 1
    assert len([r for r in caplog.records if r.getMessage().startswith("provider call failed")]
               ) == 1  # one retry within the short budget, then the fail-over
    caplog.clear()
    clock.now += 30  # inside the cooldown: the next turn goes straight to the fallback
    assert await agent(msg("two")) == "echo: two"
    assert failures(caplog) == [] and not [
        r for r in caplog.records if r.getMessage().startswith("provider call failed")]
    assert "primary cooling down 30s" in agent.status("1")
    clock.now += 31  # the cooldown ran out: the primary is tried first again
    assert await agent(msg("three")) == "echo: three"
    (again,) = failures(caplog)
    assert again.cooldown_s == 120  # type: ignore[attr-defined]  # a failure in a row: doubled
    assert len(backup.requests) == 3


async def test_a_hung_primary_costs_one_turn_its_deadline_not_every_turn(
    pair: tuple[FakeOpenAI, FakeOpenAI], closing: list[Fallback],
) -> None:
    primary, backup = pair
    primary.default = Echo(delay=30)
    short = RetryPolicy(max_attempts=1, deadline=4.0)
    model = make(settings_for(primary.base_url, backup.base_url), closing, short=short)
    started = time.monotonic()
    assert (await model.complete([UserMessage("one")])).text == "echo: one"
    assert time.monotonic() - started < 20  # bounded by the short deadline, not 30 s
    started = time.monotonic()
    assert (await model.complete([UserMessage("two")])).text == "echo: two"
    assert time.monotonic() - started < 3  # under the hung endpoint's deadline: not waited for
    assert len(primary.requests) == 1


async def test_a_400_schema_error_does_not_fail_over(
    pair: tuple[FakeOpenAI, FakeOpenAI], closing: list[Fallback], tmp_path: Path,
) -> None:
    primary, backup = pair
    primary.push(HTTPError(400, message="Invalid schema for function 'calc__add'"))
    model = make(settings_for(primary.base_url, backup.base_url), closing)
    agent = agent_for(model, tmp_path)
    assert await agent(msg("hello")) == model_failed_reply(400)  # the user's error as today
    assert backup.requests == [] and len(primary.requests) == 1
    assert "cooling" not in agent.status("1")
    assert await agent(msg("again")) == "echo: again"  # answered by the primary
    assert backup.requests == []


@pytest.mark.parametrize("flavour", sorted(MODEL_NOT_FOUND))
async def test_a_model_not_found_fails_over(
    pair: tuple[FakeOpenAI, FakeOpenAI], closing: list[Fallback], flavour: str,
) -> None:
    primary, backup = pair
    primary.push(model_not_found(flavour))
    model = make(settings_for(primary.base_url, backup.base_url), closing)
    assert (await model.complete([UserMessage("hi")])).model == FALLBACK
    assert len(primary.requests) == 1  # not retried: it will not fix itself


async def test_every_endpoint_failing_raises_the_last_failure(
    pair: tuple[FakeOpenAI, FakeOpenAI], closing: list[Fallback], tmp_path: Path,
) -> None:
    primary, backup = pair
    primary.default = HTTPError(503)
    backup.push(HTTPError(401, message="Incorrect API key provided."))
    model = make(settings_for(primary.base_url, backup.base_url), closing)
    agent = agent_for(model, tmp_path)
    assert await agent(msg("hi")) == model_failed_reply(401)
    status = agent.status("1")
    assert "primary cooling down" in status and "fallback 1 cooling down" in status


# ----------------------------------------------------------------------------- streams


async def test_a_stream_cut_mid_reply_restarts_on_the_fallback(
    pair: tuple[FakeOpenAI, FakeOpenAI], closing: list[Fallback],
) -> None:
    primary, backup = pair
    primary.push(CutStream("PRIMARY TEXT THAT BREAKS", after_chunks=3))
    backup.push(Reply("the fallback's whole reply"))
    model = make(settings_for(primary.base_url, backup.base_url), closing)
    events = [e async for e in model.stream([UserMessage("hi")])]
    texts = [e for e in events if isinstance(e, TextDelta)]
    cut = next(i for i, e in enumerate(events) if isinstance(e, Restart))
    assert "".join(t.text for t in events[:cut] if isinstance(t, TextDelta)) == "PRIMARY TEXT"
    assert events[cut] == Restart("fallback 1")
    after = "".join(t.text for t in events[cut:] if isinstance(t, TextDelta))
    assert after == "the fallback's whole reply" and len(texts) > 3
    assert isinstance(events[-1], Done) and events[-1].completion.text == after
    assert events[-1].completion.model == FALLBACK


async def test_stdio_marks_a_restarted_stream_and_prints_the_reply_once(
    pair: tuple[FakeOpenAI, FakeOpenAI], closing: list[Fallback], tmp_path: Path,
) -> None:
    primary, backup = pair
    primary.push(CutStream("PRIMARY TEXT THAT BREAKS", after_chunks=3))
    backup.push(Reply("the fallback's whole reply"))
    model = make(settings_for(primary.base_url, backup.base_url), closing)
    out = io.StringIO()
    stream = StdioStream(out)
    reply = await agent_for(model, tmp_path)(msg("hi"), stream)
    await stream.finish(reply)  # as the REPL does
    assert reply == "the fallback's whole reply"
    assert out.getvalue() == f"PRIMARY TEXT\n{RESTART_MARK}\nthe fallback's whole reply\n"


async def test_a_stream_that_breaks_before_any_text_needs_no_restart(
    pair: tuple[FakeOpenAI, FakeOpenAI], closing: list[Fallback],
) -> None:
    primary, backup = pair
    primary.push(HTTPError(502), HTTPError(502))
    model = make(settings_for(primary.base_url, backup.base_url), closing)
    events = [e async for e in model.stream([UserMessage("hi")])]
    assert not any(isinstance(e, Restart) for e in events)
    assert isinstance(events[-1], Done) and events[-1].completion.text == "echo: hi"


# ----------------------------------------------------------------------------- the notice


@pytest.mark.parametrize("notice", [True, False])
async def test_the_user_is_told_only_when_the_operator_asks(
    pair: tuple[FakeOpenAI, FakeOpenAI], closing: list[Fallback], tmp_path: Path,
    notice: bool,
) -> None:
    primary, backup = pair
    model = make(settings_for(primary.base_url, backup.base_url), closing)
    agent = agent_for(model, tmp_path, model_notice=model.notice if notice else None)
    assert await agent(msg("one")) == "echo: one"  # the primary's answer: never a note
    primary.push(HTTPError(500), HTTPError(500))
    note = ("\n\n(Answered by the fallback model fb-model: primary-model is not answering "
            "right now.)")
    assert await agent(msg("two")) == "echo: two" + (note if notice else "")


# ----------------------------------------------------------------------------- Telegram


TOKEN = "123456789:AAE_fake-token-for-tests-only_xyz"
USER = 4242


async def test_telegram_message_ends_showing_only_the_fallbacks_text(
    pair: tuple[FakeOpenAI, FakeOpenAI], closing: list[Fallback], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real TelegramChannel streaming into the fake Bot API: the primary's stream breaks
    after some text was shown; the one message is edited to the fallback's reply, and no
    state of it ever held both."""
    from gantry.channel.telegram import TelegramChannel, delivery, stream
    from tests.fakes.telegram import FakeTelegram

    for module in (delivery, stream):  # an edit per chunk, so every state of it is seen
        monkeypatch.setattr(module, "EDIT_GAP", 0.01)

    primary, backup = pair
    primary.push(CutStream("PRIMARY PARTIAL TEXT THAT BREAKS OFF", after_chunks=4,
                           chunk_size=4))
    backup.push(Reply("fallback says hello", chunk_size=3, chunk_delay=0.1))
    model = make(settings_for(primary.base_url, backup.base_url), closing)
    agent = agent_for(model, tmp_path)
    async with FakeTelegram(token=TOKEN) as tg:
        ch = TelegramChannel(TOKEN, (USER,), db.connect(tmp_path / "tg.db"),
                             api_url=tg.base_url, poll_timeout=1, stream_replies=True)
        tg.push_text(USER, "hi")
        async with anyio.create_task_group() as group:
            group.start_soon(ch.serve, agent, lambda: None)
            await tg.wait_for(lambda: [m.text for m in tg.sent(USER)] == ["fallback says hello"],
                              20, "the final reply")
            group.cancel_scope.cancel()
    (message,) = tg.sent(USER)
    assert message.history[0].startswith("PRIM")  # the primary's text was shown first
    assert "…" in message.history  # then taken back
    assert len(message.history) > 4  # the fallback's reply was streamed in, edit by edit
    assert not [h for h in message.history if "PRIM" in h and "fallback" in h]
    assert not [h for h in message.history[message.history.index("…"):] if "PRIM" in h]
