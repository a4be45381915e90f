"""The Telegram channel (aiogram 3): outbound long-polling, allowlist, exactly-once replies.

The poller records each accepted update and the next offset in SQLite *before* asking
Telegram for more (which confirms the batch), so a crash never loses a message. One worker
per chat answers its chat's updates in arrival order from that table; chats run
concurrently. The delivery bookkeeping is described in docs/telegram.md.

TelegramChannel composes the parts: the Poller (poll.py) receives, the ChatWorkers
(worker.py) run the turns, Delivery (delivery.py) sends.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

import anyio

from gantry.channel.base import Inbound, Progress, Responder
from gantry.channel.reply import unpack
from gantry.channel.telegram.bot import connect, make_bot, publish_commands
from gantry.channel.telegram.delivery import Delivery, delivery_parts
from gantry.channel.telegram.elicit import TelegramDialog
from gantry.channel.telegram.filter import LogOnce
from gantry.channel.telegram.media import TelegramMedia
from gantry.channel.telegram.poll import POLL_TIMEOUT, Poller
from gantry.channel.telegram.reactions import Reactions
from gantry.channel.telegram.store import TelegramStore
from gantry.channel.telegram.voice import VoiceOut
from gantry.channel.telegram.worker import ChatWorkers
from gantry.media.build import MediaReader
from gantry.media.speech import Speaker


class TelegramChannel:
    """The channel gantry runs: its parts built here, run by serve; push for cron and watch."""

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
        followups: str = "steer",
        speech: Speaker | None = None,
        reactions: bool = False,
    ) -> None:
        self.allowed = frozenset(allowed_users)
        self.store = TelegramStore(conn)
        self.bot = make_bot(token, api_url, ssl_context)
        self.dialog = TelegramDialog(self.bot)  # MCP servers' questions (gantry/elicit.py)
        self.media = TelegramMedia(self.bot, media)
        self.out = Delivery(self.bot, self.store, VoiceOut(speech),
                            Reactions(self.bot, conn, enabled=reactions))
        self.workers = ChatWorkers(self.name, self.store, self.media, self.out,
                                   stream_replies=stream_replies, followups=followups)
        self.poller = Poller(self.bot, self.store, self.workers, self.out, self.dialog,
                             self.media, allowed=self.allowed, groups=groups,
                             poll_timeout=poll_timeout)

    async def serve(self, respond: Responder, ready: Callable[[], None]) -> None:
        self.workers.respond = respond
        try:
            me = await connect(self.bot)
            self.poller.me_id, self.poller.me_username = me.id, me.username or ""
            self.store.prune()
            ready()
            async with anyio.create_task_group() as tg:
                self.workers.tg = tg
                self.dialog.start(tg)
                for chat in self.store.pending_chats():
                    self.workers.kick(chat)
                tg.start_soon(publish_commands, self.bot, self.out.voice.configured)
                try:
                    await self.poller.run(tg)
                finally:
                    self.out.begin_grace()
        finally:
            with anyio.CancelScope(shield=True):
                await self.bot.session.close()
                if self.out.voice.speaker is not None:
                    await self.out.voice.speaker.aclose()

    # The parts' per-chat state, as tests/test_telegram*.py watch it.

    @property
    def _active(self) -> set[int]:
        return self.workers.active

    @property
    def _turning(self) -> dict[int, tuple[int, Inbound]]:
        return self.workers.turning

    @property
    def _edit_at(self) -> dict[int, float]:
        return self.out.edit_at

    @property
    def _strangers(self) -> LogOnce:
        return self.poller.strangers

    # ------------------------------------------------------------------ push (cron)

    def can_push(self, chat_id: str) -> bool:
        """Only an allowlisted user's private chat (its id is the user's id) gets pushes."""
        return chat_id.lstrip("-").isdecimal() and int(chat_id) in self.allowed

    async def push(
        self, chat_id: str, text: str, sent: int = 0, progress: Progress | None = None,
        origin: str = "scheduled",
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
                await self.out.send(chat, parts[i])
            else:
                await self.out.send_file(chat, extras[i - len(parts)])
            if progress is not None:
                progress(i + 1, total)
        if sent >= total and progress is not None:
            progress(total, total)
