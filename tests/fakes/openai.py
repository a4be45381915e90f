"""A loopback fake of an OpenAI-compatible `/v1/chat/completions` server.

Real sockets on 127.0.0.1 (ephemeral port) so tests exercise real httpx, SSE framing and
connection errors. Each test scripts the replies it needs; unscripted requests get the
default (`Echo`: "echo: <last user message>"). Every request is recorded for assertions.

Async tests::

    async with FakeOpenAI() as fake:
        fake.push(Reply("hi"), HTTPError(429, retry_after="1"))
        provider = Provider(fake.base_url, "sk-test", "fake-model")

Subprocess tests (`gantry run` in another process)::

    fake = FakeOpenAI(default=Echo(delay=30))   # "hang": every turn waits 30 s
    base_url = fake.start_in_thread()
    ...
    fake.stop()
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import ssl
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes._loopback import LoopbackServer

__all__ = [
    "BadGzip",
    "Call",
    "CutJSON",
    "CutStream",
    "Echo",
    "FakeOpenAI",
    "HTTPError",
    "Malformed",
    "RawSSE",
    "RecordedRequest",
    "Reply",
    "Route",
    "Script",
    "SendAttachment",
    "SpeechRequest",
    "ToolCalls",
    "UseTool",
    "WhenOffered",
    "dead_base_url",
    "model_not_found",
    "rate_limited",
    "without_footer",
]


@dataclass(frozen=True)
class Reply:
    """A text reply; streamed in `chunk_size`-char pieces if the request asked for a stream."""

    text: str
    chunk_size: int = 4
    delay: float = 0.0
    finish_reason: str = "stop"
    chunk_delay: float = 0.0  # pause between streamed chunks (a slow model)


@dataclass(frozen=True)
class Echo:
    """The default: reply "echo: <last user message>". `delay` > 0 makes the turn hang."""

    delay: float = 0.0
    chunk_size: int = 4


@dataclass(frozen=True)
class Call:
    """One tool call to emit; `arguments` may be JSON text or a mapping."""

    name: str
    arguments: str | Mapping[str, Any] = "{}"
    id: str | None = None

    @property
    def arguments_text(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True)
class ToolCalls:
    """Tool calls; streamed OpenAI-style with arguments split into `pieces` fragments.

    `interleave` sends the fragments of all calls round-robin (several calls in flight).
    """

    calls: Sequence[Call]
    text: str = ""
    pieces: int = 3
    interleave: bool = False
    delay: float = 0.0


@dataclass(frozen=True)
class UseTool:
    """Behave like a model with one tool to use: call it while the newest message is the
    user's, answer `reply` once its result is in. A retried turn then gets what a real model
    would give it, wherever the retry resumes."""

    call: Call
    reply: str
    delay: float = 0.0


@dataclass(frozen=True)
class HTTPError:
    """An error status with an OpenAI-shaped body (or `raw_body` verbatim)."""

    status: int
    message: str = "scripted error"
    retry_after: str | None = None
    raw_body: str | None = None
    delay: float = 0.0


def rate_limited(retry_after: str = "1", message: str = "Rate limit reached") -> HTTPError:
    """A 429 with Retry-After (seconds or an HTTP-date)."""
    return HTTPError(429, message=message, retry_after=retry_after)


@dataclass(frozen=True)
class CutStream:
    """Stream `after_chunks` content chunks of `text`, then stop without [DONE]/finish_reason.

    `abrupt` closes the socket mid-body (incomplete chunked read); otherwise the body ends
    cleanly but early.
    """

    text: str
    after_chunks: int = 1
    chunk_size: int = 4
    abrupt: bool = True
    delay: float = 0.0


@dataclass(frozen=True)
class Malformed:
    """A 200 whose JSON is broken: the whole body, or a chunk after `after_chunks` good ones."""

    after_chunks: int = 1
    delay: float = 0.0


@dataclass(frozen=True)
class RawSSE:
    """Replay recorded provider bytes verbatim (split into `pieces` writes)."""

    body: bytes
    pieces: Sequence[int] = ()
    content_type: str = "text/event-stream"
    delay: float = 0.0
    event_delay: float = 0.0  # > 0: the body is sent one SSE event at a time, this far apart


@dataclass(frozen=True)
class CutJSON:
    """A JSON reply (even to a stream request) that promises more bytes than it sends,
    then drops the socket: the client sees an incomplete body while reading it."""

    text: str = "never finished"
    delay: float = 0.0


@dataclass(frozen=True)
class BadGzip:
    """A 200 claiming `Content-Encoding: gzip` whose body is not gzip (a broken proxy)."""

    content_type: str = "application/json"
    delay: float = 0.0


@dataclass(frozen=True)
class WhenOffered:
    """`calls` while the request offers tools, else `otherwise`: a model that never stops
    calling tools until they are withheld."""

    calls: ToolCalls
    otherwise: Reply
    delay: float = 0.0


@dataclass(frozen=True)
class SendAttachment:
    """A model that sends the user what a tool returned: call `first` while the newest
    message is the user's, then `send_attachment` with the attachment id its result names,
    then answer `reply`. Like UseTool, a resumed turn gets what a real model would give."""

    first: Call
    reply: str
    delay: float = 0.0


@dataclass(frozen=True)
class Route:
    """A script chosen per request by `choose` (it sees the recorded request): a long mixed
    run, where background calls (summaries, cron turns) arrive in no fixed order."""

    choose: Callable[[RecordedRequest], Script]
    delay: float = 0.0


_ATTACHMENT_ID = re.compile(r"attachment ([0-9a-f]{12})")

# What real endpoints answer a text-only model sent an image part (FakeOpenAI.no_vision).
NO_VISION: dict[str, tuple[int, dict[str, Any]]] = {
    "openai": (400, {"error": {
        "message": "Invalid content type. image_url is only supported by certain models.",
        "type": "invalid_request_error", "param": "messages.[1].content.[1].type",
        "code": None}}),
    "llamacpp": (500, {"error": {
        "code": 500, "type": "server_error", "message": "image input is not supported - "
        "hint: if this is unexpected, you may need to provide the mmproj"}}),
    "vllm": (400, {"object": "error", "type": "BadRequestError", "param": None, "code": 400,
                   "message": "fake-model is not a multimodal model"}),
}


# What real endpoints answer for a model they do not serve (fail-over tests): status, body.
MODEL_NOT_FOUND: dict[str, tuple[int, dict[str, Any]]] = {
    "openai": (404, {"error": {
        "message": "The model `gone-model` does not exist or you do not have access to it.",
        "type": "invalid_request_error", "param": None, "code": "model_not_found"}}),
    "ollama": (404, {"error": {"message": 'model "gone-model" not found, try pulling it first',
                               "type": "api_error", "param": None, "code": None}}),
    "vllm": (404, {"object": "error", "message": "The model `gone-model` does not exist.",
                   "type": "NotFoundError", "param": None, "code": 404}),
    "llamacpp": (400, {"error": {"code": 400, "message": "model not found",
                                 "type": "invalid_request_error"}}),
}


def model_not_found(endpoint: str) -> HTTPError:
    """That endpoint's answer for a model it does not serve (a key of MODEL_NOT_FOUND)."""
    status, body = MODEL_NOT_FOUND[endpoint]
    return HTTPError(status, raw_body=json.dumps(body))


