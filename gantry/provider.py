"""The one model client: OpenAI-compatible chat completions over httpx.

Gemini, xAI, Ollama, llama.cpp and vLLM all speak this wire, so there is no provider
registry — only a base URL, a key and a model name. Transient failures (connect errors,
timeouts, 429, 5xx) are retried with backoff within a deadline; everything else surfaces
as one typed ProviderError that never contains the API key.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio
import httpx
import msgspec

from gantry import __version__
from gantry.wire.openai import (
    ChatRequest,
    Completion,
    ErrorBody,
    Message,
    SSEParser,
    StreamAssembler,
    StreamOptions,
    ToolCall,
    ToolDef,
    Usage,
    completion_from_response,
    decode_chunk,
    decode_response,
    encode_request,
)

__all__ = [
    "Completion",
    "Done",
    "Provider",
    "ProviderError",
    "RetryPolicy",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "Usage",
]

log = logging.getLogger("gantry.provider")

T = TypeVar("T")

_MESSAGE_LIMIT = 500
_REDACTED = "[redacted]"

_HINTS = {
    400: "the provider rejected the request; the message above says which field",
    401: "check LLM_API_KEY",
    403: "check LLM_API_KEY and that it may use this model",
    404: "check LLM_BASE_URL (it must point at the OpenAI-compatible root, e.g. .../v1) "
    "and LLM_MODEL",
    429: "rate limited and out of retries; wait, or raise the provider quota",
}


class ProviderError(Exception):
    """The model call failed. `status` is the HTTP status (None for network/protocol errors).

    `message` is the provider's own message (or ours), bounded to ~500 chars and scrubbed
    of the API key. `retryable` says whether the failure was transient.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        hint: str = "",
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.message = _bound(message)
        self.hint = hint
        self.retryable = retryable
        self.retry_after = retry_after
        super().__init__(self.message)

    def __str__(self) -> str:
        head = f"provider returned HTTP {self.status}: " if self.status else "provider error: "
        tail = f" ({self.hint})" if self.hint else ""
        return head + self.message + tail


