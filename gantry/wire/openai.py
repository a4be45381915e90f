"""The OpenAI chat-completions wire: msgspec types, SSE framing and stream assembly.

Everything here is pure (no IO) so it can be tested against recorded provider bytes.
Request-side types are strict and omit `None` fields; response-side types are lenient
because Gemini, xAI, Ollama, llama.cpp and vLLM each bend the shape a little
(unknown fields, `null` where OpenAI sends a value, missing `index`/`id`/`type`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import msgspec

__all__ = [
    "AssistantMessage",
    "ChatChunk",
    "ChatRequest",
    "ChatResponse",
    "Choice",
    "ChunkChoice",
    "Completion",
    "ContentPart",
    "Delta",
    "ErrorBody",
    "FunctionCall",
    "FunctionDef",
    "FunctionDelta",
    "ImagePart",
    "ImageURL",
    "Message",
    "ResponseMessage",
    "SSEEvent",
    "SSEParser",
    "StreamAssembler",
    "StreamOptions",
    "SystemMessage",
    "TextPart",
    "ToolCall",
    "ToolCallAssembler",
    "ToolCallDelta",
    "ToolDef",
    "ToolMessage",
    "Usage",
    "UserMessage",
    "completion_from_response",
    "content_text",
    "decode_chunk",
    "decode_messages",
    "decode_response",
    "encode",
    "encode_request",
    "new_call_id",
    "user_content",
]

# --------------------------------------------------------------------------- request side


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


class StreamOptions(msgspec.Struct):
    """Ask for a final usage chunk when streaming (OpenAI only sends it on request)."""

    include_usage: bool = True


class ChatRequest(msgspec.Struct, omit_defaults=True):
    """POST body for `/chat/completions`; None fields are not sent (some providers 400 on null)."""

    model: str
    messages: list[Message]
    tools: list[ToolDef] | None = None
    tool_choice: str | dict[str, Any] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    temperature: float | None = None


# --------------------------------------------------------------------------- response side


class Usage(msgspec.Struct):
    """Token counts as the provider reports them (any may be missing or null)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class ErrorBody(msgspec.Struct):
    """`{"error": {...}}` — some providers send it with a 200 or inside a stream."""

    message: str | None = None
    type: str | None = None
    code: str | int | None = None


class FunctionDelta(msgspec.Struct):
    """A fragment of a call; a few servers send `arguments` as an object, not a string."""

    name: str | None = None
    arguments: str | dict[str, Any] | None = None


class ToolCallDelta(msgspec.Struct):
    """A tool call or a fragment of one; every field may be missing, empty or null."""

    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: FunctionDelta | None = None
    extra_content: dict[str, Any] | None = None


class ResponseMessage(msgspec.Struct):
    """`choices[].message` of a non-streamed reply. Reasoning comes apart from the content
    as `reasoning_content` (DeepSeek, vLLM, llama.cpp) or `reasoning` (Ollama, vLLM, LM
    Studio); it is kept out of the reply and the history."""

    role: str | None = None
    content: str | list[Any] | None = None
    tool_calls: list[ToolCallDelta] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class Choice(msgspec.Struct):
    """One choice of a non-streamed reply (gantry asks for one)."""

    index: int | None = 0
    message: ResponseMessage | None = None
    finish_reason: str | None = None


class ChatResponse(msgspec.Struct):
    """A non-streamed reply."""

    id: str | None = None
    model: str | None = None
    choices: list[Choice] | None = None
    usage: Usage | None = None
    error: ErrorBody | str | None = None


class Delta(msgspec.Struct):
    """`choices[].delta` of a stream chunk (reasoning fields as in ResponseMessage)."""

    role: str | None = None
    content: str | list[Any] | None = None
    tool_calls: list[ToolCallDelta] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class ChunkChoice(msgspec.Struct):
    """One choice of a stream chunk."""

    index: int | None = 0
    delta: Delta | None = None
    finish_reason: str | None = None


class ChatChunk(msgspec.Struct):
    """One `data:` payload of a stream; the usage-only last chunk has empty `choices`."""

    id: str | None = None
    model: str | None = None
    choices: list[ChunkChoice] | None = None
    usage: Usage | None = None
    error: ErrorBody | str | None = None


