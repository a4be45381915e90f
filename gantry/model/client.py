"""The one model client: OpenAI-compatible chat completions over httpx.

Gemini, xAI, Ollama, llama.cpp and vLLM all speak this wire, so there is no provider
registry — only a base URL, a key and a model name. Transient failures (connect errors,
timeouts, 429, 5xx) are retried with backoff within a deadline (gantry.model.retry);
everything else surfaces as one typed ProviderError that never contains the API key.
"""

from __future__ import annotations

import logging
import random
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
import httpx
import msgspec

from gantry import __version__
from gantry.model.assemble import Completion, StreamAssembler, completion_from_response
from gantry.model.errors import HINTS, ProviderError, body_message, retry_after_seconds
from gantry.model.ledger import Meter
from gantry.model.messages import Message, ToolDef
from gantry.model.retry import RetryPolicy, with_retries
from gantry.model.sse import SSEParser
from gantry.model.wire import (
    ChatRequest,
    ErrorBody,
    StreamOptions,
    decode_chunk,
    decode_response,
    encode_request,
)

__all__ = ["Done", "Provider", "StreamEvent", "TextDelta", "url_without_credentials"]

log = logging.getLogger("gantry.provider")

T = TypeVar("T")

_REDACTED = "[redacted]"


class TextDelta(msgspec.Struct, frozen=True):
    """A piece of reply text, yielded as soon as it arrives."""

    text: str


class Done(msgspec.Struct, frozen=True):
    """The end of a stream: the assembled turn (text and tool calls)."""

    completion: Completion


StreamEvent = TextDelta | Done


def _retryable_transport(exc: httpx.HTTPError) -> bool:
    return isinstance(exc, httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError)


def url_without_credentials(url: httpx.URL) -> str:
    """The URL as gantry shows it: any `user:password@` part removed."""
    return str(url.copy_with(username=None, password=None)) if url.userinfo else str(url)


