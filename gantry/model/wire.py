"""The chat-completions request and reply bodies (msgspec types and their codecs, pure).

Request-side types are strict and omit `None` fields; reply-side types are lenient
because Gemini, xAI, Ollama, llama.cpp and vLLM each bend the shape a little
(unknown fields, `null` where OpenAI sends a value, missing `index`/`id`/`type`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from gantry.model.messages import Message, ToolDef, encode

__all__ = [
    "ChatChunk",
    "ChatRequest",
    "ChatResponse",
    "Choice",
    "ChunkChoice",
    "Delta",
    "ErrorBody",
    "FunctionDelta",
    "PromptDetails",
    "ResponseMessage",
    "StreamOptions",
    "ToolCallDelta",
    "Usage",
    "decode_chunk",
    "decode_response",
    "encode_request",
]

# --------------------------------------------------------------------------- request side


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


class PromptDetails(msgspec.Struct):
    """`usage.prompt_tokens_details`: how much of the prompt the provider's cache served."""

    cached_tokens: int | None = None


class Usage(msgspec.Struct):
    """Token counts as the provider reports them (any may be missing or null)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: PromptDetails | None = None
    prompt_cache_hit_tokens: int | None = None  # DeepSeek's name for the cached part

    @property
    def cached_tokens(self) -> int | None:
        """Prompt tokens served from the provider's cache, when it says."""
        details = self.prompt_tokens_details
        if details is not None and details.cached_tokens is not None:
            return details.cached_tokens
        return self.prompt_cache_hit_tokens


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


# --------------------------------------------------------------------------- codecs

_response_decoder = msgspec.json.Decoder(ChatResponse)
_chunk_decoder = msgspec.json.Decoder(ChatChunk)


def encode_request(request: ChatRequest) -> bytes:
    """The request body as JSON bytes."""
    return encode(request)


def decode_response(data: bytes | str) -> ChatResponse:
    """Decode a non-streamed reply; raises msgspec.DecodeError on malformed JSON or shape."""
    return _response_decoder.decode(data)


def decode_chunk(data: bytes | str) -> ChatChunk:
    """Decode one SSE `data:` payload; raises msgspec.DecodeError on malformed JSON or shape."""
    return _chunk_decoder.decode(data)
