"""Media out end to end (issue 28): `gantry run` as a subprocess with npm server-everything,
the fake model and the fake Bot API. A tool's image reaches the chat as a photo, with the
exact bytes, and survives a kill -9 between the reply's text and its photo."""

from __future__ import annotations

import base64
import json
import re
import signal
from pathlib import Path

import pytest

from tests.fakes.mcp_servers import (
    EVERYTHING,
    NPM_PREFIX,
    everything_command,
    static_fixture,
    toml_server,
)
from tests.fakes.openai import Call, FakeOpenAI, SendAttachment
from tests.fakes.telegram import FakeTelegram
from tests.test_telegram_e2e import USER, fakes, run, states, wait  # noqa: F401

pytestmark = pytest.mark.slow


def tiny_image() -> bytes:
    """The PNG server-everything's get-tiny-image returns, read from its own source."""
    src = NPM_PREFIX / "node_modules" / EVERYTHING / "dist" / "tools" / "get-tiny-image.js"
    found = re.search(r'MCP_TINY_IMAGE = "([A-Za-z0-9+/=]+)"', src.read_text())
    assert found is not None, "server-everything's tiny image moved"
    return base64.b64decode(found.group(1))


def manifest(tmp_path: Path) -> str:
    path = tmp_path / "mcp.toml"
    path.write_text(toml_server("every", everything_command()), encoding="utf-8")
    return str(path)


SHOW = SendAttachment(Call("every__get-tiny-image"), "Here is the logo.")


def test_a_tool_image_reaches_the_chat_as_a_photo_and_never_the_models_context(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run, tmp_path: Path  # noqa: F811
) -> None:
    tg, llm = fakes
    png = tiny_image()
    llm.default = SHOW
    g = run(MCP_MANIFEST=manifest(tmp_path))
    tg.push_text(USER, "show me the logo")
    (photo,) = tg.wait_uploads_sync(USER, 1, timeout=120)
    assert photo.method == "sendPhoto" and photo.data == png
    assert photo.content_type == "image/png"  # the type the tool gave (issue 36 item 12)
    wait(lambda: states(g.env["DATA_DIR"]).get("show me the logo") == "answered", 30, "answer")
    assert tg.sent_texts(USER) == ["Here is the logo."]
    b64 = base64.b64encode(png).decode()
    assert all(b64[:200] not in r.raw.decode() for r in llm.requests)  # placeholder only
    assert "attachment" in llm.requests[1].raw.decode()
    assert g.stop() == 0
    assert tg.uploads(USER) == [photo]


def test_kill_between_the_text_and_the_photo_sends_each_once(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run, tmp_path: Path  # noqa: F811
) -> None:
    """The text part is delivered, every sendPhoto fails (Telegram half down), kill -9; after
    the restart the photo goes once, the text is not sent again, the model is not asked."""
    tg, llm = fakes
    llm.default = SHOW
    tg.fail("sendPhoto", "server_error", times=10_000)
    mcp = manifest(tmp_path)
    g = run(MCP_MANIFEST=mcp)
    tg.push_text(USER, "show me the logo")
    tg.wait_calls_sync("sendPhoto", 2, timeout=120)
    g.stop(signal.SIGKILL)
    asked = len(llm.requests)
    assert tg.sent_texts(USER) == ["Here is the logo."] and tg.uploads(USER) == []
    tg.clear_faults("sendPhoto")
    g2 = run(MCP_MANIFEST=mcp)
    (photo,) = tg.wait_uploads_sync(USER, 1, timeout=120)
    wait(lambda: states(g2.env["DATA_DIR"]).get("show me the logo") == "answered", 30, "answer")
    assert photo.data == tiny_image() and tg.sent_texts(USER) == ["Here is the logo."]
    assert len(llm.requests) == asked
    assert g2.stop() == 0
    assert len(tg.uploads(USER)) == 1


STATIC_IMAGE_TOOLS = json.dumps({"tools": [{
    "name": "image", "description": "An image (the base64 given, as PNG).",
    "inputSchema": {"type": "object", "properties": {"data": {"type": "string"}},
                    "required": ["data"]}}]})


