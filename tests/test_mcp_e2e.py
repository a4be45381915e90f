"""`gantry run` (stdio, fake model) with MCP servers from a manifest, end to end.

The model calls real servers' tools and sees their results; a crashed server is back for a
later turn; a hanging one is timed out; kill -9 between two tool rounds re-runs no finished
call; bad manifests stop boot with exit 1 and a message; no manifest → `mcp` never imported.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from gantry.mcp.elicitation import Elicitor
from gantry.mcp.host import Host
from gantry.mcp.manifest import parse
from gantry.tools import Registry
from tests.fakes.mcp_remote import fixture_http, free_port, toml_remote
from tests.fakes.mcp_servers import (
    everything_command,
    python_fixture_toml,
    static_fixture,
    time_command,
    toml_server,
)
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.test_mcp_host import BASE_ENV
from tests.test_repl_tty import Repl, repl
from tests.test_stdio_e2e import KEY, ROOT, Gantry, fake, spawn, wait_requests

pytestmark = pytest.mark.slow
__all__ = ["fake", "repl", "spawn"]  # fixtures used by name below

BOOT = 90.0


def manifest(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mcp.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def tool_messages(request_messages: list[dict[str, object]]) -> list[dict[str, object]]:
    return [m for m in request_messages if m.get("role") == "tool"]


def test_model_calls_a_real_server_and_sees_the_result(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    path = manifest(tmp_path, toml_server("time", [time_command()]) +
                    toml_server("st", [str(static_fixture())]))
    g = spawn(MCP_MANIFEST=path)
    fake.push(
        ToolCalls([Call("time__get_current_time", {"timezone": "Asia/Tokyo"}, id="t1"),
                   Call("st__echo", {"text": "side by side"}, id="t2")]),
        Reply("It is late in Tokyo."),
    )
    g.ask("what time is it in Tokyo?", "It is late in Tokyo.", timeout=BOOT)
    first = fake.requests[0].body
    names = {t["function"]["name"] for t in first["tools"]}
    assert {"time__get_current_time", "time__convert_time", "st__echo"} <= names
    results = tool_messages(fake.requests[1].messages)
    assert [r["tool_call_id"] for r in results] == ["t1", "t2"]
    assert json.loads(str(results[0]["content"]))["timezone"] == "Asia/Tokyo"
    assert results[1]["content"] == "side by side"

    g.send("/status")
    status = g.expect("restarts\n")
    status += g.expect("restarts\n")
    assert "mcp time: up, 2 tools, 1 calls, 0 errors" in status
    assert "mcp st: up, 4 tools, 1 calls, 0 errors" in status
    done = g.wait_log("turn done")
    assert done["tools"] == ["st__echo", "time__get_current_time"]
    g.close_stdin()
    assert g.wait_exit() == 0
    telemetry = g.wait_log("mcp tool telemetry")["tools"]
    assert telemetry["time/get_current_time"]["calls"] == 1
    assert telemetry["st/echo"]["errors"] == 0 and telemetry["st/echo"]["max_ms"] > 0
    g.assert_clean()


def test_crashed_server_is_used_again_in_a_later_turn_and_hang_times_out(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    path = manifest(tmp_path, toml_server("st", [str(static_fixture())]) +
                    python_fixture_toml("fx", timeout=2))
    g = spawn(MCP_MANIFEST=path)
    fake.push(ToolCalls([Call("st__crash", {}, id="c1")]), Reply("it broke"))
    g.ask("break it", "it broke", timeout=BOOT)
    crashed = tool_messages(fake.requests[1].messages)[0]["content"]
    assert "stopped while running 'crash'" in str(crashed)
    g.wait_log("mcp server restarted")

    fake.push(ToolCalls([Call("st__echo", {"text": "alive again"}, id="c2")]), Reply("fine"))
    g.ask("again", "fine")
    assert tool_messages(fake.requests[3].messages)[-1]["content"] == "alive again"

    fake.push(ToolCalls([Call("fx__hang", {}, id="c3")]), Reply("gave up"))
    started = time.monotonic()
    g.ask("wait for it", "gave up")
    assert time.monotonic() - started < 15
    hung = tool_messages(fake.requests[5].messages)[-1]["content"]
    assert "did not answer within 2 s" in str(hung)
    g.close_stdin()
    assert g.wait_exit() == 0
    g.assert_clean()


def test_kill_9_between_rounds_reruns_no_finished_tool_call(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    counter = tmp_path / "calls.txt"
    path = manifest(tmp_path, python_fixture_toml("fx"))
    g = spawn(MCP_MANIFEST=path)
    fake.push(
        ToolCalls([Call("fx__count", {"path": str(counter), "label": "book-slot"}, id="r1")]),
        Reply("never delivered", delay=60),  # round 2's model call is in flight…
    )
    g.send("book me a slot, then mail the confirmation")
    wait_requests(fake, 2, timeout=BOOT)
    os.kill(g.proc.pid, signal.SIGKILL)  # …when gantry dies
    g.proc.wait(10)
    assert counter.read_text().splitlines() == ["book-slot"]

    again = spawn(MCP_MANIFEST=path)
    fake.push(
        ToolCalls([Call("fx__count", {"path": str(counter), "label": "send-mail"}, id="r2")]),
        Reply("Booked and mailed."),
    )
    # The channel delivers the message again (stdio: the user re-sends it).
    again.ask("book me a slot, then mail the confirmation", "Booked and mailed.", timeout=BOOT)
    assert counter.read_text().splitlines() == ["book-slot", "send-mail"]
    resumed = fake.requests[2].messages
    assert [m["role"] for m in resumed] == ["system", "user", "assistant", "tool"]
    assert resumed[3]["content"] == "1"
    final = fake.requests[3].messages
    assert [m["role"] for m in final] == ["system", "user", "assistant", "tool", "assistant",
                                          "tool"]
    again.close_stdin()
    assert again.wait_exit() == 0


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[[server]]\nname = "a b"\ncommand = "sh"\n', "name must match"),
        ('[[server]]\nname = "x"\ncommand = "no-such-binary-qq"\n', "neither an executable"),
        ('[[server]]\nname = "x"\ncommand = "sh"\nenv = { K = "${UNSET_QQ}" }\n',
         "${UNSET_QQ} is used but not set"),
        ('[[server]]\nname = "x"\ncommand = "sh"\nbogus = 1\n', "unknown key 'bogus'"),
        ('[[server]]\nname = "x"\ncommand = "sh"\n[[server]]\nname = "x"\ncommand = "sh"\n',
         "duplicate name"),
        ('[[server]]\nname = "x"\ncommand = "sh"\nargs = ["-c", "echo nope >&2; exit 4"]\n',
         "nope"),
        (None, "file not found"),
    ],
)
def test_bad_manifests_stop_boot_with_exit_1_and_no_traceback(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path, text: str | None,
    needle: str,
) -> None:
    path = manifest(tmp_path, text) if text is not None else str(tmp_path / "missing.toml")
    g = spawn(MCP_MANIFEST=path)
    assert g.wait_exit(BOOT) == 1
    assert needle in g.stderr
    assert "Traceback" not in g.stderr
    assert fake.requests == []


def test_without_servers_mcp_is_never_imported(tmp_path: Path, fake: FakeOpenAI) -> None:
    persona = tmp_path / "persona"
    persona.mkdir()
    (persona / "PERSONA.md").write_text("You are lean.\n")
    code = ("import sys; from gantry.cli import main; rc = main(['run']); "
            "print('MCP_IMPORTED', sorted(m for m in sys.modules if m.split('.')[0] in "
            "('mcp', 'mcp_types', 'jsonschema')), file=sys.stderr); sys.exit(rc)")
    env = {"PATH": os.environ.get("PATH", ""), "CHANNEL": "stdio", "LLM_BASE_URL": fake.base_url,
           "LLM_API_KEY": KEY, "LLM_MODEL": "m", "DATA_DIR": str(tmp_path / "d"),
           "PERSONA_DIR": str(persona), "MCP_MANIFEST": manifest(tmp_path, "# none\n")}
    proc = subprocess.run([sys.executable, "-c", code], input="hi\n", env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "echo: hi\n"
    assert "MCP_IMPORTED []" in proc.stderr


def tools_list(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gantry", "tools", "list"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=BOOT)


def wire_tokens(tools: list[dict[str, object]]) -> int:
    """The chars/4 estimate of the tool definitions as they went over the wire."""
    return sum((len(json.dumps(t, separators=(",", ":"), ensure_ascii=False)) + 3) // 4
               for t in tools)


def test_tools_list_is_what_the_model_is_offered(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    """Issue 24 #14 (tools list left out the built-ins and showed hidden tools) and #6
    (servers named cron and memory wiped cron_* at boot and memory_* at a restart): the
    listing, /status and the next request agree, also after the memory server restarts."""
    path = manifest(tmp_path, toml_server("memory", [str(static_fixture())]) +
                    toml_server("cron", [str(static_fixture())]) +
                    toml_server("every", everything_command()))
    g = spawn(MCP_MANIFEST=path, TOOLS_MAX_PER_TURN="50")  # 26 tools: all offered, no routing
    listing = tools_list(g.env)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    summary = lines[-1]
    rows = [line for line in lines[:-1] if not line.startswith(("not offered: ", "MCP server "))]
    assert "MCP server every speaks MCP 2025-11-25 (handshake)" in lines  # its era
    listed = [line.split()[0] for line in rows]
    # Issue 42 #4: a task-only tool is offered now (gantry calls it as a task).
    assert "every__simulate-research-query" in listed
    assert not [line for line in lines if line.startswith("not offered: ")]
    marks = {line.split()[0]: line.split("tokens", 1)[1].split()[0:2] for line in rows}
    assert marks["memory_store"] == ["built", "in"] and marks["cron_list"] == ["built", "in"]
    assert marks["memory__echo"][0] == "memory" and marks["every__echo"][0] == "every"
    builtin = [n for n in listed if "__" not in n]
    assert builtin == ["cron_cancel", "cron_list", "cron_schedule", "memory_forget",
                       "memory_recall", "memory_store", "resource_list", "resource_read",
                       "send_attachment", "watch_add", "watch_cancel", "watch_list"]
    # send_attachment and watches come with MCP servers, the resource tools with
    # server-everything's resources
    mcp = len(listed) - 12
    assert summary.startswith(f"tools offered: {len(listed)} (12 built in + {mcp} MCP), ~")

    fake.push(ToolCalls([Call("memory__crash", {}, id="c1")]), Reply("it broke"))
    g.ask("break the memory server", "it broke", timeout=BOOT)
    g.wait_log("mcp server restarted")
    g.ask("and now?", "echo: and now?")
    for request in (fake.requests[0], fake.requests[-1]):
        sent = request.body["tools"]
        assert [t["function"]["name"] for t in sent] == listed
        assert summary == f"tools offered: {len(sent)} (12 built in + {mcp} MCP), " \
            f"~{wire_tokens(sent)} schema tokens per request (est.)"
    g.send("/status")
    assert f"\n{summary}\n" in g.expect("restarts\n")
    g.close_stdin()
    assert g.wait_exit() == 0


def test_routed_status_and_tools_list_name_tools_search_the_same_way(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    """Routing sends the model tools_search: /status and `tools list` count it, say what it
    is (not a built-in capability), and agree on the line."""
    path = manifest(tmp_path, toml_server("every", everything_command()))
    g = spawn(MCP_MANIFEST=path, TOOLS_MAX_PER_TURN="3")
    listing = tools_list(g.env)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    (search,) = [line for line in lines if line.startswith("tools_search ")]
    assert "  routing  " in search and "built in" not in search
    summary = lines[-1]
    assert " built in + tools_search), ~" in summary and "routed:" in summary
    g.send("/status")
    assert f"\n{summary}\n" in g.expect("restarts\n")
    g.close_stdin()
    assert g.wait_exit() == 0


def test_tools_list_without_servers_or_settings_shows_the_builtin_tools(tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "MCP_MANIFEST": "/dev/null"}
    out = tools_list(env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == [
        "cron_cancel", "cron_list", "cron_schedule", "memory_forget", "memory_recall",
        "memory_store"]
    assert all("  built in  " in line for line in lines[:-1])
    assert lines[-1].startswith("tools offered: 6 (6 built in), ~")
    off = tools_list({**env, "MEMORY_ENABLED": "false", "CRON_ENABLED": "false"})
    assert off.stdout == "tools offered: 0 (0 built in), ~0 schema tokens per request (est.)\n"
    bad = tools_list({**env, "CRON_TZ": "Mars/Olympus"})
    assert bad.returncode == 1 and "CRON_TZ 'Mars/Olympus'" in bad.stderr


def test_tools_list_fails_with_the_server_s_reason(tmp_path: Path) -> None:
    bad = manifest(tmp_path, toml_server("st", ["sh", "-c", "echo broken >&2; exit 2"]))
    proc = tools_list({"PATH": os.environ.get("PATH", ""), "MCP_MANIFEST": bad})
    assert proc.returncode == 1 and "MCP server 'st'" in proc.stderr
    assert proc.stderr.count("broken") == 1 and proc.stderr.count("could not start") == 1
    assert "Traceback" not in proc.stderr


def test_two_servers_under_the_limit_are_offered_every_tool_and_one_count(
    repl: Callable[..., Repl], fake: FakeOpenAI, tmp_path: Path
) -> None:
    """Issue 36 #1 and #2: mcp-server-time and server-everything (well under the default 24
    MCP tools) are not routed, though the ten built-ins bring the total past 24: the request
    carries every MCP tool (listed by the servers themselves) and no tools_search; the REPL's
    start line, /status and the request agree on one count whose parts add up."""
    text = toml_server("time", [time_command()]) + toml_server("every", everything_command())

    async def catalog() -> set[str]:  # as `gantry run` starts them: elicitation declared
        registry = Registry()
        host = Host(parse(text, BASE_ENV), registry, BASE_ENV, elicitor=Elicitor(timeout=60))
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(BOOT):
                await host.start(tg)
            tg.cancel_scope.cancel()
        return {t.name for t in registry.tools() if t.source.mcp}

    mcp = anyio.run(catalog)
    assert 10 + len(mcp) > 24 and len(mcp) <= 24  # the case the issue is about
    r = repl(MCP_MANIFEST=manifest(tmp_path, text))
    start = r.expect(" tool(s) · ", timeout=BOOT)
    shown = re.search(r" · (\d+) tool\(s\) · $", start)
    assert shown is not None, start
    banner = int(shown.group(1))
    r.expect("> ")
    r.type("add four and five\r")
    r.expect("echo: add four and five\n> ")
    sent = [t["function"]["name"] for t in fake.requests[-1].body["tools"]]
    assert mcp <= set(sent) and "tools_search" not in sent
    r.type("/status\r")
    status = r.expect("\n> ")
    count = re.search(r"\ntools offered: (\d+) \((\d+) built in \+ (\d+) MCP\), ~", status)
    assert count is not None, status
    total, builtin, offered_mcp = map(int, count.groups())
    assert banner == total == len(sent) == builtin + offered_mcp and offered_mcp == len(mcp)
    assert f"last call offered {total} (all offered)" in status
    r.type("\x04")
    assert r.wait_exit() == 0


def test_a_down_server_s_cause_is_told_once_and_status_cuts_between_words(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    """Issue 36 #3: a remote server that is down named its connection cause twice in every
    error and log line, a server that went down logged two warnings per retry, and /status
    cut the long error mid-word ("…attempts faile)")."""
    far = f"http://127.0.0.1:{free_port()}/mcp/" + "/".join(["segment"] * 15)  # ~150 chars
    cause = "All connection attempts failed"
    with fixture_http() as near:
        text = toml_remote("far", far, required=False) + toml_remote("near", near.url)
        g = spawn(MCP_MANIFEST=manifest(tmp_path, text), LOG_LEVEL="debug")
        g.wait_log("receiving", timeout=BOOT)
    deadline = time.monotonic() + 90
    while len(retries := [r for r in g.logs() if r.get("server") == "near"
                          and r["message"] == "mcp server down; restarting"]) < 2:
        assert time.monotonic() < deadline, "no two retries of the stopped server"
        time.sleep(0.2)
    g.send("/status")
    status = g.expect("restarts\n")
    line = next(s for s in status.splitlines() if s.startswith("mcp far: "))
    shown = line.split("last error: ", 1)[1].rsplit("), ", 1)[0]
    far_logs = [r for r in g.logs() if r.get("server") == "far"]
    full = next(r["error"] for r in far_logs if r["message"].startswith("optional mcp server"))
    assert full.count(cause) == 1, full
    assert len(full) > 200 and shown.endswith("…") and len(shown) <= 200, shown
    kept = shown[:-1]
    assert full.startswith(kept) and full[len(kept)] == " ", (kept, full)
    for record in far_logs + retries:
        told = " ".join(str(v) for k, v in record.items() if k in ("error", "reason"))
        assert told.count(cause) <= 1, record
    assert sum(r.get("server") == "near" and r["level"] == "warning" for r in g.logs()) <= \
        len(retries) + 1  # one warning per retry (and one when it dropped at most)
    g.close_stdin()
    assert g.wait_exit() == 0
