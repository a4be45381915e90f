"""Telegram channel pieces in-process: the exactly-once store, reply parts, push."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gantry import db
from gantry.channel.base import Inbound
from gantry.channel.telegram import TelegramChannel, bot, delivery, poll, retry, worker
from gantry.channel.telegram.delivery import parts_for
from gantry.channel.telegram.format import utf16_len
from gantry.channel.telegram.store import (
    MAX_ATTEMPTS,
    MAX_CRASHES,
    Accepted,
    NextAttempt,
    TelegramStore,
    next_attempt,
)
from gantry.channel.telegram.worker import FAILED_REPLY
from tests.fakes.telegram import FakeTelegram

TOKEN = "123456789:AAE_fake-token-for-tests-only_xyz"


def test_store_accept_is_atomic_and_idempotent(tmp_path: Path) -> None:
    store = TelegramStore(db.connect(tmp_path / "g.db"))
    assert store.next_offset() == 0
    batch = [Accepted(10, 1, 1, 5, "a"), Accepted(11, 2, 2, 6, "b"), Accepted(12, 1, 1, 7, "c")]
    store.accept(batch, 13)
    store.accept(batch[:1], 11)  # a redelivered update: nothing doubles
    assert store.next_offset() == 11  # the offset follows the batch just accepted
    store.accept([], 13)
    assert store.pending_chats() == [1, 2]
    row = store.next_pending(1)
    assert row is not None and (row.update_id, row.text, row.reply) == (10, "a", None)
    store.set_reply(10, "reply")
    store.mark_sent(10, 1, 2)
    row = store.next_pending(1)
    assert row is not None and (row.update_id, row.sent_parts) == (10, 1)
    store.mark_sent(10, 2, 2)
    row = store.next_pending(1)
    assert row is not None and row.update_id == 12  # arrival order within the chat


def test_non_text_rows_arrive_with_their_reply(tmp_path: Path) -> None:
    store = TelegramStore(db.connect(tmp_path / "g.db"))
    store.accept([Accepted(1, 9, 9, 1, "", reply="text only")], 2)
    row = store.next_pending(9)
    assert row is not None and row.reply == "text only"


def test_parts_for_long_markdown() -> None:
    reply = "**Title**\n\n" + "\n\n".join("para " * 300 for _ in range(8))
    parts = parts_for(reply)
    assert len(parts) >= 3 and all(utf16_len(p.text) <= 4096 for p in parts)
    assert parts[0].entities and parts[0].entities[0].type == "bold"
    assert not parts[0].text.startswith("**")
    assert parts_for("   ")[0].text == "(empty reply)"


@pytest.mark.anyio
async def test_push_only_to_allowlisted_chats(tmp_path: Path) -> None:
    async with FakeTelegram(token=TOKEN) as tg:
        ch = TelegramChannel(TOKEN, (42,), db.connect(tmp_path / "g.db"), api_url=tg.base_url)
        try:
            await ch.push("42", "*reminder*: stretch")
            with pytest.raises(PermissionError):
                await ch.push("43", "nope")
        finally:
            await ch.bot.session.close()
        assert tg.sent_texts(42) == ["reminder: stretch"]
        assert tg.sent(43) == []


def test_store_ids_restarting_lower_replace_only_finished_rows(tmp_path: Path) -> None:
    store = TelegramStore(db.connect(tmp_path / "g.db"))
    store.accept([Accepted(500, 1, 1, 10, "old")], 501)
    store.set_reply(500, "r")
    store.mark_sent(500, 1, 1)
    store.accept([Accepted(501, 1, 1, 11, "pending")], 502)
    # a week later Telegram restarts ids: 500 and 501 come back for new messages
    store.accept([Accepted(500, 1, 1, 90, "new"), Accepted(501, 1, 1, 91, "clash")], 502)
    row = store.next_pending(1)
    assert row is not None and (row.update_id, row.text) == (500, "new")
    store.set_reply(500, "r2")
    store.mark_sent(500, 1, 1)
    row = store.next_pending(1)
    assert row is not None and row.text == "pending"  # an unfinished row is never replaced


def test_store_attempts_and_terminal_states(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "g.db")
    store = TelegramStore(conn)
    store.accept([Accepted(1, 7, 7, 1, "a"), Accepted(2, 7, 7, 2, "b"),
                  Accepted(3, 8, 8, 3, "c")], 4)
    store.begin_attempt(1)
    assert [store.fail_attempt(1) for _ in range(3)] == [1, 2, 3]
    assert store.state(1) == ("accepted", 3, None)
    store.set_reply(1, FAILED_REPLY, error="the turn failed 3 times in a row")
    assert store.state(1) == ("replied", 0, "the turn failed 3 times in a row")
    store.mark_sent(1, 1, 1)
    assert store.state(1)[0] == "failed"  # its stand-in reply went out; still a failure
    store.finish(2, "undeliverable", "TelegramForbiddenError: blocked")
    assert store.next_pending(7) is None and store.pending_chats() == [8]
    conn.execute("UPDATE telegram_update SET answered_at = 0")
    assert store.prune() == 2  # finished rows of every kind go; the pending one stays
    assert store.pending_chats() == [8]


def test_store_counts_an_attempt_left_in_flight_as_a_crash(tmp_path: Path) -> None:
    """An attempt begun and never ended is a crash, counted once at the next attempt;
    an undone one (shutdown, Telegram down) counts as nothing; failures count apart."""
    store = TelegramStore(db.connect(tmp_path / "g.db"))
    store.accept([Accepted(1, 7, 7, 1, "a")], 2)
    assert store.settle_crash(1) == (0, 0)
    store.begin_attempt(1)  # … and the process dies
    assert store.settle_crash(1) == (0, 1)
    assert store.settle_crash(1) == (0, 1)  # a pause killed before the attempt: no crash
    store.begin_attempt(1)
    store.undo_attempt(1)
    assert store.settle_crash(1) == (0, 1)
    store.begin_attempt(1)
    store.fail_attempt(1)
    assert store.settle_crash(1) == (1, 1)
    store.set_reply(1, "r")  # the turn's counts end with it; delivery starts afresh
    assert store.settle_crash(1) == (0, 0)


def test_store_keeps_a_crash_pause_across_restarts(tmp_path: Path) -> None:
    """Issue 35 #11: the pause before the next attempt ends at a stored time; a restart
    during it (a new store on the same file) waits only for the rest, never longer than the
    pause, and the pause after the next crash starts anew."""
    path = tmp_path / "g.db"
    store = TelegramStore(db.connect(path))
    store.accept([Accepted(1, 7, 7, 1, "a")], 2)
    assert 3.5 < store.pause_left(1, 4.0) <= 4.0
    time.sleep(0.3)
    again = TelegramStore(db.connect(path))  # the process restarted during the pause
    assert 3.0 < again.pause_left(1, 4.0) <= 3.7
    again.conn.execute("UPDATE telegram_update SET not_before = not_before - 10")
    assert again.pause_left(1, 4.0) == 0.0  # over while the process was down
    again.conn.execute("UPDATE telegram_update SET not_before = not_before + 1000")
    assert again.pause_left(1, 4.0) == 4.0  # the clock went back: the pause is still bounded
    again.begin_attempt(1)  # … and the process dies in it: a new pause, whole
    again.settle_crash(1)
    assert again.pause_left(1, 2.0) > 1.5


def test_crash_policy_allows_more_crashes_than_failures_with_growing_pauses() -> None:
    """Crashes (maybe anyone's kill -9) get MAX_CRASHES tries with doubling pauses; ordinary
    failures (the update's own) get MAX_ATTEMPTS tries, at once."""
    assert MAX_CRASHES > MAX_ATTEMPTS
    assert next_attempt(0, 0, 1.0, 60.0) == NextAttempt()
    assert [next_attempt(0, c, 1.0, 60.0).delay for c in range(1, MAX_CRASHES)] == [
        2.0**i for i in range(MAX_CRASHES - 1)]
    assert next_attempt(0, 3, 10.0, 25.0).delay == 25.0
    assert next_attempt(MAX_ATTEMPTS - 1, 0, 1.0, 60.0) == NextAttempt()
    gone = next_attempt(MAX_ATTEMPTS, 0, 1.0, 60.0)
    assert gone.give_up == f"failed {MAX_ATTEMPTS} times in a row" and gone.delay == 0
    assert next_attempt(0, MAX_CRASHES, 1.0, 60.0).give_up == (
        f"was cut by a crash {MAX_CRASHES} times in a row")


@given(st.integers(0, 50), st.integers(0, 50))
def test_crash_policy_is_bounded(failures: int, crashes: int) -> None:
    step = next_attempt(failures, crashes, 1.0, 60.0)
    assert 0.0 <= step.delay <= 60.0
    assert (step.give_up is not None) == (failures >= MAX_ATTEMPTS or crashes >= MAX_CRASHES)


# ----------------------------------------------------------------------------- failure paths
# The channel in-process over real aiogram and the loopback fake Bot API: every fault
# below is answered by the fake as Telegram would, and the channel must ride it out.

USER = 4242
STRANGER = 666


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backoff measured in tens of milliseconds instead of seconds, and capped at half a
    second: a run of transient failures (uncounted, retried for as long as Telegram is down)
    would otherwise double the wait up to a minute within a dozen retries."""
    monkeypatch.setattr(retry, "BACKOFF_FIRST", 0.02)
    monkeypatch.setattr(worker, "WORKER_BACKOFF_CAP", 0.5)
    monkeypatch.setattr(worker, "CRASH_DELAY_FIRST", 0.02)
    monkeypatch.setattr(worker, "CRASH_DELAY_CAP", 0.1)


Respond = Callable[[Inbound, Any], Awaitable[str]]


async def echo(msg: Inbound, stream: Any) -> str:
    return f"echo: {msg.text}"


@contextlib.asynccontextmanager
async def running(
    tg: FakeTelegram, path: Path, respond: Respond = echo, users: tuple[int, ...] = (USER,),
    conn: Any = None, **kw: Any,
) -> AsyncIterator[TelegramChannel]:
    """serve() in a task group; the test fails if it ever returns or raises on its own."""
    ch = TelegramChannel(TOKEN, users, db.connect(path) if conn is None else conn,
                         api_url=tg.base_url, poll_timeout=1, **kw)
    ended: list[BaseException | None] = []
    ready = anyio.Event()

    async def serve() -> None:
        try:
            await ch.serve(respond, ready.set)
            ended.append(None)
        except BaseException as exc:
            ended.append(exc)
            raise

    async with anyio.create_task_group() as group:
        group.start_soon(serve)
        with anyio.fail_after(20):
            await ready.wait()
        yield ch
        assert not ended, f"serve() ended on its own: {ended}"
        group.cancel_scope.cancel()


def states(ch: TelegramChannel) -> dict[str, str]:
    rows = ch.store.conn.execute(  # type: ignore[attr-defined]
        "SELECT text, state FROM telegram_update ORDER BY update_id")
    return {str(t): str(s) for t, s in rows}


async def settle(tg: FakeTelegram, ch: TelegramChannel, texts: list[str],
                 timeout: float = 20.0) -> dict[str, str]:
    """Wait until every listed message is finished (answered, failed or undeliverable)."""
    def done() -> dict[str, str]:
        now = states(ch)
        finished = all(now.get(t) in ("answered", "failed", "undeliverable") for t in texts)
        return now if finished else {}

    return await tg.wait_for(done, timeout, f"{texts} to finish")


@pytest.mark.anyio
async def test_html_502_from_telegram_is_transient(tmp_path: Path, quick: None) -> None:
    """nginx's HTML 502 page (aiogram: ClientDecodeError, not a TelegramAPIError) at start,
    on getUpdates and on sendMessage: retried with backoff, never fatal."""
    async with FakeTelegram(token=TOKEN) as tg:
        tg.fail("getMe", "html_502")
        tg.fail("getUpdates", "html_502", times=2)
        tg.fail("sendMessage", "html_502")
        tg.push_text(USER, "hi")
        async with running(tg, tmp_path / "g.db") as ch:
            assert await tg.wait_sent(USER, 1, timeout=20) == ["echo: hi"]
            assert (await settle(tg, ch, ["hi"]))["hi"] == "answered"
        assert [c.fault for c in tg.calls("getMe")][:1] == ["html_502"]
        assert len(tg.calls("sendMessage")) == 2 and len(tg.sent(USER)) == 1


@pytest.mark.anyio
async def test_command_menu_is_published_beside_polling_not_before(tmp_path: Path,
                                                                   quick: None) -> None:
    """A failing, then slow setMyCommands delays neither polling nor replies; it is retried
    until the menu is published."""
    async with FakeTelegram(token=TOKEN) as tg:
        tg.fail("setMyCommands", "server_error", times=2)
        tg.fail("setMyCommands", "slow", delay=4.0)
        async with running(tg, tmp_path / "g.db"):
            calls = await tg.wait_calls("setMyCommands", 3, timeout=10)
            tg.push_text(USER, "hi")
            assert await tg.wait_sent(USER, 1, timeout=20) == ["echo: hi"]
            assert calls[-1].status is None  # answered while the menu call still hangs
            await tg.wait_for(lambda: calls[-1].status == 200 or None, 10, "the menu published")
        assert [c.fault for c in calls] == ["server_error", "server_error", "slow"]
        assert tg.calls("getUpdates")[0].at < calls[-1].at + 4.0
        assert [c["command"] for c in calls[-1].params["commands"]] == [
            "new", "status", "usage", "stop", "cancel", "decline", "skills", "prompts",
            "prompt", "help"]
        assert len(tg.calls("setMyCommands")) == 3


@pytest.mark.anyio
async def test_command_menu_given_up_after_bounded_tries(
    tmp_path: Path, quick: None, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeTelegram(token=TOKEN) as tg:
        tg.fail("setMyCommands", "server_error", times=bot.MENU_ATTEMPTS + 5)
        tg.push_text(USER, "hi")
        async with running(tg, tmp_path / "g.db"):
            assert await tg.wait_sent(USER, 1, timeout=20) == ["echo: hi"]
            await tg.wait_for(lambda: any("menu not published" in r.getMessage()
                                          for r in caplog.records) or None,
                              20, "the menu given up")
            await anyio.sleep(0.3)
        assert len(tg.calls("setMyCommands")) == bot.MENU_ATTEMPTS
        warnings = [r for r in caplog.records if "menu not published" in r.getMessage()]
        assert len(warnings) == 1 and warnings[0].exc_info is None
        assert "TelegramServerError" in warnings[0].__dict__["error"]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["blocked", "chat_not_found"])
async def test_permanent_refusal_is_final_and_frees_the_chat(
    tmp_path: Path, quick: None, kind: str
) -> None:
    async with FakeTelegram(token=TOKEN) as tg:
        tg.fail("sendMessage", kind)  # type: ignore[arg-type]
        tg.push_text(USER, "first")
        tg.push_text(USER, "second")
        async with running(tg, tmp_path / "g.db") as ch:
            assert await tg.wait_sent(USER, 1, timeout=20) == ["echo: second"]
            final = await settle(tg, ch, ["first", "second"])
        assert final == {"first": "undeliverable", "second": "answered"}
        assert len(tg.calls("sendMessage")) == 2  # the refused reply was tried once


@pytest.mark.anyio
async def test_migrated_group_reply_goes_to_the_supergroup(tmp_path: Path, quick: None) -> None:
    async with FakeTelegram(token=TOKEN) as tg:
        tg.fail("sendMessage", "migrated", migrate_to=-1001234)
        text = "/ping@gantry_test_bot"  # groups are answered only when addressed
        tg.push_text(USER, text, chat_id=-55)
        async with running(tg, tmp_path / "g.db", groups="mention") as ch:
            assert await tg.wait_sent(-1001234, 1, timeout=20) == [f"echo: {text}"]
            assert (await settle(tg, ch, [text]))[text] == "answered"
        assert tg.sent(-55) == []


@pytest.mark.anyio
async def test_blocked_while_streaming_ends_the_message_not_the_process(
    tmp_path: Path, quick: None
) -> None:
    """403 on every edit of a streamed reply: the turn finishes, the update is marked
    undeliverable, and the chat's next message is handled."""

    async def streaming(msg: Inbound, stream: Any) -> str:
        for word in ("a ", "streamed ", "reply"):
            await stream.write(word)
            await anyio.sleep(0.05)
        return f"echo: {msg.text}"

    async with FakeTelegram(token=TOKEN) as tg:
        tg.fail("editMessageText", "blocked", times=100)
        tg.push_text(USER, "stream it")
        async with running(tg, tmp_path / "g.db", streaming, stream_replies=True) as ch:
            assert (await settle(tg, ch, ["stream it"]))["stream it"] == "undeliverable"
            tg.push_text(USER, "/help")
            await settle(tg, ch, ["/help"])
            edits = len(tg.calls("editMessageText"))
            assert edits <= 2  # a blocked stream stops editing at once
            await tg.wait_for(lambda: USER not in ch._edit_at, 5, "the worker to drop its slot")


@pytest.mark.anyio
async def test_turn_that_keeps_failing_is_marked_failed_with_a_short_reply(
    tmp_path: Path, quick: None
) -> None:
    calls: list[str] = []

    async def broken(msg: Inbound, stream: Any) -> str:
        calls.append(msg.text)
        if msg.text == "poison":
            raise RuntimeError("this message always breaks the turn")
        return f"echo: {msg.text}"

    async with FakeTelegram(token=TOKEN) as tg:
        tg.push_text(USER, "poison")
        tg.push_text(USER, "fine")
        async with running(tg, tmp_path / "g.db", broken) as ch:
            final = await settle(tg, ch, ["poison", "fine"])
        assert final == {"poison": "failed", "fine": "answered"}
        assert calls == ["poison"] * MAX_ATTEMPTS + ["fine"]
        assert tg.sent_texts(USER) == [FAILED_REPLY, "echo: fine"]


@pytest.mark.anyio
async def test_crashes_across_restarts_count_and_end_in_failed(tmp_path: Path,
                                                                quick: None) -> None:
    """An update whose turn crashed the process MAX_CRASHES times (each start left its
    attempt in flight) is not tried again: no crash loop."""
    path = tmp_path / "g.db"
    store = TelegramStore(db.connect(path))
    store.accept([Accepted(100, USER, USER, 1, "kills the process")], 101)
    for _ in range(MAX_CRASHES):
        store.settle_crash(100)
        store.begin_attempt(100)  # as each crashed start left it
    asked: list[str] = []

    async def respond(msg: Inbound, stream: Any) -> str:
        asked.append(msg.text)
        return "never"

    async with FakeTelegram(token=TOKEN, first_update_id=101) as tg:
        async with running(tg, path, respond) as ch:
            final = await settle(tg, ch, ["kills the process"])
        assert final["kills the process"] == "failed" and asked == []
        assert tg.sent_texts(USER) == [FAILED_REPLY]
        assert store.state(100) == ("failed", 0,
                                    f"the turn was cut by a crash {MAX_CRASHES} times in a row")


@pytest.mark.anyio
async def test_fewer_crashes_than_the_limit_pause_then_answer(
    tmp_path: Path, quick: None, caplog: pytest.LogCaptureFixture
) -> None:
    """MAX_ATTEMPTS crashed starts (the old limit) are not the message's fault: after a
    logged pause it is answered normally."""
    path = tmp_path / "g.db"
    store = TelegramStore(db.connect(path))
    store.accept([Accepted(100, USER, USER, 1, "unlucky")], 101)
    for _ in range(MAX_ATTEMPTS):
        store.settle_crash(100)
        store.begin_attempt(100)
    async with FakeTelegram(token=TOKEN, first_update_id=101) as tg:
        async with running(tg, path) as ch:
            assert (await settle(tg, ch, ["unlucky"]))["unlucky"] == "answered"
        assert tg.sent_texts(USER) == ["echo: unlucky"]
    paused = [r for r in caplog.records if "retrying after a pause" in r.getMessage()]
    assert [r.__dict__["crashes"] for r in paused] == [MAX_ATTEMPTS]


@pytest.mark.anyio
async def test_slow_successful_send_is_not_cut_and_resent(
    tmp_path: Path, quick: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside shutdown no limit of ours cuts a delivery: a send Telegram completes slowly
    is sent once. (DELIVERY_GRACE shortened so the slow send outlasts it.)"""
    monkeypatch.setattr(delivery, "DELIVERY_GRACE", 0.3)
    async with FakeTelegram(token=TOKEN) as tg:
        tg.fail("sendMessage", "slow", delay=1.0)
        tg.push_text(USER, "take your time")
        async with running(tg, tmp_path / "g.db") as ch:
            await settle(tg, ch, ["take your time"])
            await anyio.sleep(0.5)
        assert tg.sent_texts(USER) == ["echo: take your time"]
        assert len(tg.calls("sendMessage")) == 1


@pytest.mark.anyio
async def test_shutdown_gives_a_delivery_in_flight_only_the_grace(
    tmp_path: Path, quick: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery, "DELIVERY_GRACE", 0.5)
    async with FakeTelegram(token=TOKEN) as tg:
        tg.fail("sendMessage", "slow", delay=30)
        tg.push_text(USER, "slow one")
        ch = TelegramChannel(TOKEN, (USER,), db.connect(tmp_path / "g.db"),
                             api_url=tg.base_url, poll_timeout=1)
        async with anyio.create_task_group() as group:
            group.start_soon(ch.serve, echo, lambda: None)
            await tg.wait_calls("sendMessage", 1, timeout=20)
            started = anyio.current_time()
            group.cancel_scope.cancel()
        assert anyio.current_time() - started < 3
        assert states(ch)["slow one"] == "replied"  # resumed at the next start


@pytest.mark.anyio
async def test_update_ids_restarting_lower_are_confirmed(tmp_path: Path, quick: None) -> None:
    async with FakeTelegram(token=TOKEN) as tg:
        tg.push_text(USER, "before the gap")
        async with running(tg, tmp_path / "g.db") as ch:
            await tg.wait_sent(USER, 1, timeout=20)
            tg.restart_update_ids(500)  # "after a week without updates"
            tg.push_text(USER, "after the gap")
            await tg.wait_sent(USER, 2, timeout=20)
            await tg.wait_for(lambda: tg.pending_updates == 0, 10, "the batch confirmed")
            tg.push_text(USER, "and again")
            await tg.wait_sent(USER, 3, timeout=20)
            await tg.wait_for(lambda: tg.pending_updates == 0, 10, "the batch confirmed")
            await anyio.sleep(1.5)  # a few more polls: nothing comes back
            assert ch.store.next_offset() == 502
        assert tg.sent_texts(USER) == ["echo: before the gap", "echo: after the gap",
                                       "echo: and again"]


@pytest.mark.anyio
async def test_maps_stay_bounded_and_finished_updates_are_pruned_while_running(
    tmp_path: Path, quick: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(poll, "STRANGERS_MAX", 5)
    monkeypatch.setattr(poll, "PRUNE_EVERY", 0.2)
    path = tmp_path / "g.db"
    store = TelegramStore(db.connect(path))
    store.accept([Accepted(1, USER, USER, 1, "a week ago", reply="old")], 2)
    store.mark_sent(1, 1, 1)
    store.conn.execute("UPDATE telegram_update SET answered_at = 0")  # type: ignore[attr-defined]
    async with FakeTelegram(token=TOKEN) as tg:
        for stranger in range(1000, 1030):
            tg.push_text(stranger, "let me in")
        tg.push_text(USER, "hello")
        async with running(tg, path, stream_replies=True) as ch:
            await settle(tg, ch, ["hello"])
            await tg.wait_for(lambda: "a week ago" not in states(ch), 5, "the prune")
            assert len(ch._strangers) <= 5
            await tg.wait_for(lambda: not ch._active, 5, "the worker to finish")
            assert ch._edit_at == {}


# ----------------------------------------------------------------------------- the property

_METHOD_FAULTS = {
    "getUpdates": ["server_error", "dropped", "html_502", "retry_after", "conflict"],
    "sendMessage": ["server_error", "dropped", "html_502", "retry_after", "blocked",
                    "chat_not_found", "slow"],
    "sendChatAction": ["server_error", "html_502", "blocked"],
}
_faults = st.lists(
    st.sampled_from(sorted(_METHOD_FAULTS)).flatmap(
        lambda m: st.tuples(st.just(m), st.sampled_from(_METHOD_FAULTS[m]),
                            st.integers(1, 3))),
    max_size=6,
)


@pytest.mark.slow
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@example(faults=[("getUpdates", "server_error", 1), *[("sendMessage", "server_error", 3)] * 3],
         texts=["poison", "a", "c", "b"])  # 12 failed steps in one chat: ~82 s of uncapped backoff
@given(faults=_faults, texts=st.lists(st.sampled_from(["a", "b", "c", "poison", "d"]),
                                      min_size=1, max_size=4, unique=True))
def test_any_telegram_faults_at_most_one_reply_and_nothing_left_pending(
    quick: None, monkeypatch: pytest.MonkeyPatch, faults: list[tuple[str, str, int]],
    texts: list[str],
) -> None:
    """For any sequence of injected Telegram faults: each allowlisted message gets at most
    one reply, every message ends answered, failed or undeliverable (nothing pending
    forever), and serve() never ends on its own. "poison" breaks the turn every time."""
    monkeypatch.setattr(delivery, "DELIVERY_GRACE", 0.1)  # a slow send outlasts it

    async def respond(msg: Inbound, stream: Any) -> str:
        if msg.text == "poison":
            raise RuntimeError("this turn always fails")
        return f"echo: {msg.text}"

    async def scenario(path: Path) -> None:
        async with FakeTelegram(token=TOKEN) as tg:
            for method, kind, times in faults:
                tg.fail(method, kind, times=times, retry_after=0, delay=0.3)  # type: ignore[arg-type]
            for text in texts:
                tg.push_text(USER, text)
            tg.push_text(STRANGER, "not allowed")
            async with running(tg, path, respond) as ch:
                final = await settle(tg, ch, texts, timeout=60)
                await anyio.sleep(0.3)  # room for a late duplicate to show up
            sent = tg.sent_texts(USER)
            for text in texts:
                reply = FAILED_REPLY if text == "poison" else f"echo: {text}"
                assert sent.count(reply) <= 1, (text, sent)
                assert final[text] in ("answered", "failed", "undeliverable")
                if final[text] == "answered":
                    assert sent.count(reply) == 1
            assert tg.sent(STRANGER) == [] and "not allowed" not in final

    with tempfile.TemporaryDirectory() as d:
        anyio.run(scenario, Path(d) / "g.db")


@pytest.mark.anyio
async def test_push_resumes_after_the_parts_already_sent(tmp_path: Path) -> None:
    """Cron's exactly-once push: parts before `sent` are skipped, each new one is reported."""
    text = "\n\n".join(f"part {i} " + "word " * 700 for i in range(3))
    parts = parts_for(text)
    assert len(parts) == 3
    async with FakeTelegram(token=TOKEN) as tg:
        ch = TelegramChannel(TOKEN, (42,), db.connect(tmp_path / "g.db"), api_url=tg.base_url)
        seen: list[tuple[int, int]] = []
        try:
            await ch.push("42", text, sent=1, progress=lambda d, t: seen.append((d, t)))
            await ch.push("42", text, sent=3, progress=lambda d, t: seen.append((d, t)))
        finally:
            await ch.bot.session.close()
        assert tg.sent_texts(42) == [parts[1].text, parts[2].text]
        assert seen == [(2, 3), (3, 3), (3, 3)]
    assert ch.can_push("42") and not ch.can_push("-10042") and not ch.can_push("x")


def test_session_sets_up_what_aiogram_does_with_gantrys_context_and_no_other() -> None:
    """_Session skips AiohttpSession.__init__ (and the certifi context it would build):
    everything else it sets up must match stock aiogram, so an upgrade that adds to
    __init__ fails here."""
    import ssl

    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer

    api = TelegramAPIServer.from_base("http://127.0.0.1:9")
    ctx = ssl.create_default_context()
    stock = vars(AiohttpSession(api=api))
    ours = vars(bot._Session(ctx, api=api))
    assert sorted(ours) == sorted(stock)
    for key, value in stock.items():
        if key == "middleware":
            assert type(ours[key]) is type(value)
        elif key == "_connector_init":
            assert ours[key] == {**value, "ssl": ctx}
        else:
            assert ours[key] == value, key
    assert vars(bot._Session(None, api=api))["_connector_init"]["ssl"] is not ctx
