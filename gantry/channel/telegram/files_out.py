"""Files out to Telegram: a reply's attachments as sendPhoto / sendDocument (multipart).

Each attachment is one part of the reply's delivery (TelegramChannel._deliver records it like
a text part), so it is exactly-once the same way, with the same one window (docs/telegram.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

import gantry.channel.telegram.lazy_aiogram  # noqa: F401  # isort: skip  (before aiogram: lazy models)
from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest, TelegramRetryAfter
from aiogram.types import BufferedInputFile, FSInputFile
from aiohttp import FormData, hdrs

from gantry.channel.reply import Attachment

log = logging.getLogger("gantry.channel.telegram")

DOCUMENT_MAX = 50_000_000  # Telegram's upload limit for bots
RETRY_AFTER_TRIES = 5


class TypedFile(FSInputFile):
    """An upload that keeps its MIME type: aiogram adds files to the form without one, so
    aiohttp would label every upload application/octet-stream (see typed_form)."""

    def __init__(self, path: str, filename: str, content_type: str) -> None:
        super().__init__(path, filename=filename)
        self.content_type = content_type


class TypedBytes(BufferedInputFile):
    """An upload from memory that keeps its MIME type (a voice note as audio/ogg)."""

    def __init__(self, data: bytes, filename: str, content_type: str) -> None:
        super().__init__(data, filename=filename)
        self.content_type = content_type


def typed_form(form: FormData, method: Any) -> FormData:
    """aiogram's multipart form for `method`, each TypedFile's or TypedBytes' part given its
    type (the parts are matched by file name; a form of any other shape is left as aiogram
    built it)."""
    types = {v.filename: v.content_type for _, v in method
             if isinstance(v, TypedFile | TypedBytes) and v.filename and v.content_type}
    for field in getattr(form, "_fields", ()) if types else ():
        options, headers = field[0], field[1]
        mime = types.get(options.get("filename", ""))
        if mime and isinstance(headers, dict):
            headers.setdefault(hdrs.CONTENT_TYPE, mime)
    return form


def _upload(file: Attachment) -> TypedFile:
    return TypedFile(file.path, file.name, file.mime)


def _gone(file: Attachment) -> str | None:
    """Why the file cannot be sent (deleted from the outbox, or grown past the limit)."""
    try:
        size = os.stat(file.path).st_size
    except OSError:
        return f"(the file {file.name} is no longer available to send)"
    if size > DOCUMENT_MAX:
        return f"(the file {file.name} is too big for Telegram: {size} bytes)"
    return None


async def send_attachment(bot: Bot, chat: int, file: Attachment | str) -> None:
    """Send one file: a photo when it may be one, falling back to a document when Telegram
    refuses it as a photo (dimensions, format); a missing file becomes a short line of text.
    A str is an https image URL Telegram fetches: if it cannot, the image is skipped (the
    text already links it). Raises what Telegram raised otherwise (the caller judges)."""
    if isinstance(file, str):
        try:
            await _retrying(lambda: bot.send_photo(chat_id=chat, photo=file))
        except TelegramBadRequest as exc:
            log.info("telegram could not fetch an image URL of the reply; skipped",
                     extra={"chat_id": chat, "error": exc.message[:200]})
        return
    missing = _gone(file)
    if missing is not None:
        log.warning("an attachment could not be sent", extra={"chat_id": chat, "why": missing})
        await _retrying(lambda: bot.send_message(chat_id=chat, text=missing, parse_mode=None))
        return
    caption = file.caption or None
    if file.photo:
        try:
            await _retrying(lambda: bot.send_photo(
                chat_id=chat, photo=_upload(file),
                caption=caption, parse_mode=None))
            return
        except TelegramBadRequest as exc:
            log.warning("telegram refused the image as a photo; sending it as a file",
                        extra={"chat_id": chat, "error": exc.message[:200]})
    await _retrying(lambda: bot.send_document(
        chat_id=chat, document=_upload(file),
        caption=caption, parse_mode=None))


async def _retrying(send: Callable[[], Awaitable[Any]]) -> None:
    """`send()` again after each 429's retry_after, a bounded number of times."""
    for attempt in range(RETRY_AFTER_TRIES):
        try:
            await send()
            return
        except TelegramRetryAfter as exc:
            if attempt == RETRY_AFTER_TRIES - 1:
                raise
            await anyio.sleep(exc.retry_after)
