"""`gantry run` (stdio, fake model) with MEMORY_BACKEND=mcp:<server>, end to end.

The memory server is a manifest entry started by the real MCP host: (a) gantry's own
`gantry mcp-memory` with its own DATA_DIR granted by the manifest, (b) the aigpt look-alike
(tests/fakes/aigpt.py). The model stores through the builtin `memory_store`, the row lands in
the child's storage, a later conversation is hydrated from it and `memory_recall` finds it;
the server's raw memory tools are not offered next to the builtin ones. A missing server or
one with neither shape stops boot with exit 1 and a message.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import pytest

from tests.fakes.mcp_servers import python_fixture_toml, toml_server
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.test_stdio_e2e import ROOT, Gantry, fake, spawn

pytestmark = pytest.mark.slow
__all__ = ["fake", "spawn"]  # fixtures used by name below

BOOT = 90.0
MEMORY_TOOLS = ["memory_forget", "memory_recall", "memory_store"]
MOM = {"kind": "person", "subject": "mom", "content": "prefers calls over texts"}
LINE = "(person) mom: prefers calls over texts"
CAR = {"kind": "fact", "subject": "car", "content": "drives a red van"}
CAR_LINE = "(fact) car: drives a red van"
DID = "did:plc:e2etest"


def manifest(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mcp.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def gantry_memory_server(tmp_path: Path, name: str = "mem") -> tuple[str, Path]:
    """A manifest entry running `python -m gantry mcp-memory` on its own DATA_DIR."""
    data, persona = tmp_path / "mem-data", tmp_path / "mem-persona"
    persona.mkdir()
    (persona / "SOUL.md").write_text("You are the memory keeper.\n", encoding="utf-8")
    entry = toml_server(name, [sys.executable, "-m", "gantry", "mcp-memory"], cwd=str(ROOT),
                        env={"DATA_DIR": str(data), "PERSONA_DIR": str(persona)})
    return entry, data / "gantry.db"


def aigpt_server(tmp_path: Path, name: str = "ai") -> tuple[str, Path]:
    """A manifest entry running the aigpt look-alike; returns its memory record directory."""
    root = tmp_path / "aigpt"
    entry = toml_server(name, [sys.executable, "-m", "tests.fakes.aigpt", str(root), DID],
                        cwd=str(ROOT))
    return entry, root / DID / "ai.syui.gpt.memory"


def sqlite_rows(path: Path) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(conn.execute("SELECT kind, subject, content, source FROM memory"))
    finally:
        conn.close()


def aigpt_texts(directory: Path) -> list[str]:
    return [json.loads(p.read_text())["value"]["content"]["text"]
            for p in sorted(directory.glob("*.json"))]


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


def tool_results(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m["content"]) for m in messages if m.get("role") == "tool"]


def store_recall_forget(g: Gantry, fake: FakeOpenAI, stored: Callable[[], list[str]]) -> str:
    """The shared conversation; returns the id memory_recall showed for mom's row."""
    fake.push(ToolCalls([Call("memory_store", MOM, id="s1"), Call("memory_store", CAR, id="s2")]),
              Reply("Noted."))
    g.ask("remember that mom prefers calls over texts, and my red van", "Noted.", timeout=BOOT)
    first, second = fake.requests
    names = tool_names(first.body)
    assert names == MEMORY_TOOLS, names  # the server's own memory tools are not offered
    results = tool_results(second.messages)
    assert len(results) == 2 and all(r.startswith("stored #") for r in results), results
    assert sorted(stored()) == sorted([LINE, CAR_LINE])

    g.ask("/new", "Started a new conversation. (Long-term memory is unchanged.)")
    fake.push(Reply("Call her."))
    g.ask("any tips before the weekend?", "Call her.")  # shares no word with the rows
    turn = fake.requests[2].messages[-1]["content"]  # recalled after the message, with the time
    assert "[memory]" in turn and f"- {LINE}" in turn and f"- {CAR_LINE}" in turn, turn
    assert [m["role"] for m in fake.requests[2].messages] == ["system", "user"]

    fake.push(ToolCalls([Call("memory_recall", {"query": "mom texts"}, id="r1")]),
              Reply("She prefers calls."))
    g.ask("how does mom like to be contacted?", "She prefers calls.")
    recalled = tool_results(fake.requests[4].messages)[-1]
    assert recalled.startswith("#") and f" {LINE} (" in recalled.splitlines()[0], recalled
    row_id = recalled.split()[0]

    fake.push(ToolCalls([Call("memory_forget", {"id": row_id}, id="f1")]), Reply("Forgotten."))
    g.ask("forget that", "Forgotten.")
    forgot = tool_results(fake.requests[6].messages)[-1]
    assert forgot.startswith("deleted 1:") and LINE in forgot, forgot
    assert stored() == [CAR_LINE]
    return row_id


