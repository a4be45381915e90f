"""MCP prompts and resources from the frozen binary in the distroless-like rootfs (issue 41
items 2 and 3): npm server-everything over Streamable HTTP on a loopback port outside the
sandbox. `/prompts` lists its prompts, `/prompt` asks for a missing argument on the REPL's
input and puts the prompt's text into the model's request, and the model reads a blob
resource into the outbox and sends it with send_attachment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.binary.rootfs import INSTALL_PATH, Sandbox
from tests.binary.test_binary_mcp_remote import KEY, _Run
from tests.fakes.mcp_remote import HttpServer, toml_remote
from tests.fakes.openai import Call, FakeOpenAI, Reply, SendAttachment, without_footer

pytestmark = [pytest.mark.binary, pytest.mark.slow]


def test_prompts_and_resources_in_the_frozen_binary(
    sandbox: Sandbox, every: HttpServer, persona_dir: Path, fake_openai: Any, tmp_path: Path
) -> None:
    fake: FakeOpenAI = fake_openai
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "mcp.toml").write_text(toml_remote("every", every.url, timeout=20))
    (etc / "mcp.toml").chmod(0o644)
    etc.chmod(0o755)
    env = {"CHANNEL": "stdio", "LLM_BASE_URL": fake.base_url, "LLM_API_KEY": KEY,
           "LLM_MODEL": "fake-model", "DATA_DIR": "/data", "PERSONA_DIR": "/persona",
           "MCP_MANIFEST": "/etc/gantry/mcp.toml"}
    proc = sandbox.popen([INSTALL_PATH, "run"], env=env,
                         binds={"/persona": persona_dir, "/etc/gantry": etc},
                         data=sandbox.new_data_dir("data-prompts"))
    run = _Run(proc)
    try:
        run.send("/prompts")
        run.expect("/prompt every args-prompt city=… [state=…]")
        fake.push(Reply("weather noted"))
        run.send("/prompt every args-prompt")
        run.expect("(1/2) city\nName of the city\n")
        run.send("Oslo")
        run.expect("(an empty line: Skip)\n")
        run.send("")
        run.expect("weather noted\n")
        users = [m for m in fake.requests[-1].messages if m["role"] == "user"]
        assert without_footer(str(users[-1]["content"])).strip() == "What's weather in Oslo?"
        fake.default = SendAttachment(Call("resource_read", {
            "server": "every", "uri": "demo://resource/dynamic/blob/3"}), "blob sent")
        run.send("send me blob 3")
        run.expect("blob sent\n")
        line = run.expect("B)\n")
        assert "[attachment] /data/outbox/" in line and "(text/plain," in line
        run.close_stdin()
        assert run.wait_exit(20) == 0, run.stderr[-3000:]
    finally:
        run.kill()
    assert "Traceback" not in run.stderr and KEY not in run.stderr
