"""Images after their turn, and a model without vision (issue 28): gantry.model.vision and the agent
against the fake OpenAI server refusing image parts as real text-only endpoints do."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from gantry import db
from gantry.agent import Agent
from gantry.channel.base import Inbound
from gantry.model.client import Provider
from gantry.model.messages import AssistantMessage, ImagePart, ImageURL, UserMessage, user_content
from gantry.model.vision import (
    EARLIER,
    NO_VISION_NOTICE,
    NOT_SHOWN,
    collapse_old_images,
    describe,
    rejects_images,
)
from gantry.prompt import assemble
from gantry.session import SessionStore
from gantry.tools import Registry
from tests.fakes.openai import NO_VISION, FakeOpenAI, has_image

PIXEL = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
DATA_URL = "data:image/png;base64," + base64.b64encode(PIXEL).decode()


def image() -> ImagePart:
    return ImagePart(ImageURL(DATA_URL))


REFUSALS = [
    "Invalid content type. image_url is only supported by certain models.",  # OpenAI
    "image input is not supported - hint: if this is unexpected, you may need to provide "
    "the mmproj",  # llama.cpp
    "image input is not supported by this server",  # llama.cpp, older
    'Failed to parse messages: Unsupported content part type: "image_url"',  # llama.cpp
    "fake-model is not a multimodal model",  # vLLM
    "At most 0 image(s) may be provided in one request.",  # vLLM
    "this model does not support images",  # Ollama
    "Model does not support images. Please use a model that does.",  # LM Studio
]
OTHERS = [
    "This model's maximum context length is 8192 tokens.",
    "Rate limit reached for requests",
    "Incorrect API key provided.",
    "The model `gpt-5` does not exist",
    "Invalid image data: the image could not be decoded",
]


@pytest.mark.parametrize("message", REFUSALS)
def test_refusals_of_image_input_are_recognised(message: str) -> None:
    assert rejects_images(message)


@pytest.mark.parametrize("message", OTHERS)
def test_other_errors_are_not_taken_for_a_refusal(message: str) -> None:
    assert not rejects_images(message)


def test_an_answered_turns_images_become_one_line_and_the_current_turn_keeps_its_own() -> None:
    old = UserMessage(user_content("receipt", [image()]))
    now = UserMessage(user_content("and this?", [image()]))
    history = [old, AssistantMessage("A receipt."), now]
    out = collapse_old_images(history, 2)
    line = describe(image(), EARLIER)
    assert out[0] == UserMessage(f"receipt\n{line}") and out[2] == now
    assert line == "[image: image/png, 1 kB — sent earlier, no longer shown]"
    prompt = assemble(persona="", history=history, max_messages=10, max_tokens=100_000)
    sent = [m for m in prompt.messages if isinstance(m, UserMessage)]
    assert sent[0].images == [] and sent[1].images == [image()]
    big = [UserMessage(user_content(f"shot {i}", [image()])) if i % 2 == 0
           else AssistantMessage("ok") for i in range(40)] + [UserMessage("hi")]
    # 20 old screenshots cost 20 short lines, not 20 × 800 estimated tokens
    assert assemble(persona="", history=big, max_messages=100, max_tokens=2000).history_dropped == 0


@pytest.mark.anyio
async def test_a_vision_model_gets_an_image_with_its_turn_only(tmp_path: Path) -> None:
    async with FakeOpenAI() as fake:
        provider = Provider(fake.base_url, "sk-test-123456", "fake-model")
        try:
            agent = Agent(model=provider, sessions=SessionStore(db.connect(tmp_path / "g.db")),
                          tools=Registry(), persona=lambda: "")
            await agent(Inbound("t", "1", "u", "what is it?", images=(image(),)))
            assert has_image(fake.last_request.body)
            await agent(Inbound("t", "1", "u", "and now?"))
            assert not has_image(fake.last_request.body)
            assert EARLIER in fake.last_request.raw.decode()
            assert DATA_URL not in fake.last_request.raw.decode()
        finally:
            await provider.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("flavour", sorted(NO_VISION))
async def test_a_model_without_vision_is_retried_once_and_the_session_is_not_poisoned(
    tmp_path: Path, flavour: str
) -> None:
    async with FakeOpenAI() as fake:
        fake.no_vision = flavour
        provider = Provider(fake.base_url, "sk-test-123456", "fake-model")
        try:
            agent = Agent(model=provider, sessions=SessionStore(db.connect(tmp_path / "g.db")),
                          tools=Registry(), persona=lambda: "")
            reply = await agent(Inbound("t", "1", "u", "what is it?", images=(image(),)))
            assert reply == f"{NO_VISION_NOTICE}\n\necho: what is it?"
            assert [has_image(r.body) for r in fake.requests] == [True, False]  # one retry
            assert NOT_SHOWN in fake.last_request.raw.decode()
            # a later text turn works and sends no image; a later image is not told again
            assert await agent(Inbound("t", "1", "u", "thanks")) == "echo: thanks"
            assert not has_image(fake.last_request.body) and len(fake.requests) == 3
            again = await agent(Inbound("t", "1", "u", "this one?", images=(image(),)))
            assert again == "echo: this one?" and len(fake.requests) == 5
            # another chat is told
            other = await agent(Inbound("t", "2", "u", "hm?", images=(image(),)))
            assert other.startswith(NO_VISION_NOTICE)
        finally:
            await provider.aclose()


@pytest.mark.anyio
async def test_an_ordinary_400_with_an_image_is_not_retried(tmp_path: Path) -> None:
    from tests.fakes.openai import HTTPError

    async with FakeOpenAI() as fake:
        fake.push(HTTPError(400, "This model's maximum context length is 8192 tokens."))
        provider = Provider(fake.base_url, "sk-test-123456", "fake-model")
        try:
            agent = Agent(model=provider, sessions=SessionStore(db.connect(tmp_path / "g.db")),
                          tools=Registry(), persona=lambda: "")
            reply = await agent(Inbound("t", "1", "u", "what is it?", images=(image(),)))
            assert "model call failed (HTTP 400)" in reply and len(fake.requests) == 1
        finally:
            await provider.aclose()