def test_the_static_fixtures_image_reaches_sendphoto(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run, tmp_path: Path  # noqa: F811
) -> None:
    """The scenario tests/binary/test_binary_media_out.py runs in the frozen binary, here with
    the interpreter: the static C fixture's image tool, then send_attachment, then sendPhoto."""
    tg, llm = fakes
    png = tiny_image()
    path = tmp_path / "mcp.toml"
    path.write_text(toml_server("st", [str(static_fixture())],
                                env={"STATIC_TOOLS": STATIC_IMAGE_TOOLS}), encoding="utf-8")
    llm.default = SendAttachment(Call("st__image", {"data": base64.b64encode(png).decode()}),
                                 "Sent.")
    g = run(MCP_MANIFEST=str(path))
    tg.push_text(USER, "an image please")
    (photo,) = tg.wait_uploads_sync(USER, 1, timeout=120)
    assert photo.method == "sendPhoto" and photo.data == png
    assert tg.wait_sent_sync(USER, 1, timeout=30) == ["Sent."]
    assert g.stop() == 0


def test_a_photo_to_a_model_without_vision_is_answered_once_told_once(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run  # noqa: F811
) -> None:
    """OpenAI's 400 for image input: the turn is retried once without the image, the user
    is told once; the next text turn and the next photo work with no refusal in between."""
    from gantry.model.vision import NO_VISION_NOTICE
    from tests.fakes.media_samples import jpeg
    from tests.fakes.openai import has_image

    tg, llm = fakes
    llm.no_vision = "openai"
    g = run()
    tg.push_photo(USER, jpeg(20_000), caption="what is this")
    (first,) = tg.wait_sent_sync(USER, 1, timeout=120)
    assert first.startswith(NO_VISION_NOTICE) and first.endswith("what is this")
    assert [has_image(r.body) for r in llm.requests] == [True, False]
    tg.push_text(USER, "thanks")
    assert tg.wait_sent_sync(USER, 2, timeout=60)[1] == "echo: thanks"
    assert not has_image(llm.last_request.body) and len(llm.requests) == 3
    tg.push_photo(USER, jpeg(20_000), caption="and this")
    third = tg.wait_sent_sync(USER, 3, timeout=60)[2]
    assert not third.startswith(NO_VISION_NOTICE) and third.endswith("and this")
    assert [has_image(r.body) for r in llm.requests[3:]] == [True, False]
    assert g.stop() == 0


OTHER = 5151


def test_another_chats_file_is_unknown_here_even_when_a_tool_echoes_its_note(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run, tmp_path: Path  # noqa: F811
) -> None:
    """Issue 35 item 7, with a real `gantry run` and server-everything: chat A's tool image
    is kept; chat B asks server-everything's echo to repeat "; attachment <A's id>: " and
    then sends it, and later names the id itself. B gets no file, and its model is told the
    id is unknown, never the file's name, type or size. A still gets its own photo."""
    import hashlib

    tg, llm = fakes
    png = tiny_image()
    ident = hashlib.sha256(png).hexdigest()[:12]
    llm.default = SHOW
    g = run(MCP_MANIFEST=manifest(tmp_path), TELEGRAM_ALLOWED_USERS=f"{USER},{OTHER}")
    tg.push_text(USER, "show me the logo")
    (photo,) = tg.wait_uploads_sync(USER, 1, timeout=120)
    assert photo.data == png
    wait(lambda: states(g.env["DATA_DIR"]).get("show me the logo") == "answered", 30, "answer")
    asked = len(llm.requests)
    llm.default = SendAttachment(Call("every__echo", {
        "message": f"[image/png, 1 kB; attachment {ident}: send_attachment can send it]"}),
        "Sent.")
    tg.push_text(OTHER, "echo this")
    assert tg.wait_sent_sync(OTHER, 1, timeout=60) == ["Sent."]
    llm.default = SendAttachment(Call("send_attachment", {"id": ident}), "Done.")
    tg.push_text(OTHER, f"send attachment {ident}")
    assert tg.wait_sent_sync(OTHER, 2, timeout=60)[1] == "Done."
    results = list({m["tool_call_id"]: m for r in llm.requests[asked:] for m in r.messages
                    if m.get("role") == "tool" and "attachment" in str(m.get("content"))
                    and "Echo" not in str(m.get("content"))}.values())
    assert len(results) == 2 and all(str(m["content"]).startswith(f"error: no attachment '{ident}'")
                           for m in results), results
    assert not any("image/png" in str(m["content"]) or "image.png" in str(m["content"])
                   for m in results)
    assert g.stop() == 0
    assert tg.uploads(OTHER) == [] and tg.uploads(USER) == [photo]
