"""Files tools return, kept so the model can send them to the user (docs/mcp.md, "Images and
files a tool returns").

An MCP tool's image, audio or binary resource never reaches the model's context: the model
reads a placeholder naming an attachment id, and the bytes are written here, under
DATA_DIR/outbox/<id>/<name>. The built-in `send_attachment` tool lets the model choose to
send one with its reply; the agent reads those calls back from the turn's recorded history
(`turn_attachments`), so a resumed turn still knows what it promised. Files are
content-addressed (the id is a hash of the bytes), so keeping the same bytes twice is one
file, and a restart writing them again changes nothing. Kept files are pruned after a week.

A kept file belongs to the chats whose tool results returned it: `keep` records the calling
session (gantry.tools.CALLER) in the file's folder, and `find` for a session knows only the
files recorded for it. Never the text of a result: a tool echoing "; attachment <id>: " makes
nothing sendable, and another chat's id is unknown here, its name and size never said.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gantry.channel.reply import CAPTION_MAX, MAX_ATTACHMENTS, Attachment
from gantry.kept import tidy
from gantry.model.messages import AssistantMessage, Message, ToolMessage
from gantry.tools import CALLER, Tool, ToolError

log = logging.getLogger("gantry.outbox")

TOOL_NAME = "send_attachment"
MAX_BYTES = 10_000_000  # Telegram's sendPhoto limit; larger files are not kept
KEEP_SECONDS = 7 * 86400
PHOTO_TYPES = {"image/png": ".png", "image/jpeg": ".jpg", "image/webp": ".webp"}
_EXT = {**PHOTO_TYPES, "image/gif": ".gif", "audio/wav": ".wav", "audio/mpeg": ".mp3",
        "audio/ogg": ".ogg", "application/pdf": ".pdf", "text/plain": ".txt",
        "application/json": ".json"}
_ID = re.compile(r"^[0-9a-f]{12}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
NAME_MAX = 100


def safe_name(name: str, mime: str) -> str:
    """A file name safe on any filesystem and in Telegram: the last path segment, only
    [A-Za-z0-9._-], no leading dot, at most NAME_MAX characters; `file<ext>` if nothing is left."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = _UNSAFE.sub("_", base).strip("._")[:NAME_MAX]
    if not base:
        kind = mime.split("/", 1)[0] if "/" in mime else "file"
        base = f"{_UNSAFE.sub('_', kind) or 'file'}{_EXT.get(mime, '')}"
    return base


def _marker(session: str) -> str:
    return ".chat-" + hashlib.sha256(session.encode()).hexdigest()[:24]


class Outbox:
    """The kept files under `root`; `keep` is the MCP host's hook, `find` the tool's."""

    def __init__(self, root: Path, max_bytes: int = MAX_BYTES,
                 keep_seconds: float = KEEP_SECONDS) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.keep_seconds = keep_seconds

    def keep(self, b64: str, mime: str, name: str) -> str | None:
        """Write base64 `b64` and return its id; None (and nothing written) when it is too
        big, not base64, or the disk refuses: the placeholder then offers no attachment."""
        if len(b64) * 3 // 4 > self.max_bytes + 3:  # judged before decoding anything
            log.info("tool file not kept: too big", extra={"mime": mime, "max": self.max_bytes})
            return None
        try:
            data = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            log.warning("tool file not kept: not valid base64", extra={"mime": mime})
            return None
        if len(data) > self.max_bytes:
            return None
        ident = hashlib.sha256(data).hexdigest()[:12]
        folder = self.root / ident
        try:
            if self.find(ident) is not None:  # kept before (under its first name)
                self._given(folder, CALLER.get())
                os.utime(folder)  # kept a week from now: prune goes by the folder's time
                return ident
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.iterdir():  # a half-kept earlier attempt
                old.unlink()
            target = folder / safe_name(name, mime)
            tmp = folder / f".{target.name}.{os.getpid()}.tmp"
            tmp.write_bytes(data)
            (folder / ".mime").write_text(mime, encoding="utf-8")
            self._given(folder, CALLER.get())
            os.replace(tmp, target)  # last: a folder with its file is complete
            tidy(self.root, self.keep_seconds, busy={folder})  # a week-long run prunes too
        except OSError as exc:
            log.warning("tool file not kept: could not write it",
                        extra={"error": f"{type(exc).__name__}: {exc}"})
            return None
        return ident

    @staticmethod
    def _given(folder: Path, session: str) -> None:
        """Record that this session's tool result returned the folder's file (an empty
        marker named by a hash of the session id: any session id is a safe file name)."""
        (folder / _marker(session)).touch()

    def find(self, ident: str, session: str | None = None) -> Attachment | None:
        """The kept file with this id (None for an unknown or malformed id: never a path).
        With `session`, only a file that session's own tool results returned."""
        if not _ID.match(ident):
            return None
        folder = self.root / ident
        if session is not None and not (folder / _marker(session)).exists():
            return None
        try:
            files = [p for p in folder.iterdir() if not p.name.startswith(".")]
            mime = (folder / ".mime").read_text(encoding="utf-8").strip()
        except OSError:
            return None
        if len(files) != 1:
            return None
        path = files[0]
        return Attachment(path=str(path), name=path.name, mime=mime, size=path.stat().st_size,
                          photo=mime in PHOTO_TYPES)

    def prune(self) -> int:
        """Forget kept files older than keep_seconds; how many went."""
        return tidy(self.root, self.keep_seconds)[0]


