"""The Telegram channel (aiogram 3): outbound long-polling, allowlist, exactly-once replies.

The poller records each accepted update and the next offset in SQLite *before* asking
Telegram for more (which confirms the batch), so a crash never loses a message. One worker
per chat answers its chat's updates in arrival order from that table; chats run
concurrently. The delivery bookkeeping is described in docs/telegram.md.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
from aiohttp import TCPConnector

import gantry.channel.aiogram_lazy  # noqa: F401  # isort: skip  (before aiogram: lazy models)
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.session.base import BaseSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramConflictError,
    TelegramEntityTooLarge,
    TelegramForbiddenError,
    TelegramMigrateToChat,
    TelegramNetworkError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.types import BotCommand, Message, Update

from gantry.channel.base import (
    NOTHING_TO_STOP,
    STOPPED_REPLY,
    Inbound,
    Progress,
    Responder,
    Stoppable,
    TurnAborted,
    TurnStopped,
    is_stop,
)
from gantry.channel.reply import Attachment, Reply, image_urls, unpack
from gantry.channel.telegram_media import TelegramMedia
from gantry.channel.telegram_out import send_attachment
from gantry.channel.telegram_store import (
    MAX_ATTEMPTS,
    Accepted,
    Pending,
    TelegramStore,
    next_attempt,
)
from gantry.channel.tg_elicit import TelegramDialog
from gantry.channel.tgfilter import GROUP_CHATS, LogOnce, addressed
from gantry.channel.tgformat import (
    TELEGRAM_LIMIT,
    Rendered,
    render_markdown,
    split_message,
    split_text,
    to_aiogram,
    utf16_len,
)
from gantry.channel.tgmedia import incoming
from gantry.media import MediaError, MediaReader
from gantry.media.kinds import dump
from gantry.store.space import (
    FULL_POLL_SECONDS,
    StorageFull,
    db_dir,
    full_error,
    is_full,
    wait_for_room,
)
from gantry.wire.openai import ImagePart

log = logging.getLogger("gantry.channel.telegram")

POLL_TIMEOUT = 25
# Edited messages, reactions, etc. are never delivered; callback_query: elicitation buttons.
ALLOWED_UPDATES = ["message", "callback_query"]
COMMANDS = [("new", "start a new conversation"), ("status", "uptime, model, history size"),
            ("stop", "stop the reply being written"), ("cancel", "same as /stop"),
            ("help", "what I can do")]
NON_TEXT_REPLY = "I cannot read this kind of message."
TYPING_EVERY = 4.0
EDIT_GAP = 1.0
STRANGER_LOG_EVERY = 3600.0  # also how often an ignored group chat is logged
STRANGERS_MAX = 1024  # users remembered for the once-an-hour log line
DELIVERY_GRACE = 10.0  # how long a delivery may still run once shutdown has begun
PRUNE_EVERY = 3600.0  # seconds between prunes of finished updates
SESSION_LIMIT = 100  # aiogram's defaults for its aiohttp connector (see _Session)
SESSION_DNS_TTL = 3600
BACKOFF_FIRST = 1.0  # first retry delay of the poller and the chat workers
WORKER_BACKOFF_CAP = 60.0  # longest wait of a chat worker between retries (Telegram down)
CRASH_DELAY_FIRST = 1.0  # pause before retrying an update after a crash; doubles per crash
CRASH_DELAY_CAP = 60.0
MENU_ATTEMPTS = 5  # setMyCommands tries before the menu is given up (one warning)
PLACEHOLDER = "…"
FAILED_REPLY = (
    "Sorry — I could not process this message; it failed repeatedly and was skipped. "
    "Please send it again."
)

# Errors that say nothing about the message: Telegram or the network is down for a while.
TRANSIENT = (TelegramNetworkError, TelegramServerError, TelegramRetryAfter, ClientDecodeError,
             TelegramUnauthorizedError, TelegramConflictError, OSError, TimeoutError)
# Errors that will never go away for this chat: blocked, kicked, deleted, invalid.
PERMANENT = (TelegramForbiddenError, TelegramNotFound, TelegramBadRequest,
             TelegramEntityTooLarge)


class _Session(AiohttpSession):
    """aiogram's session, verifying Telegram against the CA certificates gantry chose
    (gantry.tls); aiogram itself always uses certifi's bundle.

    Given gantry's context, it sets up what AiohttpSession.__init__ sets up, minus the certifi
    context that __init__ would build and gantry would throw away (~50 ms of every start).
    tests/test_telegram.py checks the attributes match stock aiogram's, so an aiogram that
    sets up more fails there, not at run time.
    """

    def __init__(self, ssl_context: ssl.SSLContext | None, **kwargs: Any) -> None:
        if ssl_context is None:
            super().__init__(**kwargs)
            return
        BaseSession.__init__(self, **kwargs)
        self._session = None
        self._connector_type = TCPConnector
        self._connector_init = {"ssl": ssl_context, "limit": SESSION_LIMIT,
                                "ttl_dns_cache": SESSION_DNS_TTL}
        self._should_reset_connector = True
        self._proxy = None


class BotTokenRejected(Exception):
    """Telegram said 401: the token is wrong or revoked. Fatal at boot."""


def _not_modified(exc: TelegramBadRequest) -> bool:
    return "message is not modified" in exc.message.lower()


def _bad_entities(exc: TelegramBadRequest) -> bool:
    return "can't parse entities" in exc.message.lower() or "entit" in exc.message.lower()


def _permanent(exc: BaseException) -> bool:
    return isinstance(exc, PERMANENT) and not isinstance(exc, TelegramMigrateToChat)


def _expected(exc: BaseException) -> bool:
    """A failure Telegram or the network explains (logged without a traceback)."""
    return isinstance(exc, (*TRANSIENT, TelegramAPIError))


def parts_for(reply: str) -> list[Rendered]:
    """The messages a reply is sent as: rendered Markdown split at 4096 UTF-16 units."""
    parts = [p for p in split_message(render_markdown(reply)) if p.text.strip()]
    return parts or [Rendered(reply.strip() or "(empty reply)", [])]


def delivery_parts(reply: Reply) -> tuple[list[Rendered], list[Attachment | str]]:
    """A stored reply's parts: its text's messages, then (each one more part) its
    attachments and the https images its Markdown shows (sent by URL). A reply of files
    alone sends no "(empty reply)" text."""
    extras: list[Attachment | str] = [*reply.attachments, *image_urls(reply.text)]
    return (parts_for(reply.text) if reply.text.strip() or not extras else []), extras


class Backoff:
    """Exponential backoff for the poller: 1, 2, 4 … 30 s; reset on success."""

    def __init__(self, first: float = 1.0, cap: float = 30.0) -> None:
        self.first, self.cap, self.delay = first, cap, 0.0

    def next(self) -> float:
        self.delay = self.first if self.delay == 0 else min(self.cap, self.delay * 2)
        return self.delay

    def reset(self) -> None:
        self.delay = 0.0


class TelegramChannel:
    name = "telegram"

    def __init__(
        self,
        token: str,
        allowed_users: tuple[int, ...],
        conn: object,
        *,
        api_url: str = "https://api.telegram.org",
        groups: str = "off",
        stream_replies: bool = False,
        poll_timeout: int = POLL_TIMEOUT,
        ssl_context: ssl.SSLContext | None = None,
        media: MediaReader | None = None,
    ) -> None:
        self.allowed = frozenset(allowed_users)
        self.store = TelegramStore(conn)
        self._full = False  # a full disk was reported and not yet seen freed
        self.stream_replies = stream_replies
        self.poll_timeout = poll_timeout
        session = _Session(ssl_context, api=TelegramAPIServer.from_base(api_url.rstrip("/")))
        self.bot = Bot(token, session=session)
        self.dialog = TelegramDialog(self.bot)  # MCP servers' questions (gantry/elicit.py)
        self.media = TelegramMedia(self.bot, media)
        self._active: set[int] = set()
        self._turning: dict[int, tuple[int, Inbound]] = {}  # chat → its turn's update, message
        self._edit_at: dict[int, float] = {}  # chat → earliest time the next edit may go
        self.groups = groups
        self._strangers = LogOnce(STRANGER_LOG_EVERY, STRANGERS_MAX)
        self._group_log = LogOnce(STRANGER_LOG_EVERY)
        self._me_id = 0
        self._me_username = ""
        self._tg: Any = None
        self._respond: Responder | None = None
        self._closing = False
        self._deliveries: set[anyio.CancelScope] = set()
        self._pruned_at = 0.0

    # ------------------------------------------------------------------ lifecycle

    async def serve(self, respond: Responder, ready: Callable[[], None]) -> None:
        self._respond = respond
        try:
            await self._start()
            self.store.prune()
            ready()
            self._pruned_at = time.monotonic()
            async with anyio.create_task_group() as tg:
                self._tg = tg
                self.dialog.start(tg)
                for chat in self.store.pending_chats():
                    self._kick(chat)
                tg.start_soon(self._publish_commands)
                try:
                    await self._poll()
                finally:
                    self._begin_grace()
        finally:
            with anyio.CancelScope(shield=True):
                await self.bot.session.close()

    async def _start(self) -> None:
        """getMe (a bad token is fatal) and drop any webhook: what polling needs first."""
        backoff = Backoff()
        while True:
            try:
                me = await self.bot.get_me()
                self._me_id, self._me_username = me.id, me.username or ""
                await self.bot.delete_webhook(drop_pending_updates=False)
                log.info("telegram connected", extra={"bot": me.username, "bot_id": me.id})
                return
            except TelegramUnauthorizedError:
                raise BotTokenRejected(
                    "Telegram rejected TELEGRAM_BOT_TOKEN (401 Unauthorized): check the token "
                    "from @BotFather"
                ) from None
            except TelegramRetryAfter as exc:
                await anyio.sleep(exc.retry_after)
            except Exception as exc:  # an HTML error page, a reset, a 5xx: all worth a retry
                delay = backoff.next()
                log.warning("telegram not reachable at start; retrying",
                            extra={"error": f"{type(exc).__name__}: {exc}", "retry_in_s": delay},
                            exc_info=None if _expected(exc) else exc)
                await anyio.sleep(delay)

    async def _publish_commands(self) -> None:
        """The command menu beside the poller, not before it: it is only a convenience (the
        commands work without it), so a slow or failing setMyCommands never delays receiving.
        A few tries with backoff, then one warning."""
        backoff = Backoff(first=BACKOFF_FIRST)
        for attempt in range(1, MENU_ATTEMPTS + 1):
            try:
                await self.bot.set_my_commands([BotCommand(command=c, description=d)
                                                for c, d in COMMANDS])
                log.debug("telegram command menu published", extra={"attempt": attempt})
                return
            except TelegramRetryAfter as exc:
                error: BaseException = exc
                delay = float(exc.retry_after)
            except Exception as exc:  # an error boundary: the menu never takes the channel down
                error, delay = exc, backoff.next()
            if attempt < MENU_ATTEMPTS:
                await anyio.sleep(delay)
        log.warning("telegram command menu not published; the commands still work",
                    extra={"attempts": MENU_ATTEMPTS, "error": f"{type(error).__name__}: {error}"},
                    exc_info=None if _expected(error) else error)

    # ------------------------------------------------------------------ polling

    async def _poll(self) -> None:
        """Long-poll forever. Every failure is retried with backoff: the poller is the
        channel's lifeline, so nothing it meets may end it."""
        backoff = Backoff(first=BACKOFF_FIRST)
        bad_batch = 0
        while True:
            try:
                self._housekeeping()
                offset = self.store.next_offset()
                updates = await self.bot.get_updates(
                    offset=offset or None,
                    timeout=self.poll_timeout,
                    allowed_updates=ALLOWED_UPDATES,
                    request_timeout=self.poll_timeout + 15,
                )
            except TelegramConflictError:
                delay = max(5.0, backoff.next())
                log.error(
                    "another process is polling this bot (409 Conflict): only one gantry may "
                    "run per bot token, and no webhook may be set; retrying",
                    extra={"retry_in_s": delay},
                )
                await anyio.sleep(delay)
                continue
            except TelegramRetryAfter as exc:
                log.warning("telegram rate limit on getUpdates",
                            extra={"retry_in_s": exc.retry_after})
                await anyio.sleep(exc.retry_after)
                continue
            except TelegramUnauthorizedError:
                log.error("telegram rejected the bot token (401); was it revoked? retrying")
                await anyio.sleep(60)
                continue
            except Exception as exc:  # network, 5xx, an HTML page instead of JSON, the DB…
                delay = backoff.next()
                expected = _expected(exc)
                log.log(logging.WARNING if expected else logging.ERROR,
                        "getUpdates failed; retrying",
                        extra={"error": f"{type(exc).__name__}: {exc}", "retry_in_s": delay},
                        exc_info=None if expected else exc)
                await anyio.sleep(delay)
                continue
            try:
                if updates:
                    self._accept(updates)
                bad_batch = 0
            except Exception as exc:  # not confirmed: the batch comes back on the next poll
                if is_full(exc):  # not the batch's fault: never skipped, taken when room
                    await self._wait_for_space(exc)
                    continue
                bad_batch += 1
                ids = [u.update_id for u in updates]
                delay = backoff.next()
                log.error("could not record a batch of updates; retrying",
                          extra={"update_ids": ids, "retry_in_s": delay}, exc_info=exc)
                if bad_batch >= MAX_ATTEMPTS:  # it will never go in: skip it, never loop
                    log.error("skipping updates that cannot be recorded",
                              extra={"update_ids": ids})
                    with contextlib.suppress(Exception):
                        self.store.accept([], max(ids) + 1)
                        bad_batch = 0
                await anyio.sleep(delay)
                continue
            backoff.reset()

    def _housekeeping(self) -> None:
        """Hourly: forget finished updates older than a week and expired stranger marks."""
        now = time.monotonic()
        if now - self._pruned_at < PRUNE_EVERY:
            return
        self._pruned_at = now
        pruned = self.store.prune()
        if pruned:
            log.info("pruned finished updates", extra={"count": pruned})
        self._strangers.expire(now)
        self._group_log.expire(now)

    def _accept(self, updates: list[Update]) -> None:
        """Record a batch; a /stop is handled here, out of band, not queued behind the turn
        it stops. The stop is recorded with the batch (the stopped message gets its short
        reply even if the process dies before the turn has ended), then the turn is stopped."""
        accepted: list[Accepted] = []
        stops: dict[int, int] = {}  # chat → update id of the turn stopped
        idle: list[int] = []  # chats told there is nothing to stop
        for upd in updates:
            if upd.callback_query is not None:  # a button: answered here, never a turn
                self.dialog.take_button(upd.callback_query)
                continue
            msg = upd.message
            if msg is None or not self._chat_ok(msg):
                continue
            user = msg.from_user.id if msg.from_user else 0
            if user not in self.allowed:
                self._stranger(user)
                continue
            text = msg.text
            if text is not None and self.dialog.take_message(msg.chat.id, user, text,
                                                             self._me_username):
                continue  # an answer to a server's question: not a message for the model
            stop = text is not None and is_stop(text)
            if stop:
                target = stops.get(msg.chat.id) or self._running_turn(msg.chat.id)
                if target is None:
                    idle.append(msg.chat.id)
                else:
                    stops[msg.chat.id] = target
            got = incoming(msg, self._me_id)
            refused = NON_TEXT_REPLY if got is None else self.media.refusal(got.media)
            if got is not None and got.media_group:
                self.media.album_seen(msg.chat.id, got.media_group)
            accepted.append(Accepted(
                update_id=upd.update_id, chat_id=msg.chat.id, user_id=user,
                message_id=msg.message_id, text=got.text if got else "",
                reply=None if stop else refused, done=stop,
                media=dump(got.media) if got else "[]",
                media_group=got.media_group if got else None,
            ))
        self.store.accept(accepted, max(u.update_id for u in updates) + 1,
                          stopped=list(stops.values()), stopped_reply=STOPPED_REPLY)
        for chat, update_id in stops.items():
            self._stop(chat, update_id)
        for chat in idle:
            self._tg.start_soon(self._notice, chat, NOTHING_TO_STOP)
        for chat in dict.fromkeys(a.chat_id for a in accepted if not a.done):
            self._kick(chat)

    def _running_turn(self, chat: int) -> int | None:
        """The update whose turn runs in `chat` and can still be stopped, if any."""
        entry = self._turning.get(chat)
        if entry is None or not isinstance(self._respond, Stoppable):
            return None
        return entry[0] if self._respond.running(entry[1]) else None

    def _stop(self, chat: int, update_id: int) -> None:
        entry = self._turning.get(chat)
        if entry is not None and entry[0] == update_id and isinstance(self._respond, Stoppable):
            self._respond.stop(entry[1])
            log.info("stopping the chat's turn", extra={"chat_id": chat, "update_id": update_id})

    async def _notice(self, chat: int, text: str) -> None:
        """A short out-of-band reply (a /stop with nothing to stop). Not tracked like
        replies: after a crash it is not resent; a failure is only logged."""
        try:
            await self._send(chat, Rendered(text, []))
        except Exception as exc:
            log.warning("could not send a notice", extra={
                "chat_id": chat, "error": f"{type(exc).__name__}: {exc}"},
                exc_info=None if _expected(exc) else exc)

    def _chat_ok(self, msg: Message) -> bool:
        """Private chats always; groups only with TELEGRAM_GROUPS=mention and a message that
        mentions or replies to the bot. Ignored updates are still confirmed (the offset moves
        past them) but never stored or answered; each chat is logged at most once an hour."""
        kind = msg.chat.type
        if kind == "private":
            return True
        if (self.groups == "mention" and kind in GROUP_CHATS
                and (addressed(msg, self._me_id, self._me_username)
                     or self.media.album_known(msg.chat.id, msg.media_group_id))):
            return True  # (an album's later parts carry no mention: they follow its first)
        if self._group_log.due(msg.chat.id):
            log.info("ignored a message in a group or channel; see TELEGRAM_GROUPS",
                     extra={"chat_id": msg.chat.id, "chat_type": kind,
                            "telegram_groups": self.groups})
        return False

    def _stranger(self, user: int) -> None:
        if self._strangers.due(user):
            log.warning("ignored a message from a user not in TELEGRAM_ALLOWED_USERS",
                        extra={"user_id": user})

    # ------------------------------------------------------------------ per-chat workers

    def _kick(self, chat: int) -> None:
        if chat not in self._active and self._tg is not None:
            self._active.add(chat)
            self._tg.start_soon(self._worker, chat)

    async def _worker(self, chat: int) -> None:
        """Answer the chat's pending updates in order. An error boundary: whatever one
        update does, it is logged and counted, and the worker carries on."""
        backoff = Backoff(first=BACKOFF_FIRST, cap=WORKER_BACKOFF_CAP)
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
                    if is_full(exc) or isinstance(exc, StorageFull):
                        await self._wait_for_space(exc)
                        continue
                    log.error("chat worker failed; retrying", extra={"chat_id": chat},
                              exc_info=exc)
                    progressed = False
                if progressed:
                    backoff.reset()
                else:
                    await anyio.sleep(backoff.next())
        finally:
            self._active.discard(chat)
            self._edit_at.pop(chat, None)

    async def _wait_for_space(self, exc: Exception) -> None:
        """A full disk: said once (path and free space), then wait for room and carry on; the
        update stays pending and its cut attempt is not counted against it."""
        if not isinstance(exc, StorageFull):
            exc = full_error(self.store.conn)
        if not self._full:
            self._full = True
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
        if self._full:
            self._full = False
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
        if step.delay:
            log.warning(f"the process died during this message's {what}; retrying after a pause",
                        extra={"update_id": row.update_id, "chat_id": row.chat_id,
                               "crashes": crashes, "retry_in_s": step.delay})
            await anyio.sleep(step.delay)
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
        try:
            read = await self._read_media(row)  # not shielded: redone at the next start
        except anyio.get_cancelled_exc_class():
            self.store.undo_attempt(row.update_id)
            raise
        except MediaError as exc:  # refused as sent: the user is told why, no model call
            log.info("media refused", extra={"update_id": row.update_id, "why": exc.reply})
            self.store.set_reply(row.update_id, exc.reply)
            row.reply = exc.reply
            return True
        except Exception as exc:  # our errors say what failed without URL or token
            if is_full(exc) or isinstance(exc, StorageFull):  # the download hit ENOSPC
                raise full_error(self.store.conn, row.update_id) from None
            transient = isinstance(exc, TRANSIENT)
            failures = 0 if transient else self.store.fail_attempt(row.update_id)
            if transient:
                self.store.undo_attempt(row.update_id)
            log.warning("reading the message's media failed; will retry",
                        extra={"update_id": row.update_id, "chat_id": row.chat_id,
                               "failures": failures, "error": f"{type(exc).__name__}: {exc}"})
            return False
        try:
            # Shielded: once the turn has an answer, it is stored, even at shutdown
            # (the turn itself is cut at the drain deadline by TurnAborted).
            with anyio.CancelScope(shield=True):
                reply = await self._answer(row, *read)
                self.store.set_reply(row.update_id, reply)  # done already if the agent did
        except TurnAborted:
            self.store.undo_attempt(row.update_id)
            raise
        except TurnStopped:  # recorded when /stop came (_accept); idempotent here
            self.store.set_reply(row.update_id, STOPPED_REPLY)
            row.reply = STOPPED_REPLY
            return True
        except Exception as exc:
            if is_full(exc) or isinstance(exc, StorageFull):  # nothing to count it in
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
        with anyio.CancelScope(shield=True) as scope:
            self._deliveries.add(scope)
            if self._closing:
                scope.deadline = anyio.current_time() + DELIVERY_GRACE
            try:
                await self._deliver(row)
                return True
            except Exception as exc:
                return self._delivery_failed(row, exc)
            finally:
                self._deliveries.discard(scope)
        self.store.undo_attempt(row.update_id)  # cut by the shutdown grace: resumed next start
        return False

    def _delivery_failed(self, row: Pending, exc: Exception) -> bool:
        where = {"update_id": row.update_id, "chat_id": row.chat_id, "part": row.sent_parts}
        if _permanent(exc):
            log.error("Telegram refused the reply for good; marked undeliverable",
                      extra={**where, "error": f"{type(exc).__name__}: {exc}"})
            self.store.finish(row.update_id, "undeliverable", f"{type(exc).__name__}: {exc}")
            return True
        if isinstance(exc, TRANSIENT):
            log.warning("reply delivery failed; will retry",
                        extra={**where, "error": f"{type(exc).__name__}: {exc}"})
            self.store.undo_attempt(row.update_id)
            return False
        failures = self.store.fail_attempt(row.update_id)
        log.error("reply delivery failed unexpectedly; will retry",
                  extra={**where, "failures": failures}, exc_info=exc)
        return False

    def _begin_grace(self) -> None:
        """Shutdown has begun: deliveries in flight (and any still starting) get
        DELIVERY_GRACE seconds more, then give way. Before this, they have no limit of
        ours (aiogram's request timeout governs): cutting a slow send that Telegram then
        completes would send the reply twice."""
        self._closing = True
        limit = anyio.current_time() + DELIVERY_GRACE
        for scope in self._deliveries:
            scope.deadline = min(scope.deadline, limit)

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
        assert self._respond is not None
        # A private chat's id is its user's id; any other chat is a group (accepted only
        # with TELEGRAM_GROUPS=mention).
        # on_answer stores the reply in the agent's transaction (one connection per process,
        # so the same one): a kill cannot leave the answer recorded and the row unanswered,
        # which would run the whole turn, tool calls and all, again on redelivery.
        inbound = Inbound(channel=self.name, chat_id=str(row.chat_id), user_id=str(row.user_id),
                          text=text, message_id=str(row.message_id),
                          group=row.chat_id != row.user_id, images=images,
                          on_answer=lambda reply: self.store.set_reply(row.update_id, reply))
        stream = TelegramStream(self, row) if self.stream_replies else None
        ended: TurnAborted | TurnStopped | StorageFull | None = None
        self._turning[row.chat_id] = (row.update_id, inbound)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._typing, row.chat_id)
                try:
                    reply = await self._respond(inbound, stream)
                except (TurnAborted, TurnStopped, StorageFull) as exc:  # not in a group
                    ended = exc
                finally:
                    tg.cancel_scope.cancel()
        finally:
            del self._turning[row.chat_id]
        if stream is not None:  # a stopped turn's streamed text becomes the short reply
            row.stream_msgs = stream.message_ids
        if ended is not None:
            raise ended
        return reply

    async def _typing(self, chat: int) -> None:
        """The typing indicator: cosmetic, so no failure of it may touch the turn."""
        while True:
            try:
                await self.bot.send_chat_action(chat_id=chat, action="typing")
            except Exception as exc:
                log.debug("typing indicator failed", extra={"error": str(exc)})
                if _permanent(exc):
                    return
            await anyio.sleep(TYPING_EVERY)

    # ------------------------------------------------------------------ delivery

    async def _deliver(self, row: Pending) -> None:
        """Send the parts not yet sent (editing streamed messages in place), then the
        reply's attachments, each one more part; raises what Telegram raised (the worker
        judges whether it is transient or final)."""
        assert row.reply is not None
        parts, extras = delivery_parts(unpack(row.reply))
        total = len(parts) + len(extras)
        for i in range(row.sent_parts, total):
            if i >= len(parts):
                await self._send_file(row.chat_id, extras[i - len(parts)])
            elif i < len(row.stream_msgs):
                await self._edit_final(row.chat_id, row.stream_msgs[i], parts[i])
            else:
                await self._send(row.chat_id, parts[i])
            row.sent_parts = i + 1
            self.store.mark_sent(row.update_id, row.sent_parts, total)
        for extra in row.stream_msgs[len(parts):]:  # streamed text outgrew the final reply
            await self._quiet_delete(row.chat_id, extra)
        if row.sent_parts >= total:
            self.store.mark_sent(row.update_id, total, total)

    async def _send_file(self, chat: int, file: Attachment | str) -> None:
        """One attachment (sendPhoto, or sendDocument) or image URL, following a group's
        migration like text. A file gone from the outbox (pruned) is said in a line instead."""
        try:
            await send_attachment(self.bot, chat, file)
        except TelegramMigrateToChat as exc:
            await send_attachment(self.bot, exc.migrate_to_chat_id, file)

    async def _send(self, chat: int, part: Rendered) -> int:
        """sendMessage with entities, falling back to plain text if Telegram rejects them,
        and following a group's migration to a supergroup."""
        try:
            return await self._send_to(chat, part)
        except TelegramMigrateToChat as exc:
            log.info("the group became a supergroup; replying there",
                     extra={"chat_id": chat, "new_chat_id": exc.migrate_to_chat_id})
            return await self._send_to(exc.migrate_to_chat_id, part)

    async def _send_to(self, chat: int, part: Rendered) -> int:
        for attempt in range(5):
            try:
                try:
                    msg = await self.bot.send_message(
                        chat_id=chat, text=part.text, entities=to_aiogram(part.entities) or None,
                        parse_mode=None)
                except TelegramBadRequest as exc:
                    if not part.entities or not _bad_entities(exc):
                        raise
                    log.warning("telegram rejected the formatting; sending plain text")
                    msg = await self.bot.send_message(chat_id=chat, text=part.text,
                                                      parse_mode=None)
                return msg.message_id
            except TelegramRetryAfter as exc:
                if attempt == 4:
                    raise
                await anyio.sleep(exc.retry_after)
        raise AssertionError("unreachable")

    async def _edit_final(self, chat: int, message_id: int, part: Rendered) -> None:
        """Edit a streamed message into its final form; send anew only if the edit failed."""
        try:
            await self._edit(chat, message_id, part.text, part.entities)
        except TelegramBadRequest as exc:
            if _not_modified(exc):
                return
            if part.entities and _bad_entities(exc):
                try:
                    await self._edit(chat, message_id, part.text, [])
                    return
                except TelegramBadRequest as exc2:
                    if _not_modified(exc2):
                        return
            log.warning("final edit failed; sending the reply as a new message",
                        extra={"error": exc.message[:200]})
            await self._send(chat, part)

    async def _edit_slot(self, chat: int, *, skip_if_busy: bool = False) -> bool:
        """Take the chat's next edit slot (Telegram allows about one edit per second per chat):
        wait for it, or return False at once when `skip_if_busy` and it is not free yet."""
        wait = self._edit_at.get(chat, 0.0) - anyio.current_time()
        if wait > 0:
            if skip_if_busy:
                return False
            await anyio.sleep(wait)
        self._edit_at[chat] = anyio.current_time() + EDIT_GAP
        return True

    def _edit_later(self, chat: int, seconds: float) -> None:
        """Telegram said retry_after: no edit in this chat before then."""
        self._edit_at[chat] = anyio.current_time() + seconds

    async def _edit(self, chat: int, message_id: int, text: str, entities: list[Any]) -> None:
        """editMessageText; edits are idempotent, so transient failures are simply retried."""
        for attempt in range(4):
            await self._edit_slot(chat)
            try:
                await self.bot.edit_message_text(
                    text=text, chat_id=chat, message_id=message_id,
                    entities=to_aiogram(entities) or None, parse_mode=None)
                return
            except TelegramRetryAfter as exc:
                if attempt == 3:
                    raise
                self._edit_later(chat, exc.retry_after)
            except (TelegramNetworkError, TelegramServerError):
                if attempt == 3:
                    raise
                await anyio.sleep(0.5 * 2**attempt)

    async def _quiet_delete(self, chat: int, message_id: int) -> None:
        with contextlib.suppress(Exception):  # a leftover streamed message: cosmetic
            await self.bot.delete_message(chat_id=chat, message_id=message_id)

    # ------------------------------------------------------------------ push (cron)

    def can_push(self, chat_id: str) -> bool:
        """Only an allowlisted user's private chat (its id is the user's id) gets pushes."""
        return chat_id.lstrip("-").isdecimal() and int(chat_id) in self.allowed

    async def push(
        self, chat_id: str, text: str, sent: int = 0, progress: Progress | None = None
    ) -> None:
        """An unsolicited message; only to allowlisted users' private chats.

        Parts from `sent` on are sent; `progress` records each one (see Channel.push).
        """
        if not self.can_push(chat_id):
            raise PermissionError(f"chat {chat_id} is not in TELEGRAM_ALLOWED_USERS")
        chat = int(chat_id)
        parts, extras = delivery_parts(unpack(text))
        total = len(parts) + len(extras)
        for i in range(sent, total):
            if i < len(parts):
                await self._send(chat, parts[i])
            else:
                await self._send_file(chat, extras[i - len(parts)])
            if progress is not None:
                progress(i + 1, total)
        if sent >= total and progress is not None:
            progress(total, total)