class Provider:
    """An OpenAI-compatible chat client bound to one base URL, key and model."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        *,
        timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        verify: ssl.SSLContext | bool = True,
        sleep: Callable[[float], Awaitable[Any]] = anyio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        meter: Meter | None = None,
    ) -> None:
        """`meter` set: every HTTP attempt is a row of the usage ledger (gantry.model.ledger);
        `gantry check`'s probe has none and is not counted."""
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(
                "LLM_BASE_URL must be an http(s) URL like https://host/v1, got "
                f"{url_without_credentials(url)!r}"
            )
        if url.userinfo:  # it would replace the Bearer key: config.load refuses it at boot
            from gantry.config import URL_LOGIN_PROBLEM

            raise ValueError(URL_LOGIN_PROBLEM)
        self.base_url = str(url).rstrip("/")
        self.shown_url = self.base_url
        self._secrets = [api_key] if api_key else []
        self.model = model
        self.retry = retry or RetryPolicy()
        self.meter = meter
        self._url = self.base_url + "/chat/completions"
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        headers = {"User-Agent": f"gantry/{__version__}", "Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client_args: dict[str, Any] = {
            "headers": headers,
            "timeout": httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            "transport": transport,
            "verify": verify,
        }
        self._http: httpx.AsyncClient | None = None

    @property
    def _client(self) -> httpx.AsyncClient:
        """The connection pool, made at the first call: making it imports httpcore (~40 ms),
        which no Telegram start needs before its first poll."""
        if self._http is None:
            self._http = httpx.AsyncClient(**self._client_args)
        return self._http

    async def __aenter__(self) -> Provider:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool, if a call made one."""
        if self._http is not None:
            await self._http.aclose()

    # ------------------------------------------------------------------ public calls

    async def complete(
        self,
        messages: list[Message],
        tools: list[ToolDef] | None = None,
        *,
        max_tokens: int | None = None,
    ) -> Completion:
        """One non-streamed turn."""
        body = self._body(messages, tools, max_tokens=max_tokens, stream=False)
        started = self._clock()
        completion = await self._with_retries(lambda: self._complete_once(body))
        self._log_done(completion, started, stream=False)
        return completion

    async def stream(
        self,
        messages: list[Message],
        tools: list[ToolDef] | None = None,
        *,
        max_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """A streamed turn: TextDelta as text arrives, then exactly one Done.

        Retries happen only before the first body byte; after that a failure is a
        ProviderError (a cut stream never passes for a finished reply).
        """
        body = self._body(messages, tools, max_tokens=max_tokens, stream=True)
        started = self._clock()
        response, chunks, first, row = await self._with_retries(lambda: self._open_stream(body))
        assembler = StreamAssembler()
        completion: Completion | None = None
        try:
            if first is None:  # the server ignored stream=true and sent one JSON reply
                try:
                    raw = await response.aread()
                except httpx.HTTPError as exc:
                    raise self._transport_error(exc, during="reading the reply from") from None
                completion = self._charged(self._decode_completion(raw), row, len(body))
                if completion.text:
                    yield TextDelta(completion.text)
            else:
                async for text in self._read_stream(chunks, first, assembler):
                    yield TextDelta(text)
                completion = self._charged(assembler.result(), row, len(body))
        finally:
            if completion is None:  # failed, cut or abandoned: the attempt is closed now
                self._failed(row, assembler.text_length)
            with anyio.CancelScope(shield=True):  # close the socket even when cancelled
                await response.aclose()
        assert completion is not None
        self._log_done(completion, started, stream=True)
        yield Done(completion)

    # ------------------------------------------------------------------ internals

    def _body(
        self,
        messages: list[Message],
        tools: list[ToolDef] | None,
        *,
        max_tokens: int | None,
        stream: bool,
    ) -> bytes:
        request = ChatRequest(
            model=self.model,
            messages=messages,
            tools=tools or None,  # an empty list is a 400 on OpenAI
            max_tokens=max_tokens,
            stream=True if stream else None,
            stream_options=StreamOptions() if stream else None,
        )
        return encode_request(request)

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, _REDACTED)
        return text

    def _error(self, message: str, **kwargs: Any) -> ProviderError:
        return ProviderError(self._scrub(message), **kwargs)

    def _transport_error(self, exc: httpx.HTTPError, *, during: str) -> ProviderError:
        from gantry.tls import handshake_hint

        detail = str(exc) or "no detail"
        tls = handshake_hint(detail)  # a TLS mismatch is configuration: retrying cannot help
        return self._error(
            f"{during} {self.shown_url} failed: {type(exc).__name__}: {detail}",
            hint=tls or "check LLM_BASE_URL and that the provider is reachable",
            retryable=_retryable_transport(exc) and not tls,
            endpoint_fault=True,
        )

    async def _status_error(self, response: httpx.Response) -> ProviderError:
        status = response.status_code
        try:
            raw = await response.aread()
        except httpx.HTTPError:
            raw = b""
        from gantry.model.vision import rejects_images

        hint = HINTS.get(status, "the provider failed; try again later" if status >= 500 else "")
        message = body_message(raw)
        return self._error(
            message,
            status=status,
            hint=hint,
            # llama.cpp refuses images with a 500: retrying the same request cannot help
            retryable=(status == 429 or status >= 500) and not rejects_images(message),
            retry_after=retry_after_seconds(response.headers),
        )

    def _body_error(self, error: ErrorBody | str) -> ProviderError:
        text = error if isinstance(error, str) else (error.message or str(error.code or "?"))
        return self._error(f"the provider reported an error: {text}")

    def _decode_completion(self, raw: bytes) -> Completion:
        try:
            response = decode_response(raw)
        except msgspec.DecodeError as exc:
            snippet = raw[:200].decode("utf-8", errors="replace")
            raise self._error(f"malformed JSON reply ({exc}): {snippet}",
                              endpoint_fault=True) from None
        if response.error is not None:
            raise self._body_error(response.error)
        try:
            return completion_from_response(response)
        except ValueError as exc:
            raise self._error(str(exc)) from None

    def _opened(self, body: bytes) -> int | None:
        """The ledger row of an attempt about to be sent (committed before it goes)."""
        return self.meter.open(self.model, self.shown_url, len(body)) if self.meter else None

    def _failed(self, row: int | None, text_chars: int = 0) -> None:
        if self.meter is not None and row is not None:
            self.meter.fail(row, text_chars)

    def _charged(self, completion: Completion, row: int | None, body_chars: int) -> Completion:
        """The reply marked with who answered and, metered, the charge that closes its row."""
        completion.model = self.model
        completion.endpoint = self.shown_url
        if self.meter is not None and row is not None:
            received = len(completion.text) + len(completion.reasoning) + sum(
                len(c.function.name) + len(c.function.arguments) for c in completion.tool_calls)
            completion.charge = self.meter.charge(row, self.model, completion.usage, body_chars,
                                                  received, completion.reply_id)
        return completion

    async def _complete_once(self, body: bytes) -> Completion:
        row = self._opened(body)
        try:
            try:
                response = await self._client.post(
                    self._url, content=body, headers={"Accept": "application/json"}
                )
            except httpx.HTTPError as exc:  # transport, protocol and body-decoding errors alike
                raise self._transport_error(exc, during="POST to") from None
            if not response.is_success:
                raise await self._status_error(response)
            completion = self._decode_completion(response.content)
        except BaseException:
            self._failed(row)
            raise
        return self._charged(completion, row, len(body))

    async def _open_stream(
        self, body: bytes
    ) -> tuple[httpx.Response, AsyncIterator[bytes], bytes | None, int | None]:
        """Send and read up to the first body chunk — the last point where a retry is safe."""
        request = self._client.build_request(
            "POST", self._url, content=body, headers={"Accept": "text/event-stream"}
        )
        row = self._opened(body)
        try:
            response = await self._client.send(request, stream=True)
        except BaseException as exc:
            self._failed(row)
            if isinstance(exc, httpx.HTTPError):
                raise self._transport_error(exc, during="POST to") from None
            raise
        try:
            if not response.is_success:
                raise await self._status_error(response)
            content_type = response.headers.get("content-type", "")
            chunks = response.aiter_bytes()
            if content_type.startswith("application/json"):
                return response, chunks, None, row
            try:
                first = await anext(chunks)
            except StopAsyncIteration:
                raise self._error(
                    "the provider sent an empty stream",
                    status=response.status_code,
                    retryable=True,
                    endpoint_fault=True,
                ) from None
            except httpx.HTTPError as exc:
                raise self._transport_error(exc, during="reading the stream from") from None
        except BaseException:
            self._failed(row)
            with anyio.CancelScope(shield=True):
                await response.aclose()
            raise
        return response, chunks, first, row

    async def _read_stream(
        self, chunks: AsyncIterator[bytes], first: bytes, assembler: StreamAssembler
    ) -> AsyncIterator[str]:
        parser = SSEParser()
        data: bytes | None = first
        try:
            while True:
                eof = data is None
                events = parser.close() if data is None else parser.feed(data)
                for event in events:
                    payload = event.data.strip()
                    if event.event == "error":
                        raise self._error(f"the provider reported an error: {payload}")
                    if not payload:
                        continue
                    if payload == "[DONE]":
                        return
                    try:
                        chunk = decode_chunk(payload)
                    except msgspec.DecodeError as exc:
                        raise self._error(
                            f"malformed stream chunk ({exc}): {payload[:200]}",
                            endpoint_fault=True,
                        ) from None
                    if chunk.error is not None:
                        raise self._body_error(chunk.error)
                    text = assembler.add(chunk)
                    if text:
                        yield text
                if eof:
                    break
                data = await anext(chunks, None)
        except httpx.HTTPError as exc:
            if assembler.finished:
                log.warning(
                    "stream ended with a transport error after finish_reason; reply kept",
                    extra={"reason": self._scrub(f"{type(exc).__name__}: {exc}")},
                )
                return
            raise self._error(
                f"stream cut: the connection failed mid-reply after "
                f"{assembler.text_length} chars ({type(exc).__name__}: {exc}); "
                "the partial reply was discarded",
                hint="the provider or a proxy dropped the stream; try again",
                endpoint_fault=True,
            ) from None
        if not assembler.finished:
            raise self._error(
                f"stream cut: the stream ended without [DONE] or a finish_reason after "
                f"{assembler.text_length} chars; the partial reply was discarded",
                hint="the provider or a proxy dropped the stream; try again",
                endpoint_fault=True,
            )

    async def _with_retries(self, attempt_once: Callable[[], Awaitable[T]]) -> T:
        return await with_retries(
            attempt_once, self.retry, clock=self._clock, sleep=self._sleep, rng=self._rng,
            error=self._error,
        )

    def _log_done(self, completion: Completion, started: float, *, stream: bool) -> None:
        usage = completion.usage
        log.debug(
            "provider call done",
            extra={
                "model": self.model,
                "endpoint": self.shown_url,
                "stream": stream,
                "duration_ms": round((self._clock() - started) * 1000),
                "finish_reason": completion.finish_reason,
                "tool_calls": len(completion.tool_calls),
                "prompt_tokens": usage.prompt_tokens if usage else None,
                "completion_tokens": usage.completion_tokens if usage else None,
            },
        )
