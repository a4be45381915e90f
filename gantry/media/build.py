"""The media of one message → the turn's text blocks and image parts (see gantry.media)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gantry.kept import tidy
from gantry.media import convert, pdfproc
from gantry.media.files import MEDIA_DIR, MediaError, TooLarge, place
from gantry.media.kinds import Media, duration_text, human_size
from gantry.media.transcribe import Transcriber, unset_reply
from gantry.model.messages import ImagePart

log = logging.getLogger("gantry.media")

Fetch = Callable[[Media, Path, int], Awaitable[None]]
"""Put one item's bytes at the path, writing at most the cap (raising TooLarge past it)."""

DOCUMENT_TIMEOUT = 20.0  # seconds: Config.document_timeout_seconds' default
DEFAULT_NAMES = {"photo": "photo.jpg", "image": "image", "voice": "voice.ogg",
                 "audio": "audio", "document": "file"}


@dataclass
class Built:
    """What a message's media adds to its turn: text blocks (one per item) and images."""

    blocks: list[str] = field(default_factory=list)
    images: list[ImagePart] = field(default_factory=list)


def not_kept_reply(name: str, size: int, budget: int) -> str:
    """The reply when a file the model cannot read has no room to be kept."""
    if size > budget:
        return (f"{name} ({human_size(size)}) is too large to keep: files I keep for you may "
                f"take {human_size(budget)} in all (MEDIA_MAX_TOTAL_BYTES).")
    return (f"{name} ({human_size(size)}) cannot be kept right now: the {human_size(budget)} "
            "for kept files (MEDIA_MAX_TOTAL_BYTES) is taken by files still being read. "
            "Please send it again in a moment.")


def compose(*pieces: str) -> str:
    """The turn's text: its non-empty pieces (quote, media blocks, caption) one per paragraph."""
    return "\n\n".join(p.strip() for p in pieces if p and p.strip())


def reader_for(cfg: Any, verify: Any = True, meter: Any = None) -> MediaReader:
    """The process's MediaReader from the configuration: transcription when
    LLM_TRANSCRIBE_MODEL is set, at LLM_TRANSCRIBE_BASE_URL/_API_KEY or else the chat
    model's URL and key."""
    transcriber = None
    if cfg.llm_transcribe_model:
        transcriber = Transcriber(cfg.llm_transcribe_base_url or cfg.llm_base_url,
                                  cfg.llm_transcribe_api_key or cfg.llm_api_key,
                                  cfg.llm_transcribe_model, verify=verify, meter=meter)
    return MediaReader(cfg.data_dir, cfg.media_max_bytes, transcriber,
                       cfg.document_timeout_seconds,
                       keep_seconds=cfg.media_keep_days * 86400.0,
                       max_total_bytes=cfg.media_max_total_bytes)


