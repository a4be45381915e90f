"""Follow-ups steer the running turn (FOLLOWUPS=steer, issue 40 #1): the real channel over the
fake Bot API, the real agent over the fake model, turns wrapped as `gantry run` wraps them.

The first turn waits on a tool held open by the test (`work`, a built-in), so a follow-up is
sent while it runs, deterministically; the kill -9 cases against a real `gantry run` are in
test_telegram_steer_e2e.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from gantry.channel.telegram.steer import foldable
from gantry.channel.telegram.store import Pending
from gantry.steer import FOLLOWUP_MARK, is_followup
from tests.fakes.openai import Call, Reply, ToolCalls, without_footer
from tests.fakes.telegram import FakeTelegram
from tests.test_telegram import USER, quick, states  # noqa: F401
from tests.test_telegram_stop import BOUND, GROUP, OTHER, released, requests, stack

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("quick")]

BOT = "@gantry_test_bot"

def user_texts(request: Any) -> list[str]:
    return [without_footer(m["content"] if isinstance(m["content"], str) else
                           "".join(p.get("text", "") for p in m["content"]))
            for m in request.messages if m["role"] == "user"]

def mention(tg: FakeTelegram, user: int, text: str) -> None:
    """`@bot text` in the group, with the mention entity Telegram gives it."""
    entity = {"type": "mention", "offset": 0, "length": len(BOT)}
    tg.push_update({"message": tg.message(user, GROUP, text=f"{BOT} {text}",
                                          entities=[entity])})


async def row_state(tg: FakeTelegram, ch: Any, text: str, state: str) -> None:
    await tg.wait_for(lambda: states(ch).get(text) == state or None, BOUND,
                      f"{text!r} to be {state}")

async def test_a_follow_up_during_a_tool_call_joins_the_turn_and_one_reply_answers_both(
    tmp_path: Path
) -> None:
    """The second message comes while the first turn waits on its tool: the next model call
    carries it as a user message after the tool result, and the user gets one reply."""
    with anyio.fail_after(BOUND):
        async with stack(tmp_path) as (tg, llm, ch, work, sessions):
            async with released(work.release):
                llm.push(ToolCalls([Call("work", {}, id="w1")]), Reply("Table for Friday."))
                tg.push_text(USER, "book a table")
                await work.started.wait()
                tg.push_text(USER, "and make it Friday")
                await row_state(tg, ch, "and make it Friday", "accepted")
                work.release.set()
                assert await tg.wait_sent(USER, 1, timeout=BOUND) == ["Table for Friday."]
                await row_state(tg, ch, "book a table", "answered")
            assert states(ch) == {"book a table": "answered", "and make it Friday": "folded"}
            assert len(llm.requests) == 2
            after = llm.requests[1]
            assert [m["role"] for m in after.messages] == [
                "system", "user", "assistant", "tool", "user"]
            assert user_texts(after) == ["book a table", FOLLOWUP_MARK + "and make it Friday"]
            await anyio.sleep(0.5)  # nothing else is on its way
            assert [m.text for m in tg.sent(USER)] == ["Table for Friday."]
            assert len(llm.requests) == 2
            _ids, history = sessions.load(f"telegram:{USER}")
            assert [type(m).__name__ for m in history] == [
                "UserMessage", "AssistantMessage", "ToolMessage", "UserMessage",
                "AssistantMessage"]
            assert is_followup(history[3]) and not is_followup(history[0])

async def test_a_follow_up_while_the_answer_is_written_gets_its_own_short_turn(
    tmp_path: Path
) -> None:
    """Too late to join (the model is writing the final answer, no tool calls): the follow-up
    waits, then is answered by a turn of its own; nothing is lost or answered twice."""
    with anyio.fail_after(BOUND):
        async with stack(tmp_path) as (tg, llm, ch, _work, _sessions):
            llm.push(Reply("Here is the plan.", delay=2.0), Reply("Noted, Friday."))
            tg.push_text(USER, "plan my week")
            await requests(llm, 1)
            tg.push_text(USER, "Friday is free")
            assert await tg.wait_sent(USER, 2, timeout=BOUND) == [
                "Here is the plan.", "Noted, Friday."]
            await row_state(tg, ch, "Friday is free", "answered")
            assert states(ch) == {"plan my week": "answered", "Friday is free": "answered"}
            assert user_texts(llm.requests[1])[-1] == "Friday is free"  # a turn of its own
            assert len(llm.requests) == 2

async def test_followups_queue_keeps_one_turn_per_message(tmp_path: Path) -> None:
    """FOLLOWUPS=queue: today's behaviour, the follow-up waits for a turn of its own."""
    with anyio.fail_after(BOUND):
        async with stack(tmp_path, followups="queue") as (tg, llm, ch, work, _sessions):
            async with released(work.release):
                llm.push(ToolCalls([Call("work", {}, id="w1")]), Reply("Booked."),
                         Reply("Friday it is."))
                tg.push_text(USER, "book a table")
                await work.started.wait()
                tg.push_text(USER, "and make it Friday")
                await row_state(tg, ch, "and make it Friday", "accepted")
                work.release.set()
                assert await tg.wait_sent(USER, 2, timeout=BOUND) == ["Booked.",
                                                                       "Friday it is."]
                await row_state(tg, ch, "and make it Friday", "answered")
            assert user_texts(llm.requests[1]) == ["book a table"]
            assert user_texts(llm.requests[2])[-1] == "and make it Friday"