def attachment_tool(outbox: Outbox) -> Tool:
    """`send_attachment`: the model's choice to send a file a tool returned. The call only
    checks the id and says what will happen; the file goes out after the reply's text."""

    async def call(args: dict[str, Any]) -> str:
        ident = str(args.get("id", "")).strip().removeprefix("attachment").strip()
        found = outbox.find(ident, CALLER.get())
        if found is None:
            raise ToolError(f"no attachment {ident!r}: use an id shown as 'attachment <id>' "
                            "in a tool result of this conversation (kept for a week)")
        how = "a photo" if found.photo else "a file"
        return f"{found.name} ({found.mime}, {found.size} B) will be sent as {how} after your reply"

    return Tool(
        name=TOOL_NAME,
        description=("Send the user a file or image that a tool returned, with your reply. "
                     "`id` is the attachment id shown in that tool result."),
        parameters={"type": "object", "properties": {
            "id": {"type": "string", "description": "the attachment id, e.g. 3f2a9c1b7d0e"},
            "caption": {"type": "string", "description": "optional short caption"},
        }, "required": ["id"]},
        call=call,
    )


def turn_attachments(turn: Sequence[Message], outbox: Outbox,
                     session: str | None = None) -> list[Attachment]:
    """The files a turn's successful send_attachment calls asked for, in call order, each at
    most once, at most MAX_ATTACHMENTS; read from the recorded messages, so a turn resumed
    after a restart finds the calls it made before it. With `session`, only files that
    session's own tool results returned (as the outbox recorded them), never another chat's."""
    results = {m.tool_call_id: m.content for m in turn if isinstance(m, ToolMessage)}
    out: list[Attachment] = []
    seen: set[str] = set()
    for m in turn:
        if not isinstance(m, AssistantMessage):
            continue
        for call in m.tool_calls or ():
            result = results.get(call.id)
            if call.function.name != TOOL_NAME or result is None or result.startswith("error"):
                continue
            try:
                args = json.loads(call.function.arguments)
            except ValueError:
                continue
            if not isinstance(args, dict):
                continue
            ident = str(args.get("id", "")).strip().removeprefix("attachment").strip()
            if ident in seen or len(out) >= MAX_ATTACHMENTS:
                continue
            found = outbox.find(ident, session)
            if found is None:
                if session is not None and outbox.find(ident) is not None:
                    log.warning("send_attachment named a file this chat was not given; "
                                "left out", extra={"id": ident})
                continue
            seen.add(ident)
            caption = str(args.get("caption") or "")[:CAPTION_MAX]
            out.append(Attachment(found.path, found.name, found.mime, found.size, found.photo,
                                  caption))
    return out
