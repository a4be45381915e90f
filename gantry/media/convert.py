"""A downloaded file → what the model reads: an image part, a fenced text block, or a
description of a file kept on disk (a PDF's text: gantry.media.pdf). Pure apart from reading
the file."""

from __future__ import annotations

import base64
from pathlib import Path

from gantry.media.kinds import Media, human_size
from gantry.model.messages import ImagePart, ImageURL

TEXT_MAX_CHARS = 50_000  # a document's text inlined into the turn, at most
IMAGE_MAX_BYTES = 5_000_000  # larger images are kept as files (most vision APIs refuse more)
IMAGE_MIMES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
TEXT_MIMES = frozenset({
    "application/json", "application/xml", "application/x-yaml", "application/yaml",
    "application/toml", "application/javascript", "application/x-sh", "application/sql",
    "application/x-python", "application/csv", "application/x-ndjson", "application/ld+json",
})
TEXT_SUFFIXES = frozenset({
    ".txt", ".md", ".csv", ".tsv", ".json", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf",
    ".log", ".py", ".js", ".ts", ".sh", ".sql", ".html", ".htm", ".xml", ".css", ".rs", ".go",
    ".c", ".h", ".java", ".rb", ".env", ".srt", ".vtt", ".diff", ".patch",
})
PDF_MIME = "application/pdf"
_MAGIC = ((b"\xff\xd8\xff", "image/jpeg"), (b"\x89PNG\r\n\x1a\n", "image/png"),
          (b"GIF8", "image/gif"))


def image_mime(head: bytes, declared: str) -> str | None:
    """The image type by its first bytes (declared types lie; Telegram photos are JPEG)."""
    for magic, mime in _MAGIC:
        if head.startswith(magic):
            return mime
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_part(data: bytes, mime: str) -> ImagePart:
    return ImagePart(ImageURL(f"data:{mime};base64,{base64.b64encode(data).decode()}"))


def is_text_like(item: Media) -> bool:
    mime = item.mime.lower().split(";", 1)[0].strip()
    return (mime.startswith("text/") or mime in TEXT_MIMES or mime.endswith(("+json", "+xml"))
            or Path(item.name).suffix.lower() in TEXT_SUFFIXES)


def is_pdf(item: Media, head: bytes) -> bool:
    return head.startswith(b"%PDF-") or (item.mime.lower() == PDF_MIME and not head)


def read_text(path: Path, max_chars: int = TEXT_MAX_CHARS) -> tuple[str, bool] | None:
    """(text, cut) of a UTF-8 file, reading no more than the cap needs; None if it is not
    UTF-8 text (binary under a text name). A multi-byte character cut by the cap is dropped."""
    limit = max_chars * 4
    with open(path, "rb") as src:
        data = src.read(limit + 1)
    cut = len(data) > limit
    data = data[:limit]
    if b"\x00" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not cut or exc.start < len(data) - 3:
            return None
        text = data[: exc.start].decode("utf-8")
    text = text.removeprefix("\ufeff")
    if len(text) > max_chars:
        text, cut = text[:max_chars], True
    return text, cut


def cut_note(kept: int) -> str:
    """The line after a text cut to its cap (a document's, a transcript's)."""
    return f"\n[… cut at {kept:,} characters]"


def fenced(name: str, text: str, cut: bool, note: str = "") -> str:
    """A document's text as a fenced block headed by its name; the fence is longer than any
    run of backticks inside, so the text cannot close it."""
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    tail = cut_note(len(text)) if cut else ""
    head = f"[document: {name}{note}]"
    return f"{head}\n{fence}\n{text.rstrip()}\n{fence}{tail}"


def describe_kept(item: Media, path: Path, size: int, why: str = "") -> str:
    """A file the model cannot read here: what it is and where it was saved, so a filesystem
    tool can work on it."""
    kind = item.mime or "unknown type"
    reason = f"; {why}" if why else ""
    return (f"[file: {item.name or path.name}, {kind}, {human_size(size)}, saved at {path}"
            f"{reason}]")


def describe_image(item: Media, size: int) -> str:
    """The one line standing for an image in the text (and in history, once it is gone)."""
    dims = f"{item.width}×{item.height}" if item.width and item.height else ""
    details = ", ".join(d for d in (item.name, dims, human_size(size)) if d)
    return f"[{'photo' if item.kind == 'photo' else 'image'}: {details}]"
