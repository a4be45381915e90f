"""gantry.media's pieces: safe names, the capped streamed copy, text and PDF conversion,
the transcription client against the fake OpenAI server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gantry.media.build import MediaReader
from gantry.media.convert import fenced, read_text
from gantry.media.files import NAME_MAX, MediaError, TooLarge, place, safe_name, save_stream
from gantry.media.kinds import Media
from gantry.media.transcribe import Transcriber, TranscribeUnavailable
from tests.fakes.media_samples import jpeg, pdf
from tests.fakes.openai import FakeOpenAI


@given(st.text(max_size=300))
def test_safe_names_stay_in_their_folder(name: str) -> None:
    safe = safe_name(name)
    assert safe and "/" not in safe and "\\" not in safe and not safe.startswith(".")
    assert len(safe) <= NAME_MAX and safe not in (".", "..")


def test_safe_name_keeps_the_extension_and_place_stays_inside(tmp_path: Path) -> None:
    assert safe_name("../../etc/passwd") == "passwd"
    assert safe_name("..") == "file" and safe_name("") == "file"
    long = safe_name("a" * 300 + ".pdf")
    assert long.endswith(".pdf") and len(long) <= NAME_MAX
    path = place(tmp_path, "../k", "../../x.txt")
    assert path.parent == tmp_path / "media" and path.name == "k-x.txt"


async def chunks(n: int, size: int) -> AsyncIterator[bytes]:
    for _ in range(n):
        yield b"a" * size


@pytest.mark.anyio
async def test_save_stream_never_writes_past_the_cap(tmp_path: Path) -> None:
    dest = tmp_path / "f"
    assert await save_stream(chunks(4, 250), dest, 1_000) == 1_000
    assert dest.read_bytes() == b"a" * 1_000
    with pytest.raises(TooLarge):
        await save_stream(chunks(5, 250), tmp_path / "g", 1_000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # no .part, no g


def test_read_text_is_capped_and_refuses_binary(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_text("é" * 100, encoding="utf-8")
    assert read_text(f, max_chars=10) == ("é" * 10, True)
    assert read_text(f) == ("é" * 100, False)
    f.write_bytes(b"ok\x00binary")
    assert read_text(f) is None
    f.write_bytes(b"\xff\xfe not utf-8")
    assert read_text(f) is None


def test_a_fence_outlasts_the_backticks_inside() -> None:
    assert fenced("a.md", "x ```` y", False) == "[document: a.md]\n`````\nx ```` y\n`````"
    assert fenced("b.txt", "t", True).endswith("[… cut at 1 characters]")


async def _copy(item: Media, dest: Path, cap: int) -> None:
    dest.write_bytes(Path(item.ref).read_bytes())


@pytest.mark.anyio
async def test_unreadable_pdf_and_oversized_image_are_kept_and_described(tmp_path: Path) -> None:
    reader = MediaReader(str(tmp_path / "data"), 10_000_000)
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.4\nnot really")
    big = tmp_path / "big.png"
    big.write_bytes(jpeg(6_000_000))
    built = await reader.read([
        Media(kind="document", ref=str(bad), key="k1", name="bad.pdf", mime="application/pdf"),
        Media(kind="image", ref=str(big), key="k2", name="big.png", mime="image/png"),
    ], _copy)
    pdf_line, image_line = built.blocks
    assert pdf_line.startswith("[file: bad.pdf, application/pdf, 19 B, saved at ")
    assert "pypdf could not read it" in pdf_line
    assert "too large to show to the model" in image_line and built.images == []
    assert len(list((tmp_path / "data" / "media").iterdir())) == 2


@pytest.mark.anyio
async def test_a_pdf_without_text_is_kept(tmp_path: Path) -> None:
    blank = tmp_path / "scan.pdf"
    blank.write_bytes(pdf(""))
    built = await MediaReader(str(tmp_path / "d"), 1_000_000).read(
        [Media(kind="document", ref=str(blank), key="k", name="scan.pdf")], _copy)
    assert "no text layer" in built.blocks[0]


@pytest.mark.anyio
async def test_transcriber_errors(tmp_path: Path) -> None:
    audio = tmp_path / "a.ogg"
    audio.write_bytes(b"OggS....")
    async with FakeOpenAI() as fake:
        t = Transcriber(fake.base_url, "sk-test-123456", "whisper-1")
        try:
            fake.transcript = "  hello  "  # type: ignore[attr-defined]
            assert await t(audio, "a.ogg", "audio/ogg") == "hello"
            fake.transcribe_status = 400  # type: ignore[attr-defined]
            with pytest.raises(MediaError, match="HTTP 400"):
                await t(audio, "a.ogg", "audio/ogg")
            fake.transcribe_status = 503  # type: ignore[attr-defined]
            with pytest.raises(TranscribeUnavailable, match="HTTP 503"):
                await t(audio, "a.ogg", "audio/ogg")
        finally:
            await t.aclose()


def test_media_settings_are_checked_and_default_to_the_chat_models() -> None:
    from gantry import config
    from gantry.media.build import reader_for

    base = {"LLM_BASE_URL": "https://llm.example/v1", "LLM_API_KEY": "sk-chat-key-123",
            "LLM_MODEL": "m", "CHANNEL": "stdio", "DATA_DIR": "/tmp/d"}
    cfg = config.load({**base, "LLM_TRANSCRIBE_MODEL": "whisper-1"})
    reader = reader_for(cfg)
    assert reader.max_bytes == 20_000_000 and reader.transcriber is not None
    assert reader.transcriber.url == "https://llm.example/v1/audio/transcriptions"
    assert (reader.keep_seconds, reader.max_total_bytes) == (7 * 86400, 1_000_000_000)
    tight = reader_for(config.load({**base, "MEDIA_KEEP_DAYS": "2",
                                    "MEDIA_MAX_TOTAL_BYTES": "5000000"}))
    assert (tight.keep_seconds, tight.max_total_bytes) == (2 * 86400, 5_000_000)
    assert reader_for(config.load(base)).transcriber is None
    with pytest.raises(config.ConfigError) as err:
        config.load({**base, "MEDIA_MAX_BYTES": "10", "LLM_TRANSCRIBE_BASE_URL": "ftp://x",
                     "LLM_TRANSCRIBE_API_KEY": "sk-secret-transcribe"})
    text = str(err.value)
    assert "MEDIA_MAX_BYTES" in text and "LLM_TRANSCRIBE_BASE_URL" in text
    assert "sk-secret-transcribe" not in text


@pytest.mark.anyio
async def test_a_password_protected_pdf_is_kept_with_the_reason(tmp_path: Path) -> None:
    import io

    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf("secret plans"))))
    writer.encrypt("hunter2", algorithm="RC4-128")
    locked = tmp_path / "locked.pdf"
    with open(locked, "wb") as out:
        writer.write(out)
    built = await MediaReader(str(tmp_path / "d"), 1_000_000).read(
        [Media(kind="document", ref=str(locked), key="k", name="locked.pdf")], _copy)
    assert "protected by a password" in built.blocks[0] and "secret" not in built.blocks[0]
