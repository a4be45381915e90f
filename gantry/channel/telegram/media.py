"""The Telegram side of media: refusals decided on arrival, albums, and file downloads
through the Bot API (`getFile`, then the file URL, which holds the bot token: it is built
inside aiogram and never logged, and download errors are reported without it)."""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import gantry.channel.telegram.lazy_aiogram  # noqa: F401  # isort: skip  (before aiogram: lazy models)
from aiogram.exceptions import TelegramBadRequest

from gantry.channel.telegram.store import Pending, TelegramStore
from gantry.media.build import MediaReader, compose
from gantry.media.files import MediaError, TooLarge, save_stream
from gantry.media.kinds import Media, load
from gantry.model.messages import ImagePart

ALBUM_WAIT = 1.5  # seconds after an album's newest part before it is answered
ALBUMS_REMEMBERED = 256  # (chat, album) pairs whose later parts follow the first in a group
DOWNLOAD_TIMEOUT = 300  # seconds for one file (20 MB on a slow link)
CHUNK = 1 << 16
NO_MEDIA_REPLY = "I cannot read files here: media is not enabled for this channel."


class DownloadFailed(ConnectionError):
    """A file download from Telegram failed on the way (retried later); says how, not where."""


class TelegramMedia:
    """Media for one TelegramChannel; `reader` None means files are refused (tests)."""

    def __init__(self, bot: Any, reader: MediaReader | None) -> None:
        self.bot = bot
        self.reader = reader
        self._albums: OrderedDict[tuple[int, str], float] = OrderedDict()

    def refusal(self, items: list[Media]) -> str | None:
        """The reply for a message refused on arrival (too large, voice without
        transcription), decided from what Telegram announced: nothing is downloaded."""
        if not items:
            return None
        if self.reader is None:
            return NO_MEDIA_REPLY
        for item in items:
            refused = self.reader.refusal(item)
            if refused is not None:
                return refused
        return None

    def album_seen(self, chat: int, group: str) -> None:
        self._albums[(chat, group)] = time.monotonic()
        self._albums.move_to_end((chat, group))
        while len(self._albums) > ALBUMS_REMEMBERED:
            self._albums.popitem(last=False)

    def album_known(self, chat: int, group: str | None) -> bool:
        """Whether an album's earlier part was accepted (a group's later parts follow it)."""
        return group is not None and (chat, group) in self._albums

    @staticmethod
    def album_wait(store: TelegramStore, row: Pending) -> float:
        """How long to wait before answering an album, so its last part is in."""
        assert row.media_group is not None
        return max(0.0, min(ALBUM_WAIT, ALBUM_WAIT - store.album_age(row.chat_id,
                                                                    row.media_group)))

    async def read(self, row: Pending) -> tuple[str, tuple[ImagePart, ...]]:
        """The turn's text and images: the row's files downloaded and converted (again,
        after a crash: file ids stay valid). MediaError: refused as sent."""
        items = load(row.media)
        if not items:
            return row.text, ()
        if self.reader is None:
            raise MediaError(NO_MEDIA_REPLY)
        built = await self.reader.read(items, self.fetch)
        return compose(*built.blocks, row.text), tuple(built.images)

    async def fetch(self, item: Media, dest: Path, cap: int) -> None:
        """getFile, then stream the file to `dest`, never past `cap`."""
        try:
            file = await self.bot.get_file(item.ref)
        except TelegramBadRequest as exc:
            if "too big" in exc.message.lower():  # the Bot API serves at most 20 MB
                raise TooLarge(item.name, cap, item.size) from None
            raise MediaError("That file can no longer be fetched from Telegram; please send "
                             "it again.") from None
        if file.file_size is not None and file.file_size > cap:
            raise TooLarge(item.name, cap, file.file_size)
        if not file.file_path:
            raise MediaError("Telegram gave no way to download that file; please send it "
                             "again.")
        url = self.bot.session.api.file_url(self.bot.token, file.file_path)
        try:
            chunks = self.bot.session.stream_content(url, timeout=DOWNLOAD_TIMEOUT,
                                                     chunk_size=CHUNK, raise_for_status=True)
            async with contextlib.aclosing(chunks):
                await save_stream(chunks, dest, cap, item.name)
        except MediaError:
            raise
        except Exception as exc:  # aiohttp's messages hold the URL, and so the token
            status = getattr(exc, "status", None)
            if isinstance(status, int) and 400 <= status < 500:
                raise MediaError(f"Telegram would not let me download that file (HTTP "
                                 f"{status}); please send it again.") from None
            shown = f", HTTP {status}" if isinstance(status, int) else ""
            raise DownloadFailed(f"file download failed ({type(exc).__name__}{shown})"
                                 ) from None
