"""Reactions (issue 40, item 3), in-process against the fake Bot API and model: 👀 on a
message being answered and cleared once the answer is out; a user's reaction to a reply
stored without a model call and carried by the next turn's request (in the footer, not the
system prompt), once; strangers, groups, stale reactions and messages not gantry's ignored;
TELEGRAM_REACTIONS=false as before."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gantry import db
from gantry.agent import Agent
from gantry.channel.telegram import TelegramChannel
from gantry.channel.telegram.poll import ALLOWED_UPDATES
from gantry.channel.telegram.reactions import emojis, feedback_line
from gantry.model.client import Provider
from gantry.prompt import TIME_MARK
from gantry.session import SessionStore
from gantry.tools import Registry
from tests.fakes.openai import FakeOpenAI, RecordedRequest
from tests.fakes.telegram import FakeTelegram
from tests.test_telegram import USER, running

pytestmark = pytest.mark.anyio

STRANGER = 666
GROUP = -100123


class Bot:
    def __init__(self, tg: FakeTelegram, llm: FakeOpenAI, ch: TelegramChannel) -> None:
        self.tg, self.llm, self.ch = tg, llm, ch

    def reactions(self) -> list[tuple[Any, ...]]:
        rows: Any = self.ch.store.conn.execute(  # type: ignore[attr-defined]
            "SELECT chat_id, message_id, user_id, emoji, seen FROM telegram_reaction")
        return [tuple(r) for r in rows]

    async def ask(self, text: str, count: int) -> str:
        """Send `text`; the reply, once the update is answered (delivery done)."""
        self.tg.push_text(USER, text)
        reply = (await self.tg.wait_sent(USER, count, timeout=20))[-1]
        await self.tg.wait_for(lambda: self.settled(), what="every update answered")
        return reply

    def settled(self) -> bool:
        rows: Any = self.ch.store.conn.execute(  # type: ignore[attr-defined]
            "SELECT count(*) FROM telegram_update WHERE state NOT IN ('answered')")
        return next(iter(rows))[0] == 0


@contextlib.asynccontextmanager
async def bot(tmp_path: Path, *, reactions: bool = True,
              groups: str = "off") -> AsyncIterator[Bot]:
    async with FakeTelegram() as tg, FakeOpenAI() as llm:
        provider = Provider(llm.base_url, "sk-test", "fake-model")
        conn = db.connect(tmp_path / "g.db")
        agent = Agent(model=provider, sessions=SessionStore(conn), tools=Registry(),
                      persona=lambda: "You are a test bot.")
        try:
            async with running(tg, tmp_path / "g.db", respond=agent, conn=conn,
                               reactions=reactions, groups=groups) as ch:
                yield Bot(tg, llm, ch)
        finally:
            await provider.aclose()


def footer(req: RecordedRequest) -> str:
    user = [m for m in req.messages if m["role"] == "user"][-1]
    return str(user["content"]).split(TIME_MARK, 1)[1]


def system(req: RecordedRequest) -> str:
    return "".join(str(m["content"]) for m in req.messages if m["role"] == "system")


async def test_a_message_is_marked_while_answered_and_cleared_after(tmp_path: Path) -> None:
    async with bot(tmp_path) as b:
        sent = b.tg.push_text(USER, "hello")
        await b.ask("again", 2)
        first = sent["message"]["message_id"]
        assert b.tg.reactions_on(USER, first) == [["👀"], []]
        marks = b.tg.calls("setMessageReaction")
        sends = b.tg.calls("sendMessage")
        assert marks[0].at < sends[0].at < marks[1].at  # on before the answer, off after
        assert "message_reaction" in b.tg.calls("getUpdates")[-1].params["allowed_updates"]


async def test_reactions_off_keeps_todays_behaviour(tmp_path: Path) -> None:
    async with bot(tmp_path, reactions=False) as b:
        reply = await b.ask("hello", 1)
        b.tg.push_reaction(USER, USER, 2, ["👎"])  # not even delivered: not asked for
        await b.ask("again", 2)
        assert reply == "echo: hello"
        assert b.tg.calls("setMessageReaction") == []
        assert b.tg.calls("getUpdates")[-1].params["allowed_updates"] == ALLOWED_UPDATES
        assert b.reactions() == [] and TIME_MARK in b.llm.last_request.messages[-1]["content"]
        assert "reacted" not in footer(b.llm.last_request)


async def test_a_reaction_makes_no_model_call_and_the_next_turn_carries_it_once(
        tmp_path: Path) -> None:
    async with bot(tmp_path) as b:
        await b.ask("hello", 1)
        reply_id = b.tg.sent(USER)[0].message_id
        calls = len(b.llm.requests)
        b.tg.push_reaction(USER, USER, reply_id, ["👎"])
        await b.tg.wait_for(lambda: b.reactions(), what="the reaction stored")
        await anyio.sleep(0.5)
        assert len(b.llm.requests) == calls and b.tg.sent_texts(USER) == ["echo: hello"]
        assert b.reactions() == [(USER, reply_id, USER, "👎", 0)]
        await b.ask("what now", 2)
        req = b.llm.last_request
        assert "The user reacted 👎 to your previous reply." in footer(req)
        assert "reacted" not in system(req) and req.last_user_text == "what now"
        assert b.reactions() == [(USER, reply_id, USER, "👎", 1)]
        await b.ask("and now", 3)
        assert "reacted" not in footer(b.llm.last_request)  # shown once


async def test_an_earlier_reply_is_quoted_and_a_taken_back_reaction_says_nothing(
        tmp_path: Path) -> None:
    async with bot(tmp_path) as b:
        await b.ask("first question", 1)
        await b.ask("second question", 2)
        first, second = (m.message_id for m in b.tg.sent(USER))
        b.tg.push_reaction(USER, USER, first, ["🔥"])
        b.tg.push_reaction(USER, USER, second, ["👍"])
        b.tg.push_reaction(USER, USER, second, [], old=["👍"])  # taken back
        await b.tg.wait_for(lambda: len(b.reactions()) == 1, what="one reaction left")
        await b.ask("third", 3)
        text = footer(b.llm.last_request)
        assert "The user reacted 🔥 to an earlier reply of yours: «echo: first question»." in text
        assert "👍" not in text


async def test_strangers_groups_stale_and_foreign_reactions_are_ignored(tmp_path: Path) -> None:
    async with bot(tmp_path) as b:
        user_msg = b.tg.push_text(USER, "hello")["message"]["message_id"]
        await b.tg.wait_sent(USER, 1, timeout=20)
        await b.tg.wait_for(b.settled, what="answered")
        reply_id = b.tg.sent(USER)[0].message_id
        b.tg.push_reaction(STRANGER, USER, reply_id, ["👎"])  # not allowlisted
        b.tg.push_reaction(USER, GROUP, reply_id, ["👎"])  # a group, TELEGRAM_GROUPS=off
        b.tg.push_reaction(USER, USER, user_msg, ["👎"])  # the user's own message
        b.tg.push_reaction(USER, USER, 999, ["👎"])  # a message gantry never sent
        await b.ask("one", 2)
        assert b.reactions() == []
        b.ch.store.conn.execute(  # type: ignore[attr-defined]
            "UPDATE telegram_sent SET sent_at = ?", (time.time() - 3 * 86400,))
        stale = b.tg.sent(USER)[1].message_id
        b.tg.push_reaction(USER, USER, stale, ["👎"])  # a reply three days old
        await b.ask("two", 3)
        assert b.reactions() == []
        assert all("reacted" not in footer(r) for r in b.llm.requests)
    assert len(b.ch._strangers) == 1


async def test_a_group_reaction_counts_with_telegram_groups_mention(tmp_path: Path) -> None:
    async with bot(tmp_path, groups="mention") as b:
        mention(b.tg, "@gantry_test_bot hi")
        await b.tg.wait_sent(GROUP, 1, timeout=20)
        await b.tg.wait_for(b.settled, what="answered")
        reply_id = b.tg.sent(GROUP)[0].message_id
        b.tg.push_reaction(USER, GROUP, reply_id, ["❤"])
        await b.tg.wait_for(lambda: b.reactions(), what="the reaction stored")
        mention(b.tg, "@gantry_test_bot more")
        await b.tg.wait_sent(GROUP, 2, timeout=20)
        assert "The user reacted ❤ to your previous reply." in footer(b.llm.last_request)


def mention(tg: FakeTelegram, text: str) -> None:
    handle = {"type": "mention", "offset": 0, "length": len("@gantry_test_bot")}
    tg.push_update({"message": tg.message(USER, GROUP, text=text, entities=[handle])})


def test_reaction_kinds_as_text() -> None:
    class R:
        def __init__(self, **kw: str) -> None:
            self.__dict__.update(kw)

    assert emojis([R(type="emoji", emoji="👍"), R(type="custom_emoji", custom_emoji_id="1"),
                   R(type="paid")]) == "👍(a custom emoji)⭐"
    assert feedback_line("👍", True, None) == "The user reacted 👍 to your previous reply."
    assert feedback_line("👎", False, "x" * 500).endswith("…».")