class Completion(msgspec.Struct):
    """One assembled assistant turn, the same whether it was streamed or not.

    Branch on `tool_calls`, not `finish_reason`: Gemini streams tool calls with "stop".
    `finish_reason` is normalised to "tool_calls" when calls are present. `reasoning` (sent
    apart from the content) is never replayed: `to_message` leaves it out.
    """

    text: str = ""
    tool_calls: list[ToolCall] = []
    finish_reason: str | None = None
    usage: Usage | None = None
    reasoning: str = ""

    def to_message(self) -> AssistantMessage:
        """The history entry for this turn (keeps tool-call metadata for replay)."""
        return AssistantMessage(
            content=self.text or None,
            tool_calls=list(self.tool_calls) or None,
        )


# --------------------------------------------------------------------------- codecs

_encoder = msgspec.json.Encoder()
_response_decoder = msgspec.json.Decoder(ChatResponse)
_chunk_decoder = msgspec.json.Decoder(ChatChunk)
_messages_decoder = msgspec.json.Decoder(list[Message])


def encode(obj: Any) -> bytes:
    """JSON-encode any wire struct (e.g. messages for the session store)."""
    return _encoder.encode(obj)


def encode_request(request: ChatRequest) -> bytes:
    """The request body as JSON bytes."""
    return _encoder.encode(request)


def decode_response(data: bytes | str) -> ChatResponse:
    """Decode a non-streamed reply; raises msgspec.DecodeError on malformed JSON or shape."""
    return _response_decoder.decode(data)


def decode_chunk(data: bytes | str) -> ChatChunk:
    """Decode one SSE `data:` payload; raises msgspec.DecodeError on malformed JSON or shape."""
    return _chunk_decoder.decode(data)


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


# --------------------------------------------------------------------------- SSE framing


class SSEEvent(msgspec.Struct, frozen=True):
    """One dispatched server-sent event (multi-line `data:` joined with newlines)."""

    data: str
    event: str = "message"
    id: str | None = None


_BOM = "\ufeff"


class SSEParser:
    """Incremental text/event-stream parser (WHATWG rules), fed arbitrary byte chunks.

    Lines may end in LF, CR or CRLF, and a chunk boundary may fall anywhere — inside a
    line, inside a CRLF, inside a UTF-8 sequence. `close()` flushes an event that the
    server did not terminate with a blank line (lenient: the spec would drop it).
    """

    def __init__(self) -> None:
        self._buf = b""
        self._skip_lf = False
        self._first_line = True
        self._data: list[str] = []
        self._event = ""
        self._last_id: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume bytes; return the events completed by them."""
        if not chunk:
            return []
        if self._skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._skip_lf = False
        lines = (self._buf + chunk).splitlines(keepends=True)
        if lines and not lines[-1].endswith((b"\n", b"\r")):
            self._buf = lines.pop()
        else:
            self._buf = b""
        # Only a CR at the very end of the data may be the first half of a CRLF split across
        # chunks; a CR-terminated line followed by more text in this chunk was a bare CR.
        self._skip_lf = not self._buf and bool(lines) and lines[-1].endswith(b"\r")
        events: list[SSEEvent] = []
        for raw in lines:
            self._line(raw.rstrip(b"\r\n"), events)
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: process any unterminated line and pending event."""
        events: list[SSEEvent] = []
        if self._buf:
            self._line(self._buf, events)
            self._buf = b""
        self._dispatch(events)
        return events

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        line = raw.decode("utf-8", errors="replace")
        if self._first_line:
            self._first_line = False
            line = line.removeprefix(_BOM)
        if not line:
            self._dispatch(events)
            return
        if line.startswith(":"):
            return  # comment / keep-alive
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._last_id = value

    def _dispatch(self, events: list[SSEEvent]) -> None:
        if self._data:
            events.append(
                SSEEvent(
                    data="\n".join(self._data), event=self._event or "message", id=self._last_id
                )
            )
        self._data = []
        self._event = ""


# --------------------------------------------------------------------------- assembly