@dataclass
class MediaReader:
    """Reads media within MEDIA_MAX_BYTES into model input (one per process), each document
    within DOCUMENT_TIMEOUT_SECONDS. Files it keeps (those the model cannot read) stay
    MEDIA_KEEP_DAYS, within MEDIA_MAX_TOTAL_BYTES in all: the oldest go first to make room
    (gantry.kept)."""

    data_dir: str
    max_bytes: int
    transcriber: Transcriber | None = None
    document_timeout: float = DOCUMENT_TIMEOUT
    keep_seconds: float = 7 * 86400.0
    max_total_bytes: int = 1_000_000_000
    _busy: set[Path] = field(default_factory=set, repr=False)  # downloads being read

    def prune(self) -> int:
        """Forget kept files past their days (at start, like the outbox); how many went."""
        return tidy(Path(self.data_dir) / MEDIA_DIR, self.keep_seconds, self.max_total_bytes,
                    self._busy)[0]

    async def aclose(self) -> None:
        if self.transcriber is not None:
            await self.transcriber.aclose()

    def refusal(self, item: Media) -> str | None:
        """Why an item is refused before anything is downloaded (its announced size, or voice
        without transcription), else None."""
        if item.size is not None and item.size > self.max_bytes:
            return TooLarge(item.name, self.max_bytes, item.size).reply
        if item.kind in ("voice", "audio") and self.transcriber is None:
            return unset_reply(item.kind)
        return None

    async def read(self, items: Sequence[Media], fetch: Fetch) -> Built:
        """Fetch and convert each item; MediaError (its reply for the user) when one cannot
        be read as sent. Other exceptions (network) propagate for a retry."""
        built = Built()
        held: list[Path] = []  # this message's files: busy until it is read whole
        try:
            for item in items:
                refused = self.refusal(item)
                if refused is not None:
                    raise MediaError(refused)
                dest = place(self.data_dir, item.key,
                             item.name or DEFAULT_NAMES.get(item.kind, "file"))
                held += [dest, dest.with_name(dest.name + ".part")]
                self._busy.update(held[-2:])
                try:
                    await fetch(item, dest, self.max_bytes)
                    block, image, keep = await self._convert(item, dest)
                except BaseException:  # a /stop, shutdown, a failed download: redone if retried
                    with contextlib.suppress(OSError):
                        dest.unlink()
                    raise
                if keep:
                    self._make_room(item, dest)
                else:
                    with contextlib.suppress(OSError):
                        dest.unlink()
                built.blocks.append(block)
                if image is not None:
                    built.images.append(image)
        finally:
            self._busy.difference_update(held)
        return built

    def _make_room(self, item: Media, dest: Path) -> None:
        """Keep `dest` within MEDIA_MAX_TOTAL_BYTES, the oldest kept files going first;
        when it cannot fit even so, it is deleted and MediaError says why."""
        size = os.path.getsize(dest)
        if size <= self.max_total_bytes and tidy(dest.parent, self.keep_seconds,
                                                 self.max_total_bytes, self._busy)[1]:
            return
        with contextlib.suppress(OSError):
            dest.unlink()
        log.warning("a file could not be kept: over MEDIA_MAX_TOTAL_BYTES",
                    extra={"size": size, "max": self.max_total_bytes})
        raise MediaError(not_kept_reply(item.name or dest.name, size, self.max_total_bytes))

    async def _convert(self, item: Media, path: Path) -> tuple[str, ImagePart | None, bool]:
        """(text block, image part or None, keep the file on disk)."""
        size = os.path.getsize(path)
        with open(path, "rb") as src:
            head = src.read(16)
        name = item.name or path.name
        if item.kind in ("photo", "image"):
            mime = convert.image_mime(head, item.mime)
            if mime is not None and size <= convert.IMAGE_MAX_BYTES:
                return convert.describe_image(item, size), convert.image_part(
                    path.read_bytes(), mime), False
            why = ("too large to show to the model" if mime is not None
                   else "not an image format the model reads")
            return convert.describe_kept(item, path, size, why), None, True
        if item.kind in ("voice", "audio"):
            assert self.transcriber is not None  # refusal() said so
            text = await self.transcriber(path, name, item.mime, item.kind)
            length = duration_text(item.duration)
            what = "voice message" if item.kind == "voice" else f"audio {name}"
            head_line = f"[{what}{', ' + length if length else ''}, transcribed]"
            tail = ""
            if len(text) > convert.TEXT_MAX_CHARS:  # capped like a document's text
                text = text[: convert.TEXT_MAX_CHARS]
                tail = convert.cut_note(len(text))
            return f"{head_line}\n{text or '(no speech recognised)'}{tail}", None, False
        if convert.is_pdf(item, head):
            try:  # in a child process, killed past the deadline or when the turn is stopped
                text, cut, pages = await pdfproc.extract(path, convert.TEXT_MAX_CHARS,
                                                         self.document_timeout)
            except ValueError as exc:
                return convert.describe_kept(item, path, size, str(exc)), None, True
            if not text.strip():
                return convert.describe_kept(item, path, size, "the PDF has no text layer "
                                             "(scanned?)"), None, True
            count = f"{pages} page" + ("" if pages == 1 else "s")
            return convert.fenced(name, text, cut, f", PDF, {count}"), None, False
        if convert.is_text_like(item):
            read = convert.read_text(path)
            if read is not None:
                return convert.fenced(name, *read), None, False
        return convert.describe_kept(item, path, size), None, True
