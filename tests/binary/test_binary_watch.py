"""A poll watch inside the frozen binary in the distroless-like rootfs (issue 31).

The MCP child is the static C fixture with its `file` tool offered (STATIC_TOOLS): the watch
polls a JSON file under /data that the test rewrites. Quiet polls make no model call; one
new item wakes one turn, pushed on stdout with no user message; `gantry watch list` reads
the watch back without sqlite3.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from tests.binary.rootfs import INSTALL_PATH, Sandbox
from tests.binary.test_binary import _run_env, binds, etc_gantry, start
from tests.fakes.mcp_servers import static_fixture, toml_server
from tests.fakes.openai import Call, Reply, ToolCalls

pytestmark = [pytest.mark.binary, pytest.mark.slow]
__all__ = ["binds", "etc_gantry", "start"]  # fixtures used by name

FILE_TOOL = {"tools": [{"name": "file", "description": "A file's contents.",
                        "inputSchema": {"type": "object",
                                        "properties": {"path": {"type": "string"}},
                                        "required": ["path"]}}]}


def static_binds(factory: pytest.TempPathFactory, sandbox: Sandbox, tools: dict[str, Any],
                 tag: str) -> dict[str, Path]:
    """/opt/mcp with the static C fixture and /etc/gantry/mcp.toml naming it `st`, offering
    `tools` (STATIC_TOOLS)."""
    opt = factory.mktemp(f"opt-mcp-{tag}")
    shutil.copy(static_fixture(), opt / "mcp-static")
    (opt / "mcp-static").chmod(0o755)
    opt.chmod(0o755)
    etc = factory.mktemp(f"etc-gantry-{tag}")
    (etc / "mcp.toml").write_text(toml_server("st", ["/opt/mcp/mcp-static"],
                                              env={"STATIC_TOOLS": json.dumps(tools)}))
    (etc / "mcp.toml").chmod(0o644)
    etc.chmod(0o755)
    (sandbox.root / "opt" / "mcp").mkdir(parents=True, exist_ok=True)
    return {"/opt/mcp": opt, "/etc/gantry": etc}


@pytest.fixture
def watch_binds(tmp_path_factory: pytest.TempPathFactory, sandbox: Sandbox) -> dict[str, Path]:
    return static_binds(tmp_path_factory, sandbox, FILE_TOOL, "watch")


def write_feed(path: Path, items: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(items))
    tmp.chmod(0o644)
    os.replace(tmp, path)


def polls(db: Path) -> int:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = list(conn.execute("SELECT polls FROM watch"))
    except apsw.SQLError:
        return 0
    finally:
        conn.close()
    return int(rows[0][0]) if rows else 0


def test_poll_watch_in_the_frozen_binary(
    sandbox: Sandbox, start: Any, fake_openai: Any, watch_binds: dict[str, Path]
) -> None:
    data = sandbox.new_data_dir("data-watch")
    feed = data / "feed.json"
    write_feed(feed, [{"id": "a1", "title": "old alert"}])
    before = len(fake_openai.requests)
    fake_openai.push(
        ToolCalls([Call("watch_add", {"tool": "st__file", "arguments": {"path": "/data/feed.json"},
                                      "interval_seconds": 1, "label": "alerts",
                                      "instruction": "Tell the user about new alerts."},
                        id="w1")]),
        Reply("Watching."),
        Reply("New alert: flood warning."),
    )
    run = start(_run_env(fake_openai.base_url, CRON_TICK_SECONDS="1",
                         WATCH_MIN_INTERVAL_SECONDS="1"), data=data, extra_binds=watch_binds)
    run.send("tell me about new alerts")
    run.expect("Watching.\n")
    tool = next(m for m in fake_openai.requests[before + 1].messages if m["role"] == "tool")
    assert tool["content"].startswith("watch #1 (alerts) added: checks every 1 s"), tool
    deadline = time.monotonic() + 60
    while polls(data / "gantry.db") < 6:  # the seed poll and five quiet ones
        assert time.monotonic() < deadline, run.stderr[-3000:]
        time.sleep(0.2)
    assert len(fake_openai.requests) == before + 2
    write_feed(feed, [{"id": "a1", "title": "old alert"}, {"id": "a2", "title": "flood warning"}])
    run.expect("New alert: flood warning.\n")
    assert len(fake_openai.requests) == before + 3
    woke = fake_openai.requests[before + 2].last_user_text
    assert "flood warning" in woke and "old alert" not in woke
    listing = sandbox.run([INSTALL_PATH, "watch", "list"], env={"DATA_DIR": "/data"},
                          data=data, timeout=60)
    assert listing.returncode == 0, listing.stderr
    assert "#1 [active] stdio:local · alerts · st__file" in listing.stdout
    assert "1 wakes (last delivered)" in listing.stdout
    assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
