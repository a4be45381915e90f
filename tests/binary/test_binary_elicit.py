"""Elicitation inside the frozen binary (distroless-like rootfs): the static C fixture's `ask`
tool sends elicitation/create during its call, the stdio REPL shows the numbered choices,
and the answers typed on stdin go back to the server, not to the model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.binary.rootfs import Sandbox
from tests.binary.test_binary import STOP_WAIT, _run_env, binds, etc_gantry, start

pytestmark = [pytest.mark.binary, pytest.mark.slow]
__all__ = ["binds", "etc_gantry", "start"]  # fixtures used by name below

ASK_TOOLS = {"tools": [{"name": "ask", "description": "Ask the user one thing.",
                        "inputSchema": {"type": "object", "properties": {}}}]}


@pytest.fixture
def ask_binds(tmp_path_factory: pytest.TempPathFactory, sandbox: Sandbox) -> dict[str, Path]:
    """The static fixture at /opt/mcp offering only `ask`, named by /etc/gantry/mcp.toml."""
    from tests.fakes.mcp_servers import static_fixture

    opt = tmp_path_factory.mktemp("opt-mcp-ask")
    shutil.copy(static_fixture(), opt / "mcp-static")
    (opt / "mcp-static").chmod(0o755)
    opt.chmod(0o755)
    etc = tmp_path_factory.mktemp("etc-gantry-ask")
    tools = json.dumps(json.dumps(ASK_TOOLS))  # a TOML basic string holding the JSON
    (etc / "mcp.toml").write_text(
        '[[server]]\nname = "st"\ncommand = "/opt/mcp/mcp-static"\ntimeout_seconds = 2\n'
        f"env = {{ STATIC_TOOLS = {tools} }}\n")
    (etc / "mcp.toml").chmod(0o644)
    etc.chmod(0o755)
    (sandbox.root / "opt" / "mcp").mkdir(parents=True, exist_ok=True)
    return {"/opt/mcp": opt, "/etc/gantry": etc}


def test_stdio_elicitation_in_the_frozen_binary(
    sandbox: Sandbox, start: Any, fake_openai: Any, ask_binds: dict[str, Path]
) -> None:
    from tests.fakes.openai import Call, Reply, ToolCalls

    data = sandbox.new_data_dir("data-elicit")
    fake_openai.push(ToolCalls([Call("st__ask", {}, id="a1")]), Reply("asked ok"))
    run = start(_run_env(fake_openai.base_url), data=data, extra_binds=ask_binds)
    run.send("ask me")
    run.expect("Proceed with the static step?")
    run.expect("  1. Answer\n  2. Decline\n")
    run.send("1")
    run.expect("(1/1) Proceed\n  1. Yes\n  2. No\n")
    run.send("1")
    run.expect("Sent.\n")
    run.expect("asked ok\n")
    result = next(m["content"] for m in fake_openai.requests[1].messages if m["role"] == "tool")
    assert "'action':'accept'" in result and "'ok':true" in result
    users = [m["content"] for r in fake_openai.requests for m in r.messages
             if m["role"] == "user"]
    assert all(u.startswith("ask me") for u in users)  # the answers never reached the model
    run.close_stdin()
    assert run.wait(STOP_WAIT) == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