class RetryPolicy(msgspec.Struct, frozen=True):
    """Backoff for transient failures: attempt n waits base*2^(n-1) (≤ max) plus up to 25%.

    `deadline` bounds the whole call in seconds — every attempt and every wait between
    them: an attempt still running when it passes is cut, no retry is scheduled past it,
    and a Retry-After longer than what is left ends the call at once. For a stream it bounds
    everything up to the first body byte (the last point where a retry is safe); after that
    the read timeout governs each chunk.
    """

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0
    deadline: float = 120.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be at least 1")
        if min(self.base_delay, self.max_delay, self.deadline) < 0:
            raise ValueError("RetryPolicy delays and deadline must not be negative")

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Delay before retry number `attempt` (1-based), jitter included."""
        delay = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return delay + rng.uniform(0.0, delay * 0.25)


class TextDelta(msgspec.Struct, frozen=True):
    """A piece of reply text, yielded as soon as it arrives."""

    text: str


class Done(msgspec.Struct, frozen=True):
    """The end of a stream: the assembled turn (text and tool calls)."""

    completion: Completion


StreamEvent = TextDelta | Done


def _bound(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 1] + "…"


def _error_text(body: Any) -> str | None:
    """The message of any error shape we have seen: OpenAI, Gemini (a list), Ollama, vLLM."""
    if isinstance(body, list) and body:
        return _error_text(body[0])
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, str):
            return err
        if isinstance(err, dict | list):
            return _error_text(err)
        for key in ("message", "detail"):
            value = body.get(key)
            if isinstance(value, str):
                return value
    return None


def _body_message(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    try:
        found = _error_text(json.loads(text))
    except ValueError:
        found = None
    return found if found else (text.strip() or "(empty body)")


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait per `retry-after-ms` (OpenAI) or `Retry-After` (seconds or HTTP-date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


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
    ) -> None:
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
        response, chunks, first = await self._with_retries(lambda: self._open_stream(body))
        try:
            if first is None:  # the server ignored stream=true and sent one JSON reply
                try:
                    raw = await response.aread()
                except httpx.HTTPError as exc:
                    raise self._transport_error(exc, during="reading the reply from") from None
                completion = self._decode_completion(raw)
                if completion.text:
                    yield TextDelta(completion.text)
            else:
                assembler = StreamAssembler()
                async for text in self._read_stream(chunks, first, assembler):
                    yield TextDelta(text)
                completion = assembler.result()
        finally:
            with anyio.CancelScope(shield=True):  # close the socket even when cancelled
                await response.aclose()
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
        )

    async def _status_error(self, response: httpx.Response) -> ProviderError:
        status = response.status_code
        try:
            raw = await response.aread()
        except httpx.HTTPError:
            raw = b""
        from gantry.vision import rejects_images

        hint = _HINTS.get(status, "the provider failed; try again later" if status >= 500 else "")
        message = _body_message(raw)
        return self._error(
            message,
            status=status,
            hint=hint,
            # llama.cpp refuses images with a 500: retrying the same request cannot help
            retryable=(status == 429 or status >= 500) and not rejects_images(message),
            retry_after=_retry_after(response.headers),
        )

    def _body_error(self, error: ErrorBody | str) -> ProviderError:
        text = error if isinstance(error, str) else (error.message or str(error.code or "?"))
        return self._error(f"the provider reported an error: {text}")

    def _decode_completion(self, raw: bytes) -> Completion:
        try:
            response = decode_response(raw)
        except msgspec.DecodeError as exc:
            snippet = raw[:200].decode("utf-8", errors="replace")
            raise self._error(f"malformed JSON reply ({exc}): {snippet}") from None
        if response.error is not None:
            raise self._body_error(response.error)
        try:
            return completion_from_response(response)
        except ValueError as exc:
            raise self._error(str(exc)) from None

    async def _complete_once(self, body: bytes) -> Completion:
        try:
            response = await self._client.post(
                self._url, content=body, headers={"Accept": "application/json"}
            )
        except httpx.HTTPError as exc:  # transport, protocol and body-decoding errors alike
            raise self._transport_error(exc, during="POST to") from None
        if not response.is_success:
            raise await self._status_error(response)
        return self._decode_completion(response.content)

    async def _open_stream(
        self, body: bytes
    ) -> tuple[httpx.Response, AsyncIterator[bytes], bytes | None]:
        """Send and read up to the first body chunk — the last point where a retry is safe."""
        request = self._client.build_request(
            "POST", self._url, content=body, headers={"Accept": "text/event-stream"}
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, during="POST to") from None
        try:
            if not response.is_success:
                raise await self._status_error(response)
            content_type = response.headers.get("content-type", "")
            chunks = response.aiter_bytes()
            if content_type.startswith("application/json"):
                return response, chunks, None
            try:
                first = await anext(chunks)
            except StopAsyncIteration:
                raise self._error(
                    "the provider sent an empty stream",
                    status=response.status_code,
                    retryable=True,
                ) from None
            except httpx.HTTPError as exc:
                raise self._transport_error(exc, during="reading the stream from") from None
        except BaseException:
            with anyio.CancelScope(shield=True):
                await response.aclose()
            raise
        return response, chunks, first

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
                            f"malformed stream chunk ({exc}): {payload[:200]}"
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
            ) from None
        if not assembler.finished:
            raise self._error(
                f"stream cut: the stream ended without [DONE] or a finish_reason after "
                f"{assembler.text_length} chars; the partial reply was discarded",
                hint="the provider or a proxy dropped the stream; try again",
            )

    async def _with_retries(self, attempt_once: Callable[[], Awaitable[T]]) -> T:
        policy = self.retry
        start = self._clock()
        attempt = 0
        while True:
            attempt += 1
            remaining = policy.deadline - (self._clock() - start)
            try:
                with anyio.move_on_after(max(0.0, remaining)) as bound:
                    return await attempt_once()
            except ProviderError as err:
                if not err.retryable:
                    raise
                if attempt >= policy.max_attempts:
                    raise self._gave_up(err, attempt, start, "attempts exhausted") from None
                remaining = policy.deadline - (self._clock() - start)
                if err.retry_after is not None:
                    delay = err.retry_after
                else:
                    delay = policy.backoff(attempt, self._rng)
                if delay > remaining:
                    raise self._gave_up(err, attempt, start, "deadline reached") from None
                log.warning(
                    "provider call failed; retrying",
                    extra={
                        "attempt": attempt,
                        "max_attempts": policy.max_attempts,
                        "status": err.status,
                        "delay": round(delay, 3),
                        "reason": err.message,
                    },
                )
                await self._sleep(delay)
                continue
            if bound.cancelled_caught:  # only the deadline gets here: the attempt was cut
                cut = self._error(
                    f"no answer within the {policy.deadline:g}s deadline",
                    hint="the provider is slow or not answering; try again later",
                    retryable=True,
                )
                raise self._gave_up(cut, attempt, start, "deadline reached")

    def _gave_up(self, err: ProviderError, attempts: int, start: float, why: str) -> ProviderError:
        elapsed = self._clock() - start
        return ProviderError(
            f"gave up after {attempts} attempt(s) in {elapsed:.1f}s ({why}): {err.message}",
            status=err.status,
            hint=err.hint,
            retryable=True,
            retry_after=err.retry_after,
        )

    def _log_done(self, completion: Completion, started: float, *, stream: bool) -> None:
        usage = completion.usage
        log.debug(
            "provider call done",
            extra={
                "model": self.model,
                "stream": stream,
                "duration_ms": round((self._clock() - started) * 1000),
                "finish_reason": completion.finish_reason,
                "tool_calls": len(completion.tool_calls),
                "prompt_tokens": usage.prompt_tokens if usage else None,
                "completion_tokens": usage.completion_tokens if usage else None,
            },
        )
