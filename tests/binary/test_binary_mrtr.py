"""Multi-round-trip requests from the frozen binary in the distroless-like rootfs: the SDK's
server (tests/fakes/mcp_mrtr.py) over Streamable HTTP on a loopback port outside the sandbox,
spoken to in the 2026 era (`protocol = "2026"`). Its `book` answers input_required; the stdio
REPL asks the question, the call is retried with the answers (the server's leg log shows them)
and the tool's result reaches the model; `link` shows its https link (URL mode)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.binary.rootfs import INSTALL_PATH, Sandbox
from tests.fakes.mcp_remote import HttpServer, toml_remote
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.procs import ChildIO

pytestmark = [pytest.mark.binary, pytest.mark.slow]

WAIT = 90.0


class _Run(ChildIO):
    default_wait = WAIT


@pytest.fixture
def mrtr(tmp_path: Path) -> Iterator[tuple[HttpServer, Path]]:
    legs = tmp_path / "legs"
    srv = HttpServer([sys.executable, "-m", "tests.fakes.mcp_mrtr", "{port}"], "/mcp",
                     env={"FIXTURE_LEGS": str(legs)}).start()
    try:
        yield srv, legs
    finally:
        srv.stop()


def test_input_required_is_asked_and_retried_in_the_frozen_binary(
    sandbox: Sandbox, mrtr: tuple[HttpServer, Path], persona_dir: Path, fake_openai: Any,
    tmp_path: Path
) -> None:
    srv, legs = mrtr
    fake: FakeOpenAI = fake_openai
    fake.push(ToolCalls([Call("mr__book", {"day": "monday"}, id="b1")]), Reply("booked ok"),
              ToolCalls([Call("mr__link", {}, id="l1")]), Reply("linked ok"))
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "mcp.toml").write_text(toml_remote("mr", srv.url, timeout=5) + 'protocol = "2026"\n')
    (etc / "mcp.toml").chmod(0o644)
    etc.chmod(0o755)
    env = {"CHANNEL": "stdio", "LLM_BASE_URL": fake.base_url, "LLM_API_KEY": "sk-binary-smoke",
           "LLM_MODEL": "fake-model", "DATA_DIR": "/data", "PERSONA_DIR": "/persona",
           "MCP_MANIFEST": "/etc/gantry/mcp.toml"}
    proc = sandbox.popen([INSTALL_PATH, "run"], env=env,
                         binds={"/persona": persona_dir, "/etc/gantry": etc},
                         data=sandbox.new_data_dir("data-mrtr"))
    run = _Run(proc)
    try:
        run.send("book a table")
        run.expect("How many people, and where?")
        run.expect("  1. Answer\n  2. Decline\n")
        run.send("1")
        run.expect("(1/2) Size")
        run.send("4")
        run.expect("(2/2) Seating")
        run.send("2")  # terrace
        run.expect("Sent.\n")
        run.expect("booked ok\n")
        results = [m["content"] for m in fake.requests[1].messages if m["role"] == "tool"]
        assert "booked a table for 4, terrace, on monday" in results[0]
        carried = [json.loads(line)["responses"] for line in legs.read_text().splitlines()]
        assert [r["content"] for r in carried[-1].values()] == [
            {"size": 4, "seating": "terrace"}]
        run.send("link my account")
        run.expect("https://example.com/sign-in?session=abc")
        run.expect("  1. Accept\n  2. Decline\n")
        run.send("1")
        run.expect("linked ok\n")
        results = [m["content"] for m in fake.requests[3].messages if m["role"] == "tool"]
        assert "account linked" in results[-1]
        run.close_stdin()
        assert run.wait_exit(20) == 0, run.stderr[-3000:]
    finally:
        run.kill()
    assert "Traceback" not in run.stderr
