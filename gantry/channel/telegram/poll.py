"""The poller: getUpdates batches recorded before the next poll confirms them, then queued.

Each batch is stored with its next offset first, so a crash loses nothing. Here too: the
allowlist and group filter, elicitation buttons and answers, and /stop out of band.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import anyio

import gantry.channel.telegram.lazy_aiogram  # noqa: F401  # isort: skip  (before aiogram: lazy models)
from aiogram import Bot
from aiogram.exceptions import TelegramConflictError, TelegramRetryAfter, TelegramUnauthorizedError
from aiogram.types import Message, Update

from gantry.channel.base import NOTHING_TO_STOP, STOPPED_REPLY, is_stop
from gantry.channel.telegram import retry
from gantry.channel.telegram.delivery import Delivery
from gantry.channel.telegram.elicit import TelegramDialog
from gantry.channel.telegram.filter import GROUP_CHATS, LogOnce, addressed
from gantry.channel.telegram.format import Rendered
from gantry.channel.telegram.incoming import incoming
from gantry.channel.telegram.media import TelegramMedia
from gantry.channel.telegram.reactions import Reactions, allowed_updates
from gantry.channel.telegram.retry import Backoff, expected
from gantry.channel.telegram.store import MAX_ATTEMPTS, Accepted, TelegramStore
from gantry.channel.telegram.voice import VoiceChats, voice_command
from gantry.channel.telegram.worker import ChatWorkers
from gantry.media.kinds import dump
from gantry.store.space import is_full

log = logging.getLogger("gantry.channel.telegram")

POLL_TIMEOUT = 25
# Edited messages etc. are never delivered; callback_query: elicitation buttons. Users'
# reactions (message_reaction) are added unless TELEGRAM_REACTIONS=false (reactions.py).
ALLOWED_UPDATES = ["message", "callback_query"]
NON_TEXT_REPLY = "I cannot read this kind of message."
STRANGER_LOG_EVERY = 3600.0  # also how often an ignored group chat is logged
STRANGERS_MAX = 1024  # users remembered for the once-an-hour log line
PRUNE_EVERY = 3600.0  # seconds between prunes of finished updates


class Poller:
    """Receiving for one TelegramChannel: what arrives is stored, then handed to the workers."""

    def __init__(self, bot: Bot, store: TelegramStore, workers: ChatWorkers, out: Delivery,
                 dialog: TelegramDialog, media: TelegramMedia, *, allowed: frozenset[int],
                 groups: str, poll_timeout: int) -> None:
        self.bot = bot
        self.store = store
        self.workers = workers
        self.out = out
        self.dialog = dialog
        self.media = media
        self.allowed = allowed
        self.groups = groups
        self.poll_timeout = poll_timeout
        self.strangers = LogOnce(STRANGER_LOG_EVERY, STRANGERS_MAX)
        self._group_log = LogOnce(STRANGER_LOG_EVERY)
        self.me_id = 0
        self.me_username = ""
        self._tg: Any = None
        self._pruned_at = 0.0
        self.reactions: Reactions = out.reactions
        self.voice_chats = VoiceChats(store.conn)
        self.allowed_updates = allowed_updates(ALLOWED_UPDATES, self.reactions.enabled)

    async def run(self, tg: Any) -> None:
        """Poll until cancelled; notices go into `tg`."""
        self._tg = tg
        self._pruned_at = time.monotonic()
        await self._poll()

    async def _poll(self) -> None:
        """Long-poll forever. Every failure is retried with backoff: the poller is the
        channel's lifeline, so nothing it meets may end it."""
        backoff = Backoff(first=retry.BACKOFF_FIRST)
        bad_batch = 0
        while True:
            try:
                self._housekeeping()
                offset = self.store.next_offset()
                updates = await self.bot.get_updates(
                    offset=offset or None,
                    timeout=self.poll_timeout,
                    allowed_updates=self.allowed_updates,
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
                explained = expected(exc)
                log.log(logging.WARNING if explained else logging.ERROR,
                        "getUpdates failed; retrying",
                        extra={"error": f"{type(exc).__name__}: {exc}", "retry_in_s": delay},
                        exc_info=None if explained else exc)
                await anyio.sleep(delay)
                continue
            try:
                if updates:
                    self._accept(updates)
                bad_batch = 0
            except Exception as exc:  # not confirmed: the batch comes back on the next poll
                if is_full(exc):  # not the batch's fault: never skipped, taken when room
                    await self.workers.wait_for_space(exc)
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
        self.reactions.prune()
        if pruned:
            log.info("pruned finished updates", extra={"count": pruned})
        self.strangers.expire(now)
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
            if upd.message_reaction is not None:  # feedback for the next turn, never a turn
                self._reaction(upd.message_reaction)
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
                                                             self.me_username):
                continue  # an answer to a server's question: not a message for the model
            stop = text is not None and is_stop(text)
            if stop:
                target = stops.get(msg.chat.id) or self.workers.running_turn(msg.chat.id)
                if target is None:
                    idle.append(msg.chat.id)
                else:
                    stops[msg.chat.id] = target
            got = incoming(msg, self.me_id)
            refused = NON_TEXT_REPLY if got is None else self.media.refusal(got.media)
            if got is not None and got.media_group:
                self.media.album_seen(msg.chat.id, got.media_group)
            said = None if text is None or stop else voice_command(text)
            if said is not None:  # /voice on|off: the chat's setting, answered at once
                refused = self.voice_chats.command(msg.chat.id, said, self.out.voice.configured)
            accepted.append(Accepted(
                update_id=upd.update_id, chat_id=msg.chat.id, user_id=user,
                message_id=msg.message_id, text=got.text if got else "",
                reply=None if stop else refused, done=stop,
                media=dump(got.media) if got else "[]",
                media_group=got.media_group if got else None,
                voice=refused is None and not stop and self._spoken(msg.chat.id, got),
            ))
        self.store.accept(accepted, max(u.update_id for u in updates) + 1,
                          stopped=list(stops.values()), stopped_reply=STOPPED_REPLY)
        for chat, update_id in stops.items():
            self.workers.stop(chat, update_id)
        for chat in idle:
            self._tg.start_soon(self._notice, chat, NOTHING_TO_STOP)
        for chat in dict.fromkeys(a.chat_id for a in accepted if not a.done):
            self.workers.kick(chat)

    async def _notice(self, chat: int, text: str) -> None:
        """A short out-of-band reply (a /stop with nothing to stop). Not tracked like
        replies: after a crash it is not resent; a failure is only logged."""
        try:
            await self.out.send(chat, Rendered(text, []))
        except Exception as exc:
            log.warning("could not send a notice", extra={
                "chat_id": chat, "error": f"{type(exc).__name__}: {exc}"},
                exc_info=None if expected(exc) else exc)

    def _spoken(self, chat: int, got: Any) -> bool:
        """Whether the reply is spoken too: a voice note came in, or the chat asked for it."""
        if not self.out.voice.configured or got is None:
            return False
        return any(m.kind == "voice" for m in got.media) or self.voice_chats.wanted(chat)

    def _reaction(self, reaction: Any) -> None:
        """A user's reaction: kept for their next turn if it is an allowlisted user's, in a
        chat gantry answers in (a group only with TELEGRAM_GROUPS=mention), on one of
        gantry's recent replies; ignored otherwise, strangers logged as for messages."""
        user = reaction.user.id if reaction.user is not None else 0  # 0: anonymous admin
        kind = reaction.chat.type
        chat_ok = user in self.allowed and (
            kind == "private" or (self.groups == "mention" and kind in GROUP_CHATS))
        if user not in self.allowed and user:
            self._stranger(user)
        why = self.reactions.take(reaction, chat_ok=chat_ok)
        if why is not None:
            log.debug("ignored a reaction", extra={"chat_id": reaction.chat.id, "why": why})

    def _chat_ok(self, msg: Message) -> bool:
        """Private chats always; groups only with TELEGRAM_GROUPS=mention and a message that
        mentions or replies to the bot. Ignored updates are still confirmed (the offset moves
        past them) but never stored or answered; each chat is logged at most once an hour."""
        kind = msg.chat.type
        if kind == "private":
            return True
        if (self.groups == "mention" and kind in GROUP_CHATS
                and (addressed(msg, self.me_id, self.me_username)
                     or self.media.album_known(msg.chat.id, msg.media_group_id))):
            return True  # (an album's later parts carry no mention: they follow its first)
        if self._group_log.due(msg.chat.id):
            log.info("ignored a message in a group or channel; see TELEGRAM_GROUPS",
                     extra={"chat_id": msg.chat.id, "chat_type": kind,
                            "telegram_groups": self.groups})
        return False

    def _stranger(self, user: int) -> None:
        if self.strangers.due(user):
            log.warning("ignored a message from a user not in TELEGRAM_ALLOWED_USERS",
                        extra={"user_id": user})

