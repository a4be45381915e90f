"""File serving for the fake Bot API (tests/fakes/telegram.py): `getFile` and the download
URL `/file/bot<token>/<file_path>`, as aiogram builds it (`TelegramAPIServer.file_url`).

Files are registered with `add_file`; `push_photo`/`push_document`/`push_voice`/`push_audio`
enqueue messages that carry them. Like Telegram, getFile refuses files over FILE_LIMIT
("file is too big") and unknown ids ("invalid file_id"). `downloads` records each download:
its path (never the token) and how many bytes the server wrote before the client stopped.
`download_delay` pauses after each 64 KiB chunk (a kill mid-download).
`download_status` (a list) answers the next downloads with those statuses first.
`announce_size=False` leaves `file_size` out (a sender that lies or does not say), so the
cap can only be enforced while streaming.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from dataclasses import dataclass
from typing import Any

from aiohttp import web

FILE_LIMIT = 20 * 1024 * 1024  # the Bot API's download limit for bots
CHUNK = 64 * 1024


@dataclass
class StoredFile:
    file_id: str
    unique_id: str
    data: bytes
    announce_size: bool = True


@dataclass
class Download:
    path: str
    sent: int = 0  # bytes written to the client
    complete: bool = False


class FileServing:
    """Mixed into FakeTelegram; needs its `_lock`, `push_update`, `message` and `_calls`."""

    _file_ids = itertools.count(1)

    @property
    def files(self) -> dict[str, StoredFile]:
        if not hasattr(self, "_files"):
            self._files: dict[str, StoredFile] = {}
            self.downloads: list[Download] = []
        return self._files

    def add_file(self, data: bytes, *, announce_size: bool = True) -> StoredFile:
        """Register bytes under a new file id (unique id: a digest of the bytes)."""
        n = next(self._file_ids)
        stored = StoredFile(f"file-{n}-{hashlib.sha1(data).hexdigest()[:8]}",
                            "u" + hashlib.sha1(data).hexdigest()[:15], data, announce_size)
        self.files[stored.file_id] = stored
        return stored

    def _size(self, f: StoredFile) -> dict[str, Any]:
        return {"file_size": len(f.data)} if f.announce_size else {}

    def push_photo(self, user_id: int, data: bytes, *, caption: str | None = None,
                   width: int = 1280, height: int = 960, chat_id: int | None = None,
                   media_group_id: str | None = None, announce_size: bool = True,
                   **fields: Any) -> dict[str, Any]:
        """A photo in three sizes like Telegram's (thumbnail, medium, `data` at width×height)
        plus one over 2048 px, which gantry must not pick."""
        sizes = []
        for w, h, blob in ((90, 68, b"thumb" + data[:16]), (320, 240, b"medium" + data[:32]),
                           (width, height, data), (2560, 1920, b"huge" + data)):
            f = self.add_file(blob, announce_size=announce_size)
            sizes.append({"file_id": f.file_id, "file_unique_id": f.unique_id, "width": w,
                          "height": h, **self._size(f)})
        extra: dict[str, Any] = {"photo": sizes, **fields}
        if caption is not None:
            extra["caption"] = caption
        if media_group_id is not None:
            extra["media_group_id"] = media_group_id
        return self.push_update({"message": self.message(user_id, chat_id, **extra)})  # type: ignore[attr-defined]

    def push_document(self, user_id: int, data: bytes, name: str, mime: str, *,
                      caption: str | None = None, chat_id: int | None = None,
                      announce_size: bool = True, size: int | None = None) -> dict[str, Any]:
        """A document; `size` overrides the announced file_size (a file over the cap)."""
        f = self.add_file(data, announce_size=announce_size)
        doc = {"file_id": f.file_id, "file_unique_id": f.unique_id, "file_name": name,
               "mime_type": mime, **self._size(f)}
        if size is not None:
            doc["file_size"] = size
        extra: dict[str, Any] = {"document": doc}
        if caption is not None:
            extra["caption"] = caption
        return self.push_update({"message": self.message(user_id, chat_id, **extra)})  # type: ignore[attr-defined]

    def push_voice(self, user_id: int, data: bytes, *, duration: int = 3,
                   chat_id: int | None = None) -> dict[str, Any]:
        f = self.add_file(data)
        voice = {"file_id": f.file_id, "file_unique_id": f.unique_id, "duration": duration,
                 "mime_type": "audio/ogg", **self._size(f)}
        return self.push_update({"message": self.message(user_id, chat_id, voice=voice)})  # type: ignore[attr-defined]

    def push_audio(self, user_id: int, data: bytes, *, name: str = "song.mp3",
                   duration: int = 30, chat_id: int | None = None) -> dict[str, Any]:
        f = self.add_file(data)
        audio = {"file_id": f.file_id, "file_unique_id": f.unique_id, "duration": duration,
                 "mime_type": "audio/mpeg", "file_name": name, **self._size(f)}
        return self.push_update({"message": self.message(user_id, chat_id, audio=audio)})  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ serving

    def _file_routes(self, app: web.Application) -> None:
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)

    async def _get_file(self, params: dict[str, Any]) -> Any:
        from tests.fakes.telegram import _Reply

        with self._lock:  # type: ignore[attr-defined]
            f = self.files.get(str(params.get("file_id")))
        if f is None:
            raise _Reply(400, "Bad Request: invalid file_id")
        if len(f.data) > FILE_LIMIT:
            raise _Reply(400, "Bad Request: file is too big")
        return {"file_id": f.file_id, "file_unique_id": f.unique_id,
                "file_path": f"documents/{f.file_id}.bin", **self._size(f)}

    async def _download(self, request: web.Request) -> web.StreamResponse:
        token = request.match_info["token"]
        path = request.match_info["path"]
        expected = getattr(self, "token", None)
        file_id = path.rsplit("/", 1)[-1].removesuffix(".bin")
        with self._lock:  # type: ignore[attr-defined]
            f = self.files.get(file_id)
            record = Download(path)
            self.downloads.append(record)
        scripted = getattr(self, "download_status", None)  # a list of statuses to answer first
        status = scripted.pop(0) if scripted else None
        if (expected is not None and token != expected) or f is None:
            status = 404
        if status is not None:
            return web.json_response({"ok": False, "error_code": status,
                                      "description": "scripted failure"}, status=status)
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = len(f.data)
        await response.prepare(request)
        try:
            for i in range(0, len(f.data), CHUNK):
                await response.write(f.data[i : i + CHUNK])
                record.sent += len(f.data[i : i + CHUNK])
                await asyncio.sleep(getattr(self, "download_delay", 0.0))
            await response.write_eof()
            record.complete = True
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response
