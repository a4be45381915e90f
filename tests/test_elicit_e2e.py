"""Elicitation end to end: `gantry run` with npm server-everything, whose
`trigger-elicitation-request` tool exists only for clients that declare the capability.

Telegram (fake Bot API): the form arrives field by field, booleans and enums as inline
keyboards whose presses are answered with answerCallbackQuery and never become turns, typed
answers are checked and asked again, /cancel cancels, no answer in time cancels, a scheduled
turn is declined at once. stdio: numbered choices on a pipe.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.mcp_servers import everything_command, toml_server
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.fakes.telegram import FakeTelegram
from tests.test_cron_e2e import STARTUP, schedule_script
from tests.test_repl_tty import Repl, repl
from tests.test_stdio_e2e import Gantry as StdioGantry
from tests.test_stdio_e2e import fake, spawn
from tests.test_telegram_e2e import USER, Gantry, fakes, no_secrets, run, wait

pytestmark = pytest.mark.slow
__all__ = ["fake", "fakes", "repl", "run", "spawn"]  # fixtures used by name below

TOOL = "every__trigger-elicitation-request"
STRANGER_IN_LIST = 4343  # allowlisted, but not the turn's author


def manifest(tmp_path: Path) -> str:
    path = tmp_path / "mcp.toml"
    # timeout_seconds far below the time the user takes: the call's clock stops meanwhile.
    path.write_text(toml_server("every", everything_command(), timeout=5), encoding="utf-8")
    return str(path)


def tool_results(llm: FakeOpenAI) -> list[str]:
    return [str(m["content"]) for r in llm.requests for m in r.messages if m["role"] == "tool"]


def raw(result: str) -> dict[str, Any]:
    return dict(json.loads(result.split("Raw result:", 1)[1]))


def user_texts(llm: FakeOpenAI) -> list[str]:
    return [str(m["content"]) for r in llm.requests for m in r.messages if m["role"] == "user"]


class Chat:
    """The bot's messages to USER in order; each step waits for the next one."""

    def __init__(self, tg: FakeTelegram) -> None:
        self.tg = tg
        self.seen = 0

    def next(self, expect: str, timeout: float = 30.0) -> str:
        texts = self.tg.wait_sent_sync(USER, self.seen + 1, timeout=timeout)
        text = texts[self.seen]
        self.seen += 1
        assert expect in text, (expect, text)
        return text

    def press(self, expect: str, label: str) -> None:
        self.next(expect)
        self.tg.press(USER, USER, label)

    def type(self, expect: str, text: str) -> None:
        self.next(expect)
        self.tg.push_text(USER, text)


def fill_the_form(chat: Chat, tg: FakeTelegram) -> None:
    chat.press("MCP server 'every' asks:\nPlease provide inputs", "Answer")
    chat.type("(1/13) String\nYour full, legal name", "Ada Lovelace")
    question = chat.next("(2/13) Boolean")
    assert "Tap a button." in question
    # A press by someone else in the list, and one on the answered intro's old keyboard.
    tg.press(STRANGER_IN_LIST, USER, "Yes")
    intro = tg.sent(USER)[0]
    keyboards = [c.params["reply_markup"] for c in tg.calls("sendMessage")
                 if c.params.get("reply_markup")]
    tg.press_data(USER, USER, intro.message_id,
                  keyboards[0]["inline_keyboard"][0][0]["callback_data"])
    tg.press(USER, USER, "Yes")
    chat.press("(3/13) String with default", "Default: It was a dark and stormy night.")
    chat.type("(4/13) String with email format", "not an address")
    chat.type("That is not an email address.\n(4/13)", "ada@example.org")
    chat.press("(5/13) String with uri format (optional)", "Skip")
    chat.type("(6/13) String with date format", "1815-12-10")
    chat.type("(7/13) Integer", "500")
    chat.type("100 or less, please.\n(7/13) Integer", "7")
    chat.press("(8/13) Number in range", "Default: 3.14")
    chat.press("(9/13) Untitled Single Select Enum", "Joey")
    chat.type("(10/13) Untitled Multiple Select Enum", "1, Violin")
    chat.press("(11/13) Titled Single Select Enum", "Wonder Woman")
    chat.press("(12/13) Titled Multiple Select Enum", "Default: Tuna")
    chat.press("(13/13) Legacy Titled Single Select Enum", "Dogs")
    chat.next("Sent.")


