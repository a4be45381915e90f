"""The usage ledger inside the frozen binary in the distroless-like rootfs (issue 38).

A tool turn and a plain turn are counted as the fake model reported them; `gantry usage
--json` reads them back beside the running daemon (read-only, no sqlite3 in the image); a
kill -9 while a call is in flight leaves its row to be counted once, as lost, at the next
start.
"""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import pytest

from tests.binary.rootfs import INSTALL_PATH, Sandbox
from tests.binary.test_binary import _run_env, binds, etc_gantry, start
from tests.fakes.mcp_servers import kill_tree
from tests.fakes.openai import Call, Reply, ToolCalls

pytestmark = [pytest.mark.binary, pytest.mark.slow]
__all__ = ["binds", "etc_gantry", "start"]  # fixtures used by name

PRICES = "fake-model=2/0.5/8"


def usage(sandbox: Sandbox, data: Any) -> dict[str, Any]:
    r = sandbox.run([INSTALL_PATH, "usage", "--json", "--since", "all"],
                    env={"DATA_DIR": "/data"}, data=data, timeout=60)
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def test_usage_ledger_in_the_frozen_binary(sandbox: Sandbox, start: Any,
                                           fake_openai: Any) -> None:
    data = sandbox.new_data_dir("data-usage")
    before = len(fake_openai.requests)
    fake_openai.cached_tokens = 16
    fake_openai.push(ToolCalls([Call("cron_list", {}, id="l1")]), Reply("No jobs."),
                     Reply("Hello."))
    env = _run_env(fake_openai.base_url, LLM_PRICES=PRICES, MEMORY_ENABLED="false")
    run = start(env, data=data)
    run.send("any jobs?")
    run.expect("No jobs.\n")
    run.send("hi")
    run.expect("Hello.\n")
    sent = dict(fake_openai.reported)
    mine = [sent[r.reply_id] for r in fake_openai.requests[before:]]
    assert len(mine) == 3
    total = usage(sandbox, data)["total"]  # beside the running daemon
    assert total["calls"] == 3 and total["lost"] == 0 and total["estimated"] == 0
    assert total["prompt_tokens"] == sum(u["prompt_tokens"] for u in mine)
    assert total["completion_tokens"] == sum(u["completion_tokens"] for u in mine)
    assert total["cached_tokens"] == 3 * 16 and total["cost"] > 0

    fake_openai.push(Reply("too late", delay=30))
    run.send("slow one")
    deadline = time.monotonic() + 30
    while len(fake_openai.requests) < before + 4:
        assert time.monotonic() < deadline, run.stderr[-3000:]
        time.sleep(0.1)
    kill_tree(run.proc.pid)  # gantry itself, not only the onefile bootstrap
    run.stop(signal.SIGKILL)
    fake_openai.cached_tokens = 0
    again = start(env, data=data)
    again.send("/status")
    status = again.expect("cache hit ")
    assert "usage today: 4 calls" in status, status
    total = usage(sandbox, data)["total"]
    assert total["calls"] == 4 and total["lost"] == 1 and total["estimated"] == 1
    assert again.stop(signal.SIGTERM) == 0, again.stderr[-3000:]
    assert "Traceback" not in again.stderr
