"""MCP prompts and resources end to end (issue 41 items 2 and 3): `gantry run` as a
subprocess with npm server-everything, the fake model and the fake Bot API (or the stdio
REPL on a pipe). `/prompts` lists the server's prompts; `/prompt` puts the prompt's text into
the model's request as the user's message, asking for missing arguments through the
elicitation relay (Telegram messages, the REPL's own input); the model reads a text resource
and sends a blob resource with send_attachment; a resource link is readable."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakes.mcp_remote import everything_http, toml_remote
from tests.fakes.mcp_servers import everything_command, time_command, toml_server
from tests.fakes.openai import Call, FakeOpenAI, Reply, SendAttachment, ToolCalls, without_footer
from tests.fakes.telegram import FakeTelegram
from tests.test_cron_e2e import STARTUP
from tests.test_elicit_e2e import Chat
from tests.test_stdio_e2e import Gantry as StdioGantry
from tests.test_stdio_e2e import fake, spawn
from tests.test_telegram_e2e import USER, Gantry, fakes, no_secrets, run, states, wait

pytestmark = pytest.mark.slow
__all__ = ["fake", "fakes", "run", "spawn"]  # fixtures used by name below

BLOB = "demo://resource/dynamic/blob/5"


def last_user(llm: FakeOpenAI) -> str:
    users = [m for m in llm.requests[-1].messages if m["role"] == "user"]
    return without_footer(str(users[-1]["content"])).strip()


def tool_results(llm: FakeOpenAI) -> list[str]:
    return [str(m["content"]) for r in llm.requests for m in r.messages if m["role"] == "tool"]


def offered(llm: FakeOpenAI, index: int = -1) -> dict[str, dict[str, object]]:
    return {t["function"]["name"]: t["function"] for t in llm.requests[index].body["tools"]}


def test_telegram_prompts_missing_arguments_and_a_blob_resource(
    fakes: tuple[FakeTelegram, FakeOpenAI], run: Callable[..., Gantry], tmp_path: Path
) -> None:
    tg, llm = fakes
    manifest = tmp_path / "mcp.toml"
    manifest.write_text(toml_server("every", everything_command(), timeout=20)
                        + toml_server("time", [time_command()]), encoding="utf-8")
    g = run(MCP_MANIFEST=str(manifest), ELICITATION_TIMEOUT_SECONDS="60")
    chat = Chat(tg)
    tg.push_text(USER, "/prompts")
    listed = chat.next("MCP servers' prompts", timeout=STARTUP)
    assert "/prompt every args-prompt city=… [state=…] — Arguments Prompt: A prompt with " \
           "two arguments, one required and one optional" in listed
    assert "/prompt every simple-prompt" in listed and not llm.requests
    menu = tg.calls("setMyCommands")[-1].params["commands"]
    menu = json.loads(menu) if isinstance(menu, str) else menu
    assert {"prompts", "prompt"} <= {c["command"] for c in menu}

    # Every argument on the line: the prompt's text is the turn's user message.
    llm.push(Reply("sunny"))
    tg.push_text(USER, '/prompt every args-prompt city="New York" state=NY')
    chat.next("sunny")
    assert last_user(llm) == "What's weather in New York, NY?"

    # Both missing: asked one at a time in the chat, then the prompt runs.
    llm.push(Reply("promoted"))
    tg.push_text(USER, "/prompt every completable-prompt")
    chat.next("The prompt 'completable-prompt' of MCP server 'every' needs 2 more argument(s)")
    chat.type("(1/2) department\nChoose the department.", "Engineering")
    chat.type("(2/2) name\nChoose a team member", "Alice Smith")
    chat.next("promoted")
    assert last_user(llm) == "Please promote Alice Smith to the head of the Engineering team."

    # /cancel during the questions: nothing runs, the model is not asked.
    asked = len(llm.requests)
    tg.push_text(USER, "/prompt every args-prompt")
    chat.next("needs 2 more argument(s)")
    chat.type("(1/2) city", "/cancel")
    chat.next("Cancelled.")
    chat.next("The prompt 'args-prompt' was not run.")
    assert len(llm.requests) == asked

    # The resource tool: offered for `every` only (time has no resources); a blob goes out
    # as a file through send_attachment, its bytes never in the model's context.
    llm.default = SendAttachment(Call("resource_read", {"server": "every", "uri": BLOB}),
                                 "Here is the blob.")
    tg.push_text(USER, "send me blob 5")
    (sent,) = tg.wait_uploads_sync(USER, 1, timeout=60)
    assert sent.method == "sendDocument"
    assert sent.data.startswith(b"Resource 5: This is a base64 blob created at")
    wait(lambda: states(g.env["DATA_DIR"]).get("send me blob 5") == "answered", 30, "answer")
    tools = offered(llm)
    assert tools["resource_read"]["parameters"]["properties"]["server"]["enum"] == ["every"]
    assert "resource_list" in tools
    assert "attachment" in tool_results(llm)[-2]
    assert all("UmVzb3VyY2Ug" not in r.raw.decode() for r in llm.requests)
    assert g.stop() == 0
    no_secrets(g)


def test_stdio_over_streamable_http_prompt_asks_and_resources_read(
    spawn: Callable[..., StdioGantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    with everything_http("streamableHttp") as srv:
        manifest = tmp_path / "mcp.toml"
        manifest.write_text(toml_remote("every", srv.url, timeout=20), encoding="utf-8")
        g = spawn(MCP_MANIFEST=str(manifest))
        g.send("/prompts")
        g.expect("/prompt every resource-prompt resourceType=… resourceId=…", timeout=STARTUP)
        # The short form (the name is only every's), a missing required argument typed at
        # the REPL's prompt, the optional one skipped with an empty line.
        fake.push(Reply("weather noted"))
        g.send("/prompt args-prompt")
        g.expect("(1/2) city\nName of the city\n")
        g.send("Paris")
        g.expect("(2/2) state (optional)\n(an empty line: Skip)\n")
        g.send("")
        g.expect("weather noted\n")
        assert last_user(fake) == "What's weather in Paris?"
        # Reading a text resource through a resource link of a tool result.
        fake.push(ToolCalls([Call("every__get-resource-links", {"count": 2}, id="l1")]),
                  ToolCalls([Call("resource_read", {"server": "every",
                                                    "uri": "demo://resource/dynamic/text/2"},
                                  id="r1")]),
                  Reply("read it"))
        g.send("what links are there?")
        g.expect("read it\n", timeout=60)
        link, text = tool_results(fake)[-2:]
        assert "[resource link demo://resource/dynamic/text/2 (Text Resource 2, text/plain); " \
               "resource_read can read it: server 'every', this uri]" in link
        assert text.startswith("[resource demo://resource/dynamic/text/2]\nResource 2: This "
                               "is a plaintext resource")
        # A blob read into the outbox and sent: the REPL prints the kept file's path.
        fake.default = SendAttachment(Call("resource_read", {"server": "every", "uri": BLOB}),
                                      "blob sent")
        g.send("send me the blob")
        g.expect("blob sent\n", timeout=60)
        line = g.expect("B)\n")
        assert f"[attachment] {g.data_dir}/outbox/" in line and "(text/plain," in line
        g.send("/prompt every nope")
        g.expect("MCP server 'every' has no prompt 'nope'.")
        g.close_stdin()
        assert g.wait_exit() == 0
        g.assert_clean()
