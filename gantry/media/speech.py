"""Text → speech through the OpenAI-compatible `POST {base}/audio/speech` (OpenAI, LocalAI,
Kokoro-FastAPI and openedai-speech speak it): JSON in, OGG/Opus audio out, bounded in time and
bytes and checked (gantry.media.ogg) before anyone sends it."""

from __future__ import annotations

import logging
import ssl
from typing import Any

import anyio
import anyio.to_thread
import httpx
import msgspec

from gantry.media.ogg import opus_file
from gantry.media.transcribe import capped_body, client_args

log = logging.getLogger("gantry.media")

SPEECH_MAX_BYTES = 10_000_000  # far above what SPEECH_MAX_CHARS of speech take in opus
SPEECH_TIMEOUT = 120.0  # seconds for one reply's speech, the whole answer read
SPEECH_MAX_SECONDS = 1800.0  # audio longer than this is not what was asked for


class SpeechFailed(Exception):
    """No usable speech: `str()` says why in a line, without the key or the service's text."""


class Speech(msgspec.Struct, frozen=True):
    data: bytes  # OGG/Opus
    seconds: float
    chars: int  # characters spoken (what a speech service bills)


async def synthesize(http: httpx.AsyncClient, url: str, body: dict[str, Any],
                     max_bytes: int) -> bytes:
    """The one speech request: the audio's bytes, read to `max_bytes` at most."""
    async with http.stream("POST", url, json=body) as response:
        data = await capped_body(response, max_bytes)
    status = response.status_code
    if status >= 400:
        raise SpeechFailed(f"the speech service answered HTTP {status}")
    if data is None:
        raise SpeechFailed(f"the speech service sent more than {max_bytes:,} bytes")
    return data


class Speaker:
    """One speech endpoint: base URL, key, model and voice."""

    def __init__(self, base_url: str, api_key: str, model: str, voice: str, *,
                 max_chars: int = 1000, verify: ssl.SSLContext | bool = True,
                 timeout: float = SPEECH_TIMEOUT, max_bytes: int = SPEECH_MAX_BYTES,
                 transport: httpx.AsyncBaseTransport | None = None, meter: Any = None) -> None:
        """`meter` (gantry.model.ledger.Meter) set: each request is a usage-ledger row."""
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/audio/speech"
        self.meter = meter
        self.model, self.voice = model, voice
        self.max_chars, self.timeout, self.max_bytes = max_chars, timeout, max_bytes
        self._args = client_args(api_key, verify, timeout, transport)
        self._http: httpx.AsyncClient | None = None

    async def __call__(self, text: str) -> Speech:
        """`text` (already the spoken text, gantry.media.spoken) as OGG/Opus; SpeechFailed
        when the service is down, slow past the timeout, or sends something else."""
        if self._http is None:
            self._http = httpx.AsyncClient(**self._args)
        text = text[: self.max_chars]
        body = {"model": self.model, "input": text, "voice": self.voice,
                "response_format": "opus"}
        try:
            with anyio.fail_after(self.timeout):
                data = await synthesize(self._http, self.url, body, self.max_bytes)
        except (TimeoutError, httpx.HTTPError, SpeechFailed) as exc:
            self._record(len(text), ok=False)
            if isinstance(exc, TimeoutError):
                raise SpeechFailed(f"no speech within {self.timeout:.0f} s") from None
            if isinstance(exc, httpx.HTTPError):
                raise SpeechFailed(f"the speech service was not reachable: "
                                   f"{type(exc).__name__}") from None
            raise
        self._record(len(text), ok=True)
        found = await anyio.to_thread.run_sync(opus_file, data)
        if found is None:
            raise SpeechFailed(f"the speech service sent no OGG/Opus audio ({len(data)} bytes, "
                               f"starting {data[:4]!r})")
        if found.seconds > SPEECH_MAX_SECONDS:
            raise SpeechFailed(f"the speech is {found.seconds:.0f} s long, more than "
                               f"{SPEECH_MAX_SECONDS:.0f} s")
        return Speech(data, found.seconds, len(text))

    def _record(self, chars: int, *, ok: bool) -> None:
        """The request as one ledger row (source `speech`): billed by the characters sent,
        so its tokens are an estimate, marked as one."""
        if self.meter is not None:
            self.meter.record_call(self.model, self.base_url, prompt_chars=chars, ok=ok,
                                   source="speech")

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def speaker_for(cfg: Any, verify: Any = True, meter: Any = None) -> Speaker | None:
    """The process's Speaker when LLM_SPEECH_MODEL is set, at LLM_SPEECH_BASE_URL/_API_KEY or
    else the chat model's URL and key; None (no voice replies) otherwise."""
    if not cfg.llm_speech_model:
        return None
    return Speaker(cfg.llm_speech_base_url or cfg.llm_base_url,
                   cfg.llm_speech_api_key or cfg.llm_api_key, cfg.llm_speech_model,
                   cfg.llm_speech_voice, max_chars=cfg.speech_max_chars, verify=verify,
                   meter=meter)
