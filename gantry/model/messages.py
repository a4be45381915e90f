"""Chat messages as gantry keeps and sends them: roles, content parts, tool calls (msgspec, pure).

These are the history's types: the session store encodes them, every channel builds
`UserMessage`s with `ImagePart`s, and the request carries them unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

__all__ = [
    "AssistantMessage",
    "ContentPart",
    "FunctionCall",
    "FunctionDef",
    "ImagePart",
    "ImageURL",
    "Message",
    "SystemMessage",
    "TextPart",
    "ToolCall",
    "ToolDef",
    "ToolMessage",
    "UserMessage",
    "content_text",
    "decode_messages",
    "encode",
    "user_content",
]


class FunctionDef(msgspec.Struct, omit_defaults=True):
    """A tool's schema as the model sees it (`parameters` is a JSON Schema object)."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolDef(msgspec.Struct, tag_field="type", tag="function"):
    """`{"type": "function", "function": {...}}` — the tag makes `type` always encoded."""

    function: FunctionDef


class FunctionCall(msgspec.Struct):
    """A resolved call: `arguments` is always a JSON text (never empty; `{}` at least)."""

    name: str
    arguments: str


class ToolCall(msgspec.Struct, tag_field="type", tag="function", omit_defaults=True):
    """A complete tool call, as returned by the model and replayed in history.

    `extra_content` carries provider metadata that must round-trip unchanged, e.g. Gemini 3's
    `{"google": {"thought_signature": ...}}` — dropping it makes the next request fail with 400.
    """

    id: str
    function: FunctionCall
    extra_content: dict[str, Any] | None = None


class SystemMessage(msgspec.Struct, tag_field="role", tag="system", omit_defaults=True):
    """Persona, memory and summary blocks."""

    content: str
    name: str | None = None


class ImageURL(msgspec.Struct, omit_defaults=True):
    """An image as a URL; gantry sends `data:<mime>;base64,…` (never a link to fetch)."""

    url: str
    detail: str | None = None


class TextPart(msgspec.Struct, tag_field="type", tag="text"):
    """A text content part: `{"type": "text", "text": ...}`."""

    text: str


class ImagePart(msgspec.Struct, tag_field="type", tag="image_url"):
    """An image content part: `{"type": "image_url", "image_url": {"url": ...}}`."""

    image_url: ImageURL


ContentPart = TextPart | ImagePart


class UserMessage(msgspec.Struct, tag_field="role", tag="user", omit_defaults=True):
    """What the human said: plain text, or content parts when it came with images.

    Rows stored before parts existed hold a string and still decode.
    """

    content: str | list[ContentPart]
    name: str | None = None

    @property
    def text(self) -> str:
        """The text the user sent (text parts joined; images left out)."""
        return content_text(self.content)

    @property
    def images(self) -> list[ImagePart]:
        """The image parts, if any."""
        if isinstance(self.content, str):
            return []
        return [p for p in self.content if isinstance(p, ImagePart)]

    def with_text(self, text: str) -> UserMessage:
        """The same message with its text replaced (images kept, after the text)."""
        if isinstance(self.content, str) or not self.images:
            return UserMessage(text, name=self.name)
        return UserMessage([TextPart(text), *self.images], name=self.name)


class AssistantMessage(msgspec.Struct, tag_field="role", tag="assistant", omit_defaults=True):
    """A model turn; `content` is None when the turn is only tool calls."""

    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    name: str | None = None


class ToolMessage(msgspec.Struct, tag_field="role", tag="tool", omit_defaults=True):
    """A tool result, paired with its call by `tool_call_id`."""

    tool_call_id: str
    content: str
    name: str | None = None


Message = SystemMessage | UserMessage | AssistantMessage | ToolMessage

_encoder = msgspec.json.Encoder()
_messages_decoder = msgspec.json.Decoder(list[Message])


def encode(obj: Any) -> bytes:
    """JSON-encode any wire struct (e.g. messages for the session store)."""
    return _encoder.encode(obj)


def decode_messages(data: bytes | str) -> list[Message]:
    """Decode a JSON list of messages (dispatching on `role`)."""
    return _messages_decoder.decode(data)


def content_text(content: str | list[Any] | None) -> str:
    """Text of a content field that may be a string, null or a list of parts (`TextPart`s or
    `{"text": ...}` dicts); image parts have no text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = [p.text if isinstance(p, TextPart) else p.get("text") if isinstance(p, dict)
             else None for p in content]
    return "".join(p for p in parts if isinstance(p, str))


def user_content(text: str, images: Sequence[ImagePart] = ()) -> str | list[ContentPart]:
    """A user message's content: the text alone, or the text then its images as parts."""
    if not images:
        return text
    return [TextPart(text), *images]
