"""Voice replies on Telegram: which replies are spoken, `/voice on|off`, and the voice note
sent (sendVoice, OGG/Opus) with the text as its caption when it fits.

A reply is spoken when its message was a voice note or its chat said `/voice on` (kept in
`telegram_chat`), and only with LLM_SPEECH_MODEL set. That is decided on arrival and stored
with the update, so a delivery resumed after a restart sends the same parts. Speech is a
courtesy: when it fails, the text goes out as it would have, and the failure is logged once
until speech works again.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import msgspec

import gantry.channel.telegram.lazy_aiogram  # noqa: F401  # isort: skip  (before aiogram: lazy models)
from aiogram.exceptions import TelegramBadRequest, TelegramRetryAfter

from gantry.channel.reply import Attachment
from gantry.channel.telegram.files_out import TypedBytes
from gantry.channel.telegram.format import Rendered, to_aiogram, utf16_len
from gantry.media.speech import Speaker, SpeechFailed
from gantry.media.spoken import spoken_text

log = logging.getLogger("gantry.channel.telegram")

CAPTION_LIMIT = 1024  # Telegram's caption limit, in UTF-16 units after entities are parsed
VOICE_ON = "Voice replies are on in this chat: I answer in voice as well as text."
VOICE_OFF = ("Voice replies are off in this chat (a voice note still gets one back). "
             "/voice on turns them on.")
VOICE_UNSET = ("Voice replies are not set up: the operator sets LLM_SPEECH_MODEL (for example "
               "tts-1) to turn them on.")
VOICE_USAGE = "Usage: /voice on, /voice off, or /voice to see which it is."


def voice_command(text: str) -> str | None:
    """The argument of a `/voice` command (`/voice@botname on` too), lowercased; "" for a
    bare `/voice`; None for any other message."""
    words = text.strip().split()
    if not words or words[0].split("@", 1)[0].lower() != "/voice":
        return None
    return " ".join(words[1:]).lower()


class VoiceChats:
    """Which chats asked for voice replies (`telegram_chat.voice`)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def wanted(self, chat: int) -> bool:
        rows = list(self.conn.execute("SELECT voice FROM telegram_chat WHERE chat_id = ?",
                                      (chat,)))
        return bool(rows and rows[0][0])

    def set(self, chat: int, on: bool) -> None:
        """Idempotent: a batch of updates taken again after a crash sets the same value."""
        with self.conn:
            self.conn.execute(
                "INSERT INTO telegram_chat (chat_id, voice) VALUES (?, ?) ON CONFLICT (chat_id) "
                "DO UPDATE SET voice = excluded.voice", (chat, int(on)))

    def command(self, chat: int, arg: str, configured: bool) -> str:
        """Carry out `/voice [arg]` for `chat`; the reply to send."""
        if not configured:
            return VOICE_UNSET
        if arg in ("on", "off"):
            self.set(chat, arg == "on")
            return VOICE_ON if arg == "on" else VOICE_OFF
        if arg:
            return VOICE_USAGE
        return VOICE_ON if self.wanted(chat) else VOICE_OFF


class Spoken(msgspec.Struct, frozen=True):
    """The voice part of a reply: `text` (spoken_text already) said aloud, with `caption` (the
    reply's one text part) under it; without a caption the text went out as messages."""

    text: str
    caption: Rendered | None = None


Step = Rendered | Spoken | Attachment | str


def with_voice(parts: list[Rendered], extras: list[Attachment | str], reply_text: str,
               cap: int, streamed: int) -> list[Step]:
    """A spoken reply's delivery steps: the voice note captioned with the text when the text is
    one part short enough to be a caption (and was not streamed into a message already), else
    the text's messages and then the voice note; attachments after either. A reply with
    nothing to say aloud (code only) gets no voice note."""
    said = spoken_text(reply_text, cap)
    if not said:
        return [*parts, *extras]
    if len(parts) == 1 and not streamed and utf16_len(parts[0].text) <= CAPTION_LIMIT:
        return [Spoken(said, parts[0]), *extras]
    return [*parts, Spoken(said), *extras]


class VoiceOut:
    """Speech for one TelegramChannel (None speaker: voice replies are off)."""

    def __init__(self, speaker: Speaker | None) -> None:
        self.speaker = speaker
        self.max_chars = speaker.max_chars if speaker is not None else 0
        self._failing = False  # a failure was logged and speech has not worked since

    @property
    def configured(self) -> bool:
        return self.speaker is not None

    async def send(self, bot: Any, chat: int, step: Spoken) -> int | None:
        """The voice note's message id, or None when there is none (speech failed, or the
        user does not take voice messages): the caller then sends the caption as text.
        Raises what Telegram raised otherwise (the delivery retries or gives up as for text).
        """
        if self.speaker is None:
            return None
        try:
            speech = await self.speaker(step.text)
        except SpeechFailed as exc:
            self._failed(chat, str(exc))
            return None
        except Exception as exc:  # never the text's loss: whatever speech did, the text goes
            self._failed(chat, f"speech failed unexpectedly: {type(exc).__name__}")
            return None
        caption = step.caption
        voice = TypedBytes(speech.data, "reply.ogg", "audio/ogg")
        for attempt in range(5):
            try:
                msg = await bot.send_voice(
                    chat_id=chat, voice=voice, duration=max(1, round(speech.seconds)),
                    caption=caption.text if caption else None,
                    caption_entities=(to_aiogram(caption.entities) or None) if caption else None,
                    parse_mode=None)
                break
            except TelegramRetryAfter as exc:
                if attempt == 4:
                    raise
                await anyio.sleep(exc.retry_after)
            except TelegramBadRequest as exc:  # VOICE_MESSAGES_FORBIDDEN: a user's privacy
                self._failed(chat, f"Telegram refused the voice message: {exc.message[:200]}")
                return None
        if self._failing:
            self._failing = False
            log.info("voice replies work again", extra={"chat_id": chat})
        return int(msg.message_id)

    def _failed(self, chat: int, why: str) -> None:
        """Logged once until speech works again; the text reply stands either way."""
        if self._failing:
            log.debug("no voice reply; the text stands", extra={"chat_id": chat, "why": why})
            return
        self._failing = True
        log.warning("no voice reply; the text stands (said once until voice works again)",
                    extra={"chat_id": chat, "why": why})