class _Slot:
    __slots__ = ("args", "extra", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.args = ""
        self.extra: dict[str, Any] | None = None


def _merge(into: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    out = dict(into or {})
    for key, value in new.items():
        old = out.get(key)
        out[key] = (
            _merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
        )
    return out


def new_call_id() -> str:
    """A call id for a call that came without one (or was printed as text)."""
    return "call_" + uuid.uuid4().hex[:24]


class ToolCallAssembler:
    """Builds complete ToolCalls from stream fragments, tolerating every provider's habits.

    - OpenAI/vLLM/llama.cpp: `index` on every fragment, `id`/`name` on the first only.
    - Some servers repeat `id`/`name` on every fragment, or reuse index 0 for every call
      (a different id at a known index therefore starts a new call).
    - Gemini omits `index` (and sends `id: ""`); calls come whole, arguments may follow in
      indexless fragments, `extra_content` may come as a metadata-only fragment.
      Without an index, a new id (or a new name when the last call already has one) starts a
      new call; anything else continues the last call.
    """

    def __init__(self) -> None:
        self._slots: list[_Slot] = []
        self._by_index: dict[int, _Slot] = {}
        self._by_id: dict[str, _Slot] = {}

    def add(self, frag: ToolCallDelta) -> None:
        """Fold one fragment in."""
        call_id = frag.id or ""
        name = (frag.function.name if frag.function else None) or ""
        slot: _Slot | None = None
        if frag.index is not None:
            slot = self._by_index.get(frag.index)
            if slot is not None and call_id and slot.id and call_id != slot.id:
                slot = None
        elif call_id:
            slot = self._by_id.get(call_id)
        elif self._slots:
            last = self._slots[-1]
            if not (name and last.name):
                slot = last
        if slot is None:
            slot = _Slot()
            self._slots.append(slot)
        if frag.index is not None:
            self._by_index[frag.index] = slot
        if call_id:
            slot.id = slot.id or call_id
            self._by_id[call_id] = slot
        if name and not slot.name:
            slot.name = name
        args = frag.function.arguments if frag.function else None
        if isinstance(args, dict):
            slot.args = encode(args).decode()
        elif args:
            slot.args += args
        if frag.extra_content:
            slot.extra = _merge(slot.extra, frag.extra_content)

    def result(self) -> list[ToolCall]:
        """The calls in arrival order; missing ids are generated, empty arguments become `{}`."""
        calls: list[ToolCall] = []
        for slot in self._slots:
            if not slot.name and not slot.args:
                continue  # metadata-only noise with nothing to call
            calls.append(
                ToolCall(
                    id=slot.id or new_call_id(),
                    function=FunctionCall(name=slot.name, arguments=slot.args.strip() or "{}"),
                    extra_content=slot.extra,
                )
            )
        return calls


def _finish(reason: str | None, calls: list[ToolCall]) -> str | None:
    if calls and reason in (None, "stop"):
        return "tool_calls"
    return reason


class StreamAssembler:
    """Folds decoded chunks into text deltas and, at the end, one Completion."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls = ToolCallAssembler()
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    @property
    def finished(self) -> bool:
        """True once a finish_reason arrived (the reply is complete even if [DONE] is lost)."""
        return self.finish_reason is not None

    @property
    def text_length(self) -> int:
        """Characters of text received so far."""
        return sum(len(t) for t in self._text)

    def add(self, chunk: ChatChunk) -> str:
        """Fold a chunk in; return the text it added ("" if none)."""
        if chunk.usage is not None:
            self.usage = chunk.usage
        added: list[str] = []
        for choice in chunk.choices or ():
            if choice.index not in (0, None):
                continue
            delta = choice.delta
            if delta is not None:
                text = content_text(delta.content)
                if text:
                    added.append(text)
                thought = delta.reasoning_content or delta.reasoning
                if thought:
                    self._reasoning.append(thought)
                for frag in delta.tool_calls or ():
                    self._calls.add(frag)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        text = "".join(added)
        if text:
            self._text.append(text)
        return text

    def result(self) -> Completion:
        """The assembled turn."""
        calls = self._calls.result()
        return Completion(
            text="".join(self._text),
            tool_calls=calls,
            finish_reason=_finish(self.finish_reason, calls),
            usage=self.usage,
            reasoning="".join(self._reasoning),
        )


def completion_from_response(response: ChatResponse) -> Completion:
    """The Completion of a non-streamed reply; raises ValueError when it has no choice."""
    choice = next((c for c in response.choices or () if c.index in (0, None)), None)
    if choice is None:
        raise ValueError("the reply has no choices")
    message = choice.message or ResponseMessage()
    assembler = ToolCallAssembler()
    for position, call in enumerate(message.tool_calls or ()):
        # Non-streamed calls are each complete: key them by position, whatever they carry.
        assembler.add(
            ToolCallDelta(
                index=position,
                id=call.id,
                function=call.function,
                extra_content=call.extra_content,
            )
        )
    calls = assembler.result()
    return Completion(
        text=content_text(message.content),
        tool_calls=calls,
        finish_reason=_finish(choice.finish_reason, calls),
        usage=response.usage,
        reasoning=message.reasoning_content or message.reasoning or "",
    )