async def test_in_a_group_only_the_turns_author_steers_it(tmp_path: Path) -> None:
    """Another member's message in the group is not folded into the turn: it gets its own
    turn after. The author's own follow-up joins."""
    with anyio.fail_after(BOUND):
        async with stack(tmp_path, users=(USER, OTHER), groups="mention") as (
                tg, llm, ch, work, _sessions):
            async with released(work.release):
                llm.push(ToolCalls([Call("work", {}, id="w1")]), Reply("Done for both."),
                         Reply("Hello other."))
                mention(tg, USER, "book a table")
                await work.started.wait()
                mention(tg, OTHER, "I want pizza")
                mention(tg, USER, "for two")
                await row_state(tg, ch, f"{BOT} for two", "accepted")
                await row_state(tg, ch, f"{BOT} I want pizza", "accepted")
                work.release.set()
                assert await tg.wait_sent(GROUP, 2, timeout=BOUND) == ["Done for both.",
                                                                        "Hello other."]
                await row_state(tg, ch, f"{BOT} I want pizza", "answered")
            assert states(ch)[f"{BOT} for two"] == "folded"
            assert user_texts(llm.requests[1]) == [f"{BOT} book a table",
                                                   FOLLOWUP_MARK + f"{BOT} for two"]
            assert user_texts(llm.requests[2])[-1] == f"{BOT} I want pizza"

async def test_stop_still_stops_a_turn_a_follow_up_joined(tmp_path: Path) -> None:
    """/stop after a follow-up was folded in: the turn stops, one "Stopped." answers both, and
    the history closes the turn (nothing is asked of the model again)."""
    from gantry.channel.base import STOPPED_REPLY
    from gantry.session import STOPPED_ANSWER

    with anyio.fail_after(BOUND):
        async with stack(tmp_path) as (tg, llm, ch, work, sessions):
            async with released(work.release):
                llm.push(ToolCalls([Call("work", {}, id="w1")]), Reply("late", delay=30))
                tg.push_text(USER, "book a table")
                await work.started.wait()
                tg.push_text(USER, "and make it Friday")
                await row_state(tg, ch, "and make it Friday", "accepted")
                work.release.set()
                await requests(llm, 2)  # the follow-up was folded before this call
                tg.push_text(USER, "/stop")
                assert await tg.wait_sent(USER, 1, timeout=BOUND) == [STOPPED_REPLY]
            assert states(ch)["and make it Friday"] == "folded"
            _ids, history = sessions.load(f"telegram:{USER}")
            assert history[-1].content == STOPPED_ANSWER
            assert is_followup(history[-2])

def _row(update_id: int, user: int, text: str, media: str = "[]",
         reply: str | None = None) -> Pending:
    return Pending(update_id, GROUP, user, update_id, text, reply, 0, [], media)

def test_which_waiting_messages_fold() -> None:
    """The author's plain text, in order; another member's is skipped; a command, a file or
    an answered row of the author's ends the run (it keeps its place)."""
    lead = _row(1, USER, "book")
    assert [r.update_id for r in foldable(lead, [
        _row(2, USER, "for two"), _row(3, OTHER, "pizza"), _row(4, USER, "at 8"),
        _row(5, USER, "/status"), _row(6, USER, "late")])] == [2, 4]
    assert foldable(lead, [_row(2, USER, "look", media='[{"kind": "photo"}]'),
                           _row(3, USER, "more")]) == []
    assert foldable(lead, [_row(2, USER, "", reply="I cannot read this kind of message.")]) == []
    assert [r.update_id for r in foldable(lead, [_row(2, USER, "/usr/bin is slow")])] == [2]

def test_fold_never_answers_twice_in_the_store(tmp_path: Path) -> None:
    """A folded row is finished (not pending), and folding it again changes nothing."""
    from gantry import db
    from gantry.channel.telegram.store import Accepted, TelegramStore

    store = TelegramStore(db.connect(tmp_path / "g.db"))
    store.accept([Accepted(1, USER, USER, 1, "a"), Accepted(2, USER, USER, 2, "b")], 3)
    lead = store.next_pending(USER)
    assert lead is not None and [r.update_id for r in store.waiting(lead, 10)] == [2]
    assert store.fold(2) is True and store.fold(2) is False
    assert store.state(2) == ("folded", 0, None)
    assert store.waiting(lead, 10) == [] and store.pending_chats() == [USER]
