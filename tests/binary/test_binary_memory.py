"""Memory inside the frozen binary in the distroless-like rootfs: `gantry mcp-memory` speaks
MCP over stdio (initialize, tools/list, store, recall), `gantry run` stores through the
memory_store tool and hydrates it on a later turn, and `gantry memory list` reads it back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.binary.rootfs import INSTALL_PATH, Sandbox
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.procs import ChildIO

pytestmark = [pytest.mark.binary, pytest.mark.slow]
WAIT = 90.0


class Rpc(ChildIO):
    default_wait = WAIT

    def request(self, rid: int, method: str, params: dict[str, Any] | None = None) -> Any:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(json.dumps(msg))
        text = self.expect(f'"id":{rid},')
        text += self.expect("\n")  # the rest of that response's line
        line = [x for x in text.splitlines() if f'"id":{rid},' in x][-1]
        return json.loads(line)


def test_mcp_memory_speaks_mcp_over_stdio(sandbox: Sandbox, persona_dir: Path) -> None:
    data = sandbox.new_data_dir("mcp-memory")
    proc = sandbox.popen([INSTALL_PATH, "mcp-memory"], data=data,
                         env={"DATA_DIR": "/data", "PERSONA_DIR": "/persona"},
                         binds={"/persona": persona_dir})
    rpc = Rpc(proc)
    try:
        init = rpc.request(1, "initialize", {
            "protocolVersion": "2024-11-05", "capabilities": {},
            "clientInfo": {"name": "smoke", "version": "0"}})
        assert init["result"]["protocolVersion"] == "2024-11-05"
        assert "distroless smoke-test persona" in init["result"]["instructions"]
        rpc.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        names = {t["name"] for t in rpc.request(2, "tools/list")["result"]["tools"]}
        assert names == {"memory_store", "memory_recall", "memory_forget", "read_core",
                         "read_memory", "save_memory", "compress"}
        stored = rpc.request(3, "tools/call", {"name": "memory_store", "arguments": {
            "kind": "person", "subject": "mom", "content": "prefers calls over texts"}})
        assert stored["result"]["content"][0]["text"] == (
            "stored #1: (person) mom: prefers calls over texts")
        found = rpc.request(4, "tools/call", {"name": "memory_recall",
                                              "arguments": {"query": 'mom "texts NEAR('}})
        assert found["result"]["content"][0]["text"].startswith(
            "#1 (person) mom: prefers calls over texts (")
        records = rpc.request(5, "tools/call", {"name": "read_memory", "arguments": {}})
        record = json.loads(records["result"]["content"][0]["text"])[0]
        assert record["value"]["$type"] == "ai.syui.gpt.memory"
    finally:
        rpc.close_stdin()
        rpc.kill()
    listed = sandbox.run([INSTALL_PATH, "memory", "list"], env={"DATA_DIR": "/data"}, data=data)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("#1 (person) mom: prefers calls over texts · mcp")


def test_run_stores_and_hydrates_memory(
    sandbox: Sandbox, persona_dir: Path, fake_openai: FakeOpenAI
) -> None:
    fake = fake_openai
    base_url = fake.base_url
    data = sandbox.new_data_dir("run-memory")
    env = {"CHANNEL": "stdio", "LLM_BASE_URL": base_url, "LLM_API_KEY": "sk-binary-smoke",
           "LLM_MODEL": "fake-model", "DATA_DIR": "/data", "PERSONA_DIR": "/persona",
           "MCP_MANIFEST": "/etc/gantry/mcp.toml"}
    fake.push(ToolCalls([Call("memory_store", {"kind": "fact", "subject": "chris",
                                               "content": "climbs on Tuesdays"}, id="c1")]),
              Reply("noted"))
    run = ChildIO(sandbox.popen([INSTALL_PATH, "run"], env=env, data=data,
                                binds={"/persona": persona_dir}))
    run.default_wait = WAIT
    try:
        run.send("remember that I climb on Tuesdays")
        run.expect("noted")
        run.send("/new")
        run.expect("Started a new conversation")
        run.send("when do I climb?")
        run.expect("echo: when do I climb?")
        turn = fake.last_request.messages[-1]["content"]  # recalled for it: after it
        assert "[memory]\n- (fact) chris: climbs on Tuesdays" in turn
        run.send("/status")
        run.expect("memory (builtin): 1 fact")
    finally:
        run.close_stdin()
        run.kill()
    listed = sandbox.run([INSTALL_PATH, "memory", "search", "tuesdays"],
                         env={"DATA_DIR": "/data"}, data=data)
    assert listed.stdout.startswith("#1 (fact) chris: climbs on Tuesdays"), listed.stderr


def test_run_with_itself_as_the_mcp_memory_backend(
    sandbox: Sandbox, persona_dir: Path, fake_openai: FakeOpenAI,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """MEMORY_BACKEND=mcp:mem with `gantry mcp-memory` (the same binary) as the manifest's
    child: the row lands in the child's own database, hydrates after /new, and the model is
    offered memory_* once (the child's own copies stay hidden)."""
    fake = fake_openai
    data = sandbox.new_data_dir("run-mcp-memory")
    (data / "mem").mkdir()
    (data / "mem").chmod(0o777)
    etc = tmp_path_factory.mktemp("etc-gantry-mem")
    (etc / "mcp.toml").write_text(
        f'[[server]]\nname = "mem"\ncommand = "{INSTALL_PATH}"\nargs = ["mcp-memory"]\n'
        'env = { DATA_DIR = "/data/mem", PERSONA_DIR = "/persona" }\n')
    (etc / "mcp.toml").chmod(0o644)
    etc.chmod(0o755)
    env = {"CHANNEL": "stdio", "LLM_BASE_URL": fake.base_url, "LLM_API_KEY": "sk-binary-smoke",
           "LLM_MODEL": "fake-model", "DATA_DIR": "/data", "PERSONA_DIR": "/persona",
           "MCP_MANIFEST": "/etc/gantry/mcp.toml", "MEMORY_BACKEND": "mcp:mem"}
    fake.push(ToolCalls([Call("memory_store", {"kind": "fact", "subject": "chris",
                                               "content": "climbs on Tuesdays"}, id="c1")]),
              Reply("noted"))
    run = ChildIO(sandbox.popen([INSTALL_PATH, "run"], env=env, data=data,
                                binds={"/persona": persona_dir, "/etc/gantry": etc}))
    run.default_wait = WAIT
    try:
        run.send("remember that I climb on Tuesdays")
        run.expect("noted")
        offered = [t["function"]["name"] for t in fake.requests[0].body.get("tools", [])]
        memory = sorted(n for n in offered if "memory" in n or n.startswith("mem__"))
        assert memory == ["memory_forget", "memory_recall", "memory_store"], offered
        run.send("/new")
        run.expect("Started a new conversation")
        run.send("what is the weather?")
        run.expect("echo: what is the weather?")
        turn = fake.last_request.messages[-1]["content"]
        assert "chris: climbs on Tuesdays" in turn, turn
    finally:
        run.close_stdin()
        assert run.wait_exit(WAIT) == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "sk-binary-smoke" not in run.stderr
    own = sandbox.run([INSTALL_PATH, "memory", "list"], env={"DATA_DIR": "/data"}, data=data)
    assert "climbs" not in own.stdout, own.stdout
    child = sandbox.run([INSTALL_PATH, "memory", "list"], env={"DATA_DIR": "/data/mem"},
                        data=data)
    assert "(fact) chris: climbs on Tuesdays" in child.stdout, child.stderr


def test_recall_reads_the_packaged_lexicon(sandbox: Sandbox) -> None:
    """The WordNet-derived lexicon is package data inside the onefile binary: 'give' finds
    a row that only says 'gave' (an irregular form), 'children' one that says 'kids'."""
    data = sandbox.new_data_dir("lexicon")
    for content in ("chris gave a talk at school", "ana's kids love dinosaurs"):
        added = sandbox.run([INSTALL_PATH, "memory", "add", content],
                            env={"DATA_DIR": "/data"}, data=data)
        assert added.returncode == 0, added.stderr
    for query, want in (("give", "chris gave a talk"), ("children", "ana's kids")):
        found = sandbox.run([INSTALL_PATH, "memory", "search", query],
                            env={"DATA_DIR": "/data"}, data=data)
        assert want in found.stdout, (query, found.stdout, found.stderr)
