"""OAuth for a remote MCP server inside the frozen binary in the distroless-like rootfs:
`gantry mcp login` (no shell, no browser: the address is printed, the redirect pasted back)
stores the tokens, and `gantry run` calls the server's tool with them. The SDK's client auth
must be in the binary; the server-side auth stack is not (the fixture runs on the host's
Python: tests/fakes/mcp_oauth.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from gantry.mcp.tokens import TokenStore
from tests.binary.rootfs import INSTALL_PATH, Sandbox
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.procs import ChildIO
from tests.test_mcp_oauth import (  # noqa: F401
    MetadataDocument,
    OAuthServer,
    follow_authorize,
    metadata_document,
    oauth_server,
)

pytestmark = [pytest.mark.binary, pytest.mark.slow]
WAIT = 90.0


def setup(sandbox: Sandbox, persona_dir: Path, tmp_path_factory: pytest.TempPathFactory,
          name: str, manifest: str) -> tuple[Path, dict[str, Path], dict[str, str]]:
    """A data dir, the binds (persona, /etc/gantry with `manifest`) and the base env."""
    etc = tmp_path_factory.mktemp(f"etc-gantry-{name}")
    (etc / "mcp.toml").write_text(manifest)
    (etc / "mcp.toml").chmod(0o644)
    etc.chmod(0o755)
    binds = {"/persona": persona_dir, "/etc/gantry": etc}
    base_env = {"DATA_DIR": "/data", "PERSONA_DIR": "/persona",
                "MCP_MANIFEST": "/etc/gantry/mcp.toml"}
    return sandbox.new_data_dir(name), binds, base_env


def log_in(sandbox: Sandbox, data: Path, binds: dict[str, Path], base_env: dict[str, str]
           ) -> tuple[ChildIO, str]:
    """`gantry mcp login remote` in the binary, the redirect pasted back; (the finished
    process, what it showed before the prompt)."""
    login = ChildIO(sandbox.popen([INSTALL_PATH, "mcp", "login", "remote"], env=base_env,
                                  data=data, binds=binds))
    login.default_wait = WAIT
    try:
        shown = login.expect("Address or code: ")
        match = re.search(r"^\s*(http\S+/authorize\?\S+)$", shown, re.MULTILINE)
        assert match, shown
        login.send(follow_authorize(match.group(1)))
        login.expect("Logged in to 'remote': 2 tools.")
        assert login.wait_exit(WAIT) == 0, login.stderr
    finally:
        login.kill()
    return login, shown


def whoami(sandbox: Sandbox, fake_openai: FakeOpenAI, data: Path, binds: dict[str, Path],
           base_env: dict[str, str]) -> tuple[ChildIO, dict[str, str]]:
    """`gantry run` in the binary: the model calls remote__whoami through the stored tokens;
    `/status` shows the server up. (The finished process, the env it ran with.)"""
    fake_openai.push(ToolCalls([Call("remote__whoami", {}, id="c1")]), Reply("done"))
    env = {**base_env, "CHANNEL": "stdio", "LLM_BASE_URL": fake_openai.base_url,
           "LLM_API_KEY": "sk-binary-smoke", "LLM_MODEL": "fake-model"}
    run = ChildIO(sandbox.popen([INSTALL_PATH, "run"], env=env, data=data, binds=binds))
    run.default_wait = WAIT
    try:
        run.send("who am I on the remote server?")
        run.expect("done")
        tool_message = fake_openai.last_request.messages[-1]
        assert tool_message["role"] == "tool" and tool_message["content"] == "operator"
        run.send("/status")
        run.expect("remote: up, 2 tools")
    finally:
        run.close_stdin()
        run.kill()
    return run, env


def test_login_then_a_tool_call_through_the_stored_tokens(
    sandbox: Sandbox, persona_dir: Path, fake_openai: FakeOpenAI,
    oauth_server: Callable[..., OAuthServer],  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    server = oauth_server()
    data, binds, base_env = setup(sandbox, persona_dir, tmp_path_factory, "oauth",
                                  f'[[server]]\nname = "remote"\nurl = "{server.url}"\n'
                                  'auth = "oauth"\n')
    login, _shown = log_in(sandbox, data, binds, base_env)

    run, _env = whoami(sandbox, fake_openai, data, binds, base_env)
    stats = server.stats()
    assert stats["code_grants"] == 1 and stats["authorized"] == 1
    record = TokenStore(data / "gantry.db", read_only=True).get("remote")
    assert record is not None and record.tokens
    tokens = json.loads(record.tokens)
    for text in (login.stdout + login.stderr, run.stdout + run.stderr):
        assert "Traceback" not in text
        assert tokens["access_token"] not in text and tokens["refresh_token"] not in text


def test_login_by_a_client_metadata_document_then_an_issuer_change_asks_for_a_login(
    sandbox: Sandbox, persona_dir: Path, fake_openai: FakeOpenAI,
    oauth_server: Callable[..., OAuthServer],  # noqa: F811
    metadata_document: MetadataDocument,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """CIMD in the binary: the manifest's https address is the client_id (the fixture's
    authorization server fetches the document; nothing is registered), and a tool call works.
    Then the server's authorization server changes: the binary sends the old login nowhere
    and `/status` names the change and `gantry mcp login remote`."""
    from urllib.parse import urlsplit

    server = oauth_server("--cimd-ca", str(metadata_document.ca_file))
    data, binds, base_env = setup(
        sandbox, persona_dir, tmp_path_factory, "cimd",
        f'[[server]]\nname = "remote"\nurl = "{server.url}"\nauth = "oauth"\n'
        f'oauth_client_metadata_url = "{metadata_document.url}"\n')
    login, shown = log_in(sandbox, data, binds, base_env)
    assert f"client metadata document, {metadata_document.url}" in shown, shown
    assert server.stats()["registered"] == 0 and server.stats()["cimd_fetches"] >= 1
    record = TokenStore(data / "gantry.db", read_only=True).get("remote")
    assert record is not None and json.loads(record.client_info)["client_id"] == \
        metadata_document.url

    _run, env = whoami(sandbox, fake_openai, data, binds, base_env)

    port = str(urlsplit(server.base).port)
    server.proc.kill()
    server.proc.wait(timeout=10)
    moved = oauth_server("--port", port, "--issuer-host", "localhost")
    run = ChildIO(sandbox.popen([INSTALL_PATH, "run"], env=env, data=data, binds=binds))
    run.default_wait = WAIT
    try:
        run.send("/status")
        run.expect("remote: needs login (the server's authorization server changed from "
                   f"http://127.0.0.1:{port} to http://localhost:{port}")
        run.expect("run `gantry mcp login remote`")
    finally:
        run.close_stdin()
        run.kill()
    stats = moved.stats()
    assert stats["refresh_grants"] == 0 and stats["refresh_refused"] == 0, stats
    tokens = json.loads(record.tokens)
    for text in (login.stdout + login.stderr, run.stdout + run.stderr):
        assert "Traceback" not in text
        assert tokens["access_token"] not in text and tokens["refresh_token"] not in text