def dead_base_url() -> str:
    """A loopback `/v1` URL nothing listens on: every connection is refused at once."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    return f"http://127.0.0.1:{port}/v1"


def has_image(body: Any) -> bool:
    """Whether a request body carries an image content part anywhere in its messages."""
    messages = body.get("messages", []) if isinstance(body, dict) else []
    return any(isinstance(m, dict) and isinstance(m.get("content"), list)
               and any(isinstance(p, dict) and p.get("type") == "image_url"
                       for p in m["content"]) for m in messages)


Script = (
    WhenOffered | Reply | Echo | ToolCalls | UseTool | HTTPError | CutStream | Malformed | RawSSE
    | CutJSON | BadGzip | SendAttachment | Route
)


@dataclass
class Transcription:
    """One `/audio/transcriptions` request as received."""

    model: str
    filename: str
    data: bytes
    authorization: str


@dataclass
class SpeechRequest:
    """One `/audio/speech` request as received (its JSON body's fields)."""

    model: str
    input: str
    voice: str
    response_format: str
    authorization: str


@dataclass
class RecordedRequest:
    """One request as received: method, path, headers and the parsed JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes = b""
    reply_id: str = ""  # the id of the reply it got (chatcmpl-…), once one was begun

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", [])) if isinstance(self.body, dict) else []

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))

    @property
    def image_urls(self) -> list[str]:
        """Every `image_url` part's URL in the request's messages, in order (media tests)."""
        return [p["image_url"]["url"] for m in self.messages
                if isinstance(m.get("content"), list)
                for p in m["content"] if isinstance(p, dict) and p.get("type") == "image_url"]

    @property
    def last_user_text(self) -> str:
        """The newest user message as the user wrote it: gantry's time footer left off."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return without_footer(_text(message.get("content")))
        return ""


TIME_MARK = "\n\n[gantry context, not from the user]"  # gantry.prompt.TIME_MARK


def without_footer(text: str) -> str:
    """A user message without the time block gantry appends to the turn's message."""
    return text.split(TIME_MARK, 1)[0]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _split(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _pieces(text: str, count: int) -> list[str]:
    count = max(1, min(count, len(text) or 1))
    step = -(-len(text) // count) if text else 1
    return [text[i : i + step] for i in range(0, len(text), step)] or [""]


@dataclass
class _Ctx:
    """Per-request ids so chunks of one reply agree."""

    model: str
    include_usage: bool
    prompt_chars: int
    id: str = field(default_factory=lambda: "chatcmpl-" + uuid.uuid4().hex[:12])
    created: int = field(default_factory=lambda: int(time.time()))
    report: bool = True  # False: the reply carries no usage (as some local servers send)
    cached: int = 0  # prompt_tokens_details.cached_tokens reported (at most the prompt)
    log: list[tuple[str, dict[str, Any]]] | None = None  # every usage sent, with the reply id

    def usage(self, completion_chars: int) -> dict[str, Any]:
        prompt, completion = self.prompt_chars // 4, completion_chars // 4
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if self.cached:
            usage["prompt_tokens_details"] = {"cached_tokens": min(self.cached, prompt)}
        if self.log is not None:
            self.log.append((self.id, usage))
        return usage

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        return _sse(body)

    def usage_chunk(self, completion_chars: int) -> bytes:
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": self.usage(completion_chars),
        }
        return _sse(body)

    def completion(self, message: dict[str, Any], finish: str, completion_chars: int) -> bytes:
        body = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            ],
        }
        if self.report:
            body["usage"] = self.usage(completion_chars)
        return json.dumps(body).encode()


