"""Files on disk: safe names under DATA_DIR/media and capped, streamed downloads.

A download never holds the file in memory and never writes past the cap: it streams into a
`.part` file and is renamed into place whole, so a crash leaves no half file under the final
name and a second download of the same item simply replaces the first (idempotent).
"""

from __future__ import annotations

import contextlib
import os
import re
import unicodedata
from collections.abc import AsyncIterable
from pathlib import Path

MEDIA_DIR = "media"
NAME_MAX = 100
_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")


class MediaError(Exception):
    """A file that cannot be read as sent; `reply` is what the user is told (no model call)."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply


class TooLarge(MediaError):
    """Over MEDIA_MAX_BYTES: refused before or during the download, never read past the cap."""

    def __init__(self, name: str, max_bytes: int, size: int | None = None) -> None:
        from gantry.media.kinds import human_size

        what = f" ({human_size(size)})" if size is not None else ""
        super().__init__(f"{name or 'That file'}{what} is too large: I can read files up "
                         f"to {human_size(max_bytes)} (MEDIA_MAX_BYTES).")
        self.max_bytes = max_bytes


def safe_name(name: str, fallback: str = "file") -> str:
    """A file name that stays where it is put: the last path component only, no leading
    dots, only a conservative character set, at most NAME_MAX characters (extension kept)."""
    base = unicodedata.normalize("NFKC", name).replace("\\", "/").rsplit("/", 1)[-1]
    base = _UNSAFE.sub("_", base).strip(" .")
    if not base or base in (".", ".."):
        base = fallback
    if len(base) > NAME_MAX:
        stem, dot, ext = base.rpartition(".")
        ext = ext[:16] if dot and stem else ""
        base = base[: NAME_MAX - len(ext) - 1].rstrip(" .") + ("." + ext if ext else "")
    return base


def media_dir(data_dir: str | os.PathLike[str]) -> Path:
    """DATA_DIR/media, created on first use (owner-only, like DATA_DIR)."""
    path = Path(data_dir) / MEDIA_DIR
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def place(data_dir: str | os.PathLike[str], key: str, name: str) -> Path:
    """Where an item is kept: DATA_DIR/media/<key>-<safe name>, always inside that folder."""
    folder = media_dir(data_dir)
    path = folder / f"{safe_name(key, 'item')[:40]}-{safe_name(name)}"
    if path.resolve().parent != folder.resolve():  # cannot happen with safe names; belt
        raise MediaError("That file name cannot be used.")
    return path


async def save_stream(chunks: AsyncIterable[bytes], dest: Path, max_bytes: int,
                      name: str = "") -> int:
    """Write `chunks` to `dest` (atomically, via dest.part); raise TooLarge as soon as the
    data would pass `max_bytes`, having written no more than the cap. Returns the size."""
    part = dest.with_name(dest.name + ".part")
    total = 0
    try:
        with open(part, "wb") as out:
            async for chunk in chunks:
                total += len(chunk)
                if total > max_bytes:
                    raise TooLarge(name, max_bytes)
                out.write(chunk)
        os.replace(part, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            part.unlink()
        raise
    return total


async def file_chunks(path: Path, chunk_size: int = 1 << 16) -> AsyncIterable[bytes]:
    """A local file as chunks (the REPL's /attach goes through the same capped copy)."""
    with open(path, "rb") as src:
        while chunk := src.read(chunk_size):
            yield chunk
