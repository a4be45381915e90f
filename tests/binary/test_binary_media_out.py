"""Media out inside the frozen binary (issue 28): a tool's image reaches Telegram's sendPhoto.

In the distroless-like rootfs the only MCP child that runs is the static C fixture; its
`image` tool (offered through STATIC_TOOLS) returns a PNG content block. The model calls it,
then `send_attachment` with the id its placeholder names; the binary keeps the bytes under
/data/outbox and uploads them with aiogram's multipart sendPhoto to the fake Bot API. What
only the binary proves: the outbox, the built-in tool, FSInputFile and the multipart upload
are all frozen in.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.binary.rootfs import Sandbox
from tests.binary.test_binary import WAIT, _run_env, binds, etc_gantry, start  # noqa: F401
from tests.fakes.openai import Call, SendAttachment
from tests.test_media_out import PNG

pytestmark = [pytest.mark.binary, pytest.mark.slow]

IMAGE_TOOLS = json.dumps({"tools": [{
    "name": "image", "description": "An image (the base64 given, as PNG).",
    "inputSchema": {"type": "object", "properties": {"data": {"type": "string"}},
                    "required": ["data"]}}]})


@pytest.fixture
def photo_binds(tmp_path_factory: pytest.TempPathFactory, sandbox: Sandbox) -> dict[str, Path]:
    """The static fixture at /opt/mcp, and a manifest offering its image tool."""
    from tests.fakes.mcp_servers import static_fixture, toml_server

    opt = tmp_path_factory.mktemp("opt-mcp-image")
    shutil.copy(static_fixture(), opt / "mcp-static")
    (opt / "mcp-static").chmod(0o755)
    opt.chmod(0o755)
    etc = tmp_path_factory.mktemp("etc-gantry-image")
    (etc / "mcp.toml").write_text(toml_server("st", ["/opt/mcp/mcp-static"],
                                              env={"STATIC_TOOLS": IMAGE_TOOLS}))
    (etc / "mcp.toml").chmod(0o644)
    etc.chmod(0o755)
    (sandbox.root / "opt" / "mcp").mkdir(parents=True, exist_ok=True)  # the mount point
    return {"/opt/mcp": opt, "/etc/gantry": etc}


def test_a_tool_image_reaches_sendphoto_in_the_frozen_binary(
    sandbox: Sandbox, start: Any, fake_openai: Any, photo_binds: dict[str, Path]  # noqa: F811
) -> None:
    import base64

    from tests.fakes.telegram import FakeTelegram

    tg = FakeTelegram()
    tg_url = tg.start_in_thread()
    try:
        fake_openai.default = SendAttachment(
            Call("st__image", {"data": base64.b64encode(PNG).decode()}), "Here it is.")
        data = sandbox.new_data_dir("data-media-out")
        run = start(
            _run_env(fake_openai.base_url, CHANNEL="telegram", TELEGRAM_BOT_TOKEN="123456:media",
                     TELEGRAM_ALLOWED_USERS="7", TELEGRAM_API_URL=tg_url),
            data=data, extra_binds=photo_binds,
        )
        run.wait_stderr('"receiving"')
        tg.push_text(user_id=7, text="send me the image")
        (photo,) = tg.wait_uploads_sync(7, 1, timeout=WAIT)
        assert photo.method == "sendPhoto" and photo.data == PNG, run.stderr[-3000:]
        assert tg.wait_sent_sync(chat_id=7, count=1, timeout=WAIT) == ["Here it is."]
        kept = list((data / "outbox").glob("*/image.png"))
        assert [p.read_bytes() for p in kept] == [PNG]
        assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
        assert "Traceback" not in run.stderr
    finally:
        tg.stop()
