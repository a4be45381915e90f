"""Content parts (text + images) in the wire types, the session store and the prompt."""

from __future__ import annotations

import base64
from pathlib import Path

import msgspec
import pytest

from gantry import db
from gantry.agent import Agent
from gantry.channel.base import Inbound
from gantry.model.client import Provider
from gantry.model.messages import (
    ImagePart,
    ImageURL,
    TextPart,
    UserMessage,
    content_text,
    decode_messages,
    encode,
    user_content,
)
from gantry.model.wire import ChatRequest
from gantry.prompt import assemble
from gantry.session import IMAGE_CHARS, SessionStore, msg_chars, render_for_summary
from gantry.tools import Registry
from tests.fakes.openai import FakeOpenAI

PIXEL = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
DATA_URL = "data:image/png;base64," + base64.b64encode(PIXEL).decode()


def image() -> ImagePart:
    return ImagePart(ImageURL(DATA_URL))


def test_parts_encode_in_the_openai_shape() -> None:
    body = msgspec.json.decode(encode(ChatRequest(
        model="m", messages=[UserMessage(user_content("what is this?", [image()]))])))
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": DATA_URL}},
    ]}]


def test_plain_text_stays_a_string_and_old_rows_decode() -> None:
    assert user_content("hi") == "hi"
    old = b'[{"role":"user","content":"hello"}]'
    assert decode_messages(old) == [UserMessage("hello")]
    new = encode([UserMessage(user_content("cap", [image()]))])
    (m,) = decode_messages(new)
    assert isinstance(m, UserMessage) and m.text == "cap" and m.images == [image()]


def test_an_image_counts_as_its_labelled_estimate_not_its_base64() -> None:
    m = UserMessage(user_content("abcd", [image(), image()]))
    assert msg_chars(m) == 4 + 2 * IMAGE_CHARS
    assert content_text(m.content) == "abcd"


def test_the_summary_transcript_holds_no_base64() -> None:
    out = render_for_summary([UserMessage(user_content("receipt", [image()]))])
    assert out == "User: receipt [image 1]"
    assert "base64" not in out


def test_the_time_footer_goes_into_the_text_part_and_keeps_the_image() -> None:
    prompt = assemble(persona="", history=[UserMessage(user_content("look", [image()]))],
                      max_messages=10, max_tokens=100_000, footer="\n\n[time]")
    (m,) = prompt.messages
    assert isinstance(m, UserMessage)
    assert m.content == [TextPart("look\n\n[time]"), image()]


def test_stored_rows_round_trip_and_a_stopped_image_turn_settles(tmp_path: Path) -> None:
    store = SessionStore(db.connect(tmp_path / "g.db"))
    store.append("s", [UserMessage(user_content("see", [image()]))])
    _ids, (m,) = store.load("s")
    assert isinstance(m, UserMessage) and m.images == [image()]
    assert store.stats("s") == (1, 3 + IMAGE_CHARS)
    assert store.settle_stopped("s", "see")


@pytest.mark.anyio
async def test_an_inbound_image_reaches_the_model_as_a_part(tmp_path: Path) -> None:
    async with FakeOpenAI() as fake:
        provider = Provider(fake.base_url, "sk-test-123456", "fake-model")
        try:
            agent = Agent(model=provider, sessions=SessionStore(db.connect(tmp_path / "g.db")),
                          tools=Registry(), persona=lambda: "")
            msg = Inbound(channel="t", chat_id="1", user_id="u", text="what is it?",
                          images=(image(),))
            assert await agent(msg) == "echo: what is it?"
            assert fake.last_request.image_urls == [DATA_URL]
            # the next turn still carries it (history), and plain text turns still work
            await agent(Inbound(channel="t", chat_id="1", user_id="u", text="and now?"))
            assert fake.last_request.last_user_text == "and now?"
        finally:
            await provider.aclose()