class TelegramStream:
    """Edit-in-place streaming: a placeholder, then throttled edits as tokens arrive."""

    def __init__(self, channel: TelegramChannel, row: Pending) -> None:
        self.ch = channel
        self.row = row
        self.message_ids: list[int] = list(row.stream_msgs)
        self.text = ""  # text of the current (last) message
        self.shown = ""
        self.dead = False

    async def write(self, delta: str) -> None:
        self.text += delta
        if self.dead:
            return
        try:
            await self._write()
        except Exception as exc:
            self._failed(exc)

    async def _write(self) -> None:
        if utf16_len(self.text) > TELEGRAM_LIMIT:
            head, *rest = split_text(self.text, TELEGRAM_LIMIT - 1)
            await self._show(head, force=True)
            self.text, self.shown = "".join(rest), ""
            await self._new_message()
        if not self.message_ids:
            await self._new_message()
        await self._show(self.text)

    async def discard(self) -> None:
        """A tool round: the preamble goes; the placeholder stays for the answer."""
        self.text = ""
        if self.message_ids and self.shown and not self.dead:
            try:
                await self._show(PLACEHOLDER, force=True)
            except Exception as exc:
                self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        """Showing progress is cosmetic: a failure never reaches the turn. After a final
        refusal (bot blocked, chat gone) the stream stops trying; delivery decides."""
        if _permanent(exc):
            self.dead = True
        log.debug("stream update failed", extra={"error": f"{type(exc).__name__}: {exc}"})

    async def finish(self, final_text: str) -> None:
        """Final delivery happens in the channel's _deliver (tracked for exactly-once)."""

    async def _new_message(self) -> None:
        try:
            mid = await self.ch._send(self.row.chat_id, Rendered(self.text or PLACEHOLDER, []))
        except Exception as exc:
            log.warning("could not send the streaming placeholder", extra={"error": str(exc)})
            self.dead = self.dead or _permanent(exc)
            return
        self.message_ids.append(mid)
        self.shown = self.text or PLACEHOLDER
        self.ch._edit_later(self.row.chat_id, EDIT_GAP)  # a new message counts as an edit
        self.ch.store.set_stream_msgs(self.row.update_id, self.message_ids)

    async def _show(self, text: str, force: bool = False) -> None:
        """Edit the current message, at most once per EDIT_GAP per chat (forced ones wait)."""
        chat = self.row.chat_id
        if not self.message_ids or not text.strip() or text == self.shown:
            return
        if not await self.ch._edit_slot(chat, skip_if_busy=not force):
            return
        try:
            await self.ch.bot.edit_message_text(text=text, chat_id=chat,
                                                message_id=self.message_ids[-1], parse_mode=None)
            self.shown = text
        except TelegramRetryAfter as exc:
            self.ch._edit_later(chat, exc.retry_after)
        except TelegramBadRequest as exc:
            if _not_modified(exc):
                self.shown = text
            else:
                log.debug("stream edit rejected", extra={"error": exc.message[:200]})
        except Exception as exc:  # 403 blocked, network, an HTML error page…
            self._failed(exc)
