"""Local files as media: the REPL's `/attach PATH [caption]` goes through the same reader,
caps and conversions as a file sent on Telegram."""

from __future__ import annotations

import hashlib
import mimetypes
import os
from pathlib import Path

from gantry.media.files import MediaError, file_chunks, save_stream
from gantry.media.kinds import Media

ATTACH = "/attach"
ATTACH_HELP = "/attach PATH [caption] — send a local file (image, document, PDF, audio)"
_VOICE_SUFFIXES = frozenset({".ogg", ".oga", ".opus"})


def parse_attach(text: str) -> tuple[str, str] | None:
    """(path, caption) of an `/attach` line, or None for any other line. A path with spaces
    is quoted ("…" or '…'); an empty path is ("", "")."""
    stripped = text.strip()
    head, _, rest = stripped.partition(" ")
    if head.lower() != ATTACH:
        return None
    rest = rest.strip()
    if rest[:1] in ('"', "'"):
        end = rest.find(rest[0], 1)
        if end > 0:
            return rest[1:end], rest[end + 1 :].strip()
    path, _, caption = rest.partition(" ")
    return path, caption.strip()


def local_item(path: str) -> Media:
    """The Media item for a local file; MediaError if there is no readable file there."""
    p = Path(os.path.expanduser(path))
    try:
        st = p.stat()
    except OSError as exc:
        raise MediaError(f"Cannot attach {path}: {exc.strerror or 'not found'}.") from None
    if not p.is_file():
        raise MediaError(f"Cannot attach {path}: not a regular file.")
    mime = mimetypes.guess_type(p.name)[0] or ""
    suffix = p.suffix.lower()
    if mime.startswith("image/"):
        kind = "image"
    elif suffix in _VOICE_SUFFIXES:
        kind = "voice"
    elif mime.startswith("audio/"):
        kind = "audio"
    else:
        kind = "document"
    stamp = f"{p.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()
    return Media(kind=kind, ref=str(p), key=hashlib.sha256(stamp).hexdigest()[:16],
                 name=p.name, mime=mime, size=st.st_size)


async def fetch_local(item: Media, dest: Path, cap: int) -> None:
    """Copy a local file into DATA_DIR/media, never past the cap (it may have grown)."""
    await save_stream(file_chunks(Path(item.ref)), dest, cap, item.name)
