"""One server's prompts: listed at every start and again on `notifications/prompts/list_changed`
(paged, bounded), and one got (prompts/get, within the server's timeout) as the text and
images of the user's message it becomes (docs/mcp.md, "Prompts and resources")."""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gantry.clip import clip
from gantry.mcp import convert
from gantry.mcp.trouble import within
from gantry.model.messages import ImagePart, ImageURL
from gantry.tools import truncate

log = logging.getLogger("gantry.mcp")

MAX_PAGES = 10  # prompts/list pages read per listing
MAX_PROMPTS = 200  # prompts kept per server
MAX_ARGUMENTS = 20  # arguments kept per prompt
NAME_MAX = 100  # a longer prompt or argument name is not offered
TEXT_MAX = 300  # of a title or description shown
MAX_IMAGES = 4  # images of one prompt sent to the model as images
IMAGE_MAX_BYTES = 5_000_000  # larger ones are kept in the outbox instead
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})
ASSISTANT = "Assistant: "  # what an assistant-role message of a prompt is marked with


class PromptError(Exception):
    """Why a prompt could not be got; `str()` is for the user."""


@dataclass(frozen=True)
class Argument:
    name: str
    description: str = ""
    required: bool = False
    title: str = ""


@dataclass(frozen=True)
class ListedPrompt:
    name: str
    title: str = ""
    description: str = ""
    arguments: tuple[Argument, ...] = ()

    @property
    def required(self) -> list[str]:
        return [a.name for a in self.arguments if a.required]


def listed_prompt(item: Any) -> ListedPrompt | None:
    """A prompts/list item, its texts clipped; None when its name cannot be typed sensibly."""
    name = str(getattr(item, "name", "") or "")
    if not name or len(name) > NAME_MAX:
        return None
    args = []
    for a in (getattr(item, "arguments", None) or ())[:MAX_ARGUMENTS]:
        arg = str(getattr(a, "name", "") or "")
        if arg and len(arg) <= NAME_MAX and "=" not in arg and not arg.isspace():
            args.append(Argument(arg, clip(str(getattr(a, "description", "") or ""), TEXT_MAX),
                                 bool(getattr(a, "required", False)),
                                 clip(str(getattr(a, "title", "") or ""), TEXT_MAX)))
    return ListedPrompt(name, clip(str(getattr(item, "title", "") or ""), TEXT_MAX),
                        clip(str(getattr(item, "description", "") or ""), TEXT_MAX),
                        tuple(args))


class PromptListing:
    """One server's prompts as last listed (supervise.Listing)."""

    what = "prompts"

    def __init__(self, server: str) -> None:
        self.server = server
        self.listed: dict[str, ListedPrompt] = {}

    def changed(self, message: Any) -> bool:
        from mcp_types import PromptListChangedNotification

        return isinstance(message, PromptListChangedNotification)

    async def refresh(self, session: Any, capabilities: Any) -> None:
        if getattr(capabilities, "prompts", None) is None:
            self.listed = {}
            return
        from mcp_types import PaginatedRequestParams

        items: list[Any] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await session.list_prompts(
                params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            items.extend(page.prompts or ())
            cursor = page.next_cursor
            if not cursor or len(items) >= MAX_PROMPTS:
                break
        listed = [p for item in items[:MAX_PROMPTS] if (p := listed_prompt(item)) is not None]
        self.listed = {p.name: p for p in listed}
        log.info("mcp prompts listed", extra={"server": self.server, "prompts": len(listed)})


@dataclass(frozen=True)
class Got:
    """A prompt as the user's message: its text and the images that go with it."""

    text: str
    images: tuple[ImagePart, ...] = ()


def _image(block: Any) -> ImagePart | None:
    """An image block the model may see as an image: a known type, valid, not too big."""
    mime = str(getattr(block, "mime_type", "") or "")
    data = str(getattr(block, "data", "") or "")
    if mime not in IMAGE_TYPES or not data or len(data) * 3 // 4 > IMAGE_MAX_BYTES + 3:
        return None
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return ImagePart(ImageURL(f"data:{mime};base64,{data}"))


def prompt_message(messages: Any, max_chars: int, keep: convert.Keep | None = None,
                   reader: str = "") -> Got:
    """A prompts/get result's messages as one user message: texts in order (an assistant
    message marked as such), embedded resources' text, images as images (MAX_IMAGES), any
    other binary kept (`keep`) and named; the text cut at `max_chars`."""
    parts: list[str] = []
    images: list[ImagePart] = []
    for message in messages or ():
        block = getattr(message, "content", None)
        kind = getattr(block, "type", None)
        image = _image(block) if kind == "image" and len(images) < MAX_IMAGES else None
        if image is not None:
            images.append(image)
            text = f"[image {len(images)}, {getattr(block, 'mime_type', '')}]"
        else:
            text = convert.block_text(block, keep, reader)
        if getattr(message, "role", "user") == "assistant":
            text = ASSISTANT + text
        if text:
            parts.append(text)
    text = "\n\n".join(parts).strip() or "(the prompt is empty)"
    return Got(truncate(text, max_chars), tuple(images))


async def get_prompt(session: Any, server: str, timeout: float, name: str,
                     arguments: Mapping[str, str]) -> Any:
    """prompts/get within `timeout`; PromptError says why it failed."""
    return await within(
        lambda: session.get_prompt(name, dict(arguments)), timeout, PromptError,
        late=f"MCP server {server!r} did not give the prompt {name!r}",
        refused=f"MCP server {server!r} refused the prompt {name!r}",
        failed=f"getting the prompt {name!r} from MCP server {server!r} failed")