def _sse(body: Any) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


_DONE = b"data: [DONE]\n\n"


class FakeOpenAI(LoopbackServer):
    """A scriptable OpenAI-compatible server on 127.0.0.1 (see the module docstring).

    `base_url` is `http://127.0.0.1:<port>/v1`, what LLM_BASE_URL should be.
    """

    name = "fake OpenAI server"
    url_suffix = "/v1"
    no_vision: str | None = None
    """Set to a key of NO_VISION: a request with an image part gets that endpoint's refusal
    (recorded, consuming no script), as from a model without vision."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        basic_auth: tuple[str, str] | None = None,
        model: str = "fake-model",
        default: Script | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """`api_key` set → requests without `Bearer <api_key>` get a 401 like OpenAI's.
        `basic_auth` set → requests without that user/password get a 401 like a proxy's
        (reach it with credentials in the URL: `credentialed_url`)."""
        super().__init__(ssl_context)
        self.api_key = api_key
        self.basic_auth = basic_auth
        self.model = model
        self.default: Script = default or Echo()
        self.requests: list[RecordedRequest] = []
        self.speeches: list[SpeechRequest] = []  # /audio/speech requests, in order
        self.report_usage = True
        """False: replies carry no `usage` (non-streamed) and streams no usage chunk."""
        self.cached_tokens = 0
        """Set: usage reports this many prompt tokens as cached (prompt_tokens_details)."""
        self.reported: list[tuple[str, dict[str, Any]]] = []
        """(reply id, usage) of every usage the server sent, in order."""
        self._queue: deque[Script] = deque()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ scripting

    def push(self, *scripts: Script) -> None:
        """Queue replies, consumed one per request in order."""
        with self._lock:
            self._queue.extend(scripts)

    @property
    def pending(self) -> int:
        """Scripted replies not yet consumed."""
        with self._lock:
            return len(self._queue)

    @property
    def credentialed_url(self) -> str:
        """`base_url` with the `basic_auth` user and password in it (http://u:p@host/v1)."""
        if self.basic_auth is None:
            raise AssertionError("credentialed_url needs FakeOpenAI(basic_auth=(user, pw))")
        scheme, rest = self.base_url.split("://", 1)
        user, password = self.basic_auth
        return f"{scheme}://{user}:{password}@{rest}"

    def forget(self) -> None:
        """Drop the recorded requests (a soak of thousands of turns keeps the fake flat)."""
        del self.requests[:]
        del self.reported[:]

    @property
    def last_request(self) -> RecordedRequest:
        if not self.requests:
            raise AssertionError("the fake OpenAI server has received no request")
        return self.requests[-1]

    # ------------------------------------------------------------------ serving

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/audio/speech", self._speech)

    # ------------------------------------------------------------------ audio (media tests)

    async def _transcribe(self, request: web.Request) -> web.StreamResponse:
        """`POST /audio/transcriptions` (multipart: file, model, response_format), answered
        with `{"text": transcript}`; each request is kept in `transcriptions`. Set
        `transcript` for the text, `transcribe_status` for an error status."""
        if not hasattr(self, "transcriptions"):
            self.transcriptions: list[Transcription] = []
        form = await request.post()
        upload = form.get("file")
        data = upload.file.read() if isinstance(upload, web.FileField) else b""
        self.transcriptions.append(Transcription(
            model=str(form.get("model", "")), filename=getattr(upload, "filename", ""),
            data=data, authorization=request.headers.get("Authorization", "")))
        status = getattr(self, "transcribe_status", 200)
        if status != 200:
            return _error_response(status, "transcription failed")
        return web.json_response({"text": getattr(self, "transcript", "a transcribed note")})

    speech_status = 200
    """`/audio/speech` answers this status (an OpenAI-shaped error body unless 200)."""
    speech_body: bytes | None = None
    """Set: `/audio/speech` answers these bytes instead of a valid OGG/Opus file."""
    speech_delay = 0.0
    """Seconds `/audio/speech` waits (recorded first) before it answers: a slow service."""

    async def _speech(self, request: web.Request) -> web.StreamResponse:
        """`POST /audio/speech` (JSON: model, input, voice, response_format), answered with a
        small valid OGG/Opus file, a second of silence per 20 characters spoken, made for each
        request; each request is kept in `speeches`."""
        from tests.fakes.media_samples import ogg_opus

        try:
            body = await request.json()
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        self.speeches.append(SpeechRequest(
            model=str(body.get("model", "")), input=str(body.get("input", "")),
            voice=str(body.get("voice", "")), response_format=str(body.get("response_format", "")),
            authorization=request.headers.get("Authorization", "")))
        if self.speech_delay:
            await asyncio.sleep(self.speech_delay)
        if self.speech_status != 200:
            return _error_response(self.speech_status, "speech failed")
        if self.speech_body is not None:
            return web.Response(body=self.speech_body, content_type="audio/ogg")
        audio = ogg_opus(max(1.0, len(str(body.get("input", ""))) / 20))
        return web.Response(body=audio, content_type="audio/ogg")

    def _next(self) -> Script:
        with self._lock:
            return self._queue.popleft() if self._queue else self.default

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        recorded = RecordedRequest(
            method=request.method,
            path=request.path,
            headers=dict(request.headers),
            body=body,
            raw=raw,
        )
        self.requests.append(recorded)
        if self.api_key is not None and request.headers.get("Authorization") != (
            f"Bearer {self.api_key}"
        ):
            return _error_response(401, "Incorrect API key provided.", "invalid_api_key")
        if self.basic_auth is not None:
            expected = "Basic " + base64.b64encode(":".join(self.basic_auth).encode()).decode()
            if request.headers.get("Authorization") != expected:
                return _error_response(401, "proxy authentication required")
        if not isinstance(body, dict):
            return _error_response(400, "We could not parse the JSON body of your request.")
        if self.no_vision is not None and has_image(body):
            status, refusal = NO_VISION[self.no_vision]
            return web.Response(status=status, text=json.dumps(refusal), content_type=_JSON)
        script = self._next()
        if isinstance(script, Route):
            script = script.choose(recorded)
        if script.delay:
            await asyncio.sleep(script.delay)
        stream_options = body.get("stream_options") or {}
        ctx = _Ctx(
            model=str(body.get("model") or self.model),
            include_usage=bool(stream_options.get("include_usage")),
            prompt_chars=len(json.dumps(body.get("messages", []))),
            report=self.report_usage, cached=self.cached_tokens, log=self.reported,
        )
        recorded.reply_id = ctx.id
        if isinstance(script, WhenOffered):
            script = script.calls if body.get("tools") else script.otherwise
        if isinstance(script, Echo):
            script = Reply(f"echo: {recorded.last_user_text}", chunk_size=script.chunk_size)
        if isinstance(script, UseTool):
            newest = recorded.messages[-1].get("role") if recorded.messages else None
            script = Reply(script.reply) if newest == "tool" else ToolCalls([script.call])
        if isinstance(script, SendAttachment):
            script = _send_attachment(script, recorded.messages)
        if isinstance(script, HTTPError):
            return _scripted_error(script)
        if isinstance(script, RawSSE):
            return await _raw(request, script)
        if isinstance(script, CutJSON):
            return await _cut_body(request, ctx.completion({"content": script.text}, "stop", 0))
        if isinstance(script, BadGzip):
            return web.Response(body=b"\x1f\x8b\x08\x00garbage, not a gzip stream",
                                headers={"Content-Type": script.content_type,
                                         "Content-Encoding": "gzip"})
        if isinstance(script, CutStream) and not recorded.stream:
            return await _cut_body(request, ctx.completion({"content": script.text}, "stop", 0))
        if isinstance(script, Malformed) and not recorded.stream:
            return web.Response(body=b'{"id": "chatcmpl-x", "choices": [{"mess', content_type=_JSON)
        if recorded.stream:
            return await self._stream(request, script, ctx)
        return _complete(script, ctx)

    async def _stream(self, request: web.Request, script: Script, ctx: _Ctx) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        await response.write(ctx.chunk({"role": "assistant", "content": ""}))
        if isinstance(script, Reply):
            for piece in _split(script.text, script.chunk_size):
                await response.write(ctx.chunk({"content": piece}))
                if script.chunk_delay:
                    await asyncio.sleep(script.chunk_delay)
            await response.write(ctx.chunk({}, script.finish_reason))
            completion_chars = len(script.text)
        elif isinstance(script, ToolCalls):
            for frame in _tool_call_frames(script, ctx):
                await response.write(frame)
            await response.write(ctx.chunk({}, "tool_calls"))
            completion_chars = sum(len(c.arguments_text) for c in script.calls)
        elif isinstance(script, CutStream):
            for piece in _split(script.text, script.chunk_size)[: script.after_chunks]:
                await response.write(ctx.chunk({"content": piece}))
            if script.abrupt:
                _abort(request)
                return response
            await response.write_eof()
            return response
        elif isinstance(script, Malformed):
            for _ in range(script.after_chunks):
                await response.write(ctx.chunk({"content": "ok "}))
            await response.write(b'data: {"id": "chatcmpl-x", "choices": [{"delta": {"cont\n\n')
            await response.write(_DONE)
            await response.write_eof()
            return response
        else:
            raise AssertionError(f"unhandled script {script!r}")
        if ctx.include_usage and ctx.report:
            await response.write(ctx.usage_chunk(completion_chars))
        await response.write(_DONE)
        await response.write_eof()
        return response


_JSON = "application/json"


def _send_attachment(script: SendAttachment, messages: list[dict[str, Any]]) -> Script:
    newest = messages[-1] if messages else {}
    if newest.get("role") != "tool":
        return ToolCalls([script.first])
    found = _ATTACHMENT_ID.search(_text(newest.get("content")))
    if found is None:
        return Reply(script.reply)
    return ToolCalls([Call("send_attachment", {"id": found.group(1)})])


def _error_response(status: int, message: str, code: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return web.Response(status=status, text=json.dumps(body), content_type=_JSON)


def _scripted_error(script: HTTPError) -> web.Response:
    headers = {"Retry-After": script.retry_after} if script.retry_after is not None else {}
    if script.raw_body is not None:
        return web.Response(status=script.status, text=script.raw_body, headers=headers)
    body = {"error": {"message": script.message, "type": "scripted", "code": None}}
    return web.Response(
        status=script.status, text=json.dumps(body), content_type=_JSON, headers=headers
    )


def _abort(request: web.Request) -> None:
    """Drop the socket mid-body so the client sees an incomplete chunked read."""
    transport = request.transport
    if transport is not None:
        transport.abort()


async def _cut_body(request: web.Request, body: bytes) -> web.StreamResponse:
    """Promise the whole body, send half, drop the socket."""
    response = web.StreamResponse(headers={"Content-Type": _JSON})
    response.content_length = len(body)
    await response.prepare(request)
    await response.write(body[: len(body) // 2])
    _abort(request)
    return response


async def _raw(request: web.Request, script: RawSSE) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": script.content_type})
    await response.prepare(request)
    body, offset = script.body, 0
    if script.event_delay:
        for event in body.split(b"\n\n"):
            await response.write(event + b"\n\n")
            await asyncio.sleep(script.event_delay)
        await response.write_eof()
        return response
    for size in script.pieces:
        await response.write(body[offset : offset + size])
        offset += size
    if offset < len(body):
        await response.write(body[offset:])
    await response.write_eof()
    return response


def _tool_call_frames(script: ToolCalls, ctx: _Ctx) -> Iterator[bytes]:
    """OpenAI's shape: a head fragment per call (index, id, name), then argument pieces."""
    if script.text:
        yield ctx.chunk({"content": script.text})
    heads: list[bytes] = []
    tails: list[list[bytes]] = []
    for index, call in enumerate(script.calls):
        head = {
            "index": index,
            "id": call.id or f"call_{uuid.uuid4().hex[:8]}",
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        heads.append(ctx.chunk({"tool_calls": [head]}))
        tails.append(
            [
                ctx.chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in _pieces(call.arguments_text, script.pieces)
            ]
        )
    if not script.interleave:
        for first, rest in zip(heads, tails, strict=True):
            yield first
            yield from rest
        return
    yield from heads
    for round_ in range(max((len(t) for t in tails), default=0)):
        for tail in tails:
            if round_ < len(tail):
                yield tail[round_]


def _complete(script: Script, ctx: _Ctx) -> web.Response:
    if isinstance(script, Reply):
        message: dict[str, Any] = {"role": "assistant", "content": script.text}
        body = ctx.completion(message, script.finish_reason, len(script.text))
    elif isinstance(script, ToolCalls):
        calls = [
            {
                "id": call.id or f"call_{uuid.uuid4().hex[:8]}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_text},
            }
            for call in script.calls
        ]
        message = {"role": "assistant", "content": script.text or None, "tool_calls": calls}
        body = ctx.completion(
            message, "tool_calls", sum(len(c.arguments_text) for c in script.calls)
        )
    else:
        raise AssertionError(f"unhandled script {script!r}")
    return web.Response(body=body, content_type=_JSON)