@pytest.mark.parametrize("name", ["mem", "memory"])
def test_gantry_mcp_memory_as_the_backend(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path, name: str
) -> None:
    """Also under the name most people give a memory server: `memory`, which is the built-in
    memory tools' source name too (issue 24 #6)."""
    entry, child_db = gantry_memory_server(tmp_path, name)
    g = spawn(MCP_MANIFEST=manifest(tmp_path, entry), MEMORY_BACKEND=f"mcp:{name}",
              CRON_ENABLED="false")
    seen: list[list[tuple[Any, ...]]] = []

    def stored() -> list[str]:
        rows = sqlite_rows(child_db)
        seen.append(rows)
        return [f"({k}) {s}: {c}" for k, s, c, _src in rows]

    store_recall_forget(g, fake, stored)
    assert {row[3] for row in seen[0]} == {"mcp"}  # came in over `gantry mcp-memory`
    assert sqlite_rows(g.data_dir / "gantry.db") == []  # gantry's builtin store never used
    g.send("/status")
    status = g.expect(f"memory: mcp:{name} (mcp:{name} memory_* tools)\n")
    assert "\ntools offered: 3 (3 built in), ~" in status  # memory_*, nothing of the server's
    assert re.search(rf"mcp {name}: up, 7 tools \(7 for memory only\), \d+ calls, 0 errors",
                     status)
    listing = subprocess.run([sys.executable, "-m", "gantry", "tools", "list"], env=g.env,
                             cwd=ROOT, capture_output=True, text=True, timeout=BOOT)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert any(line.startswith("MCP server ") and " speaks MCP " in line for line in lines)
    assert [line.split()[0] for line in lines[:-1]
            if not line.startswith("MCP server ")] == MEMORY_TOOLS
    g.close_stdin()
    assert g.wait_exit() == 0
    g.assert_clean()


def test_aigpt_lookalike_as_the_backend(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    entry, records = aigpt_server(tmp_path)
    g = spawn(MCP_MANIFEST=manifest(tmp_path, entry), MEMORY_BACKEND="mcp:ai",
              CRON_ENABLED="false")
    row_id = store_recall_forget(g, fake, lambda: aigpt_texts(records))
    assert len(row_id) == 14 and row_id.startswith("#")  # '#' + the record's 13-char TID
    fake.push(ToolCalls([Call("memory_forget", {"query": "red van"}, id="f2")]),
              Reply("Cannot."))
    g.ask("forget the van too", "Cannot.")
    refused = tool_results(fake.requests[8].messages)[-1]
    assert refused.startswith("error: refused: this would delete every memory"), refused
    assert aigpt_texts(records) == [CAR_LINE]
    g.close_stdin()
    assert g.wait_exit() == 0
    g.assert_clean()


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains `text` (a test's unique tmp path)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if text in cmdline and state != "Z":
                out.append(int(entry))
    return out


def boot_fails(g: Gantry, tmp_path: Path) -> str:
    """Exit 1, one `gantry: …` line for the operator, JSON logs without a traceback, and
    no MCP child left behind; returns the operator line."""
    assert g.wait_exit(BOOT) == 1
    assert "Traceback" not in g.stderr, g.stderr
    plain = [line for line in g.stderr.splitlines() if not line.startswith("{")]
    assert len(plain) == 1 and plain[0].startswith("gantry: "), g.stderr
    records = [json.loads(line) for line in g.stderr.splitlines() if line.startswith("{")]
    assert not [r for r in records if "traceback" in r], g.stderr
    assert any(r["message"] == "boot failed" for r in records), g.stderr
    assert g.stdout == ""
    deadline = time.monotonic() + 10
    while processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(tmp_path)) == []
    return plain[0]


def test_backend_naming_no_manifest_server_stops_boot(
    spawn: Callable[..., Gantry], tmp_path: Path
) -> None:
    entry, _ = aigpt_server(tmp_path)
    g = spawn(MCP_MANIFEST=manifest(tmp_path, entry), MEMORY_BACKEND="mcp:nosuch")
    err = boot_fails(g, tmp_path)
    assert ("gantry: MEMORY_BACKEND=mcp:nosuch: no MCP server named 'nosuch' in the manifest "
            "(servers: ai)") in err, err


def test_backend_without_any_manifest_stops_boot(
    spawn: Callable[..., Gantry], tmp_path: Path
) -> None:
    g = spawn(MCP_MANIFEST=manifest(tmp_path, "# no servers yet\n"), MEMORY_BACKEND="mcp:nosuch")
    err = boot_fails(g, tmp_path)
    assert "MEMORY_BACKEND=mcp:nosuch needs MCP servers" in err, err


def test_backend_with_neither_shape_stops_boot(
    spawn: Callable[..., Gantry], tmp_path: Path
) -> None:
    g = spawn(MCP_MANIFEST=manifest(tmp_path, python_fixture_toml("fx")),
              MEMORY_BACKEND="mcp:fx")
    err = boot_fails(g, tmp_path)
    assert "gantry: MEMORY_BACKEND=mcp:fx: the server exposes neither memory_store" in err, err
    assert "(it has: " in err and "use MEMORY_BACKEND=builtin" in err, err
