"""Images in the prompt: which ones are sent, and what stands in for the others (pure).

Two rules (docs/models.md, "Images"):

* An image is sent with its own turn only. Once the turn is answered, every later prompt
  carries a one-line description instead (`collapse_old_images`), so no turn re-sends
  yesterday's screenshots and the history's token estimate stays small.
* A model without vision: when the endpoint refuses image input (`rejects_images`), the
  turn is retried once with each image replaced by a description (`without_images`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gantry.model.messages import ImagePart, Message, UserMessage

NOT_SHOWN = "not shown: this model cannot read images"
EARLIER = "sent earlier, no longer shown"
NO_VISION_NOTICE = ("(This model cannot read images, so I only saw a description of your "
                    "image, not the picture itself.)")
"""Prefixed once per conversation to the reply of the first turn whose images were refused."""

# What endpoints answer a text-only model sent an image part, seen in the wild:
#   OpenAI   400 "Invalid content type. image_url is only supported by certain models."
#   llama.cpp 500 "image input is not supported - hint: … you may need to provide the mmproj"
#             500 "Failed to parse messages: Unsupported content part type: \"image_url\""
#   vLLM     400 "<model> is not a multimodal model" / "At most 0 image(s) may be provided"
#   Ollama, LM Studio "… does not support images"
_ABOUT_IMAGES = re.compile(r"image|vision|multi-?modal|mmproj", re.IGNORECASE)
_REFUSED = re.compile(
    r"not (?:be )?supported|unsupported|only supported|not a multi-?modal|does ?n[o']t support"
    r"|do(?:es)? not accept|cannot (?:read|process|accept)|at most 0|not enabled"
    r"|invalid content type|provide the mmproj",
    re.IGNORECASE,
)


def rejects_images(message: str) -> bool:
    """Whether a provider's error text says the model cannot take image input. Only asked
    about a request that carried images, so a loose match costs at most one extra call."""
    return bool(_ABOUT_IMAGES.search(message) and _REFUSED.search(message))


def has_images(messages: Sequence[Message]) -> bool:
    return any(isinstance(m, UserMessage) and m.images for m in messages)


def describe(image: ImagePart, why: str) -> str:
    """One line for an image: its type and size from the data URL (never the data)."""
    url = image.image_url.url
    mime = "image"
    size = ""
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        mime = head.removeprefix("data:").split(";", 1)[0] or "image"
        n = len(data) * 3 // 4
        size = f", {n} B" if n < 1000 else f", {round(n / 1000)} kB"
    return f"[image: {mime}{size} — {why}]"


def _described(m: UserMessage, why: str) -> UserMessage:
    """The message as text alone: its text parts, each image a line in its place."""
    if isinstance(m.content, str):
        return m
    lines = [describe(p, why) if isinstance(p, ImagePart) else p.text for p in m.content]
    return UserMessage("\n".join(line for line in lines if line), name=m.name)


def without_images(messages: Sequence[Message], why: str = NOT_SHOWN) -> list[Message]:
    """Every user message's images replaced by their one-line description."""
    return [_described(m, why) if isinstance(m, UserMessage) and m.images else m
            for m in messages]


def collapse_old_images(history: Sequence[Message], start: int) -> list[Message]:
    """Images of messages before `start` (where the turn in progress begins) replaced by a
    description; the turn in progress keeps its own."""
    return [*without_images(history[:start], EARLIER), *history[start:]]
