"""The REPL's `/attach PATH [caption]`: a local file through the same media path as
Telegram's (gantry.media), against the real agent and provider and the fake OpenAI server."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest

from gantry import db
from gantry.agent import Agent
from gantry.channel.stdio import StdioChannel
from gantry.media.build import MediaReader
from gantry.media.local import ATTACH_HELP, parse_attach
from gantry.media.transcribe import UNSET_REPLY
from gantry.model.client import Provider
from gantry.session import SessionStore
from gantry.tools import Registry
from tests.fakes.media_samples import jpeg, ogg, pdf
from tests.fakes.openai import FakeOpenAI


async def repl(tmp_path: Path, fake: FakeOpenAI, lines: list[str], cap: int = 100_000) -> str:
    provider = Provider(fake.base_url, "sk-test-123456", "fake-model")
    agent = Agent(model=provider, sessions=SessionStore(db.connect(tmp_path / "g.db")),
                  tools=Registry(), persona=lambda: "")
    out = io.StringIO()
    channel = StdioChannel(inp=io.StringIO("".join(f"{line}\n" for line in lines)), out=out,
                           media=MediaReader(str(tmp_path / "data"), cap))
    try:
        await channel.serve(agent, lambda: None)
    finally:
        await provider.aclose()
    return out.getvalue()


def test_attach_lines_are_parsed_with_quoted_paths() -> None:
    assert parse_attach("/attach a.png what is it") == ("a.png", "what is it")
    assert parse_attach('/attach "my scan.pdf" sum it up') == ("my scan.pdf", "sum it up")
    assert parse_attach("/attach") == ("", "")
    assert parse_attach("/attachment x") is None and parse_attach("hello") is None


@pytest.mark.anyio
async def test_attach_an_image_and_a_pdf(tmp_path: Path) -> None:
    photo = jpeg(8_000)
    (tmp_path / "cat.jpg").write_bytes(photo)
    (tmp_path / "my scan.pdf").write_bytes(pdf("Lease ends 2027-03-31"))
    async with FakeOpenAI() as fake:
        out = await repl(tmp_path, fake, [
            f"/attach {tmp_path / 'cat.jpg'} what animal is this?",
            f'/attach "{tmp_path / "my scan.pdf"}" when does it end?',
        ])
        first, second = fake.requests
    assert first.image_urls == ["data:image/jpeg;base64," + base64.b64encode(photo).decode()]
    assert first.last_user_text == "[image: cat.jpg, 8 KB]\n\nwhat animal is this?"
    assert second.last_user_text.startswith("[document: my scan.pdf, PDF, 1 page]\n```\n")
    assert "Lease ends 2027-03-31" in second.last_user_text
    assert second.last_user_text.endswith("when does it end?")
    assert out.count("echo: ") == 2


@pytest.mark.anyio
async def test_attach_refusals_make_no_model_call(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(b"z" * 2_000)
    (tmp_path / "note.ogg").write_bytes(ogg(500))
    async with FakeOpenAI() as fake:
        out = await repl(tmp_path, fake, [
            "/attach", f"/attach {tmp_path / 'missing.txt'}", f"/attach {tmp_path}",
            f"/attach {tmp_path / 'big.bin'}", f"/attach {tmp_path / 'note.ogg'}",
        ], cap=1_000)
        assert fake.requests == []
    lines = out.splitlines()
    assert lines[0] == "Usage: " + ATTACH_HELP
    assert lines[1].startswith("Cannot attach ") and "No such file" in lines[1]
    assert lines[2].endswith("not a regular file.")
    assert "too large" in lines[3] and "MEDIA_MAX_BYTES" in lines[3]
    assert lines[4:] == [UNSET_REPLY]


@pytest.mark.anyio
async def test_an_attached_wav_is_an_audio_file_not_a_voice_message(tmp_path: Path) -> None:
    """Issue 36 item 13: /attach of a .wav is spoken of as an audio file."""
    (tmp_path / "memo.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(64))
    async with FakeOpenAI() as fake:
        out = await repl(tmp_path, fake, [f"/attach {tmp_path / 'memo.wav'}"])
        assert fake.requests == []
    (line,) = out.splitlines()
    assert line.startswith("I got an audio file, but transcription is not set up")
