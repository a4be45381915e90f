"""Voice notes and audio → text through the OpenAI-compatible `POST {base}/audio/transcriptions`
(OpenAI, Groq, LocalAI, vLLM and whisper.cpp's server speak it): multipart, the file streamed
from disk, `response_format=json` → `{"text": ...}`."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Any

import httpx

from gantry import __version__
from gantry.media.files import MediaError

log = logging.getLogger("gantry.media")

UNSET_REPLY = (
    "I got a voice message, but voice transcription is not set up, so I could not listen to "
    "it. To have voice notes and audio transcribed, set LLM_TRANSCRIBE_MODEL (for example "
    "whisper-1) — and LLM_TRANSCRIBE_BASE_URL / LLM_TRANSCRIBE_API_KEY if the transcription "
    "service is not your chat model's."
)


class TranscribeUnavailable(MediaError):
    """The service is down or unreachable (network, 5xx, 429). Like a failed model call, the
    user is told at once (the message says how, without the key or the service's text) and
    may send the message again; it is not retried behind their back."""

    def __init__(self, how: str) -> None:
        super().__init__(f"Sorry — the voice message could not be transcribed ({how}). "
                         "Please send it again in a moment.")


class Transcriber:
    """One transcription endpoint: base URL, key and model."""

    def __init__(self, base_url: str, api_key: str, model: str, *,
                 verify: ssl.SSLContext | bool = True, timeout: float = 300.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = base_url.rstrip("/") + "/audio/transcriptions"
        self.model = model
        headers = {"User-Agent": f"gantry/{__version__}"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._args: dict[str, Any] = {
            "headers": headers, "verify": verify, "transport": transport,
            "timeout": httpx.Timeout(timeout, connect=min(timeout, 10.0)),
        }
        self._http: httpx.AsyncClient | None = None

    async def __call__(self, path: Path, name: str, mime: str) -> str:
        """The transcript; MediaError (TranscribeUnavailable when the service is down) with
        the reply for the user otherwise."""
        if self._http is None:
            self._http = httpx.AsyncClient(**self._args)
        try:
            with open(path, "rb") as audio:
                response = await self._http.post(
                    self.url, data={"model": self.model, "response_format": "json"},
                    files={"file": (name, audio, mime or "application/octet-stream")})
        except httpx.HTTPError as exc:
            log.warning("transcription request failed", extra={"error": type(exc).__name__})
            raise TranscribeUnavailable(f"the service was not reachable: {type(exc).__name__}"
                                        ) from None
        if response.status_code >= 500 or response.status_code == 429:
            log.warning("transcription failed", extra={"status": response.status_code})
            raise TranscribeUnavailable(f"the service answered HTTP {response.status_code}")
        if response.status_code >= 400:
            log.warning("transcription refused", extra={"status": response.status_code,
                                                        "error": response.text[:300]})
            raise MediaError(f"The voice message could not be transcribed (the transcription "
                             f"service answered HTTP {response.status_code}).")
        try:
            body = response.json()
            text = body["text"] if isinstance(body, dict) else None
        except (ValueError, KeyError):
            text = None
        if not isinstance(text, str):
            raise TranscribeUnavailable("the service sent no text")
        return text.strip()

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
