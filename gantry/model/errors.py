"""Why a model call failed: ProviderError, and the message and Retry-After read from a reply."""

from __future__ import annotations

import email.utils
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

__all__ = ["HINTS", "ProviderError", "body_message", "retry_after_seconds"]

_MESSAGE_LIMIT = 500

HINTS = {
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
    of the API key. `retryable` says whether the failure was transient; `endpoint_fault`
    that the endpoint failed (unreachable, a cut or broken reply), not the request, so
    another endpoint may answer it (gantry.model.fallback).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        hint: str = "",
        retryable: bool = False,
        retry_after: float | None = None,
        endpoint_fault: bool = False,
    ) -> None:
        self.status = status
        self.endpoint_fault = endpoint_fault
        self.message = _bound(message)
        self.hint = hint
        self.retryable = retryable
        self.retry_after = retry_after
        super().__init__(self.message)

    def __str__(self) -> str:
        head = f"provider returned HTTP {self.status}: " if self.status else "provider error: "
        tail = f" ({self.hint})" if self.hint else ""
        return head + self.message + tail


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


def body_message(raw: bytes) -> str:
    """The provider's message in an error reply's body, or the body itself as text."""
    text = raw.decode("utf-8", errors="replace")
    try:
        found = _error_text(json.loads(text))
    except ValueError:
        found = None
    return found if found else (text.strip() or "(empty body)")


def retry_after_seconds(headers: httpx.Headers) -> float | None:
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
