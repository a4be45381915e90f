"""Protocol eras from the frozen binary in the distroless-like rootfs (issue 42 items 1, 3):
the Python SDK's own server over Streamable HTTP (tests/fakes/mcp_http_fixture.py, both
eras) on a loopback port outside the sandbox. The binary must carry the SDK's 2026 client
path (server/discover, the `_meta` envelope, subscriptions/listen), and a call whose
response is cut is re-issued only for a read-only tool: the fixture's own counter files
(written outside the sandbox) show how often each tool ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.binary.rootfs import INSTALL_PATH, Sandbox
from tests.binary.test_binary_mcp_remote import _etc, _Run
from tests.fakes.mcp_remote import HttpServer, fixture_http, toml_remote
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls

pytestmark = [pytest.mark.binary, pytest.mark.slow]

KEY = "sk-binary-smoke"  # the fake_openai fixture's key


@pytest.fixture(scope="module")
def web() -> Iterator[HttpServer]:
    with fixture_http() as srv:
        yield srv


@pytest.mark.parametrize(("protocol", "shown"), [
    ("auto", "MCP server web speaks MCP 2026-07-28 (stateless)"),
    ("2025", "MCP server web speaks MCP 2025-11-25 (handshake)"),
])
def test_tools_list_says_which_era_the_server_speaks(
    sandbox: Sandbox, web: HttpServer, tmp_path: Path, protocol: str, shown: str
) -> None:
    manifest = toml_remote("web", web.url) + f'protocol = "{protocol}"\n'
    done = sandbox.run([INSTALL_PATH, "tools", "list"],
                       env={"MCP_MANIFEST": "/etc/gantry/mcp.toml"},
                       binds=_etc(tmp_path / "etc", manifest), timeout=120)
    assert done.returncode == 0, done.stderr
    assert shown in done.stdout.splitlines()
    assert "web__echo" in done.stdout


def test_run_reissues_a_cut_readonly_call_and_reports_the_other_broken(
    sandbox: Sandbox, web: HttpServer, persona_dir: Path, fake_openai: Any, tmp_path: Path
) -> None:
    fake: FakeOpenAI = fake_openai
    counters = tmp_path / "counters"
    counters.mkdir()
    tally, peek = counters / "tally", counters / "peek"
    fake.push(ToolCalls([Call("web__tally", {"path": str(tally)}, id="t1")]),
              Reply("tally done"))
    fake.push(ToolCalls([Call("web__peek", {"path": str(peek)}, id="p1")]),
              Reply("peek done"))
    env = {"CHANNEL": "stdio", "LLM_BASE_URL": fake.base_url, "LLM_API_KEY": KEY,
           "LLM_MODEL": "fake-model", "DATA_DIR": "/data", "PERSONA_DIR": "/persona",
           "MCP_MANIFEST": "/etc/gantry/mcp.toml"}
    manifest = toml_remote("web", web.url, timeout=30)
    binds = {"/persona": persona_dir, **_etc(tmp_path / "etc", manifest)}
    proc = sandbox.popen([INSTALL_PATH, "run"], env=env, binds=binds,
                         data=sandbox.new_data_dir("data-era"))
    run = _Run(proc)
    try:
        run.send("/status")
        assert "MCP 2026-07-28 (stateless)" in run.expect("restarts\n")
        run.send("count it")
        run.expect("tally done\n")
        broken = [m["content"] for m in fake.requests[1].messages if m["role"] == "tool"]
        assert "it may or may not have run" in broken[0] and "not sent again" in broken[0]
        assert len(tally.read_text().splitlines()) == 1  # ran once, never replayed
        run.send("peek at it")
        run.expect("peek done\n")
        reissued = [m["content"] for m in fake.requests[3].messages if m["role"] == "tool"]
        assert reissued[-1] == "ran 2 times"
        assert len(peek.read_text().splitlines()) == 2  # re-issued: it is read-only
        run.close_stdin()
        assert run.wait_exit(20) == 0, run.stderr[-3000:]
    finally:
        run.kill()
    assert "Traceback" not in run.stderr
