"""One worker per chat: its updates answered in arrival order, each step retried or given up.

The policy is store.next_attempt's; the worker also knows the chat's running turn, for /stop.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import anyio.lowlevel

from gantry.channel.base import (
    STOPPED_REPLY,
    Inbound,
    Responder,
    Stoppable,
    TurnAborted,
    TurnStopped,
)
from gantry.channel.telegram import retry
from gantry.channel.telegram.delivery import Delivery
from gantry.channel.telegram.media import TelegramMedia
from gantry.channel.telegram.retry import TRANSIENT, Backoff, permanent
from gantry.channel.telegram.steer import steer_for
from gantry.channel.telegram.store import Pending, TelegramStore, next_attempt
from gantry.channel.telegram.stream import TelegramStream
from gantry.media.files import MediaError
from gantry.model.messages import ImagePart
from gantry.store.space import (
    FULL_POLL_SECONDS,
    StorageFull,
    db_dir,
    full_error,
    is_full,
    wait_for_room,
)

log = logging.getLogger("gantry.channel.telegram")

TYPING_EVERY = 4.0
WORKER_BACKOFF_CAP = 60.0  # longest wait of a chat worker between retries (Telegram down)
CRASH_DELAY_FIRST = 1.0  # pause before retrying an update after a crash; doubles per crash
CRASH_DELAY_CAP = 60.0
FAILED_REPLY = (
    "Sorry — I could not process this message; it failed repeatedly and was skipped. "
    "Please send it again."
)


class ChatWorkers:
    """The per-chat workers of one TelegramChannel, started by `kick` in its task group."""

    def __init__(self, name: str, store: TelegramStore, media: TelegramMedia, out: Delivery,
                 *, stream_replies: bool, followups: str = "steer") -> None:
        self.name = name
        self.store = store
        self.media = media
        self.out = out
        self.stream_replies = stream_replies
        self.followups = followups  # FOLLOWUPS: "steer" folds the author's follow-ups in
        self.respond: Responder | None = None
        self.tg: Any = None
        self.active: set[int] = set()
        self.turning: dict[int, tuple[int, Inbound]] = {}  # chat → its turn's update, message
        self._reading: dict[int, tuple[int, anyio.CancelScope]] = {}  # chat → media being read
        self.full = False  # a full disk was reported and not yet seen freed (poller's too)

    def kick(self, chat: int) -> None:
        if chat not in self.active and self.tg is not None:
            self.active.add(chat)
            self.tg.start_soon(self._worker, chat)

    async def _worker(self, chat: int) -> None:
        """Answer the chat's pending updates in order. An error boundary: whatever one
        update does, it is logged and counted, and the worker carries on."""
        backoff = Backoff(first=retry.BACKOFF_FIRST, cap=WORKER_BACKOFF_CAP)
        try:
            while True:
                await anyio.lowlevel.checkpoint()  # stop here once shutdown has begun
                try:
                    row = self.store.next_pending(chat)
                    if row is None:
                        return
                    progressed = await self._process(row)
                except TurnAborted:
                    return  # shutdown cut the turn: the update stays pending for next start
                except Exception as exc:
                    if is_full(exc):
                        await self.wait_for_space(exc)
                        continue
                    log.error("chat worker failed; retrying", extra={"chat_id": chat},
                              exc_info=exc)
                    progressed = False
                if progressed:
                    backoff.reset()
                else:
                    await anyio.sleep(backoff.next())
        finally:
            self.active.discard(chat)
            self.out.edit_at.pop(chat, None)

    async def wait_for_space(self, exc: Exception) -> None:
        """A full disk: said once (path and free space), then wait for room and carry on; the
        update stays pending and its cut attempt is not counted against it. The poller waits
        here too, so the workers and the poller say it once between them."""
        if not isinstance(exc, StorageFull):
            exc = full_error(self.store.conn)
        if not self.full:
            self.full = True
            log.error("cannot store messages: disk full; waiting for space",
                      extra={"error": str(exc)})
        directory = db_dir(self.store.conn)
        while True:
            await wait_for_room(directory)
            try:
                if exc.update_id is not None:
                    self.store.undo_attempt(exc.update_id)
                break
            except Exception as again:
                if not is_full(again):
                    raise
                await anyio.sleep(FULL_POLL_SECONDS)  # room enough to look, not to write
        if self.full:
            self.full = False
            log.warning("disk has room again; answering the pending messages",
                        extra={"dir": directory})

    async def _process(self, row: Pending) -> bool:
        """One step for one update: the turn, then delivery. False means "back off".

        Each attempt is marked in flight before it starts, so one the process died during is
        counted as a crash at the next; an attempt that failed for reasons outside the update
        (Telegram down, shutdown) counts as nothing. Past the limits of next_attempt the
        update is given up, never retried forever: a failed turn gets FAILED_REPLY, a failed
        delivery ends the update.
        """
        if row.reply is None and row.media_group:
            wait = self.media.album_wait(self.store, row)
            if wait > 0:  # its other parts may still be on their way
                await anyio.sleep(wait)
            row = self.store.gather_album(row)
        if row.reply is None and not await self._turn_step(row):
            return False
        return await self._delivery_step(row)

    async def _hold(self, row: Pending, what: str) -> str | None:
        """Before an attempt: why the update is given up, or None once the attempt may start
        (after the pause next_attempt asks for when the last attempts crashed)."""
        failures, crashes = self.store.settle_crash(row.update_id)
        step = next_attempt(failures, crashes, CRASH_DELAY_FIRST, CRASH_DELAY_CAP)
        if step.give_up is not None:
            return step.give_up
        wait = self.store.pause_left(row.update_id, step.delay) if step.delay else 0.0
        if wait:
            log.warning(f"the process died during this message's {what}; retrying after a pause",
                        extra={"update_id": row.update_id, "chat_id": row.chat_id,
                               "crashes": crashes, "retry_in_s": round(wait, 2)})
            await anyio.sleep(wait)
        self.store.begin_attempt(row.update_id)
        return None

    async def _turn_step(self, row: Pending) -> bool:
        """The turn and its stored reply (row.reply set); False means "back off"."""
        why = await self._hold(row, "turn")
        if why is not None:
            log.error("message failed repeatedly; marked failed and skipped",
                      extra={"update_id": row.update_id, "chat_id": row.chat_id, "why": why})
            row.reply = FAILED_REPLY
            self.store.set_reply(row.update_id, FAILED_REPLY, error=f"the turn {why}")
            return True
        await self.out.reactions.mark(row.chat_id, row.message_id)  # 👀: seen, started on
        try:
            with anyio.CancelScope() as reading:  # a /stop cancels it (see stop)
                self._reading[row.chat_id] = (row.update_id, reading)
                try:
                    read = await self._read_media(row)  # not shielded: redone at the next start
                finally:
                    del self._reading[row.chat_id]
        except anyio.get_cancelled_exc_class():
            self.store.undo_attempt(row.update_id)
            raise
        except MediaError as exc:  # refused as sent: the user is told why, no model call
            log.info("media refused", extra={"update_id": row.update_id, "why": exc.reply})
            self.store.set_reply(row.update_id, exc.reply)
            row.reply = exc.reply
            return True
        except Exception as exc:  # our errors say what failed without URL or token
            if is_full(exc):  # the download hit ENOSPC
                raise full_error(self.store.conn, row.update_id) from None
            transient = isinstance(exc, TRANSIENT)
            failures = 0 if transient else self.store.fail_attempt(row.update_id)
            if transient:
                self.store.undo_attempt(row.update_id)
            log.warning("reading the message's media failed; will retry",
                        extra={"update_id": row.update_id, "chat_id": row.chat_id,
                               "failures": failures, "error": f"{type(exc).__name__}: {exc}"})
            return False
        if reading.cancelled_caught:  # stopped before the turn began (recorded by Poller._accept)
            self.store.set_reply(row.update_id, STOPPED_REPLY)
            row.reply = STOPPED_REPLY
            return True
        try:
            # Shielded: once the turn has an answer, it is stored, even at shutdown
            # (the turn itself is cut at the drain deadline by TurnAborted).
            with anyio.CancelScope(shield=True):
                reply = await self._answer(row, *read)
                self.store.set_reply(row.update_id, reply)  # done already if the agent did
        except TurnAborted:
            self.store.undo_attempt(row.update_id)
            raise
        except TurnStopped:  # recorded when /stop came (Poller._accept); idempotent here
            self.store.set_reply(row.update_id, STOPPED_REPLY)
            row.reply = STOPPED_REPLY
            return True
        except Exception as exc:
            if is_full(exc):  # nothing to count it in
                raise full_error(self.store.conn, row.update_id) from None
            failures = self.store.fail_attempt(row.update_id)
            log.error("turn failed; will retry",
                      extra={"update_id": row.update_id, "chat_id": row.chat_id,
                             "failures": failures}, exc_info=exc)
            return False
        row.reply = reply
        return True

    async def _delivery_step(self, row: Pending) -> bool:
        why = await self._hold(row, "delivery")
        if why is not None:
            log.error("reply delivery failed repeatedly; marked failed and skipped",
                      extra={"update_id": row.update_id, "chat_id": row.chat_id, "why": why})
            self.store.finish(row.update_id, "failed", f"delivery {why}")
            return True
        done = await self.out.attempt(row)
        if done:  # the answer is out (or given up): the 👀 goes
            await self.out.reactions.clear(row.chat_id, row.message_id)
        return done

    async def _read_media(self, row: Pending) -> tuple[str, tuple[ImagePart, ...]]:
        """The turn's text and images (gantry.media), with the typing indicator on while
        files download and voice is transcribed (seconds, for a long voice note)."""
        if row.media == "[]":
            return row.text, ()
        result: tuple[str, tuple[ImagePart, ...]] | None = None
        error: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._typing, row.chat_id)
            try:
                result = await self.media.read(row)
            except Exception as exc:  # raised here, not through the task group
                error = exc
            finally:
                tg.cancel_scope.cancel()
        if error is not None:
            raise error
        assert result is not None
        return result

    async def _answer(self, row: Pending, text: str, images: tuple[ImagePart, ...]) -> str:
        assert self.respond is not None
        # A private chat's id is its user's id; any other chat is a group (accepted only
        # with TELEGRAM_GROUPS=mention).
        # on_answer stores the reply in the agent's transaction (one connection per process,
        # so the same one): a kill cannot leave the answer recorded and the row unanswered,
        # which would run the whole turn, tool calls and all, again on redelivery.
        # The user's reactions since (reactions.py): context for this turn, seen with its answer.
        context, reacted = self.out.reactions.context(row.chat_id, row.user_id)

        def on_answer(reply: str) -> None:
            self.store.set_reply(row.update_id, reply)
            self.out.reactions.seen(reacted, row.user_id)

        inbound = Inbound(channel=self.name, chat_id=str(row.chat_id), user_id=str(row.user_id),
                          text=text, message_id=str(row.message_id),
                          group=row.chat_id != row.user_id, images=images,
                          on_answer=on_answer, context=context,
                          steer=steer_for(self.store, row) if self.followups == "steer" else None)
        stream = TelegramStream(self.out, row) if self.stream_replies else None
        ended: TurnAborted | TurnStopped | StorageFull | None = None
        self.turning[row.chat_id] = (row.update_id, inbound)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._typing, row.chat_id)
                try:
                    reply = await self.respond(inbound, stream)
                except (TurnAborted, TurnStopped, StorageFull) as exc:  # not in a group
                    ended = exc
                finally:
                    tg.cancel_scope.cancel()
        finally:
            del self.turning[row.chat_id]
        if stream is not None:  # a stopped turn's streamed text becomes the short reply
            row.stream_msgs = stream.message_ids
        if ended is not None:
            raise ended
        return reply

    async def _typing(self, chat: int) -> None:
        """The typing indicator: cosmetic, so no failure of it may touch the turn."""
        while True:
            try:
                await self.out.bot.send_chat_action(chat_id=chat, action="typing")
            except Exception as exc:
                log.debug("typing indicator failed", extra={"error": str(exc)})
                if permanent(exc):
                    return
            await anyio.sleep(TYPING_EVERY)

    def running_turn(self, chat: int) -> int | None:
        """The update whose turn runs in `chat` (or whose media is read) and can still be
        stopped, if any."""
        if chat in self._reading:
            return self._reading[chat][0]
        entry = self.turning.get(chat)
        if entry is None or not isinstance(self.respond, Stoppable):
            return None
        return entry[0] if self.respond.running(entry[1]) else None

    def stop(self, chat: int, update_id: int) -> None:
        reading = self._reading.get(chat)
        if reading is not None and reading[0] == update_id:  # a download, a PDF's child
            reading[1].cancel()
            log.info("stopping the chat's turn while its media is read",
                     extra={"chat_id": chat, "update_id": update_id})
            return
        entry = self.turning.get(chat)
        if entry is not None and entry[0] == update_id and isinstance(self.respond, Stoppable):
            self.respond.stop(entry[1])
            log.info("stopping the chat's turn", extra={"chat_id": chat, "update_id": update_id})