def test_telegram_form_cancel_timeout_and_scheduled(
    fakes: tuple[FakeTelegram, FakeOpenAI], run: Callable[..., Gantry], tmp_path: Path
) -> None:
    tg, llm = fakes
    llm.push(ToolCalls([Call(TOOL, {}, id="e1")]), Reply("form done"))
    g = run(MCP_MANIFEST=manifest(tmp_path), ELICITATION_TIMEOUT_SECONDS="10",
            TELEGRAM_ALLOWED_USERS=f"{USER},{STRANGER_IN_LIST}")
    chat = Chat(tg)
    tg.push_text(USER, "ask me things")
    chat.next("MCP server 'every' asks:", timeout=STARTUP)
    chat.seen = 0
    fill_the_form(chat, tg)
    chat.next("form done")
    got = raw(tool_results(llm)[-1])
    assert got == {"action": "accept", "content": {
        "name": "Ada Lovelace", "check": True, "firstLine": "It was a dark and stormy night.",
        "email": "ada@example.org", "birthdate": "1815-12-10", "integer": 7, "number": 3.14,
        "untitledSingleSelectEnum": "Joey", "untitledMultipleSelectEnum": ["Guitar", "Violin"],
        "titledSingleSelectEnum": "hero-3", "titledMultipleSelectEnum": ["fish-1"],
        "legacyTitledEnum": "pet-2"}}
    assert tg.calls("getUpdates")[-1].params["allowed_updates"] == [
        "message", "callback_query", "message_reaction"]
    # Every press was answered; the foreign and the stale one with a notice, not an answer.
    wait(lambda: len(tg.queries) == 11, what="every press answered")
    notices = list(tg.queries.values())
    assert "Only the person whose message started this can answer." in notices
    assert "This question is closed." in notices
    assert notices.count("Yes") == 1
    assert not tg.buttons(USER)  # answered questions lose their buttons
    # The answers went to the server, never to the model as messages, and started no turn.
    assert not any("Ada" in t or "1815" in t or "500" in t for t in user_texts(llm))
    assert len(llm.requests) == 2

    # /cancel cancels the question (the turn goes on), and an old button is closed.
    llm.push(ToolCalls([Call(TOOL, {}, id="e2")]), Reply("cancel done"))
    tg.push_text(USER, "again")
    chat.press("MCP server 'every' asks:", "Answer")
    chat.type("(1/13) String", "/cancel")
    chat.next("Cancelled.")
    chat.next("cancel done")
    assert raw(tool_results(llm)[-1]) == {"action": "cancel"}

    # No answer within ELICITATION_TIMEOUT_SECONDS: cancelled, though timeout_seconds is 5.
    llm.push(ToolCalls([Call(TOOL, {}, id="e3")]), Reply("timeout done"))
    tg.push_text(USER, "and again")
    chat.press("MCP server 'every' asks:", "Answer")
    chat.next("(1/13) String")
    chat.next("No answer within 10 s: the request is cancelled.", timeout=60)
    chat.next("Cancelled.")
    chat.next("timeout done")
    assert raw(tool_results(llm)[-1]) == {"action": "cancel"}

    # A scheduled turn has nobody to ask: declined at once, no question sent.
    llm.push(*schedule_script("in 2 seconds", "run the form"),
             ToolCalls([Call(TOOL, {}, id="e4")]), Reply("scheduled done"))
    tg.push_text(USER, "schedule it")
    chat.next("Scheduled.")
    chat.next("scheduled done", timeout=60)
    assert raw(tool_results(llm)[-1]) == {"action": "decline"}
    assert g.stop() == 0
    assert "Ada Lovelace" not in g.stderr and "ada@example.org" not in g.stderr
    no_secrets(g)


def test_stdio_numbered_choices(
    spawn: Callable[..., StdioGantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.push(ToolCalls([Call(TOOL, {}, id="s1")]), Reply("stdio form done"),
              ToolCalls([Call(TOOL, {}, id="s2")]), Reply("stdio declined"))
    g = spawn(MCP_MANIFEST=manifest(tmp_path))
    g.send("ask me")
    g.expect("  1. Answer\n  2. Decline\n", timeout=STARTUP)
    steps = [("1", "(1/13) String"), ("Ada", "  1. Yes\n  2. No\n  3. Skip\n"),
             ("1", "(an empty line: Default: It was a dark and stormy night.)\n"),
             ("", "(4/13) String with email format"), ("nope", "not an email address."),
             ("ada@example.org", "(5/13)"), ("", "(6/13)"), ("1815-12-10", "(7/13)"),
             ("0", "1 or more, please."), ("", "(8/13)"), ("9.5", "  3. Joey\n"),
             ("3", "  1. Guitar\n"), ("2,3", "  3. Wonder Woman\n"), ("3", "(12/13)"),
             ("Salmon", "  2. Dogs\n"), ("2", "Sent.\n")]
    for line, shown in steps:
        g.send(line)
        g.expect(shown)
    g.expect("stdio form done\n")
    got = raw(tool_results(fake)[-1])
    assert got["content"] == {
        "name": "Ada", "check": True, "firstLine": "It was a dark and stormy night.",
        "email": "ada@example.org", "birthdate": "1815-12-10", "integer": 42, "number": 9.5,
        "untitledSingleSelectEnum": "Joey", "untitledMultipleSelectEnum": ["Piano", "Violin"],
        "titledSingleSelectEnum": "hero-3", "titledMultipleSelectEnum": ["fish-2"],
        "legacyTitledEnum": "pet-2"}
    g.send("again")
    g.expect("  2. Decline\n")
    g.send("2")
    g.expect("Declined.\n")
    g.expect("stdio declined\n")
    assert raw(tool_results(fake)[-1]) == {"action": "decline"}
    assert user_texts(fake)[-1].startswith("again") and len(fake.requests) == 4
    g.close_stdin()
    assert g.wait_exit() == 0
    g.assert_clean()


def test_terminal_answers_are_typed_at_the_prompt_and_ctrl_c_cancels(
    repl: Callable[..., Repl], fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.push(ToolCalls([Call(TOOL, {}, id="t1")]), Reply("terminal done"))
    r = repl(MCP_MANIFEST=manifest(tmp_path), CRON_ENABLED="false")
    r.expect("> ", timeout=STARTUP)
    r.type("ask me\r")
    r.expect("  1. Answer\n  2. Decline\n> ", timeout=STARTUP)
    r.type("1\r")
    r.expect("(1/13) String\nYour full, legal name\n> ")
    r.type("Ada\r")  # echoed as typed, then the next question
    r.expect("Ada\n(2/13) Boolean (optional)")
    r.type("\x03")  # Ctrl-C during a question cancels it; the turn goes on
    r.expect("Cancelled.\n")
    r.expect("terminal done\n> ")
    assert raw(tool_results(fake)[-1]) == {"action": "cancel"}
    assert r.proc.poll() is None and len(fake.requests) == 2
    r.type("\x04")
    assert r.wait_exit() == 0
