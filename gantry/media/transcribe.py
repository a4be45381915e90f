"""Voice notes and audio → text through the OpenAI-compatible `POST {base}/audio/transcriptions`
(OpenAI, Groq, LocalAI, vLLM and whisper.cpp's server speak it): multipart, the file streamed
from disk, `response_format=json` → `{"text": ...}`."""

from __future__ import annotations

import json
import logging
import ssl
from pathlib import Path
from typing import Any

import httpx

from gantry import __version__
from gantry.media.files import MediaError
from gantry.media.kinds import sound_noun

log = logging.getLogger("gantry.media")

# The response body read, at most: a transcript's JSON, far above any honest transcript of a
# file within MEDIA_MAX_BYTES (the text is then cut to the document cap, gantry.media.build).
RESPONSE_MAX_BYTES = 8_000_000


def unset_reply(kind: str = "voice") -> str:
    """The one reply to a voice note or audio file when no transcription is configured."""
    return (f"I got {sound_noun(kind, article=True)}, but transcription is not set up, so I "
            "could not listen to it. To have voice notes and audio files transcribed, set "
            "LLM_TRANSCRIBE_MODEL (for example whisper-1) — and LLM_TRANSCRIBE_BASE_URL / "
            "LLM_TRANSCRIBE_API_KEY if the transcription service is not your chat model's.")


UNSET_REPLY = unset_reply("voice")


class TranscribeUnavailable(MediaError):
    """The service is down or unreachable (network, 5xx, 429). Like a failed model call, the
    user is told at once (the message says how, without the key or the service's text) and
    may send the message again; it is not retried behind their back."""

    def __init__(self, how: str, kind: str = "voice") -> None:
        super().__init__(f"Sorry — the {sound_noun(kind)} could not be transcribed ({how}). "
                         "Please send it again in a moment.")


async def capped_body(response: httpx.Response, limit: int) -> bytes | None:
    """The (decoded) body, or None once it passes `limit` bytes: the rest is never read."""
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > limit:
            return None
    return bytes(data)


def client_args(api_key: str, verify: ssl.SSLContext | bool, timeout: float,
                transport: httpx.AsyncBaseTransport | None) -> dict[str, Any]:
    """httpx.AsyncClient's arguments for an audio endpoint (transcription, speech): gantry's
    User-Agent, the key as a bearer token, the timeout with a short connect."""
    headers = {"User-Agent": f"gantry/{__version__}"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return {"headers": headers, "verify": verify, "transport": transport,
            "timeout": httpx.Timeout(timeout, connect=min(timeout, 10.0))}


class Transcriber:
    """One transcription endpoint: base URL, key and model."""

    def __init__(self, base_url: str, api_key: str, model: str, *,
                 verify: ssl.SSLContext | bool = True, timeout: float = 300.0,
                 transport: httpx.AsyncBaseTransport | None = None, meter: Any = None) -> None:
        """`meter` (gantry.model.ledger.Meter) set: each request is a usage-ledger row."""
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/audio/transcriptions"
        self.model = model
        self.meter = meter
        self._args = client_args(api_key, verify, timeout, transport)
        self._http: httpx.AsyncClient | None = None

    async def __call__(self, path: Path, name: str, mime: str, kind: str = "voice") -> str:
        """The transcript; MediaError (TranscribeUnavailable when the service is down) with
        the reply for the user otherwise. The body is read to RESPONSE_MAX_BYTES at most."""
        if self._http is None:
            self._http = httpx.AsyncClient(**self._args)
        try:
            with open(path, "rb") as audio:
                async with self._http.stream(
                        "POST", self.url, data={"model": self.model, "response_format": "json"},
                        files={"file": (name, audio, mime or "application/octet-stream")},
                ) as response:
                    body = await capped_body(response, RESPONSE_MAX_BYTES)
        except httpx.HTTPError as exc:
            log.warning("transcription request failed", extra={"error": type(exc).__name__})
            self._record(None, ok=False)
            raise TranscribeUnavailable(f"the service was not reachable: {type(exc).__name__}",
                                        kind) from None
        status = response.status_code
        self._record(body, ok=status < 400)
        if status >= 500 or status == 429:
            log.warning("transcription failed", extra={"status": status})
            raise TranscribeUnavailable(f"the service answered HTTP {status}", kind)
        if status >= 400:
            log.warning("transcription refused", extra={
                "status": status, "error": (body or b"")[:300].decode("utf-8", "replace")})
            raise MediaError(f"The {sound_noun(kind)} could not be transcribed (the "
                             f"transcription service answered HTTP {status}).")
        if body is None:
            log.warning("transcription answer too long", extra={"max": RESPONSE_MAX_BYTES})
            raise MediaError(f"The {sound_noun(kind)} could not be transcribed (the "
                             f"transcription service sent more than {RESPONSE_MAX_BYTES:,} "
                             "bytes).")
        try:
            parsed = json.loads(body)
            text = parsed["text"] if isinstance(parsed, dict) else None
        except (ValueError, KeyError):
            text = None
        if not isinstance(text, str):
            raise TranscribeUnavailable("the service sent no text", kind)
        return text.strip()

    def _record(self, body: bytes | None, *, ok: bool) -> None:
        """The request as a usage-ledger row: the tokens the service reported, if any, else
        an estimate of the transcript (marked as one)."""
        if self.meter is None:
            return
        usage, text = transcript_usage(body) if ok else (None, "")
        self.meter.record_call(self.model, self.base_url, usage=usage,
                               completion_chars=len(text), ok=ok, source="transcription")

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def transcript_usage(body: bytes | None) -> tuple[Any, str]:
    """The `usage` a transcription reply reported (OpenAI's `input_tokens`/`output_tokens`),
    as a chat Usage or None, and its text ("" when unreadable)."""
    from gantry.model.wire import Usage

    try:
        parsed = json.loads(body or b"")
    except ValueError:
        return None, ""
    if not isinstance(parsed, dict):
        return None, ""
    raw = parsed.get("text")
    text = raw if isinstance(raw, str) else ""
    usage = parsed.get("usage")
    if isinstance(usage, dict):
        prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
        if isinstance(prompt, int) and isinstance(completion, int):
            return Usage(prompt_tokens=prompt, completion_tokens=completion), text
    return None, text
